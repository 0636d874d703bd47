// The CUDA backend's memory: allocation, copies, reorders, page-locked host memory and uploads, fills, random numbers,
// dropout.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

using namespace cuda_util;

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

// Between any layouts, and between floating types as the CPU backend's reorder converts
// float32 and bfloat16 (channels-last is a block of C: [N, S, C]).
void CudaBackend::reorder(const Tensor& src, const Tensor& dst) {
    if (src.shape() != dst.shape() ||
        (src.dtype() != dst.dtype() && !(isFloating(src.dtype()) && isFloating(dst.dtype())))) {
        throw ShapeError("CudaBackend::reorder: " + src.shape().str() + " " + str(src.dtype()) + " to " +
                         dst.shape().str() + " " + str(dst.dtype()));
    }
    if (src.layout() == dst.layout() && src.dtype() == dst.dtype()) {
        copy(src, dst);
        return;
    }
    const Shape& sh = src.shape();
    if (sh.numel() == 0) return;
    if (src.layout() == dst.layout() && (src.isPlain() || src.layout() == Layout::channelsLast)) {
        cast(src, dst); // one order, two types
        return;
    }
    const int64_t c = sh[1], spatial = sh.numel() / (sh[0] * sh[1]);
    auto block = [c](Layout l) { return l == Layout::channelsLast ? c : blockOf(l); };
    if (src.dtype() == DType::float32 && dst.dtype() == DType::float32) {
        cudak::reorder(fp(src), block(src.layout()), fp(dst), block(dst.layout()), sh[0], c, spatial, s());
    } else {
        cudak::reorderAny(src.raw(), static_cast<int>(src.dtype()), block(src.layout()), dst.raw(),
                          static_cast<int>(dst.dtype()), block(dst.layout()), sh[0], c, spatial, s());
    }
}

Tensor CudaBackend::arranged(const Tensor& t, Layout layout, DType dtype) {
    if (t.layout() == layout && t.dtype() == dtype) return t;
    Tensor out = Tensor::empty(t.shape(), dtype, device(), layout);
    reorder(t, out);
    return out;
}

MemoryStats CudaBackend::memoryStats() const { return allocator_.stats(); }

void CudaBackend::resetPeak() { allocator_.resetPeak(); }

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

void CudaBackend::fill(const Tensor& t, float value) {
    if (t.dtype() == DType::int32) {
        cudak::fillInt(ip(t), t.numel(), static_cast<int32_t>(value), s());
    } else if (t.dtype() == DType::float32) {
        cudak::fill(fp(t), static_cast<int64_t>(t.nbytes() / sizeof(float)), value, s());
    } else if (value == 0.0f) { // 16-bit zeros are zero bytes
        fillBytes(t, 0);
    } else { // 16-bit: the value in float32, rounded once
        const Tensor f = Tensor::empty(Shape{static_cast<int64_t>(t.nbytes() / 2)}, DType::float32, t.device());
        cudak::fill(fp(f), f.numel(), value, s());
        cudak::cast(f.raw(), static_cast<int>(DType::float32), t.raw(), static_cast<int>(t.dtype()), f.numel(), s());
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

void CudaBackend::dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) {
    requireSameNumel("dropoutForward", x, mask);
    requireSameNumel("dropoutForward", x, y);
    const int64_t n = x.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(static_cast<uint64_t>(n));
    cudak::dropout(fp(x), fp(mask), fp(y), n, p, seed, first, s());
}

void CudaBackend::dropoutApply(const Tensor& x, float p, uint64_t seed, uint64_t first, const Tensor& y) {
    requireSameNumel("dropoutApply", x, y);
    for (const Tensor* t : {&x, &y}) {
        if (!isFloating(t->dtype()) || t->layout() != Layout::plain) {
            throw BackendError("CudaBackend::dropoutApply: needs plain floating tensors, got " + str(t->dtype()));
        }
    }
    cudak::dropoutApply(x.raw(), static_cast<int>(x.dtype()), y.raw(), static_cast<int>(y.dtype()), x.numel(), p, seed,
                        first, s());
}

} // namespace tessera
