// The CUDA backend's memory, copies, BLAS, element-wise, index, normalisation helpers,
// costs and optimizer ops. cuDNN-backed ops (convolution, pooling, batch norm, softmax)
// are in CudaDnn.cpp; the kernels in Kernels.cu.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Kernels.h"

namespace tessera {

namespace cuda {
void throwStatus(const char* library, const char* call, const char* status, const char* file, int line) {
    throw BackendError(std::string(library) + " call failed: " + call + ": " + status + " (" + file + ":" +
                       std::to_string(line) + ")");
}
} // namespace cuda

namespace {

float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }
int32_t* ip(const Tensor& t) { return static_cast<int32_t*>(t.raw()); }

void requireDtype(const char* op, const Tensor& t, DType dtype, const char* name) {
    if (t.dtype() != dtype) {
        throw ShapeError(std::string("CudaBackend::") + op + ": " + name + " must be " + str(dtype) + ", got " +
                         str(t.dtype()) + " " + t.shape().str());
    }
}

void requireSameNumel(const char* op, const Tensor& a, const Tensor& b) {
    if (a.numel() != b.numel()) {
        throw ShapeError(std::string("CudaBackend::") + op + ": " + a.shape().str() + " and " + b.shape().str() +
                         " differ in size");
    }
}

// The leading-1 padded spatial dims of [N, C, *spatial] (1 to 3 spatial dims).
void spatial3(const char* op, const Shape& s, int64_t out[3]) {
    const size_t sp = s.rank() - 2;
    if (s.rank() < 3 || sp > 3) {
        throw ShapeError(std::string("CudaBackend::") + op + ": needs 1 to 3 spatial dims, got " + s.str());
    }
    out[0] = out[1] = out[2] = 1;
    for (size_t d = 0; d < sp; ++d) out[3 - sp + d] = s[2 + d];
}

constexpr size_t kMinBlock = 512;

} // namespace

// ---- the caching allocator -------------------------------------------------------------------

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

// ---- set-up ---------------------------------------------------------------------------------

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

// The constructor and destructor are in CudaDnn.cpp, beside the cuDNN state they own.

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

// ---- memory -----------------------------------------------------------------------------------

namespace {
void freeCuda(void* ptr, size_t, Device device) { cudaBackend(device.index).allocator().release(ptr); }
} // namespace

std::shared_ptr<Storage> CudaBackend::allocate(size_t bytes) {
    s();
    void* ptr = allocator_.allocate(bytes);
    return std::make_shared<Storage>(ptr, bytes, device(), &freeCuda);
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
    if (src.nbytes() != dst.nbytes()) {
        throw ShapeError("CudaBackend::copy: " + std::to_string(src.nbytes()) + " bytes into " +
                         std::to_string(dst.nbytes()));
    }
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDefault, s()));
    // The host may read its copy as soon as this returns.
    if (dst.device().isCpu()) synchronize();
}

void CudaBackend::copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst,
                              int64_t dstOffset, int64_t dstStride, int64_t rows, int64_t width) {
    if (rows == 0 || width == 0) return;
    const size_t es = sizeOf(src.dtype());
    TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.raw()) + dstOffset * es, dstStride * es,
                                         static_cast<const char*>(src.raw()) + srcOffset * es, srcStride * es,
                                         width * es, rows, cudaMemcpyDefault, s()));
    if (dst.device().isCpu()) synchronize();
}

void CudaBackend::fillBytes(const Tensor& t, unsigned char byte) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(t.raw(), byte, t.nbytes(), s()));
}

void CudaBackend::reorder(const Tensor& src, const Tensor& dst) {
    if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
        throw ShapeError("CudaBackend::reorder: " + src.shape().str() + " and " + dst.shape().str() + " differ");
    }
    if (src.layout() == dst.layout()) {
        copy(src, dst);
        return;
    }
    if (src.layout() == Layout::channelsLast || dst.layout() == Layout::channelsLast) {
        throw BackendError("CudaBackend::reorder: the channelsLast layout is the CPU's (reorder to plain there)");
    }
    const Shape& sh = src.shape();
    cudak::reorder(fp(src), blockOf(src.layout()), fp(dst), blockOf(dst.layout()), sh[0], sh[1],
                   sh.numel() / (sh[0] * sh[1]), s());
}

MemoryStats CudaBackend::memoryStats() const { return allocator_.stats(); }
void CudaBackend::resetPeak() { allocator_.resetPeak(); }

// ---- page-locked host memory and uploads ------------------------------------------------------

template <class Blocks> auto PinnedHostPool::find(Blocks& blocks, const void* ptr) {
    auto it = blocks.upper_bound(ptr);
    if (it == blocks.begin()) return blocks.end();
    --it;
    const auto* base = static_cast<const char*>(it->first);
    return static_cast<const char*>(ptr) < base + it->second.size ? it : blocks.end();
}

void* PinnedHostPool::allocate(size_t bytes) {
    const size_t size = CachingAllocator::roundUp(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [ptr, b] : blocks_) {
        if (b.live || b.size < size || b.size > 2 * size) continue;
        if (b.copied) {
            const cudaError_t done = cudaEventQuery(b.copied);
            if (done == cudaErrorNotReady) continue; // a copy still reads it
            (void)cudaGetLastError();
        }
        b.live = true;
        return const_cast<void*>(ptr);
    }
    void* ptr = nullptr;
    if (cudaHostAlloc(&ptr, size, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        throw BackendError("cannot allocate " + std::to_string(size) + " bytes of page-locked host memory");
    }
    blocks_[ptr] = Block{size, true};
    return ptr;
}

void PinnedHostPool::release(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it != blocks_.end()) it->second.live = false;
}

bool PinnedHostPool::contains(const void* ptr) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return find(blocks_, ptr) != blocks_.end();
}

void PinnedHostPool::recordCopy(const void* ptr, cudaStream_t stream, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = find(blocks_, ptr);
    if (it == blocks_.end()) return;
    Block& b = it->second;
    if (b.copied && b.eventDevice != device) { // events are recorded on their own device's streams
        cudaEventDestroy(b.copied);
        b.copied = nullptr;
    }
    if (!b.copied) {
        TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming));
        b.eventDevice = device;
    }
    TESSERA_CUDA_CHECK(cudaEventRecord(b.copied, stream));
}

PinnedHostPool& pinnedHostPool() {
    static auto* pool = new PinnedHostPool(); // never destroyed: tensors may outlive statics
    return *pool;
}

Tensor pinnedHostTensor(const Shape& shape, DType dtype) {
    const size_t bytes = Tensor::storageBytes(shape, dtype, Layout::plain);
    void* ptr = pinnedHostPool().allocate(bytes);
    return Tensor::wrap(ptr, shape, dtype, std::shared_ptr<void>(ptr, [](void* p) { pinnedHostPool().release(p); }));
}

namespace {
void releaseUploadBuffer(void* ptr, size_t, Device device) { cudaBackend(device.index).releaseUpload(ptr); }
} // namespace

Tensor CudaBackend::upload(const Tensor& host) {
    if (!host.device().isCpu() || !host.isPlain() || !host.hasData() || !pinnedHostPool().contains(host.raw())) {
        return host.to(device());
    }
    s();
    const size_t bytes = host.nbytes(), size = CachingAllocator::roundUp(bytes);
    UploadBuffer* buffer = nullptr;
    {
        std::lock_guard<std::mutex> lock(uploadMutex_);
        for (auto& b : uploads_) {
            if (!b->busy && b->bytes >= size && b->bytes <= 2 * size) {
                buffer = b.get();
                break;
            }
        }
        if (!buffer) {
            auto fresh = std::make_unique<UploadBuffer>();
            fresh->bytes = size;
            fresh->ptr = allocator_.allocate(size);
            TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&fresh->copied, cudaEventDisableTiming));
            TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&fresh->released, cudaEventDisableTiming));
            uploads_.push_back(std::move(fresh));
            buffer = uploads_.back().get();
        }
        buffer->busy = true;
    }
    // The copy waits for the kernels that read the buffer's previous tensor (queued
    // before it was freed), not for everything on the compute stream; the compute stream
    // waits for the copy.
    if (buffer->wasReleased) TESSERA_CUDA_CHECK(cudaStreamWaitEvent(copyStream_, buffer->released, 0));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(buffer->ptr, host.raw(), bytes, cudaMemcpyHostToDevice, copyStream_));
    TESSERA_CUDA_CHECK(cudaEventRecord(buffer->copied, copyStream_));
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, buffer->copied, 0));
    pinnedHostPool().recordCopy(host.raw(), copyStream_, index_);
    auto storage = std::make_shared<Storage>(buffer->ptr, buffer->bytes, device(), &releaseUploadBuffer);
    return Tensor::onStorage(std::move(storage), host.shape(), host.dtype());
}

void CudaBackend::releaseUpload(void* ptr) {
    std::lock_guard<std::mutex> lock(uploadMutex_);
    for (auto& b : uploads_) {
        if (b->ptr != ptr) continue;
        // Statuses unchecked: this runs in destructors, also while the process ends. (The
        // event and the stream are this device's; the calling thread's device is left alone.)
        b->wasReleased = cudaEventRecord(b->released, stream_) == cudaSuccess;
        b->busy = false;
        return;
    }
}

// ---- fills and random --------------------------------------------------------------------------

void CudaBackend::fill(const Tensor& t, float value) {
    if (t.dtype() == DType::int32) {
        cudak::fillInt(ip(t), t.numel(), static_cast<int32_t>(value), s());
    } else {
        cudak::fill(fp(t), static_cast<int64_t>(t.nbytes() / sizeof(float)), value, s());
    }
}

void CudaBackend::fillUniform(const Tensor& t, float lo, float hi, Generator& gen) {
    const int64_t n = t.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(static_cast<uint64_t>(n));
    cudak::uniform(fp(t), n, lo, hi, seed, first, s());
}

void CudaBackend::fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) {
    const int64_t n = t.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(2 * static_cast<uint64_t>(n));
    cudak::normal(fp(t), n, mean, stddev, seed, first, s());
}

// ---- BLAS -----------------------------------------------------------------------------------------

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
// In float16 or bfloat16, A and B are converted (unless they already are of that type) and
// cuBLAS multiplies them on tensor cores with float32 accumulation into float32 C.
void CudaBackend::gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                       const Tensor& C, DType compute) {
    if (compute != DType::float32 && compute != DType::float16 && compute != DType::bfloat16) {
        throw BackendError("CudaBackend::gemm: computing in " + str(compute) +
                           " is not supported (float32, float16 and bfloat16 are)");
    }
    if (A.shape().rank() != 2 || B.shape().rank() != 2 || C.shape().rank() != 2) {
        throw ShapeError("CudaBackend::gemm: needs matrices, got " + A.shape().str() + ", " + B.shape().str() +
                         " and " + C.shape().str());
    }
    requireDtype("gemm", C, DType::float32, "C");
    const int64_t m = C.shape()[0], n = C.shape()[1];
    const int64_t k = transA ? A.shape()[0] : A.shape()[1];
    if ((transA ? A.shape()[1] : A.shape()[0]) != m || (transB ? B.shape()[1] : B.shape()[0]) != k ||
        (transB ? B.shape()[0] : B.shape()[1]) != n) {
        throw ShapeError("CudaBackend::gemm: " + A.shape().str() + (transA ? "^T" : "") + " x " + B.shape().str() +
                         (transB ? "^T" : "") + " does not give " + C.shape().str());
    }
    s();
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (compute == DType::float32) {
        requireDtype("gemm", A, DType::float32, "A");
        requireDtype("gemm", B, DType::float32, "B");
        TESSERA_CUDA_CHECK(cublasSgemm(cublas_, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                       &alpha, fp(B), static_cast<int>(B.shape()[1]), fp(A),
                                       static_cast<int>(A.shape()[1]), &beta, fp(C), static_cast<int>(n)));
        return;
    }
    const Tensor a = A.convertedTo(compute), b = B.convertedTo(compute);
    const cudaDataType_t type = compute == DType::float16 ? CUDA_R_16F : CUDA_R_16BF;
    TESSERA_CUDA_CHECK(cublasGemmEx(cublas_, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                    &alpha, b.raw(), type, static_cast<int>(B.shape()[1]), a.raw(), type,
                                    static_cast<int>(A.shape()[1]), &beta, C.raw(), CUDA_R_32F, static_cast<int>(n),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::broadcastRows(const Tensor& row, const Tensor& y) {
    if (y.shape().rank() != 2 || row.numel() != y.shape()[1]) {
        throw ShapeError("CudaBackend::broadcastRows: row " + row.shape().str() + " does not fit rows of " +
                         y.shape().str());
    }
    cudak::broadcastRows(fp(row), fp(y), y.shape()[0], y.shape()[1], s());
}

void CudaBackend::sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) {
    if (x.shape().rank() != 2 || y.numel() != x.shape()[1]) {
        throw ShapeError("CudaBackend::sumRows: y " + y.shape().str() + " does not fit the columns of " +
                         x.shape().str());
    }
    cudak::sumRows(fp(x), alpha, beta, fp(y), x.shape()[0], x.shape()[1], s());
}

// ---- element-wise -------------------------------------------------------------------------------

void CudaBackend::axpby(float alpha, const Tensor& x, float beta, const Tensor& y) {
    requireSameNumel("axpby", x, y);
    if (x.layout() != y.layout()) {
        axpby(alpha, x.toLayout(y.layout()), beta, y);
        return;
    }
    cudak::axpby(alpha, fp(x), beta, fp(y), static_cast<int64_t>(y.nbytes() / sizeof(float)), s());
}

void CudaBackend::axpbyz(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
    requireSameNumel("axpbyz", x, z);
    requireSameNumel("axpbyz", y, z);
    if (!x.isPlain() || !y.isPlain() || !z.isPlain()) { // blocked tensors moved from the CPU
        Backend::axpbyz(alpha, x, beta, y, z);
        return;
    }
    cudak::axpbyz(alpha, fp(x), beta, fp(y), fp(z), z.numel(), s());
}

void CudaBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
    requireSameNumel("mul", a, b);
    requireSameNumel("mul", a, y);
    cudak::mul(fp(a), fp(b), fp(y), y.numel(), s());
}

void CudaBackend::binaryBroadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) {
    if (!broadcastsTo(a.shape(), y.shape()) || !broadcastsTo(b.shape(), y.shape())) {
        throw ShapeError("CudaBackend::binaryBroadcast: " + a.shape().str() + " and " + b.shape().str() +
                         " do not broadcast to " + y.shape().str());
    }
    cudak::binaryBroadcast(op, fp(a), fp(b), fp(y), element::broadcastGeometry(a.shape(), b.shape(), y.shape()),
                           y.numel(), s());
}

void CudaBackend::sumTo(const Tensor& x, float alpha, const Tensor& y) {
    if (!broadcastsTo(y.shape(), x.shape())) {
        throw ShapeError("CudaBackend::sumTo: " + y.shape().str() + " does not broadcast to " + x.shape().str());
    }
    cudak::sumTo(fp(x), alpha, fp(y), element::reduceGeometry(x.shape(), y.shape()), y.numel(), s());
}

void CudaBackend::activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) {
    if (y.shape() != x.shape()) throw ShapeError("CudaBackend::activationForward: x and y differ in shape");
    if (!x.isPlain() || !y.isPlain()) { // blocked tensors moved from the CPU
        Tensor out = Tensor::empty(y.shape(), y.dtype(), y.device());
        activationForward(act, x.plain(), out);
        reorder(out, y);
        return;
    }
    cudak::activationForward(static_cast<int>(act.kind), act.alpha, act.beta, fp(x), fp(y), x.numel(), s());
}

void CudaBackend::activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                                     const Tensor& dx) {
    if (dx.shape() != x.shape() || dy.shape() != x.shape()) {
        throw ShapeError("CudaBackend::activationBackward: x, dy and dx differ in shape");
    }
    if (!x.isPlain() || !y.isPlain() || !dy.isPlain() || !dx.isPlain()) {
        Tensor out = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
        activationBackward(act, x.plain(), y.plain(), dy.plain(), out);
        reorder(out, dx);
        return;
    }
    cudak::activationBackward(static_cast<int>(act.kind), act.alpha, act.beta, fp(x), fp(y), fp(dy), fp(dx), x.numel(),
                              s());
}

void CudaBackend::affine(const Tensor& x, float a, float b, const Tensor& y) {
    requireSameNumel("affine", x, y);
    cudak::affine(fp(x), a, b, fp(y), y.numel(), s());
}

void CudaBackend::spatialTfForward(const Tensor& x, const Tensor& theta, const Tensor& y) {
    const Shape& s = x.shape();
    if (s.rank() != 4 || theta.shape() != Shape{s[0], 2, 3} || y.shape().rank() != 4 || y.shape()[1] != s[1]) {
        throw ShapeError("CudaBackend::spatialTf: x " + s.str() + ", theta " + theta.shape().str() + " and y " +
                         y.shape().str() + " do not fit");
    }
    cudak::spatialTfForward(fp(x), fp(theta), fp(y), s[0], s[1], s[2], s[3], y.shape()[2], y.shape()[3], this->s());
}

void CudaBackend::spatialTfBackward(const Tensor& x, const Tensor& theta, const Tensor& dy, const Tensor& dx,
                                    const Tensor& dtheta) {
    const Shape& s = x.shape();
    fill(dx, 0.0f);
    fill(dtheta, 0.0f);
    cudak::spatialTfBackward(fp(x), fp(theta), fp(dy), fp(dx), fp(dtheta), s[0], s[1], s[2], s[3], dy.shape()[2],
                             dy.shape()[3], this->s());
}

void CudaBackend::power(const Tensor& x, float p, const Tensor& y) {
    requireSameNumel("power", x, y);
    cudak::power(fp(x), p, fp(y), y.numel(), s());
}

void CudaBackend::mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) {
    const Shape& xs = x.shape();
    if (xs.rank() < 2 || m.numel() != xs[0] * xs[1]) {
        throw ShapeError("CudaBackend::mulChannels: m " + m.shape().str() + " does not fit " + xs.str());
    }
    const int64_t planes = xs[0] * xs[1];
    cudak::mulChannels(fp(x), fp(m), fp(y), planes, planes ? xs.numel() / planes : 0, s());
}

void CudaBackend::cast(const Tensor& x, const Tensor& y) {
    requireSameNumel("cast", x, y);
    if (x.dtype() == y.dtype()) {
        copy(x, y);
    } else if (x.dtype() == DType::float32 && y.dtype() == DType::int32) {
        cudak::castToInt(fp(x), ip(y), x.numel(), s());
    } else if (x.dtype() == DType::int32 && y.dtype() == DType::float32) {
        cudak::castToFloat(ip(x), fp(y), x.numel(), s());
    } else {
        if (!x.isPlain() || !y.isPlain()) throw BackendError("CudaBackend::cast: plain tensors only");
        cudak::cast(x.raw(), static_cast<int>(x.dtype()), y.raw(), static_cast<int>(y.dtype()), x.numel(), s());
    }
}

// ---- gathers and scatters --------------------------------------------------------------------

namespace {
struct Axis3 {
    int64_t outer, along, inner;
};
Axis3 axis3(const Tensor& t, const char* op) {
    const Shape& s = t.shape();
    if (s.rank() != 3)
        throw ShapeError(std::string("CudaBackend::") + op + ": expects a [O, A, I] view, got " + s.str());
    return {s[0], s[1], s[2]};
}
} // namespace

void CudaBackend::gatherAxis(const Tensor& x, const Tensor& idx, const Tensor& y) {
    const Axis3 xs = axis3(x, "gatherAxis"), is = axis3(idx, "gatherAxis");
    checkIndexRange("gatherAxis", idx, xs.along);
    cudak::gatherAxis(fp(x), ip(idx), fp(y), is.outer, xs.along, is.along, is.inner, s());
}

void CudaBackend::scatterAddAxis(const Tensor& src, const Tensor& idx, const Tensor& dst) {
    const Axis3 ds = axis3(dst, "scatterAddAxis"), is = axis3(idx, "scatterAddAxis");
    checkIndexRange("scatterAddAxis", idx, ds.along);
    cudak::scatterAddAxis(fp(src), ip(idx), fp(dst), is.outer, ds.along, is.along, is.inner, s());
}

void CudaBackend::topKIndices(const Tensor& x, int64_t k, const Tensor& idx) {
    const Axis3 xs = axis3(x, "topKIndices");
    if (k < 1 || k > xs.along) {
        throw ShapeError("CudaBackend::topKIndices: k = " + std::to_string(k) + " outside [1, " +
                         std::to_string(xs.along) + "]");
    }
    cudak::topKIndices(fp(x), ip(idx), xs.outer, xs.along, xs.inner, k, s());
}

void CudaBackend::gatherRows(const Tensor& table, const Tensor& idx, const Tensor& y) {
    checkIndexRange("gatherRows", idx, table.shape()[0]);
    cudak::gatherRows(fp(table), ip(idx), fp(y), idx.numel(), table.shape()[1], s());
}

void CudaBackend::scatterAddRows(const Tensor& src, const Tensor& idx, float scale, const Tensor& table) {
    checkIndexRange("scatterAddRows", idx, table.shape()[0]);
    cudak::scatterAddRows(fp(src), ip(idx), scale, fp(table), idx.numel(), table.shape()[1], s());
}

void CudaBackend::permute(const Tensor& x, const std::vector<int64_t>& perm, const Tensor& y) {
    const Shape& xs = x.shape();
    const size_t r = xs.rank();
    if (perm.size() != r || r > 8) {
        throw ShapeError("CudaBackend::permute: needs a permutation of rank " + std::to_string(r) +
                         " (at most 8) for " + xs.str());
    }
    cudak::PermuteDims p{};
    p.rank = static_cast<int>(r);
    std::vector<int64_t> xStride(r, 1);
    for (size_t i = r - 1; i-- > 0;) xStride[i] = xStride[i + 1] * xs[i + 1];
    for (size_t i = 0; i < r; ++i) {
        p.ydims[i] = y.shape()[i];
        p.xstride[i] = xStride[static_cast<size_t>(perm[i])];
    }
    cudak::permute(fp(x), fp(y), p, y.numel(), s());
}

// ---- LRN, resampling, padding, prelu -----------------------------------------------------------

namespace {
// [N, C, H, W] view of an LRN input: 1-D inputs get W = 1; across channels, 3-D spatial
// dims fold into H.
void lrnDims(const LrnParams& p, const Shape& s, int64_t& h, int64_t& w) {
    if (s.rank() < 3 || s.rank() > 5 || (!p.acrossChannels && s.rank() == 5)) {
        throw ShapeError("CudaBackend::lrn: unsupported input " + s.str() +
                         (p.acrossChannels ? "" : " for within-channel LRN (1-D or 2-D maps)"));
    }
    if (s.rank() == 4) {
        h = s[2];
        w = s[3];
    } else {
        h = s.numel() / (s[0] * s[1]);
        w = 1;
    }
}
} // namespace

Tensor CudaBackend::lrnForward(const LrnParams& p, const Tensor& xIn, Tensor& workspace) {
    const Tensor x = xIn.plain();
    const Shape& sh = x.shape();
    int64_t h = 0, w = 0;
    lrnDims(p, sh, h, w);
    Tensor y = Tensor::empty(sh, DType::float32, device());
    workspace = Tensor::empty(sh, DType::float32, device());
    cudak::lrnForward(p.acrossChannels, p.size, p.alpha, p.beta, p.k, fp(x), fp(y), fp(workspace), sh[0], sh[1], h, w,
                      s());
    return y;
}

Tensor CudaBackend::lrnBackward(const LrnParams& p, const Tensor& xIn, const Tensor& dyIn, const Tensor& workspace) {
    if (!workspace.defined()) throw BackendError("CudaBackend::lrnBackward: no workspace from a forward pass");
    const Tensor x = xIn.plain(), dy = dyIn.plain();
    const Shape& sh = x.shape();
    int64_t h = 0, w = 0;
    lrnDims(p, sh, h, w);
    Tensor dx = Tensor::empty(sh, DType::float32, device());
    cudak::lrnBackward(p.acrossChannels, p.size, p.alpha, p.beta, fp(x), fp(dy), fp(workspace), fp(dx), sh[0], sh[1], h,
                       w, s());
    return dx;
}

void CudaBackend::resampleForward(ResampleMode mode, const Tensor& x, const Tensor& y) {
    int64_t in[3], out[3];
    spatial3("resampleForward", x.shape(), in);
    spatial3("resampleForward", y.shape(), out);
    cudak::resampleForward(mode == ResampleMode::linear, fp(x), fp(y), in, out, x.shape()[0] * x.shape()[1], s());
}

void CudaBackend::resampleBackward(ResampleMode mode, const Tensor& dy, const Tensor& dx) {
    int64_t in[3], out[3];
    spatial3("resampleBackward", dx.shape(), in);
    spatial3("resampleBackward", dy.shape(), out);
    cudak::resampleBackward(mode == ResampleMode::linear, fp(dy), fp(dx), in, out, dx.shape()[0] * dx.shape()[1], s());
}

namespace {
void padLo3(const std::vector<int64_t>& lo, int64_t out[3]) {
    const size_t sp = lo.size();
    out[0] = out[1] = out[2] = 0;
    for (size_t d = 0; d < sp && d < 3; ++d) out[3 - sp + d] = lo[d];
}
} // namespace

void CudaBackend::padForward(PadMode mode, float value, const std::vector<int64_t>& lo, const std::vector<int64_t>&,
                             const Tensor& x, const Tensor& y) {
    int64_t in[3], out[3], l[3];
    spatial3("padForward", x.shape(), in);
    spatial3("padForward", y.shape(), out);
    padLo3(lo, l);
    cudak::padForward(mode == PadMode::reflect, value, fp(x), fp(y), in, out, l, x.shape()[0] * x.shape()[1], s());
}

void CudaBackend::padBackward(PadMode mode, const std::vector<int64_t>& lo, const std::vector<int64_t>&,
                              const Tensor& dy, const Tensor& dx) {
    int64_t in[3], out[3], l[3];
    spatial3("padBackward", dx.shape(), in);
    spatial3("padBackward", dy.shape(), out);
    padLo3(lo, l);
    cudak::padBackward(mode == PadMode::reflect, fp(dy), fp(dx), in, out, l, dx.shape()[0] * dx.shape()[1], s());
}

void CudaBackend::preluForward(const Tensor& x, const Tensor& slopes, const Tensor& y) {
    const Shape& xs = x.shape();
    const int64_t n = xs[0], c = xs[1];
    cudak::preluForward(fp(x), fp(slopes), fp(y), n, c, (n * c) != 0 ? xs.numel() / (n * c) : 0, slopes.numel() == 1,
                        s());
}

void CudaBackend::preluBackward(const Tensor& x, const Tensor& slopes, const Tensor& dy, const Tensor& dx, float scale,
                                float momentum, const Tensor& dslopes) {
    const Shape& xs = x.shape();
    const int64_t n = xs[0], c = xs[1];
    Tensor fresh = Tensor::empty(slopes.shape(), DType::float32, device());
    cudak::preluBackward(fp(x), fp(slopes), fp(dy), fp(dx), fp(fresh), n, c, (n * c) != 0 ? xs.numel() / (n * c) : 0,
                         slopes.numel() == 1, s());
    axpby(scale, fresh, momentum, dslopes);
}

// ---- costs ----------------------------------------------------------------------------------------

void CudaBackend::crossEntropy(const Tensor& scores, const Tensor& labels, const Tensor& weights, float smoothing,
                               const Tensor& grad, double& error, int64_t& correct) {
    const Shape& sh = scores.shape();
    const int64_t n = sh[0], c = sh[1], inner = sh.numel() / (n * c), samples = n * inner;
    checkIndexRange("crossEntropy", labels, c, "label");
    auto* slots = static_cast<char*>(scalars());
    auto* err = reinterpret_cast<double*>(slots + 8);
    auto* hits = reinterpret_cast<unsigned long long*>(slots + 16);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(slots + 8, 0, 16, s()));
    cudak::crossEntropy(fp(scores), ip(labels), weights.defined() ? fp(weights) : nullptr,
                        grad.defined() ? fp(grad) : nullptr, n, c, inner, smoothing, err, hits, s());
    struct {
        double err;
        unsigned long long hits;
    } host{};
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, slots + 8, 16, cudaMemcpyDeviceToHost, s()));
    synchronize();
    error = host.err / static_cast<double>(samples);
    correct = static_cast<int64_t>(host.hits);
}

double CudaBackend::pointwiseCost(CostKind kind, const Tensor& pred, const Tensor& target, const Tensor& grad) {
    auto* sum = reinterpret_cast<double*>(static_cast<char*>(scalars()) + 8);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), s()));
    const int64_t n = pred.shape()[0], c = pred.shape().rank() > 1 ? pred.shape()[1] : 1;
    cudak::pointwiseCost(static_cast<int>(kind), fp(pred), fp(target), fp(grad), pred.numel(), n, c, sum, s());
    double host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host / static_cast<double>(n);
}

bool CudaBackend::scaleCheckFinite(const Tensor& t, float factor) {
    auto* bad = static_cast<int*>(scalars());
    TESSERA_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), s()));
    cudak::scaleCheckFinite(fp(t), factor, static_cast<int64_t>(t.nbytes() / sizeof(float)), bad, s());
    int host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host == 0;
}

double CudaBackend::sumSquares(const Tensor& t) {
    auto* sum = reinterpret_cast<double*>(static_cast<char*>(scalars()) + 8);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), s()));
    cudak::sumSquares(fp(t), static_cast<int64_t>(t.nbytes() / sizeof(float)), sum, s());
    double host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host;
}

double CudaBackend::svmCost(const Tensor& scores, const Tensor& labels, bool l2, const Tensor& grad) {
    const int64_t n = scores.shape()[0], c = scores.shape()[1];
    checkIndexRange("svmCost", labels, c, "label");
    auto* sum = reinterpret_cast<double*>(static_cast<char*>(scalars()) + 8);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), s()));
    cudak::svmCost(fp(scores), ip(labels), l2, fp(grad), n, c, sum, s());
    double host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host / static_cast<double>(n);
}

void CudaBackend::ctc(const Tensor& scores, const Tensor& labels, const Tensor& labelLengths,
                      const Tensor& inputLengths, int32_t blank, const std::vector<float>& gradScale,
                      const Tensor& grad, std::vector<double>& losses) {
    const int64_t T = scores.shape()[0], N = scores.shape()[1], V = scores.shape()[2], S = labels.shape()[1];
    // float64 scratch: lse [T, N], alpha and beta [N, T, 2 S + 1], losses [N]
    const int64_t rows = T * N, cells = N * T * (2 * S + 1);
    const Tensor scratch = Tensor::empty({2 * (rows + 2 * cells + N)}, DType::float32, device());
    auto* lse = static_cast<double*>(scratch.raw());
    double *alpha = lse + rows, *beta = alpha + cells, *dLosses = beta + cells;
    const Tensor scale = Tensor::fromVector({N}, gradScale).to(device());
    cudak::ctc(fp(scores), ip(labels), ip(labelLengths), ip(inputLengths), blank, fp(scale),
               grad.defined() ? fp(grad) : nullptr, T, N, V, S, lse, alpha, beta, dLosses, s());
    losses.assign(static_cast<size_t>(N), 0.0);
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(losses.data(), dLosses, static_cast<size_t>(N) * sizeof(double), cudaMemcpyDeviceToHost, s()));
    synchronize();
}

// ---- optimizers, dropout ---------------------------------------------------------------------------

void CudaBackend::optimizerUpdate(const UpdateParams& p, const Tensor& param, const Tensor& grad, const Tensor& s1,
                                  const Tensor& s2, const Tensor& s3) {
    requireSameNumel("optimizerUpdate", param, grad);
    cudak::optimizerUpdate(p.rule, element::scalarsOf(p), fp(param), fp(grad), s1.defined() ? fp(s1) : nullptr,
                           s2.defined() ? fp(s2) : nullptr, s3.defined() ? fp(s3) : nullptr, param.numel(), s());
}

void CudaBackend::dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) {
    requireSameNumel("dropoutForward", x, mask);
    requireSameNumel("dropoutForward", x, y);
    const int64_t n = x.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(static_cast<uint64_t>(n));
    cudak::dropout(fp(x), fp(mask), fp(y), n, p, seed, first, s());
}

} // namespace tessera
