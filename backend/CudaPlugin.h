#pragma once
/// \file The seam between the library and its CUDA backend, which is a plugin of its own
/// (`libtessera_cuda.so`, from `cuda/`). The library loads it beside itself on the first
/// CUDA request (a CUDA device's backend, the device count, pinned memory); the plugin
/// registers its provider while it loads. So a CUDA build starts, and runs on the CPU, on
/// a host without the CUDA libraries, and nothing in `backend/` names CUDA. Private to the
/// library.

#include <atomic>
#include <string>

#include "backend/Backend.h"

namespace tessera {

/// What the CUDA plugin provides. Every call is made with the plugin loaded.
class CudaProvider {
public:
    virtual ~CudaProvider() = default;
    /// CUDA devices this process can use (0: no driver or no GPU).
    virtual int deviceCount() = 0;
    /// Why no device can be used; empty when one can.
    virtual std::string unavailableReason() = 0;
    /// The backend of device `index` (throws BackendError for a device that is not there).
    virtual Backend& backend(int index) = 0;
    /// A host tensor in page-locked memory, and whether `t` is one.
    virtual Tensor pinnedEmpty(const Shape& shape, DType dtype) = 0;
    virtual bool isPinned(const Tensor& t) = 0;
    /// Apply cudaSettings() to the devices' backends made so far (later ones read them).
    virtual void applySettings() = 0;
    virtual void profilerRange(bool start) = 0;
};

/// Called by the plugin while it loads.
void registerCudaProvider(CudaProvider& provider);

/// The process-wide CUDA settings (setCudaAllowTF32, setCudaDeterministic,
/// setCuda16BitActivations, setCudaChannelsLast, setCudaFusedAttention), kept here so that they hold for backends made
/// after the call, and before the plugin is loaded.
struct CudaSettings {
    std::atomic<bool> allowTF32{true};
    std::atomic<bool> deterministic{false};
    std::atomic<bool> activations16{true};   // TESSERA_CUDA_16BIT_ACTIVATIONS at start
    std::atomic<bool> channelsLast{true};    // TESSERA_CUDA_CHANNELS_LAST at start
    std::atomic<bool> fusedAttention{false}; // TESSERA_CUDA_FUSED_ATTENTION at start
};
const CudaSettings& cudaSettings();

} // namespace tessera
