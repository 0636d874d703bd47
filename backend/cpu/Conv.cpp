// Convolution and deconvolution through oneDNN: forward, backward-data and
// backward-weights primitives, built once per shape and layout (and compute type) and
// cached. In bfloat16 (ConvParams::compute) the float32 activations, weights and output
// gradients are reordered into bfloat16 on the way in (the Staged inputs), the primitive
// runs oneDNN's bfloat16 kernels (AMX or AVX-512 BF16 where present) and writes float32.
//
// Activations are described to oneDNN with format `any`, so it picks its fastest layout
// (a channel-blocked one on AVX-512/AVX2 CPUs); outputs stay in that layout and the next
// oneDNN op reads them without a reorder. Weights stay plain in the module
// ([K, C/g, *k], PuzzleLib's order) and are reordered into the primitive's layout on
// every call, which costs their size in memory traffic, small next to the convolution.
#include <atomic>

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

namespace {

constexpr auto f32 = dnnl::memory::data_type::f32;

// The plain layout of the module's weights as oneDNN dims. Convolution weights are
// [K, C/g, *k] = (g, K/g, C/g, *k); deconvolution weights are [C, K/g, *k] =
// (g, C/g, K/g, *k), which oneDNN knows as "io" (input channels first).
md plainWeights(const ConvParams& p, const Shape& w, int64_t inC, int64_t outC) {
    const size_t sp = w.rank() - 2;
    const int64_t g = p.groups;
    dims d;
    if (g > 1) d.push_back(g);
    d.push_back(outC / g);
    d.push_back(inC / g);
    for (size_t i = 0; i < sp; ++i) d.push_back(w[2 + i]);
    if (!p.transposed) return plainDesc(d);
    static const tag io[] = {tag::bac, tag::bacd, tag::bacde};
    static const tag gio[] = {tag::acbd, tag::acbde, tag::acbdef};
    return md(d, f32, g > 1 ? gio[sp - 1] : io[sp - 1]);
}

md anyDesc(const dims& d, dnnl::memory::data_type type = f32) { return md(d, type, tag::any); }

dims dilationOf(const ConvParams& p) {
    dims d;
    for (int64_t v : p.dilation) d.push_back(v - 1); // oneDNN counts the gaps
    return d;
}

std::vector<int64_t> keyOf(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    std::vector<int64_t> k = {p.transposed, p.groups, bias, static_cast<int64_t>(x.rank()),
                              static_cast<int64_t>(p.compute)};
    for (const auto* v : {&p.stride, &p.padLo, &p.padHi, &p.dilation}) k.insert(k.end(), v->begin(), v->end());
    for (const Shape* s : {&x, &w, &y}) k.insert(k.end(), s->dims().begin(), s->dims().end());
    return k;
}

// One convolution geometry: the three primitives and the stages that feed them.
struct ConvEntry {
    dnnl::primitive fwd, bwdData, bwdWeights;
    md plainW, plainB;
    Staged fwdSrc, fwdW, bdDiffDst, bdW, bwSrc, bwDiffDst;
    md fwdDst, bdDiffSrc, bwDiffW;
    Staged diffWToPlain;
    // Gradient buffers for when the result is not written straight into the parameter's.
    mutable std::optional<dnnl::memory> diffWBuffer, diffBBuffer;
    // The output gradient backward-data last reordered (for bfloat16), and when: a
    // backward-weights call right after it on the same gradient reuses the reorder.
    mutable const void* stagedDiffDst = nullptr;
    mutable uint64_t stagedAt = 0;
};

// Convolution calls so far (each entry point counts one), to tell "right after".
std::atomic<uint64_t> convCalls{0};

// Builds the entry for one primitive family (convolution or deconvolution).
template <class Fwd, class BwdData, class BwdWeights>
ConvEntry build(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    const auto alg = p.transposed ? dnnl::algorithm::deconvolution_direct : dnnl::algorithm::convolution_direct;
    ConvEntry e;
    e.plainW = plainWeights(p, w, x[1], y[1]);
    e.plainB = plainDesc({y[1]});
    // In bfloat16 the inputs and weights (and, backwards, the output gradient) are bfloat16;
    // outputs and gradients stay float32.
    const auto low = p.compute == DType::bfloat16 ? dnnl::memory::data_type::bf16 : f32;
    const md src = anyDesc(x.dims(), low), dst = anyDesc(y.dims()), wts = anyDesc(e.plainW.dims(), low);
    const md lowDst = anyDesc(y.dims(), low), srcOut = anyDesc(x.dims()), wtsOut = anyDesc(e.plainW.dims());
    const md b = bias ? md({y[1]}, f32, tag::any) : md();
    const dims st(p.stride.begin(), p.stride.end()), pl(p.padLo.begin(), p.padLo.end()),
        pr(p.padHi.begin(), p.padHi.end()), dil = dilationOf(p);

    typename Fwd::primitive_desc fpd(
        typename Fwd::desc(dnnl::prop_kind::forward_training, alg, src, wts, b, dst, st, dil, pl, pr), engine());
    // Outputs must be in a layout a Tensor can carry; otherwise ask for plain ones.
    if (!layoutOf(fpd.dst_desc())) {
        fpd = typename Fwd::primitive_desc(typename Fwd::desc(dnnl::prop_kind::forward_training, alg, src, wts, b,
                                                              plainDesc(y.dims()), st, dil, pl, pr),
                                           engine());
    }
    e.fwd = Fwd(fpd);
    e.fwdSrc = Staged(fpd.src_desc());
    e.fwdW = Staged(fpd.weights_desc());
    e.fwdDst = fpd.dst_desc();

    typename BwdData::primitive_desc dpd(typename BwdData::desc(alg, srcOut, wts, lowDst, st, dil, pl, pr), engine(),
                                         fpd);
    if (!layoutOf(dpd.diff_src_desc())) {
        dpd = typename BwdData::primitive_desc(
            typename BwdData::desc(alg, plainDesc(x.dims()), wts, lowDst, st, dil, pl, pr), engine(), fpd);
    }
    e.bwdData = BwdData(dpd);
    e.bdDiffDst = Staged(dpd.diff_dst_desc());
    e.bdW = Staged(dpd.weights_desc());
    e.bdDiffSrc = dpd.diff_src_desc();

    typename BwdWeights::primitive_desc wpd(typename BwdWeights::desc(alg, src, wtsOut, b, lowDst, st, dil, pl, pr),
                                            engine(), fpd);
    e.bwdWeights = BwdWeights(wpd);
    e.bwSrc = Staged(wpd.src_desc());
    e.bwDiffDst = Staged(wpd.diff_dst_desc());
    e.bwDiffW = wpd.diff_weights_desc();
    e.diffWToPlain = Staged(e.plainW);
    return e;
}

const ConvEntry& entryFor(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    static PrimitiveCache<ConvEntry> cache;
    if (p.compute != DType::float32 && p.compute != DType::bfloat16) {
        throw BackendError(std::string("CpuBackend: ") + (p.transposed ? "deconvolution" : "convolution") + " in " +
                           str(p.compute) + " is not supported (float32 and bfloat16 are)");
    }
    return cache.get(keyOf(p, x, w, y, bias), [&] {
        return checkDnnl(p.transposed ? "deconvolution" : "convolution", [&] {
            if (p.transposed) {
                return build<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                             dnnl::deconvolution_backward_weights>(p, x, w, y, bias);
            }
            return build<dnnl::convolution_forward, dnnl::convolution_backward_data,
                         dnnl::convolution_backward_weights>(p, x, w, y, bias);
        });
    });
}

// dst <- alpha * src + beta * dst over n floats (beta == 0 never reads dst).
void axpbyRaw(float alpha, const float* src, float beta, float* dst, int64_t n) {
#pragma omp parallel for simd if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) dst[i] = alpha * src[i] + (beta == 0.0f ? 0.0f : beta * dst[i]);
}

} // namespace

Layout CpuBackend::convOutputLayout(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    const std::optional<Layout> l = layoutOf(entryFor(p, x, w, y, bias).fwdDst);
    return l ? *l : Layout::plain;
}

// x: [N, C, *in], w: [K, C/g, *k] (deconv: [C, K/g, *k]), b: [K] -> y: [N, K, *out]
Tensor CpuBackend::convForward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                               const Shape& yShape) {
    const ConvEntry& e = entryFor(p, x.shape(), w.shape(), yShape, b.defined());
    ++convCalls;
    Tensor y = tensorFor(e.fwdDst, yShape, x.device());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, e.fwdSrc.from(x)},
                                                  {DNNL_ARG_WEIGHTS, e.fwdW.from(memOf(e.plainW, w))},
                                                  {DNNL_ARG_DST, memOf(e.fwdDst, y)}};
    if (b.defined()) args[DNNL_ARG_BIAS] = memOf(e.plainB, b);
    checkDnnl("convolution_forward::execute", [&] { e.fwd.execute(stream(), args); });
    return y;
}

// dy: [N, K, *out], w -> dx: [N, C, *in]
Tensor CpuBackend::convBackwardData(const ConvParams& p, const Tensor& dy, const Tensor& w, const Shape& xShape) {
    const ConvEntry& e = entryFor(p, xShape, w.shape(), dy.shape(), false);
    Tensor dx = tensorFor(e.bdDiffSrc, xShape, dy.device());
    e.stagedDiffDst = dy.raw();
    e.stagedAt = ++convCalls;
    checkDnnl("convolution_backward_data::execute", [&] {
        e.bwdData.execute(stream(), {{DNNL_ARG_DIFF_DST, e.bdDiffDst.from(dy)},
                                     {DNNL_ARG_WEIGHTS, e.bdW.from(memOf(e.plainW, w))},
                                     {DNNL_ARG_DIFF_SRC, memOf(e.bdDiffSrc, dx)}});
    });
    return dx;
}

// x, dy -> dw = scale * dL/dw + momentum * dw (and db likewise)
void CpuBackend::convBackwardWeights(const ConvParams& p, const Tensor& x, const Tensor& dy, float scale,
                                     float momentum, const Tensor& dw, const Tensor& db) {
    const ConvEntry& e = entryFor(p, x.shape(), dw.shape(), dy.shape(), db.defined());
    // oneDNN overwrites its outputs: with scale 1 and momentum 0 it writes the plain
    // gradients in place; otherwise into buffers that are then blended in.
    const bool direct = scale == 1.0f && momentum == 0.0f;
    auto buffer = [](std::optional<dnnl::memory>& buf, const md& d) {
        if (!buf) buf = checkDnnl("memory", [&] { return dnnl::memory(d, engine()); });
        return *buf;
    };
    dnnl::memory diffW = direct && e.bwDiffW == e.plainW ? memOf(e.plainW, dw) : buffer(e.diffWBuffer, e.bwDiffW);
    dnnl::memory diffB = !db.defined() ? dnnl::memory()
                         : direct      ? memOf(e.plainB, db)
                                       : buffer(e.diffBBuffer, e.plainB);
    // Right after backward-data on the same gradient, its reorder into the same format is reused.
    const bool reuse = e.stagedAt == convCalls && e.stagedDiffDst == dy.raw() && e.bdDiffDst.buffer() &&
                       e.bwDiffDst.want() == e.bdDiffDst.want() && e.bdDiffDst.want() != descOf(dy);
    ++convCalls;
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, e.bwSrc.from(x)},
        {DNNL_ARG_DIFF_DST, reuse ? *e.bdDiffDst.buffer() : e.bwDiffDst.from(dy)},
        {DNNL_ARG_DIFF_WEIGHTS, diffW}};
    if (db.defined()) args[DNNL_ARG_DIFF_BIAS] = diffB;
    checkDnnl("convolution_backward_weights::execute", [&] { e.bwdWeights.execute(stream(), args); });
    if (diffW.get_data_handle() != dw.raw()) {
        dnnl::memory plain = e.diffWToPlain.from(diffW);
        axpbyRaw(scale, static_cast<const float*>(plain.get_data_handle()), momentum, dw.data<float>(), dw.numel());
    }
    if (db.defined() && !direct) {
        axpbyRaw(scale, static_cast<const float*>(diffB.get_data_handle()), momentum, db.data<float>(), db.numel());
    }
}

} // namespace tessera
