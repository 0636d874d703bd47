// Convolution and deconvolution through oneDNN: forward, backward-data and
// backward-weights primitives, built once per shape and layout (and compute type) and
// cached. In bfloat16 (ConvParams::compute) the float32 activations, weights and output
// gradients are reordered into bfloat16 on the way in (the Staged inputs), the primitive
// runs oneDNN's bfloat16 kernels (AMX or AVX-512 BF16 where present) and writes float32.
// On a CPU without bfloat16 kernels (AVX2 only) the stages round to bfloat16 instead and
// the float32 kernels run (CpuBackend::bfloat16Kernels).
//
// The backward passes of a bfloat16 2-D convolution can instead run as GEMMs on oneDNN's
// matmul: backward-weights as an im2col of the bfloat16 input and dW [K, kh kw C] =
// dY^T [K, N Ho Wo] x col [N Ho Wo, kh kw C]; backward-data as dcol = dY x W and a col2im. oneDNN 2.6's AMX
// backward kernels are slow on small output planes (a 512-channel 4x4 layer's
// backward-weights ran at a third of its forward's rate), where the GEMMs run at matmul
// speed; CpuBackend::convBackwardAlgo says when they are used.
//
// With bfloat16 activations (CpuBackend::bfloat16Activations) a bfloat16 convolution writes
// its output and its input gradient in bfloat16, and reads bfloat16 inputs and output
// gradients as they come: the float32 conversions happen only where a float32 layer
// meets a bfloat16 one. Otherwise outputs and gradients are float32, and a training
// bfloat16 convolution (ConvParams::state set) keeps its input's bfloat16 reorder from
// forward (KeptInput) for backward-weights instead of converting the input again; it is
// released once read.
//
// Activations are described to oneDNN with format `any`, so it picks its fastest layout
// (a channel-blocked one on AVX-512/AVX2 CPUs); outputs stay in that layout and the next
// oneDNN op reads them without a reorder. Weights stay plain in the module
// ([K, C/g, *k], PuzzleLib's order) and are reordered into the primitive's layout on
// every call, which costs their size in memory traffic, small next to the convolution.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

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

std::atomic<bool>& lowActivationsSetting() {
    static std::atomic<bool> on{[] {
        const char* env = std::getenv("TESSERA_BF16_ACTIVATIONS");
        const std::string v = env ? env : "";
        if (!v.empty() && v != "0" && v != "1") {
            throw BackendError("TESSERA_BF16_ACTIVATIONS=" + v + ": expected 1 or 0");
        }
        return v != "0";
    }()};
    return on;
}

// Whether this convolution writes bfloat16 outputs and input gradients (see the file comment).
bool lowActivations(const ConvParams& p) {
    return p.compute == DType::bfloat16 && bfloat16Kernels() && lowActivationsSetting().load();
}

std::vector<int64_t> keyOf(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    std::vector<int64_t> k = {
        p.transposed,     p.groups, bias, static_cast<int64_t>(x.rank()), static_cast<int64_t>(p.compute),
        lowActivations(p)};
    for (const auto* v : {&p.stride, &p.padLo, &p.padHi, &p.dilation}) k.insert(k.end(), v->begin(), v->end());
    for (const Shape* s : {&x, &w, &y}) k.insert(k.end(), s->dims().begin(), s->dims().end());
    return k;
}

// Backward-weights as a GEMM (see the file comment): the matmul, its staged operands and
// the bfloat16 im2col buffer, built on first use. The im2col's columns run (ky, kx, c), so
// each window position is one contiguous copy of a channels-last pixel; the product
// dW' [K, kh kw C] is the weights in the (K, kh, kw, C) order, reordered into the plain
// weights' (K, C, kh, kw).
struct GemmWeights {
    dnnl::matmul prim;
    md dyT;               // dY^T [K, M] over a channels-last float32 dy
    Staged nhwcX, nhwcDy; // x in channels-last bfloat16; dy in channels-last float32
    Staged a;             // dY^T in the matmul's bfloat16 layout
    dnnl::memory col;     // [M, kh kw C] bfloat16
    dnnl::memory product; // dW' [K, kh kw C] float32
    Staged toPlain;       // dW' into the plain weights' layout
};

// Backward-data as a GEMM and a col2im: dcol [M, C kh kw] = dY [M, K] x W [K, C kh kw],
// then each column entry added into the input pixel it came from.
struct GemmData {
    dnnl::matmul prim;
    md dyMat, wMat;    // dY [M, K] over a channels-last float32 dy; W [K, C kh kw], the plain weights
    Staged nhwcDy, a;  // dy in channels-last float32; dY as the matmul wants it
    Staged w;          // W in plain bfloat16 (a plain reorder: several times faster than into a blocked layout)
    dnnl::memory dcol; // [M, C kh kw] float32
};

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
    mutable std::optional<GemmWeights> gemmWeights;
    mutable std::optional<GemmData> gemmData;
    // The forward with a ReLU post-op (ConvParams::relu), built on first use.
    mutable std::optional<dnnl::primitive> fwdRelu;
};

// A training layer's input in the forward primitive's bfloat16 source descriptor, made by
// its forward for its backward-weights (ConvParams::state). The bytes come from Tessera's
// allocator, so memoryStats and the memory plan (convKeptBytes) count them.
struct KeptInput final : BackendState {
    Tensor bytes;               // desc.get_size() bytes
    md desc;                    // the forward primitive's source descriptor
    const void* from = nullptr; // the float32 input it was made from, and that input's descriptor
    md fromDesc;
};

// Convolution calls so far (each entry point counts one), to tell "right after".
thread_local uint64_t convCalls = 0;

// Builds the entry for one primitive family (convolution or deconvolution).
template <class Fwd, class BwdData, class BwdWeights>
ConvEntry build(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    const auto alg = p.transposed ? dnnl::algorithm::deconvolution_direct : dnnl::algorithm::convolution_direct;
    ConvEntry e;
    e.plainW = plainWeights(p, w, x[1], y[1]);
    e.plainB = plainDesc({y[1]});
    // In bfloat16 the inputs and weights (and, backwards, the output gradient) are bfloat16;
    // outputs and gradients are float32, or bfloat16 with bfloat16 activations.
    // Without bfloat16 kernels (CpuBackend::bfloat16Kernels) the stages round to bfloat16
    // and the float32 kernels run.
    const auto low = p.compute == DType::bfloat16 ? lowType() : f32;
    const auto out = lowActivations(p) ? low : f32;
    const bool emulate = p.compute == DType::bfloat16 && low == f32;
    const md src = anyDesc(x.dims(), low), dst = anyDesc(y.dims(), out), wts = anyDesc(e.plainW.dims(), low);
    const md lowDst = anyDesc(y.dims(), low), srcOut = anyDesc(x.dims(), out), wtsOut = anyDesc(e.plainW.dims());
    const md b = bias ? md({y[1]}, f32, tag::any) : md();
    const dims st(p.stride.begin(), p.stride.end()), pl(p.padLo.begin(), p.padLo.end()),
        pr(p.padHi.begin(), p.padHi.end()), dil = dilationOf(p);

    typename Fwd::primitive_desc fpd(
        typename Fwd::desc(dnnl::prop_kind::forward_training, alg, src, wts, b, dst, st, dil, pl, pr), engine());
    // Outputs must be in a layout a Tensor can carry; otherwise ask for plain ones.
    if (!layoutOf(fpd.dst_desc())) {
        fpd = typename Fwd::primitive_desc(typename Fwd::desc(dnnl::prop_kind::forward_training, alg, src, wts, b,
                                                              plainDesc(y.dims(), out), st, dil, pl, pr),
                                           engine());
    }
    e.fwd = Fwd(fpd);
    e.fwdSrc = Staged(fpd.src_desc(), emulate);
    e.fwdW = Staged(fpd.weights_desc(), emulate);
    e.fwdDst = fpd.dst_desc();

    typename BwdData::primitive_desc dpd(typename BwdData::desc(alg, srcOut, wts, lowDst, st, dil, pl, pr), engine(),
                                         fpd);
    if (!layoutOf(dpd.diff_src_desc())) {
        dpd = typename BwdData::primitive_desc(
            typename BwdData::desc(alg, plainDesc(x.dims(), out), wts, lowDst, st, dil, pl, pr), engine(), fpd);
    }
    e.bwdData = BwdData(dpd);
    e.bdDiffDst = Staged(dpd.diff_dst_desc(), emulate);
    e.bdW = Staged(dpd.weights_desc(), emulate);
    e.bdDiffSrc = dpd.diff_src_desc();

    typename BwdWeights::primitive_desc wpd(typename BwdWeights::desc(alg, src, wtsOut, b, lowDst, st, dil, pl, pr),
                                            engine(), fpd);
    e.bwdWeights = BwdWeights(wpd);
    e.bwSrc = Staged(wpd.src_desc(), emulate);
    e.bwDiffDst = Staged(wpd.diff_dst_desc(), emulate);
    e.bwDiffW = wpd.diff_weights_desc();
    e.diffWToPlain = Staged(e.plainW);
    return e;
}

const ConvEntry& entryFor(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    static thread_local PrimitiveCache<ConvEntry> cache;
    if (p.compute != DType::float32 && p.compute != DType::bfloat16) {
        throw BackendError(std::string("CpuBackend: ") + (p.transposed ? "deconvolution" : "convolution") + " in " +
                           str(p.compute) +
                           " is not supported on the CPU (float32 and bfloat16 are; float16 runs on CUDA devices)");
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

// The im2col of x (channels-last bfloat16 [N, H, W, C]) for a 2-D convolution: row
// (n, oy, ox), column (ky, kx, c); zero where the window is over the padding.
void im2colLast(const uint16_t* x, const Shape& xs, const ConvParams& p, int64_t kh, int64_t kw, int64_t Ho, int64_t Wo,
                uint16_t* col) {
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], CK = C * kh * kw;
    const auto bytes = static_cast<size_t>(C) * sizeof(uint16_t);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t oy = 0; oy < Ho; ++oy) {
            for (int64_t ox = 0; ox < Wo; ++ox) {
                uint16_t* out = col + ((n * Ho + oy) * Wo + ox) * CK;
                for (int64_t ky = 0; ky < kh; ++ky) {
                    const int64_t iy = oy * p.stride[0] - p.padLo[0] + ky;
                    for (int64_t kx = 0; kx < kw; ++kx, out += C) {
                        const int64_t ix = ox * p.stride[1] - p.padLo[1] + kx;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) {
                            std::memset(out, 0, bytes);
                        } else {
                            std::memcpy(out, x + ((n * H + iy) * W + ix) * C, bytes);
                        }
                    }
                }
            }
        }
    }
}

// dx (channels-last [N, H, W, C], zeroed here) <- the col2im of dcol [N Ho Wo, C kh kw]:
// every column entry added into the input pixel its window position covers.
void col2im(const float* dcol, const Shape& xs, const ConvParams& p, int64_t kh, int64_t kw, int64_t Ho, int64_t Wo,
            float* dx) {
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], KK = kh * kw, CK = C * KK;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) { // each image's pixels are its own: no races
        float* img = dx + n * H * W * C;
        std::fill(img, img + H * W * C, 0.0f);
        for (int64_t oy = 0; oy < Ho; ++oy) {
            for (int64_t ox = 0; ox < Wo; ++ox) {
                const float* row = dcol + ((n * Ho + oy) * Wo + ox) * CK;
                for (int64_t ky = 0; ky < kh; ++ky) {
                    const int64_t iy = oy * p.stride[0] - p.padLo[0] + ky;
                    if (iy < 0 || iy >= H) continue;
                    for (int64_t kx = 0; kx < kw; ++kx) {
                        const int64_t ix = ox * p.stride[1] - p.padLo[1] + kx;
                        if (ix < 0 || ix >= W) continue;
                        float* out = img + (iy * W + ix) * C;
                        const float* in = row + ky * kw + kx;
                        for (int64_t c = 0; c < C; ++c) out[c] += in[c * KK];
                    }
                }
            }
        }
    }
}

bool cpuHasAmx() {
    static const bool amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
    return amx;
}

// AVX-512 BF16 without AMX (Zen 4 and 5, Cooper Lake): oneDNN's avx512_core_bf16 kernels.
bool cpuHasAvx512Bf16() {
    static const bool bf16 = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_bf16;
    return bf16;
}

ConvBackwardAlgo algoFromEnvironment() {
    const char* env = std::getenv("TESSERA_CONV_BACKWARD_ALGO");
    const std::string v = env ? env : "";
    if (v == "direct") return ConvBackwardAlgo::direct;
    if (v == "gemm") return ConvBackwardAlgo::gemm;
    if (!v.empty() && v != "auto") {
        throw BackendError("TESSERA_CONV_BACKWARD_ALGO=" + v + ": expected auto, direct or gemm");
    }
    return ConvBackwardAlgo::automatic;
}

std::atomic<ConvBackwardAlgo>& backwardAlgo() {
    static std::atomic<ConvBackwardAlgo> algo{algoFromEnvironment()};
    return algo;
}

// The choice setConvBackwardAlgo forces, if any: true for the GEMMs, false for oneDNN's.
std::optional<bool> forcedGemm() {
    switch (backwardAlgo().load()) {
    case ConvBackwardAlgo::direct: return false;
    case ConvBackwardAlgo::gemm: return true;
    case ConvBackwardAlgo::automatic: break;
    }
    return std::nullopt;
}

// Whether a convolution's backward passes can run as GEMMs: bfloat16 on a CPU with
// bfloat16 kernels, 2-D, one group, no dilation, not transposed.
bool gemmCandidate(const ConvParams& p, const Shape& x) {
    if (p.compute != DType::bfloat16 || x.rank() != 4 || p.groups != 1 || p.transposed) return false;
    if (!bfloat16Kernels()) return false;
    for (int64_t d : p.dilation) {
        if (d != 1) return false;
    }
    return true;
}

// Whether backward-weights runs as a GEMM: bfloat16, 2-D, one group, no dilation, not
// transposed; automatically where oneDNN's kernel was measured slower (tools/bench Conv
// rows, batch 64). With AMX (Sapphire Rapids): output planes of at most 16 pixels, and
// strided convolutions with at most 64 output pixels or a 1x1 kernel (3x3 stride-1 layers
// of 8x8 and more run faster in oneDNN). With AVX-512 BF16 and no AMX (Zen 5): output
// planes of at most 16 pixels (512->512 3x3 at 4x4 7.3 -> 6.0 ms, 256->512 3x3/2 6.9 ->
// 3.9 ms; every larger plane ran slower as a GEMM). Elsewhere oneDNN's kernels.
bool backwardWeightsByGemm(const ConvParams& p, const Shape& x, const Shape& w, const Shape& dy) {
    if (!gemmCandidate(p, x)) return false;
    if (const std::optional<bool> forced = forcedGemm()) return *forced;
    const int64_t pixels = dy[2] * dy[3];
    const bool strided = p.stride[0] > 1 || p.stride[1] > 1, pointwise = w[2] == 1 && w[3] == 1;
    if (cpuHasAvx512Bf16()) return pixels <= 16;
    return cpuHasAmx() && (pixels <= 16 || (strided && (pixels <= 64 || pointwise)));
}

// Whether backward-data runs as a GEMM: as for backward-weights, automatically where
// oneDNN's kernel was measured slower. With AMX: output planes of at most 16 pixels, and
// strided 1x1 convolutions. With AVX-512 BF16 and no AMX (Zen 5): strided 3x3 (not 1x1)
// convolutions to at most 16 pixels (256->512 3x3/2 4.3 -> 3.5 ms; the stride-1 4x4 layer
// ran slower, 4.0 -> 5.6 ms).
bool gemmData(const ConvParams& p, const Shape& x, const Shape& w, const Shape& dy) {
    if (!gemmCandidate(p, x)) return false;
    if (const std::optional<bool> forced = forcedGemm()) return *forced;
    const bool strided = p.stride[0] > 1 || p.stride[1] > 1, pointwise = w[2] == 1 && w[3] == 1;
    if (cpuHasAvx512Bf16()) return dy[2] * dy[3] <= 16 && strided && !pointwise;
    return cpuHasAmx() && (dy[2] * dy[3] <= 16 || (strided && pointwise));
}

GemmData buildGemmData(const Shape& w, const Shape& dy) {
    using dt = dnnl::memory::data_type;
    const int64_t M = dy[0] * dy[2] * dy[3], K = dy[1], CK = w.numel() / w[0];
    GemmData g;
    g.nhwcDy = Staged(descIn(dy.dims(), Layout::channelsLast));
    g.dyMat = md({M, K}, f32, tag::ab);
    const md dcol({M, CK}, f32, tag::ab);
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(md({M, K}, dt::bf16, tag::any), md({K, CK}, dt::bf16, tag::ab), dcol), engine());
    g.prim = dnnl::matmul(pd);
    g.a = Staged(pd.src_desc());
    g.w = Staged(pd.weights_desc());
    g.wMat = md({K, CK}, f32, tag::ab);
    g.dcol = dnnl::memory(dcol, engine());
    return g;
}

GemmWeights buildGemmWeights(const Shape& x, const Shape& w, const Shape& dy) {
    using dt = dnnl::memory::data_type;
    const int64_t M = dy[0] * dy[2] * dy[3], K = dy[1], CK = w.numel() / w[0];
    GemmWeights g;
    g.nhwcX = Staged(descIn(x.dims(), Layout::channelsLast, dt::bf16));
    g.nhwcDy = Staged(descIn(dy.dims(), Layout::channelsLast));
    g.dyT = md({K, M}, f32, dims{1, K});
    const md col({M, CK}, dt::bf16, tag::ab), product({K, CK}, f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md({K, M}, dt::bf16, tag::any), col, product), engine());
    g.prim = dnnl::matmul(pd);
    g.a = Staged(pd.src_desc());
    g.col = dnnl::memory(col, engine());
    g.product = dnnl::memory(product, engine());
    g.toPlain = Staged(plainDesc(w.dims()));
    return g;
}

// dst <- alpha * src + beta * dst over n floats (beta == 0 never reads dst).
void axpbyRaw(float alpha, const float* src, float beta, float* dst, int64_t n) {
#pragma omp parallel for simd if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) dst[i] = alpha * src[i] + (beta == 0.0f ? 0.0f : beta * dst[i]);
}

// Whether this call's forward keeps its bfloat16 input for backward-weights: a training
// layer, bfloat16 kernels, and backward-weights on oneDNN's kernel (the GEMM makes its
// own channels-last copy) from the same source descriptor.
bool keepsInput(const ConvParams& p, const ConvEntry& e, const Shape& x, const Shape& w, const Shape& y) {
    return p.state && p.compute == DType::bfloat16 && bfloat16Kernels() && e.fwdSrc.want() == e.bwSrc.want() &&
           !backwardWeightsByGemm(p, x, w, y);
}

// The forward's source: x reordered into bfloat16, into the layer's KeptInput when it keeps one.
dnnl::memory forwardSource(const ConvParams& p, const ConvEntry& e, const Tensor& x, const Shape& w, const Shape& y) {
    if (x.dtype() != DType::float32 || !keepsInput(p, e, x.shape(), w, y)) {
        if (p.state) p.state->data.reset(); // backward-weights reads x itself
        return e.fwdSrc.from(x);
    }
    p.state->data.reset(); // the last step's, before the new one is allocated
    auto kept = std::make_shared<KeptInput>();
    kept->desc = e.fwdSrc.want();
    const auto words = static_cast<int64_t>((kept->desc.get_size() + sizeof(float) - 1) / sizeof(float));
    kept->bytes = Tensor::empty(Shape{words}, DType::float32, x.device());
    const dnnl::memory src = memOf(descOf(x), x);
    dnnl::memory m = e.fwdSrc.into(src, wrap(kept->desc, kept->bytes.raw()));
    kept->from = x.raw();
    kept->fromDesc = src.get_desc();
    p.state->data = std::move(kept);
    return m;
}

// What the layer's forward kept, taken out of its state: backward-weights is its last
// reader, so it is released when the caller drops it.
std::shared_ptr<KeptInput> takeKept(const ConvParams& p) {
    if (!p.state) return nullptr;
    auto kept = std::dynamic_pointer_cast<KeptInput>(p.state->data);
    p.state->data.reset();
    return kept;
}

// Backward-weights' source: what forward kept when it was made from this very x in the
// descriptor wanted, else x reordered now.
dnnl::memory backwardWeightsSource(const ConvEntry& e, const Tensor& x, const KeptInput* kept) {
    if (kept && kept->from == x.raw() && kept->fromDesc == descOf(x) && kept->desc == e.bwSrc.want()) {
        return wrap(kept->desc, kept->bytes.raw());
    }
    return e.bwSrc.from(x);
}

// The forward with a ReLU post-op (ConvParams::relu: an eval-mode batch norm and its ReLU
// folded into the layer), over the training forward's own source, weights and output
// descriptors, so that it reads and writes what that one does.
const dnnl::primitive& reluForward(const ConvParams& p, const ConvEntry& e, bool bias) {
    if (e.fwdRelu) return *e.fwdRelu;
    e.fwdRelu = checkDnnl(p.transposed ? "deconvolution (ReLU)" : "convolution (ReLU)", [&]() -> dnnl::primitive {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        dnnl::primitive_attr attr;
        attr.set_post_ops(ops);
        const dims st(p.stride.begin(), p.stride.end()), pl(p.padLo.begin(), p.padLo.end()),
            pr(p.padHi.begin(), p.padHi.end()), dil = dilationOf(p);
        const md b = bias ? e.plainB : md();
        const auto inference = dnnl::prop_kind::forward_inference;
        if (p.transposed) {
            return dnnl::deconvolution_forward(dnnl::deconvolution_forward::primitive_desc(
                dnnl::deconvolution_forward::desc(inference, dnnl::algorithm::deconvolution_direct, e.fwdSrc.want(),
                                                  e.fwdW.want(), b, e.fwdDst, st, dil, pl, pr),
                attr, engine()));
        }
        return dnnl::convolution_forward(dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(inference, dnnl::algorithm::convolution_direct, e.fwdSrc.want(),
                                            e.fwdW.want(), b, e.fwdDst, st, dil, pl, pr),
            attr, engine()));
    });
    return *e.fwdRelu;
}

} // namespace

Layout CpuBackend::convOutputLayout(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    const std::optional<Layout> l = layoutOf(entryFor(p, x, w, y, bias).fwdDst);
    return l ? *l : Layout::plain;
}

int64_t CpuBackend::convKeptBytes(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) {
    const ConvEntry& e = entryFor(p, x, w, y, bias);
    if (!keepsInput(p, e, x, w, y)) return 0;
    return allocationBytes(static_cast<int64_t>(e.fwdSrc.want().get_size()));
}

// x: [N, C, *in], w: [K, C/g, *k] (deconv: [C, K/g, *k]), b: [K] -> y: [N, K, *out]
Tensor CpuBackend::convForward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                               const Shape& yShape) {
    const ConvEntry& e = entryFor(p, x.shape(), w.shape(), yShape, b.defined());
    ++convCalls;
    Tensor y = tensorFor(e.fwdDst, yShape, x.device());
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, forwardSource(p, e, x, w.shape(), yShape)},
        {DNNL_ARG_WEIGHTS, packedWeights(e.fwdW, memOf(e.plainW, w), w, p.packed.get())},
        {DNNL_ARG_DST, memOf(e.fwdDst, y)}};
    if (b.defined()) args[DNNL_ARG_BIAS] = memOf(e.plainB, b);
    const dnnl::primitive& prim = p.relu ? reluForward(p, e, b.defined()) : e.fwd;
    checkDnnl("convolution_forward::execute", [&] { prim.execute(stream(), args); });
    return y;
}

// dy: [N, K, *out], w -> dx: [N, C, *in]
Tensor CpuBackend::convBackwardData(const ConvParams& p, const Tensor& dy, const Tensor& w, const Shape& xShape) {
    const ConvEntry& e = entryFor(p, xShape, w.shape(), dy.shape(), false);
    if (gemmData(p, xShape, w.shape(), dy.shape())) {
        ++convCalls;
        if (!e.gemmData) {
            e.gemmData = checkDnnl("matmul (backward-data)", [&] { return buildGemmData(w.shape(), dy.shape()); });
        }
        GemmData& g = *e.gemmData;
        const dnnl::memory dyLast = g.nhwcDy.from(dy); // dy as [M, K]
        checkDnnl("matmul::execute (backward-data)", [&] {
            g.prim.execute(stream(), {{DNNL_ARG_SRC, g.a.from(wrap(g.dyMat, dyLast.get_data_handle()))},
                                      {DNNL_ARG_WEIGHTS, g.w.from(wrap(g.wMat, w.data<float>()))},
                                      {DNNL_ARG_DST, g.dcol}});
        });
        Tensor dx = tensorFor(descIn(xShape.dims(), Layout::channelsLast), xShape, dy.device());
        col2im(static_cast<const float*>(g.dcol.get_data_handle()), xShape, p, w.shape()[2], w.shape()[3],
               dy.shape()[2], dy.shape()[3], dx.storageData<float>());
        return dx;
    }
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

void CpuBackend::setConvBackwardAlgo(ConvBackwardAlgo algo) { backwardAlgo() = algo; }
ConvBackwardAlgo CpuBackend::convBackwardAlgo() { return backwardAlgo(); }

void CpuBackend::setBfloat16Activations(bool on) { lowActivationsSetting() = on; }
bool CpuBackend::bfloat16Activations() { return lowActivationsSetting().load(); }
DType CpuBackend::convOutputDType(const ConvParams& p) { return lowActivations(p) ? DType::bfloat16 : DType::float32; }

// x, dy -> dw = scale * dL/dw + momentum * dw (and db likewise)
void CpuBackend::convBackwardWeights(const ConvParams& p, const Tensor& x, const Tensor& dy, float scale,
                                     float momentum, const Tensor& dw, const Tensor& db) {
    const ConvEntry& e = entryFor(p, x.shape(), dw.shape(), dy.shape(), db.defined());
    const std::shared_ptr<KeptInput> kept = takeKept(p); // alive until the primitive has run
    if (backwardWeightsByGemm(p, x.shape(), dw.shape(), dy.shape())) {
        ++convCalls;
        if (!e.gemmWeights)
            e.gemmWeights = checkDnnl("matmul (backward-weights)",
                                      [&] { return buildGemmWeights(x.shape(), dw.shape(), dy.shape()); });
        GemmWeights& g = *e.gemmWeights;
        im2colLast(static_cast<const uint16_t*>(g.nhwcX.from(x).get_data_handle()), x.shape(), p, dw.shape()[2],
                   dw.shape()[3], dy.shape()[2], dy.shape()[3], static_cast<uint16_t*>(g.col.get_data_handle()));
        const dnnl::memory dyLast = g.nhwcDy.from(dy); // dy as [M, K]
        checkDnnl("matmul::execute (backward-weights)", [&] {
            g.prim.execute(stream(), {{DNNL_ARG_SRC, g.a.from(wrap(g.dyT, dyLast.get_data_handle()))},
                                      {DNNL_ARG_WEIGHTS, g.col},
                                      {DNNL_ARG_DST, g.product}});
        });
        // dW' [K, kh, kw, C] is the weights' (K, C, kh, kw) in oneDNN's acdb order.
        const Shape& ws = dw.shape();
        const dnnl::memory last = wrap(md({ws[0], ws[1], ws[2], ws[3]}, f32, tag::acdb), g.product.get_data_handle());
        if (scale == 1.0f && momentum == 0.0f) {
            g.toPlain.into(last, memOf(plainDesc(ws.dims()), dw));
        } else {
            const dnnl::memory plain = g.toPlain.from(last);
            axpbyRaw(scale, static_cast<const float*>(plain.get_data_handle()), momentum, dw.data<float>(), dw.numel());
        }
        if (db.defined()) { // the bias gradient: dy's column sums, in float32
            const int64_t M = dy.shape()[0] * dy.shape()[2] * dy.shape()[3], K = dy.shape()[1];
            const auto* py = static_cast<const float*>(dyLast.get_data_handle());
            float* pb = db.data<float>();
            for (int64_t k = 0; k < K; ++k) pb[k] = momentum == 0.0f ? 0.0f : momentum * pb[k];
            std::vector<float> sums(static_cast<size_t>(K), 0.0f);
            for (int64_t m = 0; m < M; ++m) {
#pragma omp simd
                for (int64_t k = 0; k < K; ++k) sums[static_cast<size_t>(k)] += py[m * K + k];
            }
            for (int64_t k = 0; k < K; ++k) pb[k] += scale * sums[static_cast<size_t>(k)];
        }
        return;
    }
    // oneDNN overwrites its outputs: with scale 1 and momentum 0 it writes the plain
    // gradients in place (blocked ones are reordered into them); otherwise into buffers
    // that are then blended in.
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
        {DNNL_ARG_SRC, backwardWeightsSource(e, x, kept.get())},
        {DNNL_ARG_DIFF_DST, reuse ? *e.bdDiffDst.buffer() : e.bwDiffDst.from(dy)},
        {DNNL_ARG_DIFF_WEIGHTS, diffW}};
    if (db.defined()) args[DNNL_ARG_DIFF_BIAS] = diffB;
    checkDnnl("convolution_backward_weights::execute", [&] { e.bwdWeights.execute(stream(), args); });
    if (diffW.get_data_handle() != dw.raw() && direct) { // blocked: reordered straight into dw
        e.diffWToPlain.into(diffW, memOf(e.plainW, dw));
    } else if (diffW.get_data_handle() != dw.raw()) {
        dnnl::memory plain = e.diffWToPlain.from(diffW);
        axpbyRaw(scale, static_cast<const float*>(plain.get_data_handle()), momentum, dw.data<float>(), dw.numel());
    }
    if (db.defined() && !direct) {
        axpbyRaw(scale, static_cast<const float*>(diffB.get_data_handle()), momentum, db.data<float>(), db.numel());
    }
}

} // namespace tessera
