// The CUDA backend's set-up: the caching allocator, the per-device backends, streams, workspace and handles.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "backend/CudaPlugin.h"
#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Dnn.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

namespace cuda {
void throwStatus(const char* library, const char* call, const char* status, const char* file, int line) {
    throw BackendError(std::string(library) + " call failed: " + call + ": " + status + " (" + file + ":" +
                       std::to_string(line) + ")");
}
} // namespace cuda

namespace {
constexpr size_t kMinBlock = 512;
} // namespace

using namespace cuda_util;

size_t CachingAllocator::roundUp(size_t bytes) {
    // Small blocks in 512-byte steps, large ones in 2 MiB steps: few size classes, little waste.
    const size_t step = bytes < (size_t{1} << 20) ? kMinBlock : (size_t{2} << 20);
    return (std::max<size_t>(bytes, 1) + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t bytes) {
    const size_t size = roundUp(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    // Reuse a cached block of this size, or one at most twice as big.
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= 2 * size) {
        ptr = it->second;
        cached_ -= it->first;
        live_[ptr] = {it->first, size};
        free_.erase(it);
    } else {
        TESSERA_CUDA_CHECK(cudaSetDevice(device_));
        if (cudaMalloc(&ptr, size) != cudaSuccess) {
            (void)cudaGetLastError(); // clear the sticky out-of-memory status
            for (auto& [bytesHeld, p] : free_) TESSERA_CUDA_CHECK(cudaFree(p));
            free_.clear();
            cached_ = 0;
            const cudaError_t again = cudaMalloc(&ptr, size);
            if (again != cudaSuccess) {
                (void)cudaGetLastError();
                throw BackendError("CUDA device " + std::to_string(device_) +
                                   " is out of memory: " + std::to_string(size) + " bytes asked for, " +
                                   std::to_string(stats_.current) + " bytes held by live tensors");
            }
        }
        live_[ptr] = {size, size};
    }
    stats_.current += size;
    stats_.peak = std::max(stats_.peak, stats_.current);
    return ptr;
}

void CachingAllocator::release(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    stats_.current -= it->second.counted;
    cached_ += it->second.size;
    free_.emplace(it->second.size, ptr);
    live_.erase(it);
}

void CachingAllocator::emptyCache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, p] : free_) TESSERA_CUDA_CHECK(cudaFree(p));
    free_.clear();
    cached_ = 0;
}

MemoryStats CachingAllocator::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void CachingAllocator::resetPeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak = stats_.current;
}

size_t CachingAllocator::cachedBytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
}

namespace {
std::mutex backendsMutex;
// Never destroyed: tensors freed during static destruction still find their backend.
std::vector<CudaBackend*>& backendTable() {
    static auto* backends = new std::vector<CudaBackend*>();
    return *backends;
}
} // namespace

std::vector<CudaBackend*> madeBackends() {
    std::lock_guard<std::mutex> lock(backendsMutex);
    std::vector<CudaBackend*> made;
    for (CudaBackend* be : backendTable()) {
        if (be) made.push_back(be);
    }
    return made;
}

CudaBackend& cudaBackend(int index) {
    std::lock_guard<std::mutex> lock(backendsMutex);
    auto* backends = &backendTable();
    const int count = cudaDeviceCount();
    if (index < 0 || index >= count) {
        throw BackendError("no CUDA device cuda:" + std::to_string(index) + ": this process sees " +
                           std::to_string(count) + " CUDA device(s)");
    }
    if (backends->size() <= static_cast<size_t>(index)) backends->resize(static_cast<size_t>(index) + 1, nullptr);
    CudaBackend*& be = (*backends)[static_cast<size_t>(index)];
    if (!be) be = new CudaBackend(index);
    return *be;
}

// The constructor and destructor are below, with the cuDNN state they own (cuda/Dnn.h).

cudaStream_t CudaBackend::s() const {
    thread_local int current = -1;
    if (current != index_) {
        TESSERA_CUDA_CHECK(cudaSetDevice(index_));
        current = index_;
    }
    return stream_;
}

void CudaBackend::synchronize() { TESSERA_CUDA_CHECK(cudaStreamSynchronize(s())); }

void CudaBackend::setAllowTF32(bool allow) {
    allowTF32_ = allow;
    TESSERA_CUDA_CHECK(cublasSetMathMode(cublas_, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void CudaBackend::releaseWorkspace() {
    if (workspace_) allocator_.release(workspace_);
    workspace_ = nullptr;
    workspaceBytes_ = 0;
}

void* CudaBackend::workspace(size_t bytes) {
    if (bytes > workspaceBytes_) {
        if (workspace_) allocator_.release(workspace_);
        workspace_ = allocator_.allocate(bytes);
        workspaceBytes_ = bytes;
    }
    return workspace_;
}

void* CudaBackend::scalars() {
    if (!scalars_) scalars_ = allocator_.allocate(64);
    return scalars_;
}

void CudaBackend::checkIndexRange(const char* op, const Tensor& idx, int64_t limit, const char* what) {
    requireDtype(op, idx, DType::int32, what);
    if (idx.numel() == 0) return;
    auto* bad = static_cast<unsigned long long*>(scalars());
    TESSERA_CUDA_CHECK(cudaMemsetAsync(bad, 0xff, sizeof(unsigned long long), s()));
    cudak::checkIndices(ip(idx), idx.numel(), limit, bad, s());
    unsigned long long at = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&at, bad, sizeof at, cudaMemcpyDeviceToHost, s()));
    synchronize();
    if (at == ULLONG_MAX) return;
    int32_t value = 0;
    TESSERA_CUDA_CHECK(cudaMemcpy(&value, ip(idx) + at, sizeof value, cudaMemcpyDeviceToHost));
    throw ShapeError(std::string(what) + " " + std::to_string(value) + " at position " + std::to_string(at) +
                     " is outside [0, " + std::to_string(limit) + ") (CudaBackend::" + op + ")");
}

CudaBackend::CudaBackend(int index) : index_(index), allocator_(index), dnn_(std::make_unique<DnnState>()) {
    TESSERA_CUDA_CHECK(cudaSetDevice(index));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&copyStream_, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cublasCreate(&cublas_));
    TESSERA_CUDA_CHECK(cublasSetStream(cublas_, stream_));
    TESSERA_CUDA_CHECK(cudnnCreate(&cudnn_));
    TESSERA_CUDA_CHECK(cudnnSetStream(cudnn_, stream_));
    setAllowTF32(cudaSettings().allowTF32);
    setDeterministic(cudaSettings().deterministic);
    set16BitActivations(cudaSettings().activations16);
    setChannelsLast(cudaSettings().channelsLast);
    setFusedAttention(cudaSettings().fusedAttention);
}

const float* CudaBackend::ones(int64_t n) {
    std::lock_guard<std::mutex> lock(onesMutex_);
    if (n > onesLength_) {
        const int64_t length = std::max<int64_t>({n, 2 * onesLength_, 4096});
        if (ones_) TESSERA_CUDA_CHECK(cudaFree(ones_)); // waits for the kernels that read it
        void* p = nullptr;
        TESSERA_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(length) * sizeof(float)));
        ones_ = static_cast<float*>(p);
        onesLength_ = length;
        cudak::fill(ones_, length, 1.0f, s());
    }
    return ones_;
}

CudaBackend::~CudaBackend() {
    // Backends live until the process ends (see cudaBackend); the driver may be shutting
    // down by then, so statuses are not checked here.
    dnn_.reset();
    attentionPlans_.reset(); // its plans hold the cuDNN handle
    if (ones_) cudaFree(ones_);
    cudnnDestroy(cudnn_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(copyStream_);
    cudaStreamDestroy(stream_);
}

} // namespace tessera
