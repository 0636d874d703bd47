// Batch normalisation and local response normalisation through oneDNN, cached per shape
// and layout; outputs keep the input's layout. Batch norm also keeps the input's dtype:
// bfloat16 activations (and gradients) with float32 statistics, scale and shift.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;
using flags = dnnl::normalization_flags;

namespace {

const flags kScaleShift = flags::use_scale | flags::use_shift;

struct BnEntry {
    dnnl::batch_normalization_forward::primitive_desc pd;
    dnnl::batch_normalization_forward fwd;
};

// `relu`: a ReLU applied to the output inside the primitive (oneDNN's fuse_norm_relu); in
// training it writes a workspace (the ReLU's mask) for backward.
const BnEntry& bnForward(const Shape& x, Layout layout, float eps, bool training, bool relu = false,
                         DType dtype = DType::float32) {
    static thread_local PrimitiveCache<BnEntry> cache;
    std::vector<int64_t> key = {static_cast<int64_t>(layout), keyOf(eps), training, relu, static_cast<int64_t>(dtype)};
    key.insert(key.end(), x.dims().begin(), x.dims().end());
    return cache.get(key, [&] {
        return checkDnnl("batch_normalization_forward", [&] {
            flags f = training ? kScaleShift : kScaleShift | flags::use_global_stats;
            if (relu) f = f | flags::fuse_norm_relu;
            dnnl::batch_normalization_forward::desc d(training ? dnnl::prop_kind::forward_training
                                                               : dnnl::prop_kind::forward_inference,
                                                      descIn(x.dims(), layout, dnnlType(dtype)), eps, f);
            dnnl::batch_normalization_forward::primitive_desc pd(d, engine());
            return BnEntry{pd, dnnl::batch_normalization_forward(pd)};
        });
    });
}

dnnl::memory vecMem(const Tensor& t) { return memOf(plainDesc({t.numel()}), t); }

// oneDNN 2.7 normalises plain [N, C, L] data (BatchNorm1D over a sequence) in its reference
// implementation, a scalar loop 12x slower than the one it runs for [N, C, L, 1]: such data
// is viewed with that fourth dim of 1 (the same values in the same order).
bool viewedAs4d(const Shape& s, Layout layout) { return s.rank() == 3 && layout == Layout::plain; }
Shape as4d(const Shape& s) { return {s[0], s[1], s[2], 1}; }

// The forward, with the ReLU fused when `mask` is given (training: it receives the
// workspace).
Tensor bnRun(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean, const Tensor& var,
             float eps, bool training, Tensor* mask) {
    if (emulatedBfloat16(x.dtype())) { // a fused ReLU's mask is the float32 forward's
        return bnRun(x.convertedTo(DType::float32), scale, shift, mean, var, eps, training, mask)
            .convertedTo(DType::bfloat16);
    }
    if (viewedAs4d(x.shape(), x.layout())) {
        return bnRun(x.reshape(as4d(x.shape())), scale, shift, mean, var, eps, training, mask).reshape(x.shape());
    }
    const BnEntry& e = bnForward(x.shape(), x.layout(), eps, training, mask != nullptr, x.dtype());
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), x.layout());
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, memOf(descOf(x), x)}, {DNNL_ARG_DST, memOf(descOf(y), y)}, {DNNL_ARG_SCALE, vecMem(scale)},
        {DNNL_ARG_SHIFT, vecMem(shift)},     {DNNL_ARG_MEAN, vecMem(mean)},       {DNNL_ARG_VARIANCE, vecMem(var)}};
    if (mask && training) {
        const auto ws = e.pd.workspace_desc();
        *mask = Tensor::empty({static_cast<int64_t>((ws.get_size() + 3) / 4)}, DType::int32, x.device());
        args.emplace(DNNL_ARG_WORKSPACE, wrap(ws, mask->raw()));
    } else if (mask) {
        *mask = Tensor();
    }
    checkDnnl("batch_normalization_forward::execute", [&] { e.fwd.execute(stream(), args); });
    return y;
}

// The backward of a training forward; with the fused ReLU's workspace when `mask` is given.
Tensor bnBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                  const Tensor& var, float eps, const Tensor* mask, const Tensor& dscale, const Tensor& dshift) {
    if (emulatedBfloat16(x.dtype())) { // dy rounded to bfloat16 as the kernels' would be
        const Tensor dyLow = dy.convertedTo(DType::bfloat16).convertedTo(DType::float32);
        return bnBackward(x.convertedTo(DType::float32), dyLow, scale, shift, mean, var, eps, mask, dscale, dshift)
            .convertedTo(DType::bfloat16);
    }
    if (viewedAs4d(x.shape(), x.layout())) {
        const Shape s4 = as4d(x.shape());
        return bnBackward(x.reshape(s4), dy.plain().reshape(s4), scale, shift, mean, var, eps, mask, dscale, dshift)
            .reshape(x.shape());
    }
    struct BwdEntry {
        dnnl::batch_normalization_backward bwd;
        Staged diffDst;
        dnnl::memory::desc workspace;
    };
    static thread_local PrimitiveCache<BwdEntry> cache;
    const bool relu = mask != nullptr;
    std::vector<int64_t> key = {keyOf(eps), relu};
    appendKey(key, x);
    const BwdEntry& e = cache.get(key, [&] {
        const BnEntry& f = bnForward(x.shape(), x.layout(), eps, true, relu, x.dtype());
        return checkDnnl("batch_normalization_backward", [&] {
            const auto md = descOf(x);
            dnnl::batch_normalization_backward::desc d(dnnl::prop_kind::backward, md, md, eps,
                                                       relu ? kScaleShift | flags::fuse_norm_relu : kScaleShift);
            dnnl::batch_normalization_backward::primitive_desc pd(d, engine(), f.pd);
            return BwdEntry{dnnl::batch_normalization_backward(pd), Staged(pd.diff_dst_desc()),
                            relu ? f.pd.workspace_desc() : dnnl::memory::desc()};
        });
    });
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), x.layout());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, memOf(descOf(x), x)},
                                                  {DNNL_ARG_DIFF_DST, e.diffDst.from(dy)},
                                                  {DNNL_ARG_SCALE, vecMem(scale)},
                                                  {DNNL_ARG_SHIFT, vecMem(shift)},
                                                  {DNNL_ARG_MEAN, vecMem(mean)},
                                                  {DNNL_ARG_VARIANCE, vecMem(var)},
                                                  {DNNL_ARG_DIFF_SRC, memOf(descOf(dx), dx)},
                                                  {DNNL_ARG_DIFF_SCALE, vecMem(dscale)},
                                                  {DNNL_ARG_DIFF_SHIFT, vecMem(dshift)}};
    if (relu) args.emplace(DNNL_ARG_WORKSPACE, wrap(e.workspace, mask->raw()));
    checkDnnl("batch_normalization_backward::execute", [&] { e.bwd.execute(stream(), args); });
    return dx;
}

} // namespace

// x: [N, C, ...]; scale, shift, mean, var: [C] -> y in x's layout
Tensor CpuBackend::batchNormForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                    const Tensor& var, float eps, bool training) {
    return bnRun(x, scale, shift, mean, var, eps, training, nullptr);
}

Tensor CpuBackend::batchNormReluForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                        const Tensor& var, float eps, bool training, Tensor& mask) {
    return bnRun(x, scale, shift, mean, var, eps, training, &mask);
}

int64_t CpuBackend::batchNormReluMaskBytes(const Shape& x, Layout layout) {
    const BnEntry& e = bnForward(viewedAs4d(x, layout) ? as4d(x) : x, layout, 1e-5f, true,
                                 true); // the workspace's size depends on neither eps
    return static_cast<int64_t>((e.pd.workspace_desc().get_size() + 3) / 4 * 4);
}

// x, dy: [N, C, ...] -> dx in x's layout; dscale, dshift: [C] overwritten
Tensor CpuBackend::batchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& mean,
                                     const Tensor& var, float eps, const Tensor& dscale, const Tensor& dshift) {
    // oneDNN 2.6 insists on a shift argument in backward although no gradient depends on
    // it (it is only read with fused ReLU); the scale buffer stands in.
    return bnBackward(x, dy, scale, scale, mean, var, eps, nullptr, dscale, dshift);
}

Tensor CpuBackend::batchNormReluBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& shift,
                                         const Tensor& mean, const Tensor& var, float eps, const Tensor& mask,
                                         const Tensor& dscale, const Tensor& dshift) {
    return bnBackward(x, dy, scale, shift, mean, var, eps, &mask, dscale, dshift);
}

namespace {

struct LrnEntry {
    dnnl::lrn_forward::primitive_desc pd;
    dnnl::lrn_forward fwd;
};

dnnl::algorithm lrnAlg(const LrnParams& p) {
    return p.acrossChannels ? dnnl::algorithm::lrn_across_channels : dnnl::algorithm::lrn_within_channel;
}

std::vector<int64_t> lrnKey(const LrnParams& p, const Tensor& x) {
    std::vector<int64_t> key = {p.acrossChannels, p.size, keyOf(p.alpha), keyOf(p.beta), keyOf(p.k)};
    appendKey(key, x);
    return key;
}

const LrnEntry& lrnEntry(const LrnParams& p, const Tensor& x) {
    static thread_local PrimitiveCache<LrnEntry> cache;
    return cache.get(lrnKey(p, x), [&] {
        return checkDnnl("lrn_forward", [&] {
            dnnl::lrn_forward::desc d(dnnl::prop_kind::forward_training, lrnAlg(p), descOf(x), p.size, p.alpha, p.beta,
                                      p.k);
            dnnl::lrn_forward::primitive_desc pd(d, engine());
            return LrnEntry{pd, dnnl::lrn_forward(pd)};
        });
    });
}

} // namespace

// x: [N, C, ...] -> y in x's layout
Tensor CpuBackend::lrnForward(const LrnParams& p, const Tensor& x, Tensor& workspace) {
    const LrnEntry& e = lrnEntry(p, x);
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device(), x.layout());
    const auto wsDesc = e.pd.workspace_desc();
    workspace = Tensor::empty({static_cast<int64_t>((wsDesc.get_size() + 3) / 4) + 1}, DType::int32, x.device());
    checkDnnl("lrn_forward::execute", [&] {
        e.fwd.execute(stream(), {{DNNL_ARG_SRC, memOf(descOf(x), x)},
                                 {DNNL_ARG_DST, memOf(descOf(y), y)},
                                 {DNNL_ARG_WORKSPACE, wrap(wsDesc, workspace.raw())}});
    });
    return y;
}

// x, dy -> dx in x's layout
Tensor CpuBackend::lrnBackward(const LrnParams& p, const Tensor& x, const Tensor& dy, const Tensor& workspace) {
    struct BwdEntry {
        dnnl::lrn_backward bwd;
        Staged diffDst;
        dnnl::memory::desc workspace;
    };
    static thread_local PrimitiveCache<BwdEntry> cache;
    const BwdEntry& e = cache.get(lrnKey(p, x), [&] {
        const LrnEntry& f = lrnEntry(p, x);
        return checkDnnl("lrn_backward", [&] {
            dnnl::lrn_backward::desc d(lrnAlg(p), descOf(x), descOf(x), p.size, p.alpha, p.beta, p.k);
            dnnl::lrn_backward::primitive_desc pd(d, engine(), f.pd);
            return BwdEntry{dnnl::lrn_backward(pd), Staged(pd.diff_dst_desc()), f.pd.workspace_desc()};
        });
    });
    Tensor dx = Tensor::empty(x.shape(), DType::float32, x.device(), x.layout());
    checkDnnl("lrn_backward::execute", [&] {
        e.bwd.execute(stream(), {{DNNL_ARG_SRC, memOf(descOf(x), x)},
                                 {DNNL_ARG_DIFF_DST, e.diffDst.from(dy)},
                                 {DNNL_ARG_WORKSPACE, wrap(e.workspace, workspace.raw())},
                                 {DNNL_ARG_DIFF_SRC, memOf(descOf(dx), dx)}});
    });
    return dx;
}

} // namespace tessera
