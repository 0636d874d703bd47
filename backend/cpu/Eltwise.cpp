// The element-wise ops of the CPU backend: activations through oneDNN's eltwise primitives
// (JIT-vectorised; hardSigmoid, log, sin and cos by vector loops of their own; tan, the
// inverse and hyperbolic functions, erf and sign in Libm.cpp), and the
// arithmetic (axpby, axpbyz, affine maps, powers, products, per-channel scales, casts) as
// plain vectorisable loops that OpenMP splits only when they are large enough to pay for
// waking the thread pool.
//
// The activations' tensors are viewed as flat 1-D buffers over their storage, so one primitive serves
// every shape of a size, in any layout; only blocked tensors with padded channels are
// described with their real shape, so that the padding stays zero.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"
#include "backend/cpu/Libm.h"
#include "backend/cpu/VecMath.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace tessera {

using namespace dnnl_util;
using dnnl::algorithm;

namespace {

struct EltwiseAlgs {
    algorithm fwd;
    algorithm bwd;
    bool bwdUsesDst; // backward reads the forward output instead of its input
};

EltwiseAlgs algsOf(ActivationKind kind) {
    switch (kind) {
    case ActivationKind::sigmoid:
        return {algorithm::eltwise_logistic, algorithm::eltwise_logistic_use_dst_for_bwd, true};
    case ActivationKind::tanh: return {algorithm::eltwise_tanh, algorithm::eltwise_tanh_use_dst_for_bwd, true};
    case ActivationKind::relu: return {algorithm::eltwise_relu, algorithm::eltwise_relu_use_dst_for_bwd, true};
    case ActivationKind::leakyRelu: return {algorithm::eltwise_relu, algorithm::eltwise_relu, false};
    case ActivationKind::elu: return {algorithm::eltwise_elu, algorithm::eltwise_elu, false};
    case ActivationKind::softPlus: return {algorithm::eltwise_soft_relu, algorithm::eltwise_soft_relu, false};
    case ActivationKind::clip: return {algorithm::eltwise_clip_v2, algorithm::eltwise_clip_v2, false};
    case ActivationKind::gelu: return {algorithm::eltwise_gelu_erf, algorithm::eltwise_gelu_erf, false};
    case ActivationKind::hardSwish: return {algorithm::eltwise_hardswish, algorithm::eltwise_hardswish, false};
    case ActivationKind::silu: return {algorithm::eltwise_swish, algorithm::eltwise_swish, false}; // alpha 1
    case ActivationKind::mish: return {algorithm::eltwise_mish, algorithm::eltwise_mish, false};
    case ActivationKind::exp: return {algorithm::eltwise_exp, algorithm::eltwise_exp_use_dst_for_bwd, true};
    case ActivationKind::abs: return {algorithm::eltwise_abs, algorithm::eltwise_abs, false};
    case ActivationKind::hardSigmoid: break; // no oneDNN algorithm in this version: a loop below
    case ActivationKind::log: break;         // oneDNN's is off by ulps (log 1 != 0): a loop below
    case ActivationKind::sin:                // none in oneDNN: loops below
    case ActivationKind::cos:
    case ActivationKind::tan:
    case ActivationKind::asin:
    case ActivationKind::acos:
    case ActivationKind::atan:
    case ActivationKind::sinh:
    case ActivationKind::cosh:
    case ActivationKind::asinh:
    case ActivationKind::acosh:
    case ActivationKind::atanh:
    case ActivationKind::erf:
    case ActivationKind::sign: break;
    }
    throw BackendError("CpuBackend: unknown activation");
}

// The constants oneDNN's algorithm takes: swish's alpha (the sigmoid's scale) is 1 for silu.
ActivationParams dnnlParams(const ActivationParams& act) {
    ActivationParams p = act;
    if (act.kind == ActivationKind::silu) p.alpha = 1.0f, p.beta = 0.0f;
    if (act.kind == ActivationKind::mish || act.kind == ActivationKind::exp || act.kind == ActivationKind::abs) {
        p.alpha = 0.0f, p.beta = 0.0f;
    }
    return p;
}

// The descriptor the primitive runs over for tensor t (float32 or bfloat16).
dnnl::memory::desc viewOf(const Tensor& t) {
    const int64_t block = blockOf(t.layout());
    if (block > 1 && t.shape()[1] % block != 0) return descOf(t);
    const auto type = dnnlType(t.dtype());
    return plainDesc({static_cast<int64_t>(t.nbytes() / sizeOf(t.dtype()))}, type);
}

std::vector<int64_t> keyOf(const ActivationParams& act, const dnnl::memory::desc& md) {
    const ActivationParams p = dnnlParams(act);
    std::vector<int64_t> key = {static_cast<int64_t>(p.kind), dnnl_util::keyOf(p.alpha), dnnl_util::keyOf(p.beta),
                                static_cast<int64_t>(md.get_size()), static_cast<int64_t>(md.data_type())};
    const auto d = md.dims();
    key.insert(key.end(), d.begin(), d.end());
    return key;
}

struct EltwisePrims {
    dnnl::eltwise_forward::primitive_desc fwdPd;
    dnnl::eltwise_forward fwd;
};

PrimitiveCache<EltwisePrims>& forwardCache() {
    static thread_local PrimitiveCache<EltwisePrims> cache;
    return cache;
}

const EltwisePrims& forwardPrims(const ActivationParams& act, const dnnl::memory::desc& md) {
    return forwardCache().get(keyOf(act, md), [&] {
        return checkDnnl("eltwise_forward", [&] {
            dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_training, algsOf(act.kind).fwd, md,
                                          dnnlParams(act).alpha, dnnlParams(act).beta);
            dnnl::eltwise_forward::primitive_desc pd(d, engine());
            return EltwisePrims{pd, dnnl::eltwise_forward(pd)};
        });
    });
}

// hardSigmoid maps 0 to its offset, log to -inf, cos and cosh to 1, so the loops of the
// plainFloat32Only kinds run on plain tensors only (blocked padding stays zero).
void requirePlain(const Tensor& t, const char* where) {
    if (t.layout() != Layout::plain) {
        throw BackendError(std::string("CpuBackend::") + where +
                           ": the activations computed by loops of their own (hardSigmoid, log, sin, cos, tan, the "
                           "inverse and hyperbolic functions, erf, sign) need plain tensors");
    }
}

constexpr int64_t kLoopParallelMin = 1 << 15;

// y = ln x over n elements by vectors of W (y may be x): the last partial vector is the last
// whole one, read before the loop writes and written after it; fewer than W elements through
// a vector padded with ones. Every element gets the same value wherever it sits.
template <int W> [[gnu::always_inline]] inline void logsOf(const float* x, float* y, int64_t n) {
    using F = typename vec::Native<W>::F;
    using vec::load, vec::store, vec::logOf;
    if (n < W) {
        float pad[W];
        std::fill(pad, pad + W, 1.0f);
        std::copy(x, x + n, pad);
        store(pad, logOf<W>(load<F>(pad)));
        std::copy(pad, pad + n, y);
        return;
    }
    const int64_t whole = n / W * W, last = n - W;
    const F xt = load<F>(x + last);
    for (int64_t i = 0; i < whole; i += W) store(y + i, logOf<W>(load<F>(x + i)));
    if (whole < n) store(y + last, logOf<W>(xt));
}

// y = sin x (Cos false) or cos x over n elements, or with dy, y = sign dy sin x (or cos x): the
// derivatives (dy cos x; -dy sin x). y may be x or dy. Vectors as logsOf's; where any element
// of the n is beyond vec::kTrigLimit (an infinity among them), std::sin and std::cos for all.
template <int W, bool Cos>
[[gnu::always_inline]] inline void trigsOf(const float* x, const float* dy, float sign, float* y, int64_t n) {
    using F = typename vec::Native<W>::F;
    using I = typename vec::Native<W>::I;
    using vec::load, vec::store, vec::trigOf, vec::absOf;
    if (n < W) {
        float px[W] = {}, pd[W] = {}, py[W];
        std::copy(x, x + n, px);
        if (dy) std::copy(dy, dy + n, pd);
        trigsOf<W, Cos>(px, dy ? pd : nullptr, sign, py, W);
        std::copy(py, py + n, y);
        return;
    }
    const int64_t whole = n / W * W, last = n - W;
    I far = absOf<W>(load<F>(x + last)) > vec::kTrigLimit;
    for (int64_t i = 0; i < whole; i += W) far |= absOf<W>(load<F>(x + i)) > vec::kTrigLimit;
    bool anyFar = false;
    for (int l = 0; l < W; ++l) anyFar = anyFar || far[l] != 0;
    if (anyFar) {
        for (int64_t i = 0; i < n; ++i) {
            const float v = Cos ? std::cos(x[i]) : std::sin(x[i]);
            y[i] = dy ? dy[i] * v * sign : v;
        }
        return;
    }
    const F xt = load<F>(x + last), dt = dy ? load<F>(dy + last) : F{};
    if (dy) {
        for (int64_t i = 0; i < whole; i += W) store(y + i, load<F>(dy + i) * trigOf<W, Cos>(load<F>(x + i)) * sign);
        if (whole < n) store(y + last, dt * trigOf<W, Cos>(xt) * sign);
    } else {
        for (int64_t i = 0; i < whole; i += W) store(y + i, trigOf<W, Cos>(load<F>(x + i)));
        if (whole < n) store(y + last, trigOf<W, Cos>(xt));
    }
}

// The loops above compiled for one vector width, W = 16 (AVX-512), 8 (AVX2) or 4.
struct LoopKernels {
    void (*logs)(const float*, float*, int64_t);
    void (*trigs)(bool, const float*, const float*, float, float*, int64_t);
};
#define TESSERA_LOOP_KERNELS(W, TARGET)                                                                                \
    TARGET void logs##W(const float* x, float* y, int64_t n) { logsOf<W>(x, y, n); }                                   \
    TARGET void trigs##W(bool cos, const float* x, const float* dy, float sign, float* y, int64_t n) {                 \
        if (cos) return trigsOf<W, true>(x, dy, sign, y, n);                                                           \
        trigsOf<W, false>(x, dy, sign, y, n);                                                                          \
    }                                                                                                                  \
    constexpr LoopKernels kLoops##W{logs##W, trigs##W};
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
TESSERA_LOOP_KERNELS(16, __attribute__((target("arch=x86-64-v4"))))
TESSERA_LOOP_KERNELS(8, __attribute__((target("arch=x86-64-v3"))))
TESSERA_LOOP_KERNELS(4, )
const LoopKernels& loopKernels() {
    const int lanes = vectorLanes();
    return lanes == 16 ? kLoops16 : lanes == 8 ? kLoops8 : kLoops4;
}
#else
TESSERA_LOOP_KERNELS(16, )
const LoopKernels& loopKernels() { return kLoops16; }
#endif
#undef TESSERA_LOOP_KERNELS

// f(at, len) for blocks of 2^14 of n elements, shared among the threads for large tensors.
template <class Fn> void forEachBlock(int64_t n, Fn&& f) {
    constexpr int64_t kBlock = 1 << 14;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for if (n > kLoopParallelMin)
    for (int64_t b = 0; b < blocks; ++b) f(b * kBlock, std::min(kBlock, n - b * kBlock));
}

// y = ln x (y may be x).
void logLoops(const float* x, float* y, int64_t n) {
    const auto logs = loopKernels().logs;
    forEachBlock(n, [&](int64_t at, int64_t len) { logs(x + at, y + at, len); });
}

// y = sin x or cos x; with dy, their derivatives times dy (y may be x or dy).
void trigLoops(bool cos, const float* x, const float* dy, float sign, float* y, int64_t n) {
    const auto trigs = loopKernels().trigs;
    forEachBlock(n, [&](int64_t at, int64_t len) { trigs(cos, x + at, dy ? dy + at : nullptr, sign, y + at, len); });
}

} // namespace

std::optional<EltwiseOp> dnnl_util::eltwiseOpOf(const ActivationParams& act) {
    if (plainFloat32Only(act.kind)) return std::nullopt;
    const ActivationParams p = dnnlParams(act);
    return EltwiseOp{algsOf(act.kind).fwd, p.alpha, p.beta};
}

// x, y: same shape, layout and dtype (float32, or bfloat16 but for the own loops; emulated
// where the CPU has no bfloat16 kernels)
void CpuBackend::activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) {
    if (y.shape() != x.shape() || y.layout() != x.layout() || y.dtype() != x.dtype()) {
        throw ShapeError("CpuBackend::activationForward: x and y differ in shape, layout or dtype");
    }
    if (emulatedBfloat16(x.dtype())) {
        Tensor y32 = Tensor::empty(x.shape(), DType::float32, x.device(), x.layout());
        activationForward(act, x.convertedTo(DType::float32), y32);
        Tensor(y).copyFrom(y32.convertedTo(DType::bfloat16)); // a handle on y's storage
        return;
    }
    if (act.kind == ActivationKind::hardSigmoid) {
        requirePlain(x, "activationForward");
        const float* px = x.data<float>();
        float* py = y.data<float>();
        const int64_t n = x.numel();
        const float a = act.alpha, b = act.beta;
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) { // comparisons, not std::fmin/fmax (library calls): vectors
            const float u = a * px[i] + b, v = u > 0.0f ? u : 0.0f; // NaN: 0, as fmax gives
            py[i] = v < 1.0f ? v : 1.0f;
        }
        return;
    }
    if (act.kind == ActivationKind::log) {
        requirePlain(x, "activationForward");
        logLoops(x.data<float>(), y.data<float>(), x.numel()); // std::log per element would not vectorise
        return;
    }
    if (act.kind == ActivationKind::sin || act.kind == ActivationKind::cos) {
        requirePlain(x, "activationForward");
        trigLoops(act.kind == ActivationKind::cos, x.data<float>(), nullptr, 1.0f, y.data<float>(), x.numel());
        return;
    }
    if (cpu_libm::computes(act.kind)) {
        requirePlain(x, "activationForward");
        cpu_libm::forward(act.kind, x.data<float>(), y.data<float>(), x.numel());
        return;
    }
    const auto md = viewOf(x);
    const auto& prims = forwardPrims(act, md);
    checkDnnl("eltwise_forward::execute", [&] {
        prims.fwd.execute(stream(), {{DNNL_ARG_SRC, memOf(md, x)}, {DNNL_ARG_DST, memOf(md, y)}});
    });
}

// x, y, dx: one layout and dtype; dy reordered (and converted) to them when it differs
void CpuBackend::activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                                    const Tensor& dx) {
    if (dx.shape() != x.shape() || dy.shape() != x.shape() || dx.layout() != x.layout() || dx.dtype() != x.dtype()) {
        throw ShapeError("CpuBackend::activationBackward: x, dy and dx differ in shape, layout or dtype");
    }
    const Tensor dyIn = converted(dy, x.dtype(), x.layout());
    if (emulatedBfloat16(x.dtype())) {
        Tensor dx32 = Tensor::empty(x.shape(), DType::float32, x.device(), x.layout());
        activationBackward(act, x.convertedTo(DType::float32), y.convertedTo(DType::float32),
                           dyIn.convertedTo(DType::float32), dx32);
        Tensor(dx).copyFrom(dx32.convertedTo(DType::bfloat16));
        return;
    }
    if (act.kind == ActivationKind::hardSigmoid) { // dx = a dy inside (0, 1), 0 where clipped
        requirePlain(x, "activationBackward");
        const float* px = x.data<float>();
        const float* pdy = dyIn.data<float>();
        float* pdx = dx.data<float>();
        const int64_t n = x.numel();
        const float a = act.alpha, b = act.beta;
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) { // a 0/1 factor, not selects (which would not vectorise)
            const float u = a * px[i] + b, inside = (u > 0.0f ? 1.0f : 0.0f) * (u < 1.0f ? 1.0f : 0.0f);
            pdx[i] = inside * (a * pdy[i]);
        }
        return;
    }
    if (act.kind == ActivationKind::log) { // dx = dy / x
        requirePlain(x, "activationBackward");
        const float* px = x.data<float>();
        const float* pdy = dyIn.data<float>();
        float* pdx = dx.data<float>();
        const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) pdx[i] = pdy[i] / px[i];
        return;
    }
    if (act.kind == ActivationKind::sin || act.kind == ActivationKind::cos) { // dx = dy cos x; -dy sin x
        requirePlain(x, "activationBackward");
        const bool sine = act.kind == ActivationKind::sin;
        trigLoops(sine, x.data<float>(), dyIn.data<float>(), sine ? 1.0f : -1.0f, dx.data<float>(), x.numel());
        return;
    }
    if (cpu_libm::computes(act.kind)) {
        requirePlain(x, "activationBackward");
        cpu_libm::backward(act.kind, x.data<float>(), dyIn.data<float>(), dx.data<float>(), x.numel());
        return;
    }
    const auto md = viewOf(x);
    static thread_local PrimitiveCache<dnnl::eltwise_backward> cache;
    const EltwiseAlgs algs = algsOf(act.kind);
    const auto& bwd = cache.get(keyOf(act, md), [&] {
        return checkDnnl("eltwise_backward", [&] {
            dnnl::eltwise_backward::desc d(algs.bwd, md, md, dnnlParams(act).alpha, dnnlParams(act).beta);
            dnnl::eltwise_backward::primitive_desc pd(d, engine(), forwardPrims(act, md).fwdPd);
            return dnnl::eltwise_backward(pd);
        });
    });
    const Tensor& data = algs.bwdUsesDst ? y : x;
    checkDnnl("eltwise_backward::execute", [&] {
        bwd.execute(stream(), {{algs.bwdUsesDst ? DNNL_ARG_DST : DNNL_ARG_SRC, memOf(md, data)},
                               {DNNL_ARG_DIFF_DST, memOf(md, dyIn)},
                               {DNNL_ARG_DIFF_SRC, memOf(md, dx)}});
    });
}

// ---- arithmetic ---------------------------------------------------------------------------------

using cpu_util::requireSameNumel;

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

// z[i] = alpha x[i] + beta y[i] over n storage elements (beta == 0 never reads y); with
// `relu`, max(0, that).
template <class X, class Y, class Z>
void axpbyzLoop(float alpha, const X* x, float beta, const Y* y, Z* z, int64_t n, bool relu = false) {
    if (relu) { // a comparison, not std::fmax (a library call per element): vectors; NaN gives 0,
                // as oneDNN's ReLU does
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) {
            const float v = alpha * load(x, i) + (beta == 0.0f ? 0.0f : beta * load(y, i));
            store(z, i, v > 0.0f ? v : 0.0f);
        }
        return;
    }
    if (beta == 0.0f) { // y may hold NaN from uninitialised memory
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) store(z, i, alpha * load(x, i));
        return;
    }
#pragma omp parallel for simd if (n > kLoopParallelMin)
    for (int64_t i = 0; i < n; ++i) store(z, i, alpha * load(x, i) + beta * load(y, i));
}

// z = alpha x + beta y over n bfloat16 storage elements by oneDNN's binary add (JIT
// vectorised; the loop above converts one element at a time on a baseline build). z may be y.
void axpbyzBfloat16(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z, int64_t n,
                    bool relu = false) {
    using namespace dnnl_util;
    static thread_local PrimitiveCache<dnnl::binary> cache;
    const auto flat = plainDesc({n}, dnnl::memory::data_type::bf16);
    const auto& prim = cache.get({n, dnnl_util::keyOf(alpha), dnnl_util::keyOf(beta), relu}, [&] {
        return checkDnnl("binary", [&] {
            dnnl::primitive_attr attr;
            if (beta != 1.0f) attr.set_scales(DNNL_ARG_SRC_0, 0, {beta});
            if (alpha != 1.0f) attr.set_scales(DNNL_ARG_SRC_1, 0, {alpha});
            if (relu) { // the ReLU as a post-op: one pass
                dnnl::post_ops ops;
                ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
                attr.set_post_ops(ops);
            }
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
void axpbyzAny(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z, const char* op,
               bool relu = false) {
    const auto n = static_cast<int64_t>(z.nbytes() / sizeOf(z.dtype()));
    const DType b16 = DType::bfloat16;
    // (oneDNN has no bfloat16 binary primitive on CPUs without bfloat16 kernels: the loop.)
    if (x.dtype() == b16 && y.dtype() == b16 && z.dtype() == b16 && beta != 0.0f && dnnl_util::bfloat16Kernels()) {
        axpbyzBfloat16(alpha, x, beta, y, z, n, relu);
        return;
    }
    withElements(x, op, [&](auto* xt) {
        withElements(y, op, [&](auto* yt) {
            withElements(z, op, [&](auto* zt) {
                using X = std::remove_pointer_t<decltype(xt)>;
                using Y = std::remove_pointer_t<decltype(yt)>;
                using Z = std::remove_pointer_t<decltype(zt)>;
                axpbyzLoop(alpha, static_cast<const X*>(x.raw()), beta, static_cast<const Y*>(y.raw()),
                           static_cast<Z*>(z.raw()), n, relu);
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

// The same with the ReLU in the pass (a padded block's zeros stay 0).
void CpuBackend::axpbyzRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
    requireSameNumel("axpbyzRelu", x, z);
    requireSameNumel("axpbyzRelu", y, z);
    if (!sameStorageOrder(x, z) || !sameStorageOrder(y, z)) {
        Backend::axpbyzRelu(alpha, x, beta, y, z);
        return;
    }
    axpbyzAny(alpha, x, beta, y, z, "axpbyzRelu", true);
}

// x, y: same numel -> y = a * x + b
void CpuBackend::affine(const Tensor& x, float a, float b, const Tensor& y) {
    requireSameNumel("affine", x, y);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kLoopParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = a * px[i] + b;
}

namespace {
// py[i] = f(px[i]) over n elements.
template <class F> void mapElements(const float* px, float* py, int64_t n, F f) {
#pragma omp parallel for simd if (n > kLoopParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
}
} // namespace

// Squares, cubes, fourth powers, square roots and reciprocals (Sqrt, Reciprocal, a norm's
// square, x^3 of GELU's tanh form, and their gradients' exponents) by vector arithmetic, as
// PyTorch computes them (x x x for a cube), within 2 ulp of std::pow, with std::pow's values
// at -0 and -inf (a square root of -0 is +0, of -inf +inf); other exponents by libmvec's powf
// (cpu_libm::power). x^-2 is (1 / x)^2, not PyTorch's 1 / (x x): where x x would fall below
// float's smallest normal (|x| under 1.1e-19), which the CPU flushes to 0, that would be inf
// where std::pow is finite.
void CpuBackend::power(const Tensor& x, float p, const Tensor& y) {
    requireSameNumel("power", x, y);
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
    constexpr float inf = std::numeric_limits<float>::infinity();
    if (p == 1.0f) return mapElements(px, py, n, [](float v) { return v; });
    if (p == 2.0f) return mapElements(px, py, n, [](float v) { return v * v; });
    if (p == 3.0f) return mapElements(px, py, n, [](float v) { return v * v * v; });
    if (p == 4.0f) return mapElements(px, py, n, [](float v) { return (v * v) * (v * v); });
    if (p == -1.0f) return mapElements(px, py, n, [](float v) { return 1.0f / v; });
    if (p == -2.0f) {
        return mapElements(px, py, n, [](float v) {
            const float r = 1.0f / v;
            return r * r;
        });
    }
    // |sqrt| makes sqrt(-0) +0, and the select sends -inf to +inf; both vectorise (a square
    // root whose lanes a select may drop, or a division by one, would not, where GCC keeps
    // floating-point exceptions exact). x^-0.5 is 1 / that, a second pass.
    const auto root = [](float v) { return v == -inf ? inf : std::fabs(std::sqrt(v)); };
    if (p == 0.5f) return mapElements(px, py, n, root);
    if (p == -0.5f) {
        mapElements(px, py, n, root);
        return mapElements(py, py, n, [](float v) { return 1.0f / v; });
    }
    cpu_libm::power(px, p, py, n);
}

// x, y: [N, C, ...], m: [N, C] -> y[n, c, ...] = x[n, c, ...] * m[n, c]
void CpuBackend::mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) {
    requireSameNumel("mulChannels", x, y);
    const int64_t planes = m.numel(), inner = x.numel() / planes;
    const float* px = x.data<float>();
    const float* pm = m.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for if (x.numel() > kLoopParallelMin)
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
#pragma omp parallel for simd if (n > kLoopParallelMin)
            for (int64_t i = 0; i < n; ++i) py[i] = static_cast<float>(px[i]);
            return;
        }
        if (from == DType::float32) {
            const float* px = x.data<float>();
            int32_t* py = y.data<int32_t>();
#pragma omp parallel for simd if (n > kLoopParallelMin)
            for (int64_t i = 0; i < n; ++i) py[i] = static_cast<int32_t>(px[i]);
            return;
        }
    }
    if (from == DType::float32 && to == DType::bfloat16) {
        const float* px = x.data<float>();
        auto* py = y.data<bfloat16>();
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) py[i] = toBfloat16(px[i]);
        return;
    }
    if (from == DType::bfloat16 && to == DType::float32) {
        const auto* px = x.data<bfloat16>();
        float* py = y.data<float>();
#pragma omp parallel for simd if (n > kLoopParallelMin)
        for (int64_t i = 0; i < n; ++i) py[i] = toFloat(px[i]);
        return;
    }
    const void* px = x.raw();
    void* py = y.raw();
#pragma omp parallel for if (n > kLoopParallelMin)
    for (int64_t i = 0; i < n; ++i) writeAs(to, py, i, readAs(from, px, i));
}

void CpuBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
    requireSameNumel("mul", a, y);
    requireSameNumel("mul", b, y);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kLoopParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i];
}

} // namespace tessera
