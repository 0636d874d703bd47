// Pooling through oneDNN (max, average with or without the padding counted), cached per
// shape and layout; outputs keep the input's layout. The argmax used by unpooling is a
// plain loop, since oneDNN's max-pooling workspace is opaque.

#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;
using dims = dnnl::memory::dims;

namespace {

dnnl::algorithm algOf(PoolKind kind) {
    switch (kind) {
    case PoolKind::max: return dnnl::algorithm::pooling_max;
    case PoolKind::avgWithPad: return dnnl::algorithm::pooling_avg_include_padding;
    case PoolKind::avgNoPad: return dnnl::algorithm::pooling_avg_exclude_padding;
    }
    throw BackendError("CpuBackend: unknown pooling kind");
}

std::vector<int64_t> keyOf(const PoolParams& p, const Shape& x, Layout layout, bool training) {
    std::vector<int64_t> k = {static_cast<int64_t>(p.kind), static_cast<int64_t>(layout), training};
    for (const auto* v : {&p.kernel, &p.stride, &p.padLo, &p.padHi}) k.insert(k.end(), v->begin(), v->end());
    k.insert(k.end(), x.dims().begin(), x.dims().end());
    return k;
}

struct PoolEntry {
    dnnl::pooling_forward::primitive_desc pd;
    dnnl::pooling_forward fwd;
};

dnnl::pooling_forward::desc forwardDesc(const PoolParams& p, const Shape& x, const Shape& y, Layout layout,
                                        bool training) {
    return dnnl::pooling_forward::desc(training ? dnnl::prop_kind::forward_training
                                                : dnnl::prop_kind::forward_inference,
                                       algOf(p.kind), descIn(x.dims(), layout), descIn(y.dims(), layout),
                                       dims(p.stride), dims(p.kernel), dims(p.padLo), dims(p.padHi));
}

const PoolEntry& forwardEntry(const PoolParams& p, const Shape& x, const Shape& y, Layout layout, bool training) {
    static PrimitiveCache<PoolEntry> cache;
    return cache.get(keyOf(p, x, layout, training), [&] {
        return checkDnnl("pooling_forward", [&] {
            dnnl::pooling_forward::primitive_desc pd(forwardDesc(p, x, y, layout, training), engine());
            return PoolEntry{pd, dnnl::pooling_forward(pd)};
        });
    });
}

} // namespace

// x: [N, C, *in] -> y: [N, C, *out], x's layout
Tensor CpuBackend::poolForward(const PoolParams& p, const Tensor& x, const Shape& yShape, bool training,
                               Tensor& workspace) {
    const bool keep = training && p.kind == PoolKind::max;
    const PoolEntry& e = forwardEntry(p, x.shape(), yShape, x.layout(), keep);
    Tensor y = Tensor::empty(yShape, DType::float32, x.device(), x.layout());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, memOf(descOf(x), x)},
                                                  {DNNL_ARG_DST, memOf(descOf(y), y)}};
    if (keep) {
        const size_t bytes = e.pd.workspace_desc().get_size();
        workspace = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::int32, x.device());
        args[DNNL_ARG_WORKSPACE] = wrap(e.pd.workspace_desc(), workspace.raw());
    }
    checkDnnl("pooling_forward::execute", [&] { e.fwd.execute(stream(), args); });
    return y;
}

// dy: [N, C, *out] -> dx: [N, C, *in] in xLayout
Tensor CpuBackend::poolBackward(const PoolParams& p, const Tensor& dy, const Tensor& workspace, const Shape& xShape,
                                Layout xLayout) {
    const bool keep = p.kind == PoolKind::max;
    if (keep && !workspace.defined()) {
        throw BackendError("CpuBackend::poolBackward: max pooling backward needs the workspace of a training forward");
    }
    struct BwdEntry {
        dnnl::pooling_backward bwd;
        Staged diffDst;
        dnnl::memory::desc workspace;
    };
    static PrimitiveCache<BwdEntry> cache;
    const BwdEntry& e = cache.get(keyOf(p, xShape, xLayout, keep), [&] {
        const PoolEntry& f = forwardEntry(p, xShape, dy.shape(), xLayout, keep);
        return checkDnnl("pooling_backward", [&] {
            dnnl::pooling_backward::desc d(algOf(p.kind), descIn(xShape.dims(), xLayout),
                                           descIn(dy.shape().dims(), xLayout), dims(p.stride), dims(p.kernel),
                                           dims(p.padLo), dims(p.padHi));
            dnnl::pooling_backward::primitive_desc pd(d, engine(), f.pd);
            return BwdEntry{dnnl::pooling_backward(pd), Staged(pd.diff_dst_desc()), f.pd.workspace_desc()};
        });
    });
    Tensor dx = Tensor::empty(xShape, DType::float32, dy.device(), xLayout);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_DIFF_DST, e.diffDst.from(dy)},
                                                  {DNNL_ARG_DIFF_SRC, memOf(descOf(dx), dx)}};
    if (keep) args[DNNL_ARG_WORKSPACE] = wrap(e.workspace, workspace.raw());
    checkDnnl("pooling_backward::execute", [&] { e.bwd.execute(stream(), args); });
    return dx;
}

// x: [N, C, *in] -> idx: [N, C, *out] int32, flat index in the (n, c) plane of each
// window's first maximum (padding never wins)
void CpuBackend::maxPoolIndices(const PoolParams& p, const Tensor& x, const Tensor& idx) {
    const Shape& xs = x.shape();
    const Shape& ys = idx.shape();
    const size_t sp = xs.rank() - 2;
    if (sp < 1 || sp > 3) throw ShapeError("CpuBackend::maxPoolIndices: needs 1 to 3 spatial dims, got " + xs.str());
    const element::Window3 w = element::window3(p, xs, ys);
    const int64_t planes = xs[0] * xs[1], inPlane = w.in[0] * w.in[1] * w.in[2],
                  outPlane = w.out[0] * w.out[1] * w.out[2];
    const float* px = x.data<float>();
    int32_t* pi = idx.data<int32_t>();
#pragma omp parallel for
    for (int64_t pl = 0; pl < planes; ++pl) {
        const float* plane = px + pl * inPlane;
        int32_t* res = pi + pl * outPlane;
        float best = 0.0f;
        for (int64_t o = 0; o < outPlane; ++o) {
            const int64_t od = o / (w.out[1] * w.out[2]), oh = o / w.out[2] % w.out[1], ow = o % w.out[2];
            res[o] = static_cast<int32_t>(element::windowArgmax(plane, w, od, oh, ow, best));
        }
    }
}

} // namespace tessera
