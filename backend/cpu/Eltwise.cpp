// Activations through oneDNN's eltwise primitives: JIT-vectorised, exp/log included.
// Tensors are viewed as flat 1-D buffers, so one primitive serves every shape of a size.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

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
    case ActivationKind::sigmoid: return {algorithm::eltwise_logistic, algorithm::eltwise_logistic_use_dst_for_bwd, true};
    case ActivationKind::tanh: return {algorithm::eltwise_tanh, algorithm::eltwise_tanh_use_dst_for_bwd, true};
    case ActivationKind::relu: return {algorithm::eltwise_relu, algorithm::eltwise_relu_use_dst_for_bwd, true};
    case ActivationKind::leakyRelu: return {algorithm::eltwise_relu, algorithm::eltwise_relu, false};
    case ActivationKind::elu: return {algorithm::eltwise_elu, algorithm::eltwise_elu, false};
    case ActivationKind::softPlus: return {algorithm::eltwise_soft_relu, algorithm::eltwise_soft_relu, false};
    case ActivationKind::clip: return {algorithm::eltwise_clip_v2, algorithm::eltwise_clip_v2, false};
    }
    throw BackendError("CpuBackend: unknown activation");
}

std::vector<int64_t> keyOf(const ActivationParams& act, int64_t n) {
    return {static_cast<int64_t>(act.kind), dnnl_util::keyOf(act.alpha), dnnl_util::keyOf(act.beta), n};
}

struct EltwisePrims {
    dnnl::eltwise_forward::primitive_desc fwdPd;
    dnnl::eltwise_forward fwd;
};

PrimitiveCache<EltwisePrims>& forwardCache() {
    static PrimitiveCache<EltwisePrims> cache;
    return cache;
}

const EltwisePrims& forwardPrims(const ActivationParams& act, int64_t n) {
    return forwardCache().get(keyOf(act, n), [&] {
        return checkDnnl("eltwise_forward", [&] {
            auto md = plainDesc({n});
            dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_training, algsOf(act.kind).fwd, md, act.alpha,
                                          act.beta);
            dnnl::eltwise_forward::primitive_desc pd(d, engine());
            return EltwisePrims{pd, dnnl::eltwise_forward(pd)};
        });
    });
}

} // namespace

void CpuBackend::activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) {
    const int64_t n = x.numel();
    if (y.numel() != n) throw ShapeError("CpuBackend::activationForward: x and y differ in size");
    const auto& prims = forwardPrims(act, n);
    auto md = prims.fwdPd.src_desc();
    checkDnnl("eltwise_forward::execute", [&] {
        prims.fwd.execute(stream(), {{DNNL_ARG_SRC, wrap(md, x.data<float>())}, {DNNL_ARG_DST, wrap(md, y.data<float>())}});
    });
}

void CpuBackend::activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                                    const Tensor& dx) {
    const int64_t n = dy.numel();
    if (dx.numel() != n) throw ShapeError("CpuBackend::activationBackward: dy and dx differ in size");
    static PrimitiveCache<dnnl::eltwise_backward> cache;
    const EltwiseAlgs algs = algsOf(act.kind);
    const auto& bwd = cache.get(keyOf(act, n), [&] {
        return checkDnnl("eltwise_backward", [&] {
            auto md = plainDesc({n});
            dnnl::eltwise_backward::desc d(algs.bwd, md, md, act.alpha, act.beta);
            dnnl::eltwise_backward::primitive_desc pd(d, engine(), forwardPrims(act, n).fwdPd);
            return dnnl::eltwise_backward(pd);
        });
    });
    auto md = plainDesc({n});
    const Tensor& data = algs.bwdUsesDst ? y : x;
    checkDnnl("eltwise_backward::execute", [&] {
        bwd.execute(stream(), {{algs.bwdUsesDst ? DNNL_ARG_DST : DNNL_ARG_SRC, wrap(md, data.data<float>())},
                               {DNNL_ARG_DIFF_DST, wrap(md, dy.data<float>())},
                               {DNNL_ARG_DIFF_SRC, wrap(md, dx.data<float>())}});
    });
}

} // namespace tessera
