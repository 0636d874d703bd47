// Allocation, copies, fills, random draws and the simple element-wise ops of the CPU
// backend. The loops are plain and vectorisable; OpenMP splits them only when they are
// large enough to pay for waking the thread pool.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/Random.h"
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
    if (rounded < BlockCache::kMinBlock || !blockCache().give(ptr, rounded)) std::free(ptr);
    liveBytes.fetch_sub(bytes, std::memory_order_relaxed);
}

void raisePeak(size_t live) {
    size_t peak = peakBytes.load(std::memory_order_relaxed);
    while (live > peak && !peakBytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {}
}

void requireSameNumel(const char* op, const Tensor& a, const Tensor& b) {
    if (a.numel() != b.numel()) {
        throw ShapeError(std::string("CpuBackend::") + op + ": " + a.shape().str() + " and " + b.shape().str() +
                         " differ in size");
    }
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
    if (!ptr) ptr = std::aligned_alloc(64, rounded);
    if (!ptr) throw BackendError("CpuBackend: out of host memory allocating " + std::to_string(bytes) + " bytes");
    if (poisonMemory()) std::memset(ptr, 0xFF, rounded);
    raisePeak(liveBytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
    return std::make_shared<Storage>(ptr, bytes, Device::cpu(), &freeHost);
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

namespace {
// Element access over float32 or bfloat16 storage, in float.
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const bfloat16* p, int64_t i) { return toFloat(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(bfloat16* p, int64_t i, float v) { p[i] = toBfloat16(v); }

// Calls f with a null pointer of t's element type (float32 or bfloat16; BackendError else).
template <class F> void withElements(const Tensor& t, const char* op, F&& f) {
    if (t.dtype() == DType::float32) return f(static_cast<float*>(nullptr));
    if (t.dtype() == DType::bfloat16) return f(static_cast<bfloat16*>(nullptr));
    throw BackendError(std::string("CpuBackend::") + op + ": " + str(t.dtype()) +
                       " is not supported (float32 and bfloat16 are)");
}

// z[i] = alpha x[i] + beta y[i] over n storage elements (beta == 0 never reads y).
template <class X, class Y, class Z> void axpbyzLoop(float alpha, const X* x, float beta, const Y* y, Z* z, int64_t n) {
    if (beta == 0.0f) { // y may hold NaN from uninitialised memory
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) store(z, i, alpha * load(x, i));
        return;
    }
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) store(z, i, alpha * load(x, i) + beta * load(y, i));
}

// z = alpha x + beta y over n bfloat16 storage elements by oneDNN's binary add (JIT
// vectorised; the loop above converts one element at a time on a baseline build). z may be y.
void axpbyzBfloat16(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z, int64_t n) {
    using namespace dnnl_util;
    static thread_local PrimitiveCache<dnnl::binary> cache;
    const auto flat = plainDesc({n}, dnnl::memory::data_type::bf16);
    const auto& prim = cache.get({n, keyOf(alpha), keyOf(beta)}, [&] {
        return checkDnnl("binary", [&] {
            dnnl::primitive_attr attr;
            if (beta != 1.0f) attr.set_scales(DNNL_ARG_SRC_0, 0, {beta});
            if (alpha != 1.0f) attr.set_scales(DNNL_ARG_SRC_1, 0, {alpha});
            return dnnl::binary(dnnl::binary::primitive_desc(
                dnnl::binary::desc(dnnl::algorithm::binary_add, flat, flat, flat), attr, engine()));
        });
    });
    checkDnnl("binary::execute", [&] {
        prim.execute(stream(), {{DNNL_ARG_SRC_0, wrap(flat, y.raw())},
                                {DNNL_ARG_SRC_1, wrap(flat, x.raw())},
                                {DNNL_ARG_DST, wrap(flat, z.raw())}});
    });
}

// axpbyzLoop over three tensors of one layout and storage size, each float32 or bfloat16.
void axpbyzAny(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z, const char* op) {
    const auto n = static_cast<int64_t>(z.nbytes() / sizeOf(z.dtype()));
    const DType b16 = DType::bfloat16;
    // (oneDNN has no bfloat16 binary primitive on CPUs without bfloat16 kernels: the loop.)
    if (x.dtype() == b16 && y.dtype() == b16 && z.dtype() == b16 && beta != 0.0f && dnnl_util::bfloat16Kernels()) {
        axpbyzBfloat16(alpha, x, beta, y, z, n);
        return;
    }
    withElements(x, op, [&](auto* xt) {
        withElements(y, op, [&](auto* yt) {
            withElements(z, op, [&](auto* zt) {
                using X = std::remove_pointer_t<decltype(xt)>;
                using Y = std::remove_pointer_t<decltype(yt)>;
                using Z = std::remove_pointer_t<decltype(zt)>;
                axpbyzLoop(alpha, static_cast<const X*>(x.raw()), beta, static_cast<const Y*>(y.raw()),
                           static_cast<Z*>(z.raw()), n);
            });
        });
    });
}

// Whether two tensors' storages hold the same elements in the same places (padding too).
bool sameStorageOrder(const Tensor& a, const Tensor& b) {
    return a.layout() == b.layout() && a.nbytes() / sizeOf(a.dtype()) == b.nbytes() / sizeOf(b.dtype());
}
} // namespace

// x, y: same numel; any layouts; float32 or bfloat16, either mixed. Blocked tensors are
// added over their whole storage, padding included (0 + 0 stays 0).
void CpuBackend::axpby(float alpha, const Tensor& x, float beta, const Tensor& y) {
    requireSameNumel("axpby", x, y);
    if (x.layout() != y.layout()) {
        axpby(alpha, x.toLayout(y.layout()), beta, y);
        return;
    }
    axpbyzAny(alpha, x, beta, y, y, "axpby");
}

// One pass where the three share a layout (a residual sum, gradients summed at a fork);
// float32 or bfloat16, either mixed.
void CpuBackend::axpbyz(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
    requireSameNumel("axpbyz", x, z);
    requireSameNumel("axpbyz", y, z);
    if (!sameStorageOrder(x, z) || !sameStorageOrder(y, z)) {
        Backend::axpbyz(alpha, x, beta, y, z);
        return;
    }
    axpbyzAny(alpha, x, beta, y, z, "axpbyz");
}

// x, y: same numel -> y = a * x + b
void CpuBackend::affine(const Tensor& x, float a, float b, const Tensor& y) {
    requireSameNumel("affine", x, y);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = a * px[i] + b;
}

void CpuBackend::power(const Tensor& x, float p, const Tensor& y) {
    requireSameNumel("power", x, y);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = std::pow(px[i], p);
}

// x, y: [N, C, ...], m: [N, C] -> y[n, c, ...] = x[n, c, ...] * m[n, c]
void CpuBackend::mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) {
    requireSameNumel("mulChannels", x, y);
    const int64_t planes = m.numel(), inner = x.numel() / planes;
    const float* px = x.data<float>();
    const float* pm = m.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for if (x.numel() > kParallelMin)
    for (int64_t p = 0; p < planes; ++p)
        for (int64_t i = 0; i < inner; ++i) py[p * inner + i] = px[p * inner + i] * pm[p];
}

// float32 <-> int32 (or a copy when the dtypes agree)
namespace {
// Element i of a host array of `dtype` as a float, and a float stored as `dtype`.
inline float readAs(DType dtype, const void* p, int64_t i) {
    switch (dtype) {
    case DType::float32: return static_cast<const float*>(p)[i];
    case DType::int32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DType::bfloat16: return toFloat(static_cast<const bfloat16*>(p)[i]);
    case DType::float16: return toFloat(static_cast<const float16*>(p)[i]);
    }
    return 0.0f;
}
inline void writeAs(DType dtype, void* p, int64_t i, float v) {
    switch (dtype) {
    case DType::float32: static_cast<float*>(p)[i] = v; break;
    case DType::int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::bfloat16: static_cast<bfloat16*>(p)[i] = toBfloat16(v); break;
    case DType::float16: static_cast<float16*>(p)[i] = toFloat16(v); break;
    }
}
} // namespace

void CpuBackend::cast(const Tensor& x, const Tensor& y) {
    requireSameNumel("cast", x, y);
    const int64_t n = x.numel();
    if (x.dtype() == y.dtype()) return copy(x, y);
    if (!x.isPlain() || !y.isPlain()) throw BackendError("CpuBackend::cast: plain tensors only");
    if (x.dtype() == DType::int32 && y.dtype() == DType::int32) return copy(x, y);
    const DType from = x.dtype(), to = y.dtype();
    if (from == DType::int32 || to == DType::int32) { // int32 <-> a float type: exact int conversion
        if (from == DType::int32 && to == DType::float32) {
            const int32_t* px = x.data<int32_t>();
            float* py = y.data<float>();
#pragma omp parallel for simd if (n > kParallelMin)
            for (int64_t i = 0; i < n; ++i) py[i] = static_cast<float>(px[i]);
            return;
        }
        if (from == DType::float32) {
            const float* px = x.data<float>();
            int32_t* py = y.data<int32_t>();
#pragma omp parallel for simd if (n > kParallelMin)
            for (int64_t i = 0; i < n; ++i) py[i] = static_cast<int32_t>(px[i]);
            return;
        }
    }
    if (from == DType::float32 && to == DType::bfloat16) {
        const float* px = x.data<float>();
        auto* py = y.data<bfloat16>();
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) py[i] = toBfloat16(px[i]);
        return;
    }
    if (from == DType::bfloat16 && to == DType::float32) {
        const auto* px = x.data<bfloat16>();
        float* py = y.data<float>();
#pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) py[i] = toFloat(px[i]);
        return;
    }
    const void* px = x.raw();
    void* py = y.raw();
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) writeAs(to, py, i, readAs(from, px, i));
}

void CpuBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
    requireSameNumel("mul", a, y);
    requireSameNumel("mul", b, y);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i];
}

void CpuBackend::dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) {
    requireSameNumel("dropoutForward", x, mask);
    requireSameNumel("dropoutForward", x, y);
    const float* px = x.data<float>();
    float* pm = mask.data<float>();
    float* py = y.data<float>();
    const int64_t n = x.numel();
    const uint64_t seed = gen.seed(), first = gen.advance(static_cast<uint64_t>(n));
    const float keep = 1.0f / (1.0f - p);
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        pm[i] = randomUniform(seed, first + static_cast<uint64_t>(i)) < p ? 0.0f : keep;
        py[i] = px[i] * pm[i];
    }
}

} // namespace tessera
