// Activations through oneDNN's eltwise primitives: JIT-vectorised, exp/log included.
// Tensors are viewed as flat 1-D buffers over their storage, so one primitive serves
// every shape of a size, in any layout; only blocked tensors with padded channels are
// described with their real shape, so that the padding stays zero.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

#include <cmath>

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
    case ActivationKind::hardSigmoid: break; // no oneDNN algorithm in this version: a loop below
    }
    throw BackendError("CpuBackend: unknown activation");
}

// The descriptor the primitive runs over for tensor t (float32 or bfloat16).
dnnl::memory::desc viewOf(const Tensor& t) {
    const int64_t block = blockOf(t.layout());
    if (block > 1 && t.shape()[1] % block != 0) return descOf(t);
    const auto type = dnnlType(t.dtype());
    return plainDesc({static_cast<int64_t>(t.nbytes() / sizeOf(t.dtype()))}, type);
}

std::vector<int64_t> keyOf(const ActivationParams& act, const dnnl::memory::desc& md) {
    std::vector<int64_t> key = {static_cast<int64_t>(act.kind), dnnl_util::keyOf(act.alpha), dnnl_util::keyOf(act.beta),
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
            dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_training, algsOf(act.kind).fwd, md, act.alpha,
                                          act.beta);
            dnnl::eltwise_forward::primitive_desc pd(d, engine());
            return EltwisePrims{pd, dnnl::eltwise_forward(pd)};
        });
    });
}

// hardSigmoid maps 0 to its offset, so it runs on plain tensors only (blocked padding stays zero).
void requirePlain(const Tensor& t, const char* where) {
    if (t.layout() != Layout::plain) {
        throw BackendError(std::string("CpuBackend::") + where + ": hardSigmoid needs plain tensors");
    }
}

constexpr int64_t kLoopParallelMin = 1 << 15;

} // namespace

// x, y: same shape, layout and dtype (float32, or bfloat16 but for hardSigmoid; emulated
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
        for (int64_t i = 0; i < n; ++i) py[i] = std::fmin(std::fmax(a * px[i] + b, 0.0f), 1.0f);
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
        for (int64_t i = 0; i < n; ++i) {
            const float u = a * px[i] + b;
            pdx[i] = u > 0.0f && u < 1.0f ? a * pdy[i] : 0.0f;
        }
        return;
    }
    const auto md = viewOf(x);
    static thread_local PrimitiveCache<dnnl::eltwise_backward> cache;
    const EltwiseAlgs algs = algsOf(act.kind);
    const auto& bwd = cache.get(keyOf(act, md), [&] {
        return checkDnnl("eltwise_backward", [&] {
            dnnl::eltwise_backward::desc d(algs.bwd, md, md, act.alpha, act.beta);
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

} // namespace tessera
