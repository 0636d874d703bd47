// Softmax and log-softmax over dim 1: rows and class maps by Tessera's own vector loops, the
// rest through oneDNN; plus the engine and stream every oneDNN op shares.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"
#include "backend/cpu/VecMath.h"

namespace tessera {

namespace dnnl_util {
dnnl::engine& engine() {
    static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}
// Per thread, like the primitive caches (Dnnl.h).
dnnl::stream& stream() {
    static thread_local dnnl::stream s(engine());
    return s;
}
} // namespace dnnl_util

using namespace dnnl_util;

namespace {
// oneDNN 2 has a primitive family for softmax and one for log-softmax, alike in use: Fwd is
// softmax_forward or logsoftmax_forward, Bwd the matching backward.
template <class Fwd> struct ForwardPrims {
    typename Fwd::primitive_desc fwdPd;
    Fwd fwd;
    bool reference = false; ///< oneDNN's reference implementation (see forwardLoops)
};

template <class Fwd> const ForwardPrims<Fwd>& forwardPrims(const std::vector<int64_t>& dims, const char* op) {
    static thread_local PrimitiveCache<ForwardPrims<Fwd>> cache;
    return cache.get(dims, [&] {
        return checkDnnl(op, [&] {
            typename Fwd::desc d(dnnl::prop_kind::forward_training, plainDesc(dims), 1);
            typename Fwd::primitive_desc pd(d, engine());
            return ForwardPrims<Fwd>{pd, Fwd(pd), isReference(pd)};
        });
    });
}

void requireAxis1(const char* op, const Tensor& t) {
    if (t.shape().rank() < 2) {
        throw ShapeError(std::string("CpuBackend::") + op + ": needs [N, C, ...], got " + t.shape().str());
    }
}

constexpr int64_t kParallelMin = 1 << 15; // elements below which the loops stay on one thread

// e <- exp(v) through oneDNN's eltwise primitive (vectorised on every ISA; a loop of std::exp
// is not).
void expInto(const Tensor& v, const Tensor& e) {
    backendOf(e).activationForward(ActivationParams{ActivationKind::exp}, v, e);
}

// dx over dim 1 of y, dy, dx [N, C] (rows of C) by loops: softmax dx = y (dy - sum_c dy y),
// log-softmax dx = dy - exp(y) sum_c dy (exp(y) first, by oneDNN's exp, into dx or a scratch
// tensor). Taken for rows shorter than a vector (the longer ones: rowBackwardLoops) where
// oneDNN's backward is its reference implementation (oneDNN 2.7 on CPUs without AVX-512: a
// scalar loop, 5 to 10x slower than these).
void backwardLoops(bool log, const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const int64_t N = y.shape()[0], C = y.shape()[1];
    const float* py = y.data<float>();
    const float* pd = dy.data<float>();
    float* px = dx.data<float>();
    // exp(y) for log-softmax, in dx unless dx is dy's or y's storage (dx = dy - exp(y) * sum
    // reads each element before it writes it)
    Tensor e = dx;
    if (log) {
        if (dx.sharesStorage(dy) || dx.sharesStorage(y)) e = Tensor::empty(y.shape(), DType::float32, y.device());
        expInto(y, e);
    }
    // q: what the sum weighs dy by (y, or 1 for log-softmax), p: what it multiplies (exp(y) or y)
    const float* pq = log ? nullptr : py;
    const float* pp = log ? e.data<float>() : py;
#pragma omp parallel for if (y.numel() > kParallelMin)
    for (int64_t n = 0; n < N; ++n) { // a dot product, then one pass
        const float *dr = pd + n * C, *pr = pp + n * C;
        float* xr = px + n * C;
        float total = 0.0f;
        if (pq) {
            const float* qr = pq + n * C;
#pragma omp simd reduction(+ : total)
            for (int64_t c = 0; c < C; ++c) total += dr[c] * qr[c];
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) xr[c] = pr[c] * (dr[c] - total);
        } else {
#pragma omp simd reduction(+ : total)
            for (int64_t c = 0; c < C; ++c) total += dr[c];
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) xr[c] = dr[c] - pr[c] * total;
        }
    }
}

// ---- over the classes of a map: dim 1 of [N, C, S], S > 1 -------------------------------
// One sample's block of `len` positions (its C rows S apart) in three passes while the block
// stays in cache: the largest value m of each line; e = exp(x - m) and their sums (e
// written to y for softmax); then y = e / sum, or y = x - m - log(sum) for log-softmax. y
// may be x (each pass reads an element before it writes it). m and sum: `len` floats each.
template <int W>
[[gnu::always_inline]] inline void mapBlockOf(bool log, const float* x, float* y, int64_t C, int64_t S, int64_t len,
                                              float* m, float* sum) {
    using F = typename vec::Native<W>::F;
    using vec::load, vec::store, vec::maxv, vec::expOf;
    const int64_t whole = len / W * W;
    for (int64_t i = 0; i < whole; i += W) {
        F t = load<F>(x + i);
        for (int64_t c = 1; c < C; ++c) t = maxv(load<F>(x + c * S + i), t);
        store(m + i, t);
        store(sum + i, F{});
    }
    for (int64_t i = whole; i < len; ++i) {
        float t = x[i];
        for (int64_t c = 1; c < C; ++c) t = std::max(t, x[c * S + i]);
        m[i] = t;
        sum[i] = 0.0f;
    }
    for (int64_t c = 0; c < C; ++c) {
        const float* xc = x + c * S;
        float* yc = y + c * S;
        for (int64_t i = 0; i < whole; i += W) {
            const F e = expOf<W>(load<F>(xc + i) - load<F>(m + i));
            store(sum + i, load<F>(sum + i) + e);
            if (!log) store(yc + i, e);
        }
        for (int64_t i = whole; i < len; ++i) {
            const float e = std::exp(xc[i] - m[i]);
            sum[i] += e;
            if (!log) yc[i] = e;
        }
    }
    if (log) { // a logarithm per position (1 / C of the values): std::log
        for (int64_t i = 0; i < len; ++i) sum[i] = std::log(sum[i]);
        for (int64_t c = 0; c < C; ++c) {
            const float* xc = x + c * S;
            float* yc = y + c * S;
            for (int64_t i = 0; i < whole; i += W) store(yc + i, (load<F>(xc + i) - load<F>(m + i)) - load<F>(sum + i));
            for (int64_t i = whole; i < len; ++i) yc[i] = (xc[i] - m[i]) - sum[i];
        }
        return;
    }
    for (int64_t i = 0; i < len; ++i) sum[i] = 1.0f / sum[i];
    for (int64_t c = 0; c < C; ++c) {
        float* yc = y + c * S;
        for (int64_t i = 0; i < whole; i += W) store(yc + i, load<F>(yc + i) * load<F>(sum + i));
        for (int64_t i = whole; i < len; ++i) yc[i] *= sum[i];
    }
}

// The backward of one sample's block of `len` positions in two passes while the block stays
// in cache: the sum over the classes of dy y (softmax) or of dy (log-softmax); then dx = y
// (dy - sum), or dx = dy - exp(y) sum (y = log p <= 0: the vector exp). dx may be y or dy
// (the second pass reads an element before it writes it). sum: `len` floats.
template <int W>
[[gnu::always_inline]] inline void mapBackBlockOf(bool log, const float* y, const float* dy, float* dx, int64_t C,
                                                  int64_t S, int64_t len, float* sum) {
    using F = typename vec::Native<W>::F;
    using vec::load, vec::store, vec::expOf;
    const int64_t whole = len / W * W;
    std::fill(sum, sum + len, 0.0f);
    for (int64_t c = 0; c < C; ++c) {
        const float *yc = y + c * S, *dc = dy + c * S;
        if (log) {
            for (int64_t i = 0; i < whole; i += W) store(sum + i, load<F>(sum + i) + load<F>(dc + i));
            for (int64_t i = whole; i < len; ++i) sum[i] += dc[i];
        } else {
            for (int64_t i = 0; i < whole; i += W) store(sum + i, load<F>(sum + i) + load<F>(dc + i) * load<F>(yc + i));
            for (int64_t i = whole; i < len; ++i) sum[i] += dc[i] * yc[i];
        }
    }
    for (int64_t c = 0; c < C; ++c) {
        const float *yc = y + c * S, *dc = dy + c * S;
        float* xc = dx + c * S;
        if (log) {
            for (int64_t i = 0; i < whole; i += W)
                store(xc + i, load<F>(dc + i) - expOf<W>(load<F>(yc + i)) * load<F>(sum + i));
            for (int64_t i = whole; i < len; ++i) xc[i] = dc[i] - std::exp(yc[i]) * sum[i];
        } else {
            for (int64_t i = 0; i < whole; i += W)
                store(xc + i, load<F>(yc + i) * (load<F>(dc + i) - load<F>(sum + i)));
            for (int64_t i = whole; i < len; ++i) xc[i] = yc[i] * (dc[i] - sum[i]);
        }
    }
}

// ---- over rows: the last dim of [N, C], C >= W ---------------------------------------------
// A row's last partial vector is the row's last whole one, read before the loop over the
// whole vectors writes (y may be x) and written after it: the lanes it shares with the
// loop's last vector get the same values again, and leave the sums by `lastLanes`.

// Rows r0 to r1 of C, each in cache through its passes: the largest value m; e = exp(x - m)
// and their sum s (e written to y for softmax); then y = e / s, or y = x - m - log(s). y may
// be x.
template <int W>
[[gnu::always_inline]] inline void rowsOf(bool log, const float* x, float* y, int64_t C, int64_t r0, int64_t r1) {
    using F = typename vec::Native<W>::F;
    using vec::load, vec::store, vec::maxv, vec::expOf, vec::splat, vec::lastLanes;
    const int64_t whole = C / W * W, tail = C - whole, last = C - W;
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * C;
        float* yr = y + r * C;
        const F xt = load<F>(xr + last);
        F mv = xt;
        for (int64_t i = 0; i < whole; i += W) mv = maxv(load<F>(xr + i), mv);
        float m = mv[0];
        for (int l = 1; l < W; ++l) m = std::max(m, mv[l]);
        const F mm = splat<F>(m);
        const F et = expOf<W>(xt - mm);
        F sv = lastLanes<W>(et, tail);
        for (int64_t i = 0; i < whole; i += W) {
            const F e = expOf<W>(load<F>(xr + i) - mm);
            sv += e;
            if (!log) store(yr + i, e);
        }
        if (!log && tail) store(yr + last, et);
        float sum = sv[0];
        for (int l = 1; l < W; ++l) sum += sv[l];
        if (log) {
            const F ls = splat<F>(std::log(sum));
            for (int64_t i = 0; i < whole; i += W) store(yr + i, (load<F>(xr + i) - mm) - ls);
            if (tail) store(yr + last, (xt - mm) - ls);
        } else {
            const F inv = splat<F>(1.0f / sum);
            const F yt = load<F>(yr + last) * inv;
            for (int64_t i = 0; i < whole; i += W) store(yr + i, load<F>(yr + i) * inv);
            if (tail) store(yr + last, yt);
        }
    }
}

// The backward of rows r0 to r1 of C, each in cache through two passes: s = the sum of dy y
// (softmax) or of dy (log-softmax); then dx = y (dy - s), or dx = dy - exp(y) s. dx may be y
// or dy.
template <int W>
[[gnu::always_inline]] inline void rowsBackOf(bool log, const float* y, const float* dy, float* dx, int64_t C,
                                              int64_t r0, int64_t r1) {
    using F = typename vec::Native<W>::F;
    using vec::load, vec::store, vec::expOf, vec::splat, vec::lastLanes;
    const int64_t whole = C / W * W, tail = C - whole, last = C - W;
    for (int64_t r = r0; r < r1; ++r) {
        const float *yr = y + r * C, *dr = dy + r * C;
        float* xr = dx + r * C;
        const F dt = load<F>(dr + last), yt = load<F>(yr + last);
        F sv = lastLanes<W>(log ? dt : dt * yt, tail);
        if (log) {
            for (int64_t i = 0; i < whole; i += W) sv += load<F>(dr + i);
        } else {
            for (int64_t i = 0; i < whole; i += W) sv += load<F>(dr + i) * load<F>(yr + i);
        }
        float s = sv[0];
        for (int l = 1; l < W; ++l) s += sv[l];
        const F ss = splat<F>(s);
        if (log) {
            const F xt = dt - expOf<W>(yt) * ss;
            for (int64_t i = 0; i < whole; i += W) store(xr + i, load<F>(dr + i) - expOf<W>(load<F>(yr + i)) * ss);
            if (tail) store(xr + last, xt);
        } else {
            const F xt = yt * (dt - ss);
            for (int64_t i = 0; i < whole; i += W) store(xr + i, load<F>(yr + i) * (load<F>(dr + i) - ss));
            if (tail) store(xr + last, xt);
        }
    }
}

// The kernels above compiled for one vector width, W = 16 (AVX-512), 8 (AVX2) or 4.
struct Kernels {
    void (*map)(bool, const float*, float*, int64_t, int64_t, int64_t, float*, float*);
    void (*mapBack)(bool, const float*, const float*, float*, int64_t, int64_t, int64_t, float*);
    void (*rows)(bool, const float*, float*, int64_t, int64_t, int64_t);
    void (*rowsBack)(bool, const float*, const float*, float*, int64_t, int64_t, int64_t);
};

#define TESSERA_SOFTMAX_KERNELS(W, TARGET)                                                                             \
    TARGET void mapBlock##W(bool log, const float* x, float* y, int64_t C, int64_t S, int64_t len, float* m,           \
                            float* sum) {                                                                              \
        mapBlockOf<W>(log, x, y, C, S, len, m, sum);                                                                   \
    }                                                                                                                  \
    TARGET void mapBackBlock##W(bool log, const float* y, const float* dy, float* dx, int64_t C, int64_t S,            \
                                int64_t len, float* sum) {                                                             \
        mapBackBlockOf<W>(log, y, dy, dx, C, S, len, sum);                                                             \
    }                                                                                                                  \
    TARGET void rows##W(bool log, const float* x, float* y, int64_t C, int64_t r0, int64_t r1) {                       \
        rowsOf<W>(log, x, y, C, r0, r1);                                                                               \
    }                                                                                                                  \
    TARGET void rowsBack##W(bool log, const float* y, const float* dy, float* dx, int64_t C, int64_t r0, int64_t r1) { \
        rowsBackOf<W>(log, y, dy, dx, C, r0, r1);                                                                      \
    }                                                                                                                  \
    constexpr Kernels kKernels##W{mapBlock##W, mapBackBlock##W, rows##W, rowsBack##W};
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
TESSERA_SOFTMAX_KERNELS(16, __attribute__((target("arch=x86-64-v4"))))
TESSERA_SOFTMAX_KERNELS(8, __attribute__((target("arch=x86-64-v3"))))
TESSERA_SOFTMAX_KERNELS(4, )
const Kernels& kernels() {
    const int lanes = vectorLanes();
    return lanes == 16 ? kKernels16 : lanes == 8 ? kKernels8 : kKernels4;
}
#else
TESSERA_SOFTMAX_KERNELS(16, )
const Kernels& kernels() { return kKernels16; }
#endif
#undef TESSERA_SOFTMAX_KERNELS

// Positions per block of the class-map loops: with 21 classes (Pascal VOC's) 43 KiB.
constexpr int64_t kMapBlock = 512;

// f(at, len) for each sample's block of up to kMapBlock positions of [N, C, S], `at` its
// first element, the blocks shared among the threads for tensors of more than kParallelMin.
template <class Fn> void forEachBlock(const Shape& s, int64_t numel, Fn&& f) {
    const int64_t N = s[0], C = s[1], S = numel / (N * C), blocks = (S + kMapBlock - 1) / kMapBlock;
#pragma omp parallel for if (numel > kParallelMin)
    for (int64_t task = 0; task < N * blocks; ++task) {
        const int64_t n = task / blocks, i0 = task % blocks * kMapBlock;
        f(n * C * S + i0, std::min(kMapBlock, S - i0));
    }
}

void mapLoops(bool log, const Tensor& x, const Tensor& y) {
    const int64_t C = x.shape()[1], S = x.numel() / (x.shape()[0] * C);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const auto kernel = kernels().map;
    forEachBlock(x.shape(), x.numel(), [&](int64_t at, int64_t len) {
        alignas(64) float m[kMapBlock], sum[kMapBlock];
        kernel(log, px + at, py + at, C, S, len, m, sum);
    });
}

// The backward of mapLoops: y (its output), dy, dx [N, C, S], by the same blocks.
void mapBackwardLoops(bool log, const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const int64_t C = y.shape()[1], S = y.numel() / (y.shape()[0] * C);
    const float* py = y.data<float>();
    const float* pd = dy.data<float>();
    float* px = dx.data<float>();
    const auto kernel = kernels().mapBack;
    forEachBlock(y.shape(), y.numel(), [&](int64_t at, int64_t len) {
        alignas(64) float sum[kMapBlock];
        kernel(log, py + at, pd + at, px + at, C, S, len, sum);
    });
}

// Rows of C: x, y or y, dy, dx [N, C] by rowsOf or rowsBackOf, f(r0, r1) for groups of rows
// of at least kRowTask elements, shared among the threads as forEachBlock's blocks.
constexpr int64_t kRowTask = 4096;

template <class Fn> void forEachRows(const Shape& s, int64_t numel, Fn&& f) {
    const int64_t N = s[0], per = std::max<int64_t>(1, kRowTask / std::max<int64_t>(s[1], 1));
#pragma omp parallel for if (numel > kParallelMin)
    for (int64_t r = 0; r < N; r += per) f(r, std::min(N, r + per));
}

void rowLoops(bool log, const Tensor& x, const Tensor& y) {
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const auto kernel = kernels().rows;
    const int64_t C = x.shape()[1];
    forEachRows(x.shape(), x.numel(), [&](int64_t r0, int64_t r1) { kernel(log, px, py, C, r0, r1); });
}

void rowBackwardLoops(bool log, const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const float* py = y.data<float>();
    const float* pd = dy.data<float>();
    float* px = dx.data<float>();
    const auto kernel = kernels().rowsBack;
    const int64_t C = y.shape()[1];
    forEachRows(y.shape(), y.numel(), [&](int64_t r0, int64_t r1) { kernel(log, py, pd, px, C, r0, r1); });
}

// y over dim 1 of x, y [N, C, S]: the largest value m of each line subtracted, then softmax
// y = exp(x - m) / sum_c exp(x - m), log-softmax y = x - m - log(sum_c exp(x - m)). Taken
// where oneDNN's forward is its reference implementation: oneDNN 2.7's over a dim that is
// not the last (a softmax over the classes of a [N, C, H, W] map; on AVX-512 too), a scalar
// loop 20 to 40x slower. With S > 1, mapLoops; rows of C (S = 1) shorter than a vector (the
// longer ones: rowLoops), passes of loops around one of oneDNN's exp (x is not read after
// the first, so y may be x).
void forwardLoops(bool log, const Tensor& x, const Tensor& y) {
    const Shape& s = x.shape();
    const int64_t N = s[0], C = s[1], S = N * C > 0 ? x.numel() / (N * C) : 0;
    if (S > 1) return mapLoops(log, x, y);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    std::vector<float> most(static_cast<size_t>(N * S), -std::numeric_limits<float>::infinity());
    std::vector<float> sums(static_cast<size_t>(N * S), 0.0f);
    const bool parallel = x.numel() > kParallelMin;
#pragma omp parallel for if (parallel)
    for (int64_t n = 0; n < N; ++n) { // y = x - m
        float* m = most.data() + n * S;
        for (int64_t c = 0; c < C; ++c) {
            const float* xr = px + (n * C + c) * S;
#pragma omp simd
            for (int64_t i = 0; i < S; ++i) m[i] = std::max(m[i], xr[i]);
        }
        for (int64_t c = 0; c < C; ++c) {
            const float* xr = px + (n * C + c) * S;
            float* yr = py + (n * C + c) * S;
#pragma omp simd
            for (int64_t i = 0; i < S; ++i) yr[i] = xr[i] - m[i];
        }
    }
    // the exponentials: in place for softmax, beside y = x - m for log-softmax
    const Tensor e = log ? Tensor::empty(y.shape(), DType::float32, y.device()) : y;
    expInto(y, e);
    const float* pe = e.data<float>();
#pragma omp parallel for if (parallel)
    for (int64_t n = 0; n < N; ++n) {
        float* acc = sums.data() + n * S;
        for (int64_t c = 0; c < C; ++c) {
            const float* er = pe + (n * C + c) * S;
#pragma omp simd
            for (int64_t i = 0; i < S; ++i) acc[i] += er[i];
        }
        for (int64_t i = 0; i < S; ++i) acc[i] = log ? std::log(acc[i]) : 1.0f / acc[i];
        for (int64_t c = 0; c < C; ++c) {
            float* yr = py + (n * C + c) * S;
            if (log) {
#pragma omp simd
                for (int64_t i = 0; i < S; ++i) yr[i] -= acc[i];
            } else {
#pragma omp simd
                for (int64_t i = 0; i < S; ++i) yr[i] *= acc[i];
            }
        }
    }
}

// Whether t is rows [N, C] (trailing dims of 1) of at least one whole vector each: rowLoops
// and rowBackwardLoops run those on every CPU, faster than oneDNN 2.7's vectorised kernels
// (tools/bench/results/cpu-softmax-rows-zen5.txt); shorter rows go to oneDNN (or, where it
// has only its reference kernel, to the loops above).
bool rowsOfVectors(const Tensor& t) {
    const Shape& s = t.shape();
    return s[1] >= vectorLanes() && t.numel() == s[0] * s[1];
}

// x, y: [N, C, ...]
template <class Fwd> void forward(const char* op, const Tensor& x, const Tensor& y) {
    requireAxis1(op, x);
    if (rowsOfVectors(x)) return rowLoops(std::is_same_v<Fwd, dnnl::logsoftmax_forward>, x, y);
    const auto& prims = forwardPrims<Fwd>(x.shape().dims(), op);
    if (prims.reference) return forwardLoops(std::is_same_v<Fwd, dnnl::logsoftmax_forward>, x, y);
    auto md = prims.fwdPd.src_desc();
    checkDnnl(op, [&] {
        prims.fwd.execute(stream(),
                          {{DNNL_ARG_SRC, wrap(md, x.data<float>())}, {DNNL_ARG_DST, wrap(md, y.data<float>())}});
    });
}

// oneDNN's backward for these dims, and whether it is its reference implementation.
template <class Bwd> struct BackwardPrim {
    Bwd bwd;
    bool reference = false;
};

// y (the forward's output), dy, dx: [N, C, ...]
template <class Fwd, class Bwd> void backward(const char* op, const Tensor& y, const Tensor& dy, const Tensor& dx) {
    requireAxis1(op, y);
    const auto& dims = y.shape().dims();
    if (rowsOfVectors(y)) return rowBackwardLoops(std::is_same_v<Bwd, dnnl::logsoftmax_backward>, y, dy, dx);
    static thread_local PrimitiveCache<BackwardPrim<Bwd>> cache;
    const auto& prim = cache.get(dims, [&] {
        return checkDnnl(op, [&] {
            auto md = plainDesc(dims);
            typename Bwd::desc d(md, md, 1);
            typename Bwd::primitive_desc pd(d, engine(), forwardPrims<Fwd>(dims, op).fwdPd);
            return BackwardPrim<Bwd>{Bwd(pd), isReference(pd)};
        });
    });
    if (prim.reference) { // the class map's blocks (S > 1), or rows
        const bool log = std::is_same_v<Bwd, dnnl::logsoftmax_backward>;
        const int64_t rows = dims[0] * dims[1];
        if (rows > 0 && y.numel() > rows) return mapBackwardLoops(log, y, dy, dx);
        return backwardLoops(log, y, dy, dx);
    }
    auto md = plainDesc(dims);
    checkDnnl(op, [&] {
        prim.bwd.execute(stream(), {{DNNL_ARG_DST, wrap(md, y.data<float>())},
                                    {DNNL_ARG_DIFF_DST, wrap(md, dy.data<float>())},
                                    {DNNL_ARG_DIFF_SRC, wrap(md, dx.data<float>())}});
    });
}
} // namespace

void CpuBackend::softmaxForward(const Tensor& x, const Tensor& y) {
    forward<dnnl::softmax_forward>("softmaxForward", x, y);
}

void CpuBackend::softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    backward<dnnl::softmax_forward, dnnl::softmax_backward>("softmaxBackward", y, dy, dx);
}

void CpuBackend::logSoftmaxForward(const Tensor& x, const Tensor& y) {
    forward<dnnl::logsoftmax_forward>("logSoftmaxForward", x, y);
}

void CpuBackend::logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    backward<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>("logSoftmaxBackward", y, dy, dx);
}

} // namespace tessera
