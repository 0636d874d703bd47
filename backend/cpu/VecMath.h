#pragma once
/// \file Vectors of W floats for the CPU's own kernels (GCC's vector extension), compiled
/// once per CPU level (W = 16: AVX-512, 8: AVX2, 4: SSE) by functions with a target
/// attribute each, one of which `dnnl_util::vectorLanes()` picks at run time; and e^x, ln x,
/// sin x and cos x on them. The helpers are always inlined into those kernels, so the ABI of passing vectors
/// (which -Wpsabi warns of) never applies.
#include <algorithm>
#include <cstdint>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace tessera::vec {

template <int W> struct Native;
template <> struct Native<16> {
    using F = float __attribute__((vector_size(64)));
    using I = int32_t __attribute__((vector_size(64)));
    using U = uint32_t __attribute__((vector_size(64)));
};
template <> struct Native<8> {
    using F = float __attribute__((vector_size(32)));
    using I = int32_t __attribute__((vector_size(32)));
    using U = uint32_t __attribute__((vector_size(32)));
};
template <> struct Native<4> {
    using F = float __attribute__((vector_size(16)));
    using I = int32_t __attribute__((vector_size(16)));
    using U = uint32_t __attribute__((vector_size(16)));
};
using V8 = Native<8>::F;
using V4 = Native<4>::F;

template <class F> [[gnu::always_inline]] inline F splat(float x) { return F{} + x; }
template <class F> [[gnu::always_inline]] inline F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class F> [[gnu::always_inline]] inline void store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
template <class F> [[gnu::always_inline]] inline F maxv(F a, F b) { return a > b ? a : b; }
// |v| (the sign bit cleared).
template <int W> [[gnu::always_inline]] inline typename Native<W>::F absOf(typename Native<W>::F v) {
    return (typename Native<W>::F)((typename Native<W>::U)v & 0x7FFFFFFFu);
}
// Lanes at or past n (a row's last, partial vector): `fill`.
template <int W>
[[gnu::always_inline]] inline typename Native<W>::F keepFirst(typename Native<W>::F v, int64_t n, float fill) {
    typename Native<W>::I lane;
    for (int i = 0; i < W; ++i) lane[i] = i;
    const int32_t below = static_cast<int32_t>(std::clamp<int64_t>(n, 0, W));
    return lane < below ? v : splat<typename Native<W>::F>(fill);
}
// v's last n lanes (a row's last partial vector read as its last whole one); the others 0.
template <int W> [[gnu::always_inline]] inline typename Native<W>::F lastLanes(typename Native<W>::F v, int64_t n) {
    typename Native<W>::I lane;
    for (int i = 0; i < W; ++i) lane[i] = i;
    return lane >= static_cast<int32_t>(W - n) ? v : typename Native<W>::F{};
}

// e^x for x <= 0 (the softmax's shifted scores), 0 below -87 (where e^x leaves float's
// normal range) and for -inf: x = n ln 2 + r, |r| <= ln(2) / 2, e^r by Cephes' polynomial,
// 2^n from the exponent bits (unsigned: any input, NaN too, is defined behaviour; above 88
// it stays finite). Within 2 ulp of std::exp.
template <int W> [[gnu::always_inline]] inline typename Native<W>::F expOf(typename Native<W>::F x) {
    using F = typename Native<W>::F;
    using U = typename Native<W>::U;
    const F lo = splat<F>(-87.0f);
    const F hi = splat<F>(88.0f);
    const F xc = x < lo ? lo : x > hi ? hi : x;
    const F t = xc * 1.44269504088896341f + 12582912.0f; // 1.5 * 2^23: rounds to an integer
    const F n = t - 12582912.0f;
    const U ni = (U)t - 0x4B400000u; // n, two's complement
    const F r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
    F p = splat<F>(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const U bits = (ni + 127u) << 23;
    const F e = p * (F)bits;
    return x < lo ? F{} : e;
}

// ln x with std::log's special values (ln 0 = -inf, ln +inf = +inf, NaN for x < 0 and NaN;
// denormals scaled into the normal range first, unless the thread reads them as 0, as the
// CPU backend sets it to, when their ln is -inf): x = m 2^e, m in [sqrt(1/2), sqrt(2)),
// ln(m) by Cephes' polynomial in m - 1 (exact), e ln 2 in two parts. ln 1 is 0; within 2 ulp
// of std::log.
template <int W> [[gnu::always_inline]] inline typename Native<W>::F logOf(typename Native<W>::F x) {
    using F = typename Native<W>::F;
    using I = typename Native<W>::I;
    using U = typename Native<W>::U;
    const F denormal = x < 1.17549435e-38f ? splat<F>(1.0f) : F{}; // x < FLT_MIN: 1
    const F xs = x * (1.0f + denormal * 8388607.0f);               // times 2^23 where denormal
    const U bits = (U)xs;
    F e = __builtin_convertvector((I)(bits >> 23) - 126, F) - denormal * 23.0f; // x = m 2^e, m in [1/2, 1)
    F m = (F)((bits & 0x007FFFFFu) | 0x3F000000u);
    const F small = m < 0.707106781186547524f ? splat<F>(1.0f) : F{}; // m to [sqrt(1/2), sqrt(2))
    e -= small;
    m = m + m * small - 1.0f; // exact: m - 1, or 2m - 1
    const F z = m * m;
    F p = splat<F>(7.0376836292e-2f);
    p = p * m - 1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m - 1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m - 1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m - 2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    p = p * m * z + e * -2.12194440e-4f - 0.5f * z;
    const F l = (m + p) + e * 0.693359375f;
    const F inf = splat<F>(__builtin_inff());
    const F special = x == 0.0f ? -inf : splat<F>(__builtin_nanf("")); // x < 0 and NaN: the NaN
    const F positive = x > 0.0f ? l : special;
    // (selects of distinct values: GCC joins two conditions with one result into a && done
    // lane by lane)
    return x == inf ? inf : positive;
}

// |x| up to which trigOf is accurate (Cephes' bound for its three-part reduction); callers
// take std::sin and std::cos for vectors with a larger lane (infinities included).
constexpr float kTrigLimit = 8192.0f;

// sin x (Cos false) or cos x (true) for |x| <= kTrigLimit, NaN for NaN: |x| = j pi/4 + r with
// j even and |r| <= pi/4 (pi/4 in three parts), sin r or cos r by Cephes' polynomials as j
// says, the sign from j (and for the sine x's). sin(-0) is -0. Within 1.6 ulp of the exact
// values where they are at least 1/16 in magnitude, and within 8e-8 of them everywhere below
// kTrigLimit (every 5th float, a scratch harness).
template <int W, bool Cos> [[gnu::always_inline]] inline typename Native<W>::F trigOf(typename Native<W>::F x) {
    using F = typename Native<W>::F;
    using I = typename Native<W>::I;
    using U = typename Native<W>::U;
    const U sign = (U)x & 0x80000000u;
    const F ax = absOf<W>(x);
    const F inRange = ax < kTrigLimit ? ax : F{};                  // NaN and beyond: 0, a defined conversion
    I j = __builtin_convertvector(inRange * 1.27323954473516f, I); // |x| / (pi/4), truncated
    j = (j + 1) & ~1;                                              // even: the zeros of sin at 0
    const F y = __builtin_convertvector(j, F);
    const F r = ((ax - y * 0.78515625f) - y * 2.4187564849853515625e-4f) - y * 3.77489497744594108e-8f;
    const F z = r * r;
    F s = splat<F>(-1.9515295891e-4f);
    s = s * z + 8.3321608736e-3f;
    s = s * z - 1.6666654611e-1f;
    s = s * z * r + r;
    F c = splat<F>(2.443315711809948e-5f);
    c = c * z - 1.388731625493765e-3f;
    c = c * z + 4.166664568298827e-2f;
    c = c * z * z - 0.5f * z + 1.0f;
    const I swap = (j & 2) != 0; // the other polynomial at odd quarter turns
    F v;
    U flip;
    if constexpr (Cos) {
        v = swap ? s : c;
        flip = (U)(((j >> 1) ^ (j >> 2)) & 1) << 31; // negative at j = 2 and 4 (mod 8)
    } else {
        v = swap ? c : s;
        flip = ((U)(j & 4) << 29) ^ sign; // negative at j = 4 and 6, and for x < 0
    }
    return (F)((U)v ^ flip);
}

} // namespace tessera::vec
