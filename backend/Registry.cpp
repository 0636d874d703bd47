// The table from device kind to backend, and the global generator.
#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"
#if TESSERA_HAVE_CUDA
#include <cuda_profiler_api.h>

#include "cuda/CudaBackend.h"
#endif

#include <atomic>

namespace tessera {

namespace {
std::atomic<uint64_t> parameterChanges{0};
}

uint64_t parameterGeneration() { return parameterChanges.load(std::memory_order_acquire); }
void noteParameterChange() { parameterChanges.fetch_add(1, std::memory_order_acq_rel); }

void Backend::rnnForward(const RnnParams&, const RnnWeights&, const Tensor&, const Tensor&, const Tensor&, bool,
                         const Tensor&, const Tensor&, const Tensor&, Tensor&) {
    throw BackendError("recurrent layers are not implemented on " + device().str() + " yet");
}

void Backend::rnnBackward(const RnnParams&, const RnnWeights&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, const Tensor&, const Tensor&, const RnnWeights&) {
    throw BackendError("recurrent layers are not implemented on " + device().str() + " yet");
}

Tensor Backend::batchNormReluForward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                                     bool, Tensor&) {
    throw BackendError("batch norm with a fused ReLU is not implemented on " + device().str());
}

Tensor Backend::batchNormReluBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, float, const Tensor&, const Tensor&, const Tensor&) {
    throw BackendError("batch norm with a fused ReLU is not implemented on " + device().str());
}

Backend& backendFor(Device device) {
    if (device.isCpu()) {
        static CpuBackend cpu;
        thread_local const bool prepared = (CpuBackend::prepareThread(), true); // this thread's float mode
        (void)prepared;
        return cpu;
    }
#if TESSERA_HAVE_CUDA
    return cudaBackend(device.index);
#else
    throw BackendError("no backend for device " + device.str() +
                       ": this build of Tessera has no CUDA backend (configure with TESSERA_USE_CUDA=ON)");
#endif
}

std::string cudaUnavailableReason() {
#if TESSERA_HAVE_CUDA
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
#else
    return "Tessera was built without CUDA (configure with TESSERA_USE_CUDA=ON)";
#endif
}

int cudaDeviceCount() {
#if TESSERA_HAVE_CUDA
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
#else
    return 0;
#endif
}

Tensor pinnedEmpty(const Shape& shape, DType dtype) {
#if TESSERA_HAVE_CUDA
    if (cudaDeviceCount() > 0 && !ShapeOnlyTensors::active()) return pinnedHostTensor(shape, dtype);
#endif
    return Tensor::empty(shape, dtype);
}

bool isPinned(const Tensor& t) {
#if TESSERA_HAVE_CUDA
    return t.defined() && t.device().isCpu() && t.hasData() && pinnedHostPool().contains(t.raw());
#else
    (void)t;
    return false;
#endif
}

void setCudaAllowTF32(bool allow) {
#if TESSERA_HAVE_CUDA
    for (int i = 0; i < cudaDeviceCount(); ++i) cudaBackend(i).setAllowTF32(allow);
#else
    (void)allow;
#endif
}

void setCudaDeterministic(bool on) {
#if TESSERA_HAVE_CUDA
    for (int i = 0; i < cudaDeviceCount(); ++i) cudaBackend(i).setDeterministic(on);
#else
    (void)on;
#endif
}

void cudaProfilerRange(bool start) {
#if TESSERA_HAVE_CUDA
    if (cudaDeviceCount() == 0) return;
    // A status only: without a profiler attached both calls succeed and do nothing.
    (void)(start ? cudaProfilerStart() : cudaProfilerStop());
#else
    (void)start;
#endif
}

Generator& globalGenerator() {
    static Generator gen(0);
    return gen;
}

void manualSeed(uint64_t seed) { globalGenerator().manualSeed(seed); }

} // namespace tessera
