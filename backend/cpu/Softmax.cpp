// Softmax and log-softmax over dim 1 through oneDNN, plus the engine and stream every oneDNN op shares.
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

bool isReference(const dnnl::primitive_desc_base& pd) { return std::string(pd.impl_info_str()).rfind("ref", 0) == 0; }

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

// dx over dim 1 of y, dy, dx [N, C, S] by loops: softmax dx = y (dy - sum_c dy y), log-softmax
// dx = dy - exp(y) sum_c dy (exp(y) first, by oneDNN's exp, into dx or a scratch tensor).
// Taken where oneDNN's backward is its reference implementation (oneDNN 2.7 on CPUs without
// AVX-512: a scalar loop, 5 to 10x slower than these).
void backwardLoops(bool log, const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const Shape& s = y.shape();
    const int64_t N = s[0], C = s[1], S = N * C > 0 ? y.numel() / (N * C) : 0;
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
#pragma omp parallel if (y.numel() > kParallelMin)
    {
        std::vector<float> sum(static_cast<size_t>(S));
#pragma omp for
        for (int64_t n = 0; n < N; ++n) {
            if (S == 1) { // rows of C: a dot product, then one pass
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
                continue;
            }
            std::fill(sum.begin(), sum.end(), 0.0f);
            float* acc = sum.data();
            for (int64_t c = 0; c < C; ++c) {
                const int64_t at = (n * C + c) * S;
                const float* dr = pd + at;
                if (pq) {
                    const float* qr = pq + at;
#pragma omp simd
                    for (int64_t i = 0; i < S; ++i) acc[i] += dr[i] * qr[i];
                } else {
#pragma omp simd
                    for (int64_t i = 0; i < S; ++i) acc[i] += dr[i];
                }
            }
            for (int64_t c = 0; c < C; ++c) {
                const int64_t at = (n * C + c) * S;
                const float *dr = pd + at, *pr = pp + at;
                float* xr = px + at;
                if (log) {
#pragma omp simd
                    for (int64_t i = 0; i < S; ++i) xr[i] = dr[i] - pr[i] * acc[i];
                } else {
#pragma omp simd
                    for (int64_t i = 0; i < S; ++i) xr[i] = pr[i] * (dr[i] - acc[i]);
                }
            }
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

using MapBlock = void (*)(bool, const float*, float*, int64_t, int64_t, int64_t, float*, float*);

#define TESSERA_MAP_KERNEL(W, TARGET)                                                                                  \
    TARGET void mapBlock##W(bool log, const float* x, float* y, int64_t C, int64_t S, int64_t len, float* m,           \
                            float* sum) {                                                                              \
        mapBlockOf<W>(log, x, y, C, S, len, m, sum);                                                                   \
    }
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
TESSERA_MAP_KERNEL(16, __attribute__((target("arch=x86-64-v4"))))
TESSERA_MAP_KERNEL(8, __attribute__((target("arch=x86-64-v3"))))
TESSERA_MAP_KERNEL(4, )
MapBlock mapBlock() {
    const int lanes = vectorLanes();
    return lanes == 16 ? mapBlock16 : lanes == 8 ? mapBlock8 : mapBlock4;
}
#else
TESSERA_MAP_KERNEL(16, )
MapBlock mapBlock() { return mapBlock16; }
#endif
#undef TESSERA_MAP_KERNEL

// Positions per block of the class-map loops: with 21 classes (Pascal VOC's) 43 KiB.
constexpr int64_t kMapBlock = 512;

void mapLoops(bool log, const Tensor& x, const Tensor& y) {
    const Shape& s = x.shape();
    const int64_t N = s[0], C = s[1], S = x.numel() / (N * C);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const MapBlock kernel = mapBlock();
    const int64_t blocks = (S + kMapBlock - 1) / kMapBlock;
#pragma omp parallel for if (x.numel() > kParallelMin)
    for (int64_t task = 0; task < N * blocks; ++task) {
        const int64_t n = task / blocks, i0 = task % blocks * kMapBlock, len = std::min(kMapBlock, S - i0);
        alignas(64) float m[kMapBlock], sum[kMapBlock];
        kernel(log, px + n * C * S + i0, py + n * C * S + i0, C, S, len, m, sum);
    }
}

// y over dim 1 of x, y [N, C, S]: the largest value m of each line subtracted, then softmax
// y = exp(x - m) / sum_c exp(x - m), log-softmax y = x - m - log(sum_c exp(x - m)). Taken
// where oneDNN's forward is its reference implementation: oneDNN 2.7's over a dim that is
// not the last (a softmax over the classes of a [N, C, H, W] map; on AVX-512 too), a scalar
// loop 20 to 40x slower. With S > 1, mapLoops; rows of C (S = 1), passes of loops around
// one of oneDNN's exp (x is not read after the first, so y may be x).
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

// x, y: [N, C, ...]
template <class Fwd> void forward(const char* op, const Tensor& x, const Tensor& y) {
    requireAxis1(op, x);
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
    static thread_local PrimitiveCache<BackwardPrim<Bwd>> cache;
    const auto& prim = cache.get(dims, [&] {
        return checkDnnl(op, [&] {
            auto md = plainDesc(dims);
            typename Bwd::desc d(md, md, 1);
            typename Bwd::primitive_desc pd(d, engine(), forwardPrims<Fwd>(dims, op).fwdPd);
            return BackwardPrim<Bwd>{Bwd(pd), isReference(pd)};
        });
    });
    if (prim.reference) return backwardLoops(std::is_same_v<Bwd, dnnl::logsoftmax_backward>, y, dy, dx);
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
