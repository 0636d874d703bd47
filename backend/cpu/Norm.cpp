// Batch normalisation and local response normalisation through oneDNN, cached per shape
// and layout; outputs keep the input's layout. Batch norm also keeps the input's dtype:
// bfloat16 activations (and gradients) with float32 statistics, scale and shift.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/Clones.h"
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
    // oneDNN's reference (scalar) implementation, 10-40x slower than the loops below, which
    // run instead: chosen for every within-channel LRN and, on plain data, for the
    // across-channel backward (and below AVX2 for the forward too).
    bool reference = false;
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
            return LrnEntry{pd, dnnl::lrn_forward(pd), isReference(pd)};
        });
    });
}

// ---- LRN as loops on plain [N, C, H, W] float32 ----------------------------------------
// s = k + alpha / n * (the sum of x^2 over the window), zero outside; y = x s^-beta;
// backward, for the odd (symmetric) windows LRN takes, the window's adjoint is itself:
// dx = dy s^-beta - 2 beta alpha / n * x * (the window's sum of dy x s^(-beta - 1)).
// Nothing is kept between forward and backward: backward recomputes s.

struct LrnDims {
    int64_t n, c, h, w;
};

// s^-beta, with beta 0.75 (AlexNet's, the usual) as 1 / (sqrt(s) sqrt(sqrt(s))).
TESSERA_CPU_CLONES void powNegBeta(const float* s, float* r, int64_t count, float beta) {
    if (beta == 0.75f) {
        for (int64_t i = 0; i < count; ++i) {
            const float q = std::sqrt(s[i]);
            r[i] = 1.0f / (q * std::sqrt(q));
        }
    } else {
        for (int64_t i = 0; i < count; ++i) r[i] = std::pow(s[i], -beta);
    }
}

// out[p] = sum of in[c'] [p] over the channels c' of the window around c, for `count`
// positions of rows `stride` apart; `square` sums in^2.
TESSERA_CPU_CLONES void channelWindow(const float* in, int64_t stride, int64_t c, int64_t channels, int64_t half,
                                      bool square, int64_t count, float* __restrict out) {
    std::fill_n(out, count, 0.0f);
    for (int64_t cc = std::max<int64_t>(0, c - half); cc <= std::min(channels - 1, c + half); ++cc) {
        const float* __restrict row = in + cc * stride;
        if (square)
            for (int64_t i = 0; i < count; ++i) out[i] += row[i] * row[i];
        else
            for (int64_t i = 0; i < count; ++i) out[i] += row[i];
    }
}

// out = the size x size window's sum (zero outside) of one h x w plane (of in^2 with
// `square`), as a sum along rows then one along columns; `rows` is an h x w scratch plane.
TESSERA_CPU_CLONES void planeWindow(const float* __restrict in, int64_t h, int64_t w, int64_t half, bool square,
                                    float* __restrict rows, float* __restrict out) {
    for (int64_t i = 0; i < h; ++i) {
        const float* __restrict x = in + i * w;
        float* __restrict r = rows + i * w;
        for (int64_t j = 0; j < w; ++j) {
            float sum = 0.0f;
            for (int64_t jj = std::max<int64_t>(0, j - half); jj <= std::min(w - 1, j + half); ++jj)
                sum += square ? x[jj] * x[jj] : x[jj];
            r[j] = sum;
        }
    }
    for (int64_t i = 0; i < h; ++i) {
        float* __restrict o = out + i * w;
        std::fill_n(o, w, 0.0f);
        for (int64_t ii = std::max<int64_t>(0, i - half); ii <= std::min(h - 1, i + half); ++ii) {
            const float* __restrict r = rows + ii * w;
            for (int64_t j = 0; j < w; ++j) o[j] += r[j];
        }
    }
}

// Positions per block of the across-channel loops (their scratch: a few blocks per channel).
constexpr int64_t kLrnBlock = 512;

void lrnLoopsForward(const LrnParams& p, const LrnDims& d, const float* x, float* y) {
    const int64_t hw = d.h * d.w, half = p.size / 2;
    const float a = p.alpha / static_cast<float>(p.acrossChannels ? p.size : p.size * p.size);
    if (p.acrossChannels) {
        const int64_t blocks = (hw + kLrnBlock - 1) / kLrnBlock;
#pragma omp parallel
        {
            std::vector<float> s(kLrnBlock);
#pragma omp for
            for (int64_t task = 0; task < d.n * d.c * blocks; ++task) {
                const int64_t b = task % blocks, nc = task / blocks, n = nc / d.c, c = nc % d.c;
                const int64_t p0 = b * kLrnBlock, len = std::min(kLrnBlock, hw - p0);
                channelWindow(x + n * d.c * hw + p0, hw, c, d.c, half, true, len, s.data());
                for (int64_t i = 0; i < len; ++i) s[i] = p.k + a * s[i];
                powNegBeta(s.data(), s.data(), len, p.beta);
                const float* xr = x + nc * hw + p0;
                float* yr = y + nc * hw + p0;
                for (int64_t i = 0; i < len; ++i) yr[i] = xr[i] * s[i];
            }
        }
        return;
    }
#pragma omp parallel
    {
        std::vector<float> rows(hw), s(hw);
#pragma omp for
        for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
            planeWindow(x + nc * hw, d.h, d.w, half, true, rows.data(), s.data());
            for (int64_t i = 0; i < hw; ++i) s[i] = p.k + a * s[i];
            powNegBeta(s.data(), s.data(), hw, p.beta);
            for (int64_t i = 0; i < hw; ++i) y[nc * hw + i] = x[nc * hw + i] * s[i];
        }
    }
}

void lrnLoopsBackward(const LrnParams& p, const LrnDims& d, const float* x, const float* dy, float* dx) {
    const int64_t hw = d.h * d.w, half = p.size / 2;
    const float a = p.alpha / static_cast<float>(p.acrossChannels ? p.size : p.size * p.size);
    const float twoAB = 2.0f * a * p.beta;
    if (p.acrossChannels) {
        // per sample and block of positions: r = s^-beta and t = dy x r / s for every
        // channel, then each channel's dx from the window's sum of t
        const int64_t blocks = (hw + kLrnBlock - 1) / kLrnBlock;
#pragma omp parallel
        {
            std::vector<float> r(static_cast<size_t>(d.c * kLrnBlock)), t(static_cast<size_t>(d.c * kLrnBlock)),
                sum(kLrnBlock);
#pragma omp for
            for (int64_t task = 0; task < d.n * blocks; ++task) {
                const int64_t n = task / blocks, p0 = task % blocks * kLrnBlock, len = std::min(kLrnBlock, hw - p0);
                const float* xs = x + n * d.c * hw + p0;
                const float* dys = dy + n * d.c * hw + p0;
                for (int64_t c = 0; c < d.c; ++c) {
                    float* rc = r.data() + c * kLrnBlock;
                    float* tc = t.data() + c * kLrnBlock;
                    channelWindow(xs, hw, c, d.c, half, true, len, tc);
                    for (int64_t i = 0; i < len; ++i) tc[i] = p.k + a * tc[i];
                    powNegBeta(tc, rc, len, p.beta);
                    const float* xr = xs + c * hw;
                    const float* dyr = dys + c * hw;
                    for (int64_t i = 0; i < len; ++i) tc[i] = dyr[i] * xr[i] * rc[i] / tc[i];
                }
                for (int64_t c = 0; c < d.c; ++c) {
                    channelWindow(t.data(), kLrnBlock, c, d.c, half, false, len, sum.data());
                    const float* rc = r.data() + c * kLrnBlock;
                    const float* xr = xs + c * hw;
                    const float* dyr = dys + c * hw;
                    float* dxr = dx + (n * d.c + c) * hw + p0;
                    for (int64_t i = 0; i < len; ++i) dxr[i] = dyr[i] * rc[i] - twoAB * xr[i] * sum[i];
                }
            }
        }
        return;
    }
#pragma omp parallel
    {
        std::vector<float> rows(hw), s(hw), r(hw), t(hw), sum(hw);
#pragma omp for
        for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
            const float* xr = x + nc * hw;
            const float* dyr = dy + nc * hw;
            planeWindow(xr, d.h, d.w, half, true, rows.data(), s.data());
            for (int64_t i = 0; i < hw; ++i) s[i] = p.k + a * s[i];
            powNegBeta(s.data(), r.data(), hw, p.beta);
            for (int64_t i = 0; i < hw; ++i) t[i] = dyr[i] * xr[i] * r[i] / s[i];
            planeWindow(t.data(), d.h, d.w, half, false, rows.data(), sum.data());
            float* dxr = dx + nc * hw;
            for (int64_t i = 0; i < hw; ++i) dxr[i] = dyr[i] * r[i] - twoAB * xr[i] * sum[i];
        }
    }
}

// Whether the loops take x: plain float32 [N, C, H, W] and an odd window.
bool lrnLoopsTake(const LrnParams& p, const Tensor& x) {
    return x.isPlain() && x.dtype() == DType::float32 && x.shape().rank() == 4 && p.size % 2 == 1;
}

LrnDims lrnDims(const Tensor& x) { return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]}; }

} // namespace

// x: [N, C, ...] -> y in x's layout
Tensor CpuBackend::lrnForward(const LrnParams& p, const Tensor& x, Tensor& workspace) {
    const LrnEntry& e = lrnEntry(p, x);
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device(), x.layout());
    if (e.reference && lrnLoopsTake(p, x)) {
        workspace = Tensor(); // backward recomputes what it needs
        lrnLoopsForward(p, lrnDims(x), x.data<float>(), y.data<float>());
        return y;
    }
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
        bool reference = false;
    };
    // oneDNN 2.7 crashes building the across-channel backward of a 1-channel window on
    // channels-last data: the loops run on plain copies instead
    if (p.acrossChannels && p.size == 1 && x.layout() == Layout::channelsLast && x.dtype() == DType::float32) {
        const Tensor xp = x.plain(), dyp = dy.plain();
        Tensor dxp = Tensor::empty(x.shape(), DType::float32, x.device());
        lrnLoopsBackward(p, lrnDims(x), xp.data<float>(), dyp.data<float>(), dxp.data<float>());
        return dxp.toLayout(Layout::channelsLast);
    }
    static thread_local PrimitiveCache<BwdEntry> cache;
    const BwdEntry& e = cache.get(lrnKey(p, x), [&] {
        const LrnEntry& f = lrnEntry(p, x);
        return checkDnnl("lrn_backward", [&] {
            dnnl::lrn_backward::desc d(lrnAlg(p), descOf(x), descOf(x), p.size, p.alpha, p.beta, p.k);
            dnnl::lrn_backward::primitive_desc pd(d, engine(), f.pd);
            return BwdEntry{dnnl::lrn_backward(pd), Staged(pd.diff_dst_desc()), f.pd.workspace_desc(), isReference(pd)};
        });
    });
    Tensor dx = Tensor::empty(x.shape(), DType::float32, x.device(), x.layout());
    // the loops' forward left no workspace; oneDNN's reference backward is slower than them
    if ((e.reference || !workspace.defined()) && lrnLoopsTake(p, x)) {
        const Tensor g = dy.layout() == x.layout() ? dy : dy.plain();
        lrnLoopsBackward(p, lrnDims(x), x.data<float>(), g.data<float>(), dx.data<float>());
        return dx;
    }
    checkDnnl("lrn_backward::execute", [&] {
        e.bwd.execute(stream(), {{DNNL_ARG_SRC, memOf(descOf(x), x)},
                                 {DNNL_ARG_DIFF_DST, e.diffDst.from(dy)},
                                 {DNNL_ARG_WORKSPACE, wrap(e.workspace, workspace.raw())},
                                 {DNNL_ARG_DIFF_SRC, memOf(descOf(dx), dx)}});
    });
    return dx;
}

} // namespace tessera
