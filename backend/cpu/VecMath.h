#pragma once
/// \file Vectors of W floats for the CPU's own kernels (GCC's vector extension), compiled
/// once per CPU level (W = 16: AVX-512, 8: AVX2, 4: SSE) by functions with a target
/// attribute each, one of which `dnnl_util::vectorLanes()` picks at run time; and e^x on
/// them. The helpers are always inlined into those kernels, so the ABI of passing vectors
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
// Lanes at or past n (a row's last, partial vector): `fill`.
template <int W>
[[gnu::always_inline]] inline typename Native<W>::F keepFirst(typename Native<W>::F v, int64_t n, float fill) {
    typename Native<W>::I lane;
    for (int i = 0; i < W; ++i) lane[i] = i;
    const int32_t below = static_cast<int32_t>(std::clamp<int64_t>(n, 0, W));
    return lane < below ? v : splat<typename Native<W>::F>(fill);
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

} // namespace tessera::vec
