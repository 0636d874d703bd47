// The plugin's entry: registers the CUDA provider with the library while
// libtessera_cuda.so loads (backend/CudaPlugin.h).
#include <cuda_profiler_api.h>

#include <mutex>
#include <vector>

#include "backend/CudaPlugin.h"
#include "cuda/CudaBackend.h"

namespace tessera {

namespace {

class Provider final : public CudaProvider {
public:
    int deviceCount() override {
        static const int count = [] {
            int n = 0;
            // No driver or no GPU: a status, not an error, for this question.
            if (cudaGetDeviceCount(&n) != cudaSuccess) {
                (void)cudaGetLastError();
                return 0;
            }
            return n;
        }();
        return count;
    }

    std::string unavailableReason() override {
        int n = 0;
        const cudaError_t e = cudaGetDeviceCount(&n);
        if (e == cudaSuccess) return n > 0 ? std::string() : "no CUDA device (the driver sees none)";
        (void)cudaGetLastError();
        const std::string what = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
        if (e == cudaErrorNoDevice) return "no CUDA device (" + what + ")";
        if (e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError || e == cudaErrorNotSupported) {
            return "no usable CUDA driver (" + what + ")";
        }
        return "CUDA cannot be used (" + what + ")";
    }

    Backend& backend(int index) override { return cudaBackend(index); }

    Tensor pinnedEmpty(const Shape& shape, DType dtype) override { return pinnedHostTensor(shape, dtype); }

    bool isPinned(const Tensor& t) override { return pinnedHostPool().contains(t.raw()); }

    void applySettings() override {
        const CudaSettings& s = cudaSettings();
        for (CudaBackend* be : madeBackends()) {
            be->setAllowTF32(s.allowTF32);
            be->setDeterministic(s.deterministic);
            be->set16BitActivations(s.activations16);
            be->setChannelsLast(s.channelsLast);
            be->setFusedAttention(s.fusedAttention);
        }
    }

    void profilerRange(bool start) override {
        // A status only: without a profiler attached both calls succeed and do nothing.
        (void)(start ? cudaProfilerStart() : cudaProfilerStop());
    }
};

// Registered while the plugin loads; never destroyed (backends outlive static destruction).
const bool registered = [] {
    registerCudaProvider(*new Provider());
    return true;
}();

} // namespace

} // namespace tessera
