// tan, the inverse and hyperbolic functions, erf, sign and powers for the CPU backend (Libm.h).
// glibc 2.35 and later ship these in libmvec, vectorised within 4 ulp; it is opened at run
// time (dlopen), so that a binary built here still loads where the C library is older, and
// there each element goes through the scalar function. The derivatives are plain loops
// (the inverse functions' are algebraic) or a vector function and a loop (tan, sinh, cosh,
// erf through exp).
#include "backend/cpu/Libm.h"

#include <dlfcn.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace tessera::cpu_libm {

namespace {

constexpr int64_t kBlock = 1 << 13;
constexpr int64_t kParallelMin = 1 << 15;

// The C library's name of kind's function, for the kinds libmvec computes.
const char* libmName(ActivationKind k) {
    switch (k) {
    case ActivationKind::tan: return "tanf";
    case ActivationKind::asin: return "asinf";
    case ActivationKind::acos: return "acosf";
    case ActivationKind::atan: return "atanf";
    case ActivationKind::sinh: return "sinhf";
    case ActivationKind::cosh: return "coshf";
    case ActivationKind::asinh: return "asinhf";
    case ActivationKind::acosh: return "acoshf";
    case ActivationKind::atanh: return "atanhf";
    case ActivationKind::erf: return "erff";
    default: return nullptr;
    }
}

// libmvec's 8-lane AVX2 forms (`__m256 f(__m256)`, by the vector function ABI's names
// _ZGVdN8v_<name>), by ActivationKind; exp for erf's derivative. All null where the CPU has no
// AVX2 and FMA, the C library no libmvec of these, or TESSERA_LIBMVEC=0.
struct Mvec {
    void* fn[64] = {};
    void* exp = nullptr;
    void* pow = nullptr; // _ZGVdN8vv_powf: `__m256 f(__m256, __m256)`
    bool any = false;
};

const Mvec& mvec() {
    static const Mvec m = [] {
        Mvec v;
        const char* env = std::getenv("TESSERA_LIBMVEC");
        if (env && std::string(env) == "0") return v;
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return v;
        void* lib = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) return v;
        void* exp = dlsym(lib, "_ZGVdN8v_expf");
        bool all = exp != nullptr;
        for (int k = 0; k < 64; ++k) {
            const char* name = libmName(static_cast<ActivationKind>(k));
            if (!name) continue;
            v.fn[k] = dlsym(lib, (std::string("_ZGVdN8v_") + name).c_str());
            all = all && v.fn[k];
        }
        if (!all) return Mvec{}; // one way for every kind: no mix of roundings between them
        v.exp = exp;
        v.pow = dlsym(lib, "_ZGVdN8vv_powf");
        v.any = true;
        return v;
    }();
    return m;
}

// y = fn(x) over n floats, 8 at a time; the last partial vector through a padded copy.
[[gnu::target("avx2,fma")]] void apply8(void* fn, const float* x, float* y, int64_t n) {
    using Fn = __m256 (*)(__m256);
    const auto f = reinterpret_cast<Fn>(fn);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float t[8] = {};
        std::copy(x + i, x + n, t);
        _mm256_store_ps(t, f(_mm256_load_ps(t)));
        std::copy(t, t + (n - i), y + i);
    }
}

// y = pow(x, p) over n floats, 8 at a time (fn: libmvec's powf); the last partial vector
// through a padded copy. A whole exponent takes |x| (libmvec sends each lane of a negative
// base through the scalar powf) and gives an odd one x's sign back: powf's values, zeros and
// infinities of either sign included.
using PowFn = __m256 (*)(__m256, __m256);

[[gnu::target("avx2,fma")]] inline __m256 power8Of(PowFn f, __m256 v, __m256 e, bool whole, bool odd) {
    const __m256 signBit = _mm256_set1_ps(-0.0f);
    const __m256 r = f(whole ? _mm256_andnot_ps(signBit, v) : v, e);
    return odd ? _mm256_or_ps(r, _mm256_and_ps(v, signBit)) : r;
}

[[gnu::target("avx2,fma")]] void power8(void* fn, const float* x, float p, float* y, int64_t n) {
    const auto f = reinterpret_cast<PowFn>(fn);
    const __m256 e = _mm256_set1_ps(p);
    const bool whole = std::nearbyint(p) == p, odd = whole && std::fmod(std::fabs(p), 2.0f) == 1.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, power8Of(f, _mm256_loadu_ps(x + i), e, whole, odd));
    if (i < n) {
        alignas(32) float t[8] = {};
        std::copy(x + i, x + n, t);
        _mm256_store_ps(t, power8Of(f, _mm256_load_ps(t), e, whole, odd));
        std::copy(t, t + (n - i), y + i);
    }
}

float scalar(ActivationKind k, float x) {
    switch (k) {
    case ActivationKind::tan: return std::tan(x);
    case ActivationKind::asin: return std::asin(x);
    case ActivationKind::acos: return std::acos(x);
    case ActivationKind::atan: return std::atan(x);
    case ActivationKind::sinh: return std::sinh(x);
    case ActivationKind::cosh: return std::cosh(x);
    case ActivationKind::asinh: return std::asinh(x);
    case ActivationKind::acosh: return std::acosh(x);
    case ActivationKind::atanh: return std::atanh(x);
    case ActivationKind::erf: return std::erf(x);
    default: return x;
    }
}

// y = f(x) for kind k (one with a libm name) over n floats.
void apply(ActivationKind k, const float* x, float* y, int64_t n) {
    if (void* fn = mvec().fn[static_cast<int>(k)]) return apply8(fn, x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = scalar(k, x[i]);
}

// y = exp(x) over n floats (y may be x).
void expOf(const float* x, float* y, int64_t n) {
    if (void* fn = mvec().exp) return apply8(fn, x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

// f(at, len) over blocks of n, shared among the threads for large n.
template <class F> void forBlocks(int64_t n, F&& f) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t b = 0; b < blocks; ++b) f(b * kBlock, std::min(kBlock, n - b * kBlock));
}

// dx = dy f'(x) over one block of len (at most kBlock) floats.
void slopes(ActivationKind k, const float* x, const float* dy, float* dx, int64_t len) {
    alignas(64) float t[kBlock];
    switch (k) {
    case ActivationKind::tan: // 1 + tan^2
        apply(k, x, t, len);
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] * (1.0f + t[i] * t[i]);
        return;
    case ActivationKind::sinh: // cosh
    case ActivationKind::cosh: // sinh
        apply(k == ActivationKind::sinh ? ActivationKind::cosh : ActivationKind::sinh, x, t, len);
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] * t[i];
        return;
    case ActivationKind::erf: // 2 / sqrt(pi) exp(-x^2)
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) t[i] = -x[i] * x[i];
        expOf(t, t, len);
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] * (1.1283791670955126f * t[i]);
        return;
    case ActivationKind::asin:
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] / std::sqrt(1.0f - x[i] * x[i]);
        return;
    case ActivationKind::acos:
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = -dy[i] / std::sqrt(1.0f - x[i] * x[i]);
        return;
    case ActivationKind::atan:
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] / (1.0f + x[i] * x[i]);
        return;
    case ActivationKind::asinh:
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] / std::sqrt(x[i] * x[i] + 1.0f);
        return;
    case ActivationKind::acosh:
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] / std::sqrt(x[i] * x[i] - 1.0f);
        return;
    case ActivationKind::atanh:
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = dy[i] / (1.0f - x[i] * x[i]);
        return;
    default: // sign
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dx[i] = 0.0f;
        return;
    }
}

} // namespace

bool computes(ActivationKind kind) { return kind == ActivationKind::sign || libmName(kind) != nullptr; }

bool vectorised() { return mvec().any; }

void forward(ActivationKind kind, const float* x, float* y, int64_t n) {
    if (kind == ActivationKind::sign) { // -1, 0 or 1; NaN stays NaN, as PyTorch's sign keeps it
        forBlocks(n, [&](int64_t at, int64_t len) {
#pragma omp simd
            for (int64_t i = at; i < at + len; ++i) {
                const float v = x[i]; // zeros and NaN as they are, else 1 with v's sign
                y[i] = v == v && v != 0.0f ? std::copysign(1.0f, v) : v;
            }
        });
        return;
    }
    forBlocks(n, [&](int64_t at, int64_t len) { apply(kind, x + at, y + at, len); });
}

void power(const float* x, float p, float* y, int64_t n) {
    forBlocks(n, [&](int64_t at, int64_t len) {
        if (void* fn = mvec().pow) return power8(fn, x + at, p, y + at, len);
        for (int64_t i = at; i < at + len; ++i) y[i] = std::pow(x[i], p);
    });
}

void backward(ActivationKind kind, const float* x, const float* dy, float* dx, int64_t n) {
    forBlocks(n, [&](int64_t at, int64_t len) { slopes(kind, x + at, dy + at, dx + at, len); });
}

} // namespace tessera::cpu_libm
