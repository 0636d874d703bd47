// The CUDA backend's convolution and deconvolution on cuDNN (forward, backward-data, backward-weights) with algorithm
// choice; 16-bit convolutions with float32 accumulation, whose outputs and input gradients stay 16-bit where the
// backend carries 16-bit activations (setCuda16BitActivations) and are converted to float32 otherwise. 2-D ones that
// carry them run channels-last where setCudaChannelsLast is on: activations [N, H, W, C], filters [K, R, S, C/g]
// (permuted and converted from the layer's [K, C/g, R, S] in one pass each call, and the gradient back likewise).
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Dnn.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

using namespace cuda_util;

using namespace cudnn_util;

namespace {

struct ConvShapes {
    Shape in, out; // the convolution's input and output (see ConvProblem)
};

ConvShapes convShapes(const ConvParams& p, const Shape& x, const Shape& y) {
    return p.transposed ? ConvShapes{y, x} : ConvShapes{x, y};
}

std::string convKey(const ConvParams& p, const ConvShapes& cs, const Shape& w, bool tf32, bool deterministic,
                    Layout layout) {
    return keyOf(p.transposed ? (layout == Layout::channelsLast ? "deconv-nhwc" : "deconv")
                              : (layout == Layout::channelsLast ? "conv-nhwc" : "conv"),
                 {ints(p.stride),
                  ints(p.padLo),
                  ints(p.padHi),
                  ints(p.dilation),
                  {static_cast<int>(p.groups), tf32, deterministic, static_cast<int>(p.compute)},
                  ints(cs.in.dims()),
                  ints(w.dims()),
                  ints(cs.out.dims())});
}

} // namespace

// Descriptors and algorithms of one problem, built (and the algorithms chosen by cuDNN's
// heuristics) on first use.
static ConvProblem& convProblem(CudaBackend::DnnState& dnn, cudnnHandle_t handle, bool allowTF32, bool deterministic,
                                const ConvParams& p, const ConvShapes& cs, const Shape& w, Layout layout) {
    if (p.compute != DType::float32 && p.compute != DType::float16 && p.compute != DType::bfloat16) {
        throw BackendError(std::string("CudaBackend: ") + (p.transposed ? "deconvolution" : "convolution") + " in " +
                           str(p.compute) + " is not supported (float32, float16 and bfloat16 are)");
    }
    const std::string key = convKey(p, cs, w, allowTF32, deterministic, layout);
    std::lock_guard<std::mutex> lock(dnn.mutex);
    auto& slot = dnn.convs[key];
    if (slot) return *slot;
    for (size_t d = 0; d < p.padLo.size(); ++d) {
        // A deconvolution's postpad (padHi = padLo - q, 0 < q < stride) is the same
        // symmetric problem: the larger output still floors to the same input size.
        const int64_t q = p.padLo[d] - p.padHi[d];
        if (p.transposed && q > 0 && q < p.stride[d]) continue;
        if (q != 0) {
            throw BackendError("CudaBackend: cuDNN convolutions pad both sides alike; got pad " +
                               std::to_string(p.padLo[d]) + " before and " + std::to_string(p.padHi[d]) +
                               " after spatial dim " + std::to_string(d));
        }
    }
    const bool low = p.compute != DType::float32;
    const cudnnDataType_t type = dnnType(p.compute);
    const bool last = layout == Layout::channelsLast;
    auto prob = std::make_unique<ConvProblem>();
    prob->type = p.compute;
    prob->channelsLast = last;
    prob->in = std::make_unique<TensorDesc>(nd(cs.in), type, last);
    prob->out = std::make_unique<TensorDesc>(nd(cs.out), type, last);
    prob->inF32 = std::make_unique<TensorDesc>(nd(cs.in), CUDNN_DATA_FLOAT, last);
    prob->outF32 = std::make_unique<TensorDesc>(nd(cs.out), CUDNN_DATA_FLOAT, last);
    std::vector<int> biasDims(nd(cs.out).size(), 1);
    biasDims[1] = static_cast<int>(p.transposed ? cs.in[1] : cs.out[1]);
    prob->bias = std::make_unique<TensorDesc>(biasDims);

    const std::vector<int> wd = nd(w);
    TESSERA_CUDA_CHECK(cudnnCreateFilterDescriptor(&prob->filter));
    TESSERA_CUDA_CHECK(cudnnSetFilterNdDescriptor(prob->filter, type, last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                  static_cast<int>(wd.size()), wd.data()));
    std::vector<int> pad = ints(p.padLo), stride = ints(p.stride), dil = ints(p.dilation);
    while (pad.size() < wd.size() - 2) {
        pad.push_back(0);
        stride.push_back(1);
        dil.push_back(1);
    }
    TESSERA_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&prob->conv));
    TESSERA_CUDA_CHECK(cudnnSetConvolutionNdDescriptor(prob->conv, static_cast<int>(pad.size()), pad.data(),
                                                       stride.data(), dil.data(), CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT));
    TESSERA_CUDA_CHECK(cudnnSetConvolutionGroupCount(prob->conv, static_cast<int>(p.groups)));
    // 16-bit operands accumulate in float32 (the convolution's compute type above) on
    // tensor cores; the TF32 switch concerns float32 operands only.
    allowTF32 = allowTF32 || low;
    TESSERA_CUDA_CHECK(cudnnSetConvolutionMathType(prob->conv, low         ? CUDNN_TENSOR_OP_MATH
                                                               : allowTF32 ? CUDNN_DEFAULT_MATH
                                                                           : CUDNN_FMA_MATH));

    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    TESSERA_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, prob->in->get(), prob->filter, prob->conv,
                                                              prob->out->get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                              &count, fwd));
    prob->fwd = pick(fwd, count, kDefaultWorkspaceLimit, allowTF32, deterministic, "forward convolution");
    cudnnConvolutionBwdDataAlgoPerf_t bwdData[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    TESSERA_CUDA_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, prob->filter, prob->out->get(), prob->conv, prob->in->get(),
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, bwdData));
    prob->bwdData = pick(bwdData, count, kDefaultWorkspaceLimit, allowTF32, deterministic, "backward-data convolution");
    cudnnConvolutionBwdFilterAlgoPerf_t bwdFilter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    TESSERA_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle, prob->in->get(), prob->out->get(), prob->conv, prob->filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        &count, bwdFilter));
    prob->bwdFilter =
        pick(bwdFilter, count, kDefaultWorkspaceLimit, allowTF32, deterministic, "backward-weights convolution");
    slot = std::move(prob);
    return *slot;
}

namespace {
// The convolution's input -> output pass: the forward of a convolution, the
// backward-data of a deconvolution.
void runConvForward(cudnnHandle_t h, ConvProblem& c, void* ws, const void* in, const void* w, void* out) {
    const float one = 1.0f, zero = 0.0f;
    TESSERA_CUDA_CHECK(cudnnSetConvolutionMathType(c.conv, c.fwd.math));
    TESSERA_CUDA_CHECK(cudnnConvolutionForward(h, &one, c.in->get(), in, c.filter, w, c.conv,
                                               static_cast<cudnnConvolutionFwdAlgo_t>(c.fwd.algo), ws, c.fwd.bytes,
                                               &zero, c.out->get(), out));
}
// The output -> input pass: the backward-data of a convolution, the forward of a
// deconvolution.
void runConvBackwardData(cudnnHandle_t h, ConvProblem& c, void* ws, const void* w, const void* out, void* in) {
    const float one = 1.0f, zero = 0.0f;
    TESSERA_CUDA_CHECK(cudnnSetConvolutionMathType(c.conv, c.bwdData.math));
    TESSERA_CUDA_CHECK(cudnnConvolutionBackwardData(h, &one, c.filter, w, c.out->get(), out, c.conv,
                                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(c.bwdData.algo), ws,
                                                    c.bwdData.bytes, &zero, c.in->get(), in));
}
} // namespace

namespace {
// The elements between one channel's value and the next's: 1 in channels-last, the spatial
// size in [N, C, *spatial].
int64_t channelInner(const Shape& sh, Layout layout) {
    const int64_t planes = sh[0] * sh[1];
    return layout == Layout::channelsLast || planes == 0 ? 1 : sh.numel() / planes;
}

// A float32 tensor of `low`'s values (a 16-bit result), plus `bias` per channel if given, in
// low's layout.
Tensor toFloat32(const Tensor& low, const Tensor& bias, cudaStream_t s) {
    const Shape& sh = low.shape();
    Tensor out = Tensor::empty(sh, DType::float32, low.device(), low.layout());
    cudak::castAddChannels(low.raw(), static_cast<int>(low.dtype()), bias.defined() ? fp(bias) : nullptr, fp(out),
                           sh[1], channelInner(sh, low.layout()), sh.numel(), s);
    return out;
}

// The filter as cuDNN reads it for problem `c`: in its compute type, and in channels-last
// [K, *k, C/g] when the problem is (permuted and converted in one pass).
Tensor filterFor(CudaBackend& be, const ConvProblem& c, const Tensor& w) {
    const Tensor w32 = w.plain().convertedTo(DType::float32);
    if (!c.channelsLast) return w32.convertedTo(c.type);
    const Shape& sh = w32.shape();
    std::vector<int64_t> dims = {sh[0]};
    for (size_t d = 2; d < sh.rank(); ++d) dims.push_back(sh[d]);
    dims.push_back(sh[1]);
    Tensor out = Tensor::empty(Shape(dims), c.type, w.device());
    cudak::filterToChannelsLast(fp(w32), out.raw(), static_cast<int>(c.type), sh[0], sh[1],
                                sh.numel() / (sh[0] * sh[1]), be.stream());
    return out;
}

// dw <- scale * g + momentum * dw, where g is cuDNN's weight gradient for problem `c` (in its
// compute type, channels-last [K, *k, C/g] when the problem is).
void accumulateFilterGrad(CudaBackend& be, const ConvProblem& c, const Tensor& g, float scale, float momentum,
                          const Tensor& dw) {
    if (!c.channelsLast) {
        cudak::castAxpby(scale, g.raw(), static_cast<int>(c.type), momentum, fp(dw), dw.numel(), be.stream());
        return;
    }
    const Shape& sh = dw.shape(); // [K, C/g, *k], float32 plain
    cudak::filterGradFromChannelsLast(scale, g.raw(), static_cast<int>(c.type), momentum, fp(dw), sh[0], sh[1],
                                      sh.numel() / (sh[0] * sh[1]), be.stream());
}
} // namespace

namespace {
// What a training 16-bit convolution keeps in its layer's state between calls, so that
// each float32 operand is converted once per step: forward's converted input, read by
// backward-weights, and backward-data's converted output gradient, read by
// backward-weights right after. Each is trusted only for the tensor it was made from.
struct KeptLow : BackendState {
    Tensor x, dy;
    const void *xFrom = nullptr, *dyFrom = nullptr;
};

// `t` in `layout` and `type`, or `keptCopy` when it was made from `t`.
Tensor lowOf(CudaBackend& be, const Tensor& t, Layout layout, DType type, const Tensor& keptCopy, const void* from) {
    if (keptCopy.defined() && from == t.raw() && keptCopy.shape() == t.shape() && keptCopy.layout() == layout &&
        keptCopy.dtype() == type) {
        return keptCopy;
    }
    return be.arranged(t, layout, type);
}
} // namespace

Tensor CudaBackend::convForward(const ConvParams& p, const Tensor& xIn, const Tensor& w, const Tensor& b,
                                const Shape& yShape) {
    cudnnHandle_t h = cudnn_;
    s();
    const Layout layout = convLayout(xIn.shape(), p.compute);
    ConvProblem& c =
        convProblem(*dnn_, h, allowTF32_, deterministic_, p, convShapes(p, xIn.shape(), yShape), w.shape(), layout);
    const Tensor x = arranged(xIn, layout, c.type), wt = filterFor(*this, c, w);
    if (p.state) { // a training layer: last step's copies go; this input's converted copy stays for backward-weights
        p.state->data.reset();
        if (x.raw() != xIn.raw()) {
            auto kept = std::make_shared<KeptLow>();
            kept->x = x;
            kept->xFrom = xIn.raw();
            p.state->data = std::move(kept);
        }
    }
    Tensor y = Tensor::empty(yShape, c.type, device(), layout);
    if (p.transposed) {
        runConvBackwardData(h, c, workspace(c.bwdData.bytes), wt.raw(), x.raw(), y.raw());
    } else {
        runConvForward(h, c, workspace(c.fwd.bytes), x.raw(), wt.raw(), y.raw());
    }
    if (c.type != DType::float32 && !carries16Bit(c.type)) {
        y = toFloat32(y, b, s());
    } else if (c.type != DType::float32) { // 16-bit activations: the output stays in the compute type
        if (b.defined()) {
            cudak::addChannelsAny(y.raw(), static_cast<int>(c.type), fp(b), yShape[1], channelInner(yShape, layout),
                                  yShape.numel(), s());
        }
    } else if (b.defined()) {
        const float one = 1.0f;
        const cudnnTensorDescriptor_t yDesc = p.transposed ? c.in->get() : c.out->get();
        TESSERA_CUDA_CHECK(cudnnAddTensor(h, &one, c.bias->get(), fp(b), &one, yDesc, fp(y)));
    }
    if (p.relu) activationForward(ActivationParams{ActivationKind::relu}, y, y); // ConvParams::relu
    return y;
}

Tensor CudaBackend::convBackwardData(const ConvParams& p, const Tensor& dyIn, const Tensor& w, const Shape& xShape) {
    s();
    const Layout layout = convLayout(xShape, p.compute);
    ConvProblem& c = convProblem(*dnn_, cudnn_, allowTF32_, deterministic_, p, convShapes(p, xShape, dyIn.shape()),
                                 w.shape(), layout);
    const Tensor dy = arranged(dyIn, layout, c.type), wt = filterFor(*this, c, w);
    if (p.state && dy.raw() != dyIn.raw()) { // backward-weights, next, reads it too
        auto kept = std::dynamic_pointer_cast<KeptLow>(p.state->data);
        if (!kept) p.state->data = kept = std::make_shared<KeptLow>();
        kept->dy = dy;
        kept->dyFrom = dyIn.raw();
    }
    Tensor dx = Tensor::empty(xShape, c.type, device(), layout);
    if (p.transposed) {
        runConvForward(cudnn_, c, workspace(c.fwd.bytes), dy.raw(), wt.raw(), dx.raw());
    } else {
        runConvBackwardData(cudnn_, c, workspace(c.bwdData.bytes), wt.raw(), dy.raw(), dx.raw());
    }
    return c.type == DType::float32 || carries16Bit(c.type) ? dx : toFloat32(dx, Tensor(), s());
}

void CudaBackend::convBackwardWeights(const ConvParams& p, const Tensor& xIn, const Tensor& dyIn, float scale,
                                      float momentum, const Tensor& dw, const Tensor& db) {
    s();
    const Layout layout = convLayout(xIn.shape(), p.compute);
    ConvProblem& c = convProblem(*dnn_, cudnn_, allowTF32_, deterministic_, p, convShapes(p, xIn.shape(), dyIn.shape()),
                                 dw.shape(), layout);
    // The copies forward and backward-data kept, when made from these tensors; this is
    // their last reader, so the layer's state lets them go.
    std::shared_ptr<KeptLow> kept = p.state ? std::dynamic_pointer_cast<KeptLow>(p.state->data) : nullptr;
    if (p.state) p.state->data.reset();
    const Tensor x = kept ? lowOf(*this, xIn, layout, c.type, kept->x, kept->xFrom) : arranged(xIn, layout, c.type);
    const Tensor dy =
        kept ? lowOf(*this, dyIn, layout, c.type, kept->dy, kept->dyFrom) : arranged(dyIn, layout, c.type);
    kept.reset();
    // The convolution's input and output gradient: swapped for a deconvolution.
    const Tensor& in = p.transposed ? dy : x;
    const Tensor& outGrad = p.transposed ? x : dy;
    // In a 16-bit type cuDNN writes the weights' type, and in channels-last their permuted
    // order: the gradient goes through a buffer of its own and is accumulated into dw.
    const bool low = c.type != DType::float32 || c.channelsLast;
    const Tensor dwLow = low ? Tensor::empty(Shape({dw.numel()}), c.type, device()) : dw;
    const float one = 1.0f, zero = 0.0f;
    TESSERA_CUDA_CHECK(cudnnSetConvolutionMathType(c.conv, c.bwdFilter.math));
    TESSERA_CUDA_CHECK(cudnnConvolutionBackwardFilter(
        cudnn_, low ? &one : &scale, c.in->get(), in.raw(), c.out->get(), outGrad.raw(), c.conv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.bwdFilter.algo), workspace(c.bwdFilter.bytes), c.bwdFilter.bytes,
        low ? &zero : &momentum, c.filter, dwLow.raw()));
    if (low) accumulateFilterGrad(*this, c, dwLow, scale, momentum, dw);
    if (db.defined()) {
        const Tensor dyF = arranged(dyIn, layout, DType::float32); // itself when it is that
        const cudnnTensorDescriptor_t dyDesc = p.transposed ? c.inF32->get() : c.outF32->get();
        TESSERA_CUDA_CHECK(
            cudnnConvolutionBackwardBias(cudnn_, &scale, dyDesc, fp(dyF), &momentum, c.bias->get(), fp(db)));
    }
}

int64_t CudaBackend::convKeptBytes(const ConvParams& p, const Shape& x, const Shape&, const Shape&, bool) {
    if (!p.state || p.compute == DType::float32) return 0;
    return allocationBytes(static_cast<int64_t>(Tensor::storageBytes(x, p.compute, Layout::plain)));
}

// What the calls above allocate and free inside themselves, beyond the output (or input
// gradient) and what the layer keeps, each buffer in the allocator's size class: the filter
// in the compute type and order; in a 16-bit type not carried, the 16-bit result before its
// float32 copy; backward-data's and backward-weights' buffers, one call after the other,
// and an output gradient that comes in float32 converted once for both.
int64_t CudaBackend::convScratchBytes(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias,
                                      bool backward) {
    const DType type = p.compute;
    const bool low = type != DType::float32, last = convLayout(x, type) == Layout::channelsLast;
    const bool converts = low && !carries16Bit(type); // activations come and go in float32
    auto bytes = [&](const Shape& s, DType t) {
        return allocationBytes(static_cast<int64_t>(Tensor::storageBytes(s, t, Layout::plain)));
    };
    // filterFor: the filter in the compute type and order, where that is not the layer's
    // own (one pass, no copy in between).
    const int64_t filterHeld = low || last ? bytes(w, type) : 0;
    const Shape& out = p.transposed ? x : y; // what the forward writes
    const Shape& in = p.transposed ? y : x;  // what backward-data writes
    // An inference forward converts its float32 input too (a training one keeps that copy:
    // convKeptBytes).
    const int64_t inputCopy = converts && !p.state ? bytes(in, type) : 0;
    if (!backward) return inputCopy + filterHeld + (converts ? bytes(out, type) : 0);
    const int64_t dyLow = converts ? bytes(out, type) : 0; // kept from backward-data for backward-weights
    const int64_t data = filterHeld + (converts ? bytes(in, type) : 0);
    // backward-weights: cuDNN's gradient in its own buffer where low or channels-last
    // (accumulated into the layer's in one pass).
    int64_t weights = low || last ? bytes(w, type) : 0;
    if (bias && low && !converts) weights += bytes(out, DType::float32); // the bias gradient reads dy in float32
    return dyLow + std::max(data, weights);
}

void CudaBackend::optimizeConv(const ConvParams& p, const Shape& xShape, const Shape& wShape, const Shape& yShape,
                               size_t memlimit) {
    s();
    const ConvShapes cs = convShapes(p, xShape, yShape);
    ConvProblem& c =
        convProblem(*dnn_, cudnn_, allowTF32_, deterministic_, p, cs, wShape, convLayout(xShape, p.compute));
    // Timings differ from run to run, and so would the algorithms they choose (and the
    // bits of the results): a deterministic backend keeps the heuristic's choice.
    if (deterministic_) return;
    // Scratch operands in the compute type: the timings need real buffers, not real values
    // (of the same bytes in either layout).
    Tensor in = Tensor::empty(cs.in, c.type, device()), out = Tensor::empty(cs.out, c.type, device()),
           w = Tensor::empty(wShape, c.type, device());
    for (const Tensor* t : {&in, &out, &w}) fillBytes(*t, 0);
    void* ws = workspace(memlimit);
    int count = 0;
    const bool low = c.type != DType::float32, allow = allowTF32_ || low;
    TESSERA_CUDA_CHECK(cudnnSetConvolutionMathType(c.conv, low     ? CUDNN_TENSOR_OP_MATH
                                                           : allow ? CUDNN_DEFAULT_MATH
                                                                   : CUDNN_FMA_MATH));
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    TESSERA_CUDA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(cudnn_, c.in->get(), in.raw(), c.filter, w.raw(), c.conv,
                                                              c.out->get(), out.raw(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                              &count, fwd, ws, memlimit));
    const ConvProblem::Choice f = pick(fwd, count, memlimit, allow, deterministic_, "forward convolution");
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    TESSERA_CUDA_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        cudnn_, c.filter, w.raw(), c.out->get(), out.raw(), c.conv, c.in->get(), in.raw(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, bd, ws, memlimit));
    const ConvProblem::Choice d = pick(bd, count, memlimit, allow, deterministic_, "backward-data convolution");
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    TESSERA_CUDA_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        cudnn_, c.in->get(), in.raw(), c.out->get(), out.raw(), c.conv, c.filter, w.raw(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, bf, ws, memlimit));
    const ConvProblem::Choice g = pick(bf, count, memlimit, allow, deterministic_, "backward-weights convolution");
    std::lock_guard<std::mutex> lock(dnn_->mutex);
    c.fwd = f;
    c.bwdData = d;
    c.bwdFilter = g;
    // The search's workspace goes back to the allocator's cache; later calls grow the
    // workspace to what their chosen algorithms need, not to `memlimit`.
    releaseWorkspace();
}

} // namespace tessera
