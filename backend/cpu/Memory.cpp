// Allocation, copies, fills, random draws and dropout masks of the CPU backend. The loops
// are plain and vectorisable; OpenMP splits them only when they are large enough to pay for
// waking the thread pool.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/Random.h"
#include "backend/cpu/Clones.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

namespace {
constexpr int64_t kParallelMin = 1 << 15;

std::atomic<size_t> liveBytes{0}, peakBytes{0};

// Freed blocks of 64 KiB and more are kept, by size, for the next allocation of that size:
// a training step allocates the same activation sizes every time, and fresh pages from
// the OS cost a page fault and a clearing each (15% of a ResNet-18 step before this).
// Up to TESSERA_HOST_CACHE_MB (default 4096) are kept; 0 turns the cache off.
class BlockCache {
public:
    static constexpr size_t kMinBlock = 64 << 10;

    BlockCache() {
        const char* env = std::getenv("TESSERA_HOST_CACHE_MB");
        limit_ = (env ? std::strtoull(env, nullptr, 10) : 4096ull) << 20;
    }
    void* take(size_t bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = free_.find(bytes);
        if (it == free_.end() || it->second.empty()) return nullptr;
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
    }
    bool holds(size_t bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = free_.find(bytes);
        return it != free_.end() && !it->second.empty();
    }
    bool give(void* p, size_t bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cached_ + bytes > limit_) return false;
        free_[bytes].push_back(p);
        cached_ += bytes;
        return true;
    }

private:
    std::mutex mutex_;
    std::unordered_map<size_t, std::vector<void*>> free_;
    size_t cached_ = 0, limit_ = 0;
};

// Never destroyed: storages freed during static destruction still find it.
BlockCache& blockCache() {
    static BlockCache* cache = new BlockCache();
    return *cache;
}

size_t roundedSize(size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }

// Blocks of 1 MiB and more are pages mapped from the OS (page-aligned, zero until written),
// unmapped when freed (unless cached).
constexpr size_t kMapMin = 1 << 20;

void* mapPages(size_t rounded) {
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (rounded >= (2u << 20)) ::madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}

// TESSERA_POISON_MEMORY=1 fills every new host block with 0xFF bytes (NaN as float32, -1
// as int32), so a kernel that reads memory it never wrote shows up as NaN in the tests
// instead of passing on the zeros fresh pages happen to hold.
bool poisonMemory() {
    static const bool on = [] {
        const char* env = std::getenv("TESSERA_POISON_MEMORY");
        return env && std::string(env) == "1";
    }();
    return on;
}

void freeHost(void* ptr, size_t bytes, Device) {
    const size_t rounded = roundedSize(bytes);
    if (rounded >= BlockCache::kMinBlock && blockCache().give(ptr, rounded)) {
        // kept for the next allocation of this size
    } else if (rounded >= kMapMin) {
        ::munmap(ptr, rounded);
    } else {
        std::free(ptr);
    }
    liveBytes.fetch_sub(bytes, std::memory_order_relaxed);
}

void raisePeak(size_t live) {
    size_t peak = peakBytes.load(std::memory_order_relaxed);
    while (live > peak && !peakBytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {}
}

// A new block of `bytes` at ptr (null: out of memory), counted as live.
std::shared_ptr<Storage> hostStorage(void* ptr, size_t bytes) {
    if (!ptr) throw BackendError("CpuBackend: out of host memory allocating " + std::to_string(bytes) + " bytes");
    raisePeak(liveBytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
    return std::make_shared<Storage>(ptr, bytes, Device::cpu(), &freeHost);
}

} // namespace

CpuBackend::CpuBackend() { prepareThread(); }

void CpuBackend::prepareThread() {
#if defined(__SSE__)
    const char* env = std::getenv("TESSERA_FLUSH_DENORMALS");
    if (env && std::string(env) == "0") return;
    constexpr unsigned kFtzDaz = 0x8040; // MXCSR bits 15 (flush to zero) and 6 (denormals are zero)
    _mm_setcsr(_mm_getcsr() | kFtzDaz);
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | kFtzDaz);
#endif
}

std::shared_ptr<Storage> CpuBackend::allocate(size_t bytes) {
    const size_t rounded = roundedSize(bytes);
    void* ptr = rounded >= BlockCache::kMinBlock ? blockCache().take(rounded) : nullptr;
    if (!ptr) ptr = rounded >= kMapMin ? mapPages(rounded) : std::aligned_alloc(64, rounded);
    if (ptr && poisonMemory()) std::memset(ptr, 0xFF, rounded);
    return hostStorage(ptr, bytes);
}

// Fresh pages where no cached block of the size waits (a cached block is reused, and
// cleared, by allocate and a fill): a model's gradients cost neither a clearing nor memory
// until a backward writes them.
std::shared_ptr<Storage> CpuBackend::allocateZeroed(size_t bytes) {
    const size_t rounded = roundedSize(bytes);
    if (rounded < kMapMin || blockCache().holds(rounded)) return nullptr;
    return hostStorage(mapPages(rounded), bytes);
}

MemoryStats CpuBackend::memoryStats() const { return {liveBytes.load(), peakBytes.load()}; }

void CpuBackend::resetPeak() { peakBytes.store(liveBytes.load()); }

void CpuBackend::copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst,
                             int64_t dstOffset, int64_t dstStride, int64_t rows, int64_t width) {
    if (src.dtype() != dst.dtype()) throw ShapeError("CpuBackend::copyStrided: dtypes differ");
    if (rows <= 0 || width <= 0) return;
    const int64_t srcEnd = srcOffset + (rows - 1) * srcStride + width,
                  dstEnd = dstOffset + (rows - 1) * dstStride + width;
    if (srcOffset < 0 || dstOffset < 0 || srcEnd > src.numel() || dstEnd > dst.numel()) {
        throw ShapeError("CpuBackend::copyStrided: block out of range of " + src.shape().str() + " or " +
                         dst.shape().str());
    }
    const size_t elem = sizeOf(src.dtype());
    const char* ps = static_cast<const char*>(src.raw());
    char* pd = static_cast<char*>(dst.raw());
#pragma omp parallel for if (rows * width > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(pd + static_cast<size_t>(dstOffset + r * dstStride) * elem,
                    ps + static_cast<size_t>(srcOffset + r * srcStride) * elem, static_cast<size_t>(width) * elem);
    }
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
    if (!src.device().isCpu() || !dst.device().isCpu()) {
        throw BackendError("CpuBackend::copy: cannot copy between " + src.device().str() + " and " +
                           dst.device().str() + " without that device's backend");
    }
    if (src.raw() != dst.raw()) std::memmove(dst.raw(), src.raw(), dst.nbytes());
}

void CpuBackend::fill(const Tensor& t, float value) {
    const int64_t n = t.numel();
    if (t.dtype() == DType::int32) {
        int32_t* p = t.data<int32_t>();
        const auto v = static_cast<int32_t>(value);
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) p[i] = v;
        return;
    }
    if (is16Bit(t.dtype())) {
        const uint16_t bits = t.dtype() == DType::bfloat16 ? toBfloat16(value).bits : toFloat16(value).bits;
        auto* p = static_cast<uint16_t*>(t.raw());
        const int64_t all = static_cast<int64_t>(t.nbytes() / sizeof(uint16_t)); // padding too
#pragma omp parallel for simd if (all > kParallelMin)
        for (int64_t i = 0; i < all; ++i) p[i] = bits;
        return;
    }
    float* p = t.data<float>();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuBackend::fillUniform(const Tensor& t, float lo, float hi, Generator& gen) {
    float* p = t.data<float>();
    const int64_t n = t.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(static_cast<uint64_t>(n));
    const float range = hi - lo;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = lo + range * randomUniform(seed, first + static_cast<uint64_t>(i));
}

void CpuBackend::fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) {
    float* p = t.data<float>();
    const int64_t n = t.numel();
    // Box-Muller: element i uses counters 2i and 2i+1.
    const uint64_t seed = gen.seed(), first = gen.advance(2 * static_cast<uint64_t>(n));
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t c = first + 2 * static_cast<uint64_t>(i);
        const float u1 = 1.0f - randomUniform(seed, c); // (0, 1]: log is finite
        const float u2 = randomUniform(seed, c + 1);
        p[i] = mean + stddev * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
    }
}

void CpuBackend::fillBytes(const Tensor& t, unsigned char byte) { std::memset(t.raw(), byte, t.nbytes()); }

void cpu_util::requireSameNumel(const char* op, const Tensor& a, const Tensor& b) {
    if (a.numel() != b.numel()) {
        throw ShapeError(std::string("CpuBackend::") + op + ": " + a.shape().str() + " and " + b.shape().str() +
                         " differ in size");
    }
}

using cpu_util::requireSameNumel;

namespace {
inline float asFloat(float v) { return v; }
inline float asFloat(bfloat16 v) { return toFloat(v); }
inline void store(float& y, float v) { y = v; }
inline void store(bfloat16& y, float v) { y = toBfloat16(v); }

// f[i] <- 0 where randomUniform(seed, first + i) < p, else keep (the draw of every dropout);
// then y[i] <- x[i] * f[i], rounded once to Y.
template <class X, class Y>
inline void dropoutChunk(const X* x, Y* y, float* f, int64_t n, float p, float keep, uint64_t seed, uint64_t first) {
    for (int64_t i = 0; i < n; ++i) f[i] = randomUniform(seed, first + static_cast<uint64_t>(i)) < p ? 0.0f : keep;
    for (int64_t i = 0; i < n; ++i) store(y[i], asFloat(x[i]) * f[i]);
}

// The chunk per pair of types, cloned (Clones.h): the hash's 64-bit products vectorise with
// AVX-512 (eight lanes) and, emulated, with AVX2, and so do the bfloat16 conversions.
#define TESSERA_DROPOUT_CHUNK(NAME, X, Y)                                                                              \
    TESSERA_CPU_CLONES void NAME(const X* x, Y* y, float* f, int64_t n, float p, float keep, uint64_t seed,            \
                                 uint64_t first) {                                                                     \
        dropoutChunk(x, y, f, n, p, keep, seed, first);                                                                \
    }
TESSERA_DROPOUT_CHUNK(chunkFF, float, float)
TESSERA_DROPOUT_CHUNK(chunkFB, float, bfloat16)
TESSERA_DROPOUT_CHUNK(chunkBF, bfloat16, float)
TESSERA_DROPOUT_CHUNK(chunkBB, bfloat16, bfloat16)
#undef TESSERA_DROPOUT_CHUNK
inline void chunk(const float* x, float* y, float* f, int64_t n, float p, float k, uint64_t s, uint64_t c) {
    chunkFF(x, y, f, n, p, k, s, c);
}
inline void chunk(const float* x, bfloat16* y, float* f, int64_t n, float p, float k, uint64_t s, uint64_t c) {
    chunkFB(x, y, f, n, p, k, s, c);
}
inline void chunk(const bfloat16* x, float* y, float* f, int64_t n, float p, float k, uint64_t s, uint64_t c) {
    chunkBF(x, y, f, n, p, k, s, c);
}
inline void chunk(const bfloat16* x, bfloat16* y, float* f, int64_t n, float p, float k, uint64_t s, uint64_t c) {
    chunkBB(x, y, f, n, p, k, s, c);
}

constexpr int64_t kDropoutChunk = 4096;

// y <- x * the factors (written to `mask` too when given), a chunk of draws at a time, in
// parallel over chunks.
template <class X, class Y>
void applyDropout(const X* x, Y* y, float* mask, int64_t n, float p, uint64_t seed, uint64_t first) {
    const float keep = 1.0f / (1.0f - p);
    const int64_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t c = 0; c < chunks; ++c) {
        float own[kDropoutChunk];
        const int64_t at = c * kDropoutChunk, len = std::min(kDropoutChunk, n - at);
        chunk(x + at, y + at, mask ? mask + at : own, len, p, keep, seed, first + static_cast<uint64_t>(at));
    }
}

template <class X> void applyDropoutTo(const X* x, const Tensor& y, int64_t n, float p, uint64_t seed, uint64_t first) {
    if (y.dtype() == DType::bfloat16) return applyDropout(x, y.data<bfloat16>(), nullptr, n, p, seed, first);
    applyDropout(x, y.data<float>(), nullptr, n, p, seed, first);
}
} // namespace

void CpuBackend::dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) {
    requireSameNumel("dropoutForward", x, mask);
    requireSameNumel("dropoutForward", x, y);
    const int64_t n = x.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(static_cast<uint64_t>(n));
    applyDropout(x.data<float>(), y.data<float>(), mask.data<float>(), n, p, seed, first);
}

void CpuBackend::dropoutApply(const Tensor& x, float p, uint64_t seed, uint64_t first, const Tensor& y) {
    requireSameNumel("dropoutApply", x, y);
    for (const Tensor* t : {&x, &y}) {
        if (t->dtype() != DType::float32 && t->dtype() != DType::bfloat16) {
            throw BackendError("CpuBackend::dropoutApply: " + str(t->dtype()) +
                               " is not supported (float32 and bfloat16 are)");
        }
        if (t->layout() != Layout::plain) throw BackendError("CpuBackend::dropoutApply: needs plain tensors");
    }
    const int64_t n = x.numel();
    if (x.dtype() == DType::bfloat16) return applyDropoutTo(x.data<bfloat16>(), y, n, p, seed, first);
    applyDropoutTo(x.data<float>(), y, n, p, seed, first);
}

} // namespace tessera
