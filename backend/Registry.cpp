// The table from device kind to backend, and the global generator.
#include "backend/Backend.h"
#include "backend/CudaPlugin.h"
#include "backend/Errors.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

namespace tessera {

namespace {
std::atomic<uint64_t> parameterChanges{0};
}

uint64_t parameterGeneration() { return parameterChanges.load(std::memory_order_acquire); }
void noteParameterChange() { parameterChanges.fetch_add(1, std::memory_order_acq_rel); }

void Backend::gemmWeights(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, const Tensor& bias,
                          float beta, const Tensor& C, DType compute, const std::shared_ptr<LayerState>&) {
    if (!bias.defined()) return gemm(transA, transB, alpha, A, B, beta, C, compute);
    requireBiasable("Backend::gemmWeights", alpha, beta);
    broadcastRows(bias, C);
    gemm(transA, transB, 1.0f, A, B, 1.0f, C, compute);
}

void Backend::gemmWeightsActivation(bool transA, bool transB, const Tensor& A, const Tensor& B, const Tensor& bias,
                                    const Tensor& C, DType compute, const ActivationParams& act,
                                    const std::shared_ptr<LayerState>& packed) {
    gemmWeights(transA, transB, 1.0f, A, B, bias, 0.0f, C, compute, packed);
    activationForward(act, C, C);
}

void Backend::requireBiasable(const char* op, float alpha, float beta) {
    if (alpha != 1.0f || beta != 0.0f) {
        throw BackendError(std::string(op) + ": a bias needs alpha 1 and beta 0, got alpha " + std::to_string(alpha) +
                           " and beta " + std::to_string(beta));
    }
}

void Backend::requirePadTypes(const char* op, PadMode mode, const Tensor& from, const Tensor& to) {
    const bool ok = from.dtype() == to.dtype() &&
                    (from.dtype() == DType::float32 || (is16Bit(from.dtype()) && mode == PadMode::constant));
    if (!ok) {
        throw BackendError(std::string(op) + ": " + str(from.dtype()) + " to " + str(to.dtype()) +
                           " (float32, or one 16-bit type with constant padding)");
    }
}

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

Tensor Backend::batchNormAddBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& scale,
                                     const Tensor&, const Tensor& mean, const Tensor& var, float eps, bool relu,
                                     const Tensor&, Tensor& dz, const Tensor& dscale, const Tensor& dshift) {
    dz = relu ? reluGradient(y, dy) : dy;
    return batchNormBackward(x, dz, scale, mean, var, eps, dscale, dshift);
}

Tensor Backend::reluGradient(const Tensor& y, const Tensor& dy) {
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device(), y.layout());
    activationBackward(ActivationParams{ActivationKind::relu}, y, y, dy, dx);
    return dx;
}

namespace {

std::atomic<CudaProvider*> registeredCuda{nullptr}; // set while the plugin loads
std::string cudaLoadError;
CudaSettings settings;

#if TESSERA_CUDA_PLUGIN
// libtessera_cuda.so beside this library (the build directory, an install's lib/, a
// bundle's lib/); TESSERA_CUDA_PLUGIN names another file.
std::string pluginPath() {
    if (const char* path = std::getenv("TESSERA_CUDA_PLUGIN"); path && *path) return path;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&registerCudaProvider), &info) == 0 || !info.dli_fname) {
        return "libtessera_cuda.so";
    }
    return (std::filesystem::path(info.dli_fname).parent_path() / "libtessera_cuda.so").lexically_normal().string();
}
#endif

// The provider, loading the plugin on the first call; nullptr when there is none (the
// reason in cudaLoadError).
CudaProvider* cudaProvider() {
    static std::once_flag once;
    std::call_once(once, [] {
#if TESSERA_CUDA_PLUGIN
        if (registeredCuda) return;
        const std::string path = pluginPath();
        // RTLD_LOCAL: the CUDA libraries' symbols stay the plugin's. Never closed: tensors
        // freed during exit still reach their backend.
        if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
            const char* why = dlerror();
            cudaLoadError = "the CUDA backend (" + path + ") cannot be loaded: " + (why ? why : "unknown error") +
                            " (it needs the CUDA 13 runtime, cuBLAS 13 and cuDNN 9 on the library search path)";
        } else if (!registeredCuda) {
            cudaLoadError = "the CUDA backend (" + path + ") loaded but registered no provider";
        }
#else
        cudaLoadError = "Tessera was built without CUDA (configure with TESSERA_USE_CUDA=ON)";
#endif
    });
    return registeredCuda.load();
}

// The provider if the plugin is loaded already; never loads it.
CudaProvider* loadedCudaProvider() { return registeredCuda.load(); }

} // namespace

void registerCudaProvider(CudaProvider& provider) { registeredCuda.store(&provider); }

const CudaSettings& cudaSettings() {
    // The environment's word, read once, before any setter's (each setter reads it first).
    static const bool fromEnvironment = [] {
        auto read = [](const char* name, std::atomic<bool>& setting) {
            const char* env = std::getenv(name);
            const std::string v = env ? env : "";
            if (!v.empty() && v != "0" && v != "1") {
                throw BackendError(std::string(name) + "=" + v + ": expected 1 or 0");
            }
            if (!v.empty()) setting.store(v == "1"); // unset: the default stands
        };
        read("TESSERA_CUDA_16BIT_ACTIVATIONS", settings.activations16);
        read("TESSERA_CUDA_CHANNELS_LAST", settings.channelsLast);
        read("TESSERA_CUDA_FUSED_ATTENTION", settings.fusedAttention);
        return true;
    }();
    (void)fromEnvironment;
    return settings;
}

Backend& backendFor(Device device) {
    if (device.isCpu()) {
        static CpuBackend cpu;
        thread_local const bool prepared = (CpuBackend::prepareThread(), true); // this thread's float mode
        (void)prepared;
        return cpu;
    }
    CudaProvider* cuda = cudaProvider();
    if (!cuda) throw BackendError("no backend for device " + device.str() + ": " + cudaLoadError);
    return cuda->backend(device.index);
}

std::string cudaUnavailableReason() {
    CudaProvider* cuda = cudaProvider();
    return cuda ? cuda->unavailableReason() : cudaLoadError;
}

int cudaDeviceCount() {
    CudaProvider* cuda = cudaProvider();
    return cuda ? cuda->deviceCount() : 0;
}

Tensor pinnedEmpty(const Shape& shape, DType dtype) {
    CudaProvider* cuda = cudaProvider();
    if (cuda && cuda->deviceCount() > 0 && !ShapeOnlyTensors::active()) return cuda->pinnedEmpty(shape, dtype);
    return Tensor::empty(shape, dtype);
}

bool isPinned(const Tensor& t) {
    CudaProvider* cuda = loadedCudaProvider(); // nothing is pinned before the plugin loads
    return cuda && t.defined() && t.device().isCpu() && t.hasData() && cuda->isPinned(t);
}

void setCudaAllowTF32(bool allow) {
    settings.allowTF32.store(allow);
    if (CudaProvider* cuda = loadedCudaProvider()) cuda->applySettings();
}

void setCudaDeterministic(bool on) {
    settings.deterministic.store(on);
    if (CudaProvider* cuda = loadedCudaProvider()) cuda->applySettings();
}

void setCuda16BitActivations(bool on) {
    cudaSettings(); // the environment's word first, so that this call's stands
    settings.activations16.store(on);
    if (CudaProvider* cuda = loadedCudaProvider()) cuda->applySettings();
}

void setCudaChannelsLast(bool on) {
    cudaSettings(); // the environment's word first, so that this call's stands
    settings.channelsLast.store(on);
    if (CudaProvider* cuda = loadedCudaProvider()) cuda->applySettings();
}

bool cuda16BitActivations() { return cudaSettings().activations16.load(); }

bool cudaChannelsLast() { return cudaSettings().channelsLast.load(); }

void setCudaFusedAttention(bool on) {
    cudaSettings(); // the environment's word first, so that this call's stands
    settings.fusedAttention.store(on);
    if (CudaProvider* cuda = loadedCudaProvider()) cuda->applySettings();
}

bool cudaFusedAttention() { return cudaSettings().fusedAttention.load(); }

void cudaProfilerRange(bool start) {
    if (CudaProvider* cuda = cudaProvider(); cuda && cuda->deviceCount() > 0) cuda->profilerRange(start);
}

Generator& globalGenerator() {
    static Generator gen(0);
    return gen;
}

void manualSeed(uint64_t seed) { globalGenerator().manualSeed(seed); }

} // namespace tessera
