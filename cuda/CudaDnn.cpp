// The cuDNN side of the CUDA backend: convolution and deconvolution (forward,
// backward-data, backward-weights) with algorithm choice, average pooling, batch norm and
// softmax. Descriptors are built once per shape and kept. Max pooling runs Tessera's own
// kernel, which records each window's argmax, so backward needs neither x nor y.
//
// Convolutions in calcMode(float16) or calcMode(bfloat16) run cuDNN on 16-bit operands
// with float32 accumulation and tensor-core math: inputs and output gradients arrive in
// float32 (or already in the low type) and are converted once per call, the float32 master
// weights are converted per call, and outputs and gradients go back in float32 (the bias
// added in the same pass); weight gradients are computed in the low type and accumulated
// into the float32 gradient with the step's scale and momentum.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backend/CudaPlugin.h"
#include "backend/Errors.h"
#include "cuda/CudaBackend.h"
#include "cuda/Kernels.h"

namespace tessera {

// Named rather than anonymous: CudaBackend::DnnState holds these types.
namespace cudnn_util {

/// Workspace the default (heuristic) algorithm choice may use per convolution call.
constexpr size_t kDefaultWorkspaceLimit = size_t{512} << 20;

float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }

cudnnDataType_t dnnType(DType t) {
    switch (t) {
    case DType::float32: return CUDNN_DATA_FLOAT;
    case DType::float16: return CUDNN_DATA_HALF;
    case DType::bfloat16: return CUDNN_DATA_BFLOAT16;
    case DType::int32: break;
    }
    throw BackendError("cuDNN tensors of " + str(t) + " are not used by Tessera");
}

std::vector<int> ints(const std::vector<int64_t>& v) {
    std::vector<int> out;
    out.reserve(v.size());
    for (int64_t x : v) out.push_back(static_cast<int>(x));
    return out;
}

// cuDNN needs 4 or 5 dims: 1-D problems become 2-D with a trailing unit dim.
std::vector<int> nd(const Shape& s) {
    std::vector<int> d = ints(s.dims());
    while (d.size() < 4) d.push_back(1);
    return d;
}

// [N, C, everything else, 1]: the view batch norm and softmax run over.
std::vector<int> channelView(const Shape& s) {
    const int64_t n = s[0], c = s.rank() > 1 ? s[1] : 1;
    return {static_cast<int>(n), static_cast<int>(c), static_cast<int>((n * c) != 0 ? s.numel() / (n * c) : 1), 1};
}

std::string keyOf(const char* tag, std::initializer_list<std::vector<int>> parts) {
    std::string k = tag;
    for (const auto& p : parts) {
        k += '|';
        for (int v : p) k += std::to_string(v) + ',';
    }
    return k;
}

class TensorDesc {
public:
    explicit TensorDesc(const std::vector<int>& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
        TESSERA_CUDA_CHECK(cudnnCreateTensorDescriptor(&d_));
        std::vector<int> strides(dims.size(), 1);
        for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
        TESSERA_CUDA_CHECK(
            cudnnSetTensorNdDescriptor(d_, type, static_cast<int>(dims.size()), dims.data(), strides.data()));
    }
    ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
    TensorDesc(const TensorDesc&) = delete;
    TensorDesc& operator=(const TensorDesc&) = delete;
    cudnnTensorDescriptor_t get() const { return d_; }

private:
    cudnnTensorDescriptor_t d_ = nullptr;
};

// One convolution problem in cuDNN's terms: `in` is the convolution's input and `out` its
// output. A deconvolution is the adjoint of the convolution from its output shape to its
// input shape, so its `in` is the deconvolution's y and its `out` the deconvolution's x.
// `in`, `out` and `filter` are in the compute type; `bias`, `inF32` and `outF32` in float32.
struct ConvProblem {
    std::unique_ptr<TensorDesc> in, out, bias, inF32, outF32;
    DType type = DType::float32;
    cudnnFilterDescriptor_t filter = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    struct Choice {
        int algo = -1;
        cudnnMathType_t math = CUDNN_DEFAULT_MATH;
        size_t bytes = 0;
    };
    Choice fwd, bwdData, bwdFilter;

    ConvProblem() = default;
    ConvProblem(const ConvProblem&) = delete;
    ConvProblem& operator=(const ConvProblem&) = delete;
    ~ConvProblem() {
        if (filter) cudnnDestroyFilterDescriptor(filter);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }
};

struct PoolDesc {
    cudnnPoolingDescriptor_t d = nullptr;
    PoolDesc() = default;
    PoolDesc(const PoolDesc&) = delete;
    PoolDesc& operator=(const PoolDesc&) = delete;
    ~PoolDesc() {
        if (d) cudnnDestroyPoolingDescriptor(d);
    }
};

// The first result that ran, fits `limit`, uses an allowed math type and, when
// `deterministic`, gives the same bits on every run.
template <class Perf>
ConvProblem::Choice pick(const Perf* results, int count, size_t limit, bool allowTF32, bool deterministic,
                         const char* what) {
    for (int i = 0; i < count; ++i) {
        const Perf& r = results[i];
        if (r.status != CUDNN_STATUS_SUCCESS || r.memory > limit) continue;
        if (!allowTF32 && r.mathType != CUDNN_FMA_MATH && r.mathType != CUDNN_DEFAULT_MATH) continue;
        if (deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
        return {static_cast<int>(r.algo), r.mathType, r.memory};
    }
    throw BackendError(std::string("cuDNN offers no ") + (deterministic ? "deterministic " : "") + what +
                       " algorithm within " + std::to_string(limit) + " bytes of workspace");
}

} // namespace cudnn_util

using namespace cudnn_util;

struct CudaBackend::DnnState {
    std::mutex mutex;
    std::map<std::vector<int>, std::unique_ptr<TensorDesc>> tensors;
    std::map<std::string, std::unique_ptr<ConvProblem>> convs;
    std::map<std::string, std::unique_ptr<PoolDesc>> pools;

    cudnnTensorDescriptor_t tensor(const std::vector<int>& dims) {
        std::lock_guard<std::mutex> lock(mutex);
        auto& slot = tensors[dims];
        if (!slot) slot = std::make_unique<TensorDesc>(dims);
        return slot->get();
    }
};

CudaBackend::CudaBackend(int index) : index_(index), allocator_(index), dnn_(std::make_unique<DnnState>()) {
    TESSERA_CUDA_CHECK(cudaSetDevice(index));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&copyStream_, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cublasCreate(&cublas_));
    TESSERA_CUDA_CHECK(cublasSetStream(cublas_, stream_));
    TESSERA_CUDA_CHECK(cudnnCreate(&cudnn_));
    TESSERA_CUDA_CHECK(cudnnSetStream(cudnn_, stream_));
    setAllowTF32(cudaSettings().allowTF32);
    setDeterministic(cudaSettings().deterministic);
}

CudaBackend::~CudaBackend() {
    // Backends live until the process ends (see cudaBackend); the driver may be shutting
    // down by then, so statuses are not checked here.
    dnn_.reset();
    cudnnDestroy(cudnn_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(copyStream_);
    cudaStreamDestroy(stream_);
}

// ---- convolution ------------------------------------------------------------------------------

namespace {

struct ConvShapes {
    Shape in, out; // the convolution's input and output (see ConvProblem)
};

ConvShapes convShapes(const ConvParams& p, const Shape& x, const Shape& y) {
    return p.transposed ? ConvShapes{y, x} : ConvShapes{x, y};
}

std::string convKey(const ConvParams& p, const ConvShapes& cs, const Shape& w, bool tf32, bool deterministic) {
    return keyOf(p.transposed ? "deconv" : "conv",
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
                                const ConvParams& p, const ConvShapes& cs, const Shape& w) {
    if (p.compute != DType::float32 && p.compute != DType::float16 && p.compute != DType::bfloat16) {
        throw BackendError(std::string("CudaBackend: ") + (p.transposed ? "deconvolution" : "convolution") + " in " +
                           str(p.compute) + " is not supported (float32, float16 and bfloat16 are)");
    }
    const std::string key = convKey(p, cs, w, allowTF32, deterministic);
    std::lock_guard<std::mutex> lock(dnn.mutex);
    auto& slot = dnn.convs[key];
    if (slot) return *slot;
    for (size_t d = 0; d < p.padLo.size(); ++d) {
        if (p.padLo[d] != p.padHi[d]) {
            throw BackendError("CudaBackend: cuDNN convolutions pad both sides alike; got pad " +
                               std::to_string(p.padLo[d]) + " before and " + std::to_string(p.padHi[d]) +
                               " after spatial dim " + std::to_string(d));
        }
    }
    const bool low = p.compute != DType::float32;
    const cudnnDataType_t type = dnnType(p.compute);
    auto prob = std::make_unique<ConvProblem>();
    prob->type = p.compute;
    prob->in = std::make_unique<TensorDesc>(nd(cs.in), type);
    prob->out = std::make_unique<TensorDesc>(nd(cs.out), type);
    prob->inF32 = std::make_unique<TensorDesc>(nd(cs.in));
    prob->outF32 = std::make_unique<TensorDesc>(nd(cs.out));
    std::vector<int> biasDims(nd(cs.out).size(), 1);
    biasDims[1] = static_cast<int>(p.transposed ? cs.in[1] : cs.out[1]);
    prob->bias = std::make_unique<TensorDesc>(biasDims);

    const std::vector<int> wd = nd(w);
    TESSERA_CUDA_CHECK(cudnnCreateFilterDescriptor(&prob->filter));
    TESSERA_CUDA_CHECK(
        cudnnSetFilterNdDescriptor(prob->filter, type, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()));
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
// A float32 tensor of `low`'s values (a 16-bit result), plus `bias` per channel if given.
Tensor toFloat32(const Tensor& low, const Tensor& bias, cudaStream_t s) {
    const Shape& sh = low.shape();
    Tensor out = Tensor::empty(sh, DType::float32, low.device());
    const int64_t planes = sh[0] * sh[1];
    cudak::castAddChannels(low.raw(), static_cast<int>(low.dtype()), bias.defined() ? fp(bias) : nullptr, fp(out),
                           sh[1], planes != 0 ? sh.numel() / planes : 1, sh.numel(), s);
    return out;
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

// `t` converted to `type`, or `keptCopy` when it was made from `t`.
Tensor lowOf(const Tensor& t, DType type, const Tensor& keptCopy, const void* from) {
    if (keptCopy.defined() && from == t.raw() && keptCopy.shape() == t.shape()) return keptCopy;
    return t.plain().convertedTo(type);
}
} // namespace

Tensor CudaBackend::convForward(const ConvParams& p, const Tensor& xIn, const Tensor& w, const Tensor& b,
                                const Shape& yShape) {
    cudnnHandle_t h = cudnn_;
    s();
    ConvProblem& c =
        convProblem(*dnn_, h, allowTF32_, deterministic_, p, convShapes(p, xIn.shape(), yShape), w.shape());
    const Tensor x = xIn.plain().convertedTo(c.type), wt = w.plain().convertedTo(c.type);
    if (p.state) { // a training layer: last step's copies go; this input's converted copy stays for backward-weights
        p.state->data.reset();
        if (x.raw() != xIn.raw()) {
            auto kept = std::make_shared<KeptLow>();
            kept->x = x;
            kept->xFrom = xIn.raw();
            p.state->data = std::move(kept);
        }
    }
    Tensor y = Tensor::empty(yShape, c.type, device());
    if (p.transposed) {
        runConvBackwardData(h, c, workspace(c.bwdData.bytes), wt.raw(), x.raw(), y.raw());
    } else {
        runConvForward(h, c, workspace(c.fwd.bytes), x.raw(), wt.raw(), y.raw());
    }
    if (c.type != DType::float32) return toFloat32(y, b, s());
    if (b.defined()) {
        const float one = 1.0f;
        const cudnnTensorDescriptor_t yDesc = p.transposed ? c.in->get() : c.out->get();
        TESSERA_CUDA_CHECK(cudnnAddTensor(h, &one, c.bias->get(), fp(b), &one, yDesc, fp(y)));
    }
    return y;
}

Tensor CudaBackend::convBackwardData(const ConvParams& p, const Tensor& dyIn, const Tensor& w, const Shape& xShape) {
    s();
    ConvProblem& c =
        convProblem(*dnn_, cudnn_, allowTF32_, deterministic_, p, convShapes(p, xShape, dyIn.shape()), w.shape());
    const Tensor dy = dyIn.plain().convertedTo(c.type), wt = w.plain().convertedTo(c.type);
    if (p.state && dy.raw() != dyIn.raw()) { // backward-weights, next, reads it too
        auto kept = std::dynamic_pointer_cast<KeptLow>(p.state->data);
        if (!kept) p.state->data = kept = std::make_shared<KeptLow>();
        kept->dy = dy;
        kept->dyFrom = dyIn.raw();
    }
    Tensor dx = Tensor::empty(xShape, c.type, device());
    if (p.transposed) {
        runConvForward(cudnn_, c, workspace(c.fwd.bytes), dy.raw(), wt.raw(), dx.raw());
    } else {
        runConvBackwardData(cudnn_, c, workspace(c.bwdData.bytes), wt.raw(), dy.raw(), dx.raw());
    }
    return c.type == DType::float32 ? dx : toFloat32(dx, Tensor(), s());
}

void CudaBackend::convBackwardWeights(const ConvParams& p, const Tensor& xIn, const Tensor& dyIn, float scale,
                                      float momentum, const Tensor& dw, const Tensor& db) {
    s();
    ConvProblem& c =
        convProblem(*dnn_, cudnn_, allowTF32_, deterministic_, p, convShapes(p, xIn.shape(), dyIn.shape()), dw.shape());
    // The copies forward and backward-data kept, when made from these tensors; this is
    // their last reader, so the layer's state lets them go.
    std::shared_ptr<KeptLow> kept = p.state ? std::dynamic_pointer_cast<KeptLow>(p.state->data) : nullptr;
    if (p.state) p.state->data.reset();
    const Tensor x = kept ? lowOf(xIn, c.type, kept->x, kept->xFrom) : xIn.plain().convertedTo(c.type);
    const Tensor dy = kept ? lowOf(dyIn, c.type, kept->dy, kept->dyFrom) : dyIn.plain().convertedTo(c.type);
    kept.reset();
    // The convolution's input and output gradient: swapped for a deconvolution.
    const Tensor& in = p.transposed ? dy : x;
    const Tensor& outGrad = p.transposed ? x : dy;
    // In a 16-bit type cuDNN writes the weights' type: the gradient goes through a
    // 16-bit buffer and is accumulated into the float32 one.
    const bool low = c.type != DType::float32;
    const Tensor dwLow = low ? Tensor::empty(dw.shape(), c.type, device()) : dw;
    const float one = 1.0f, zero = 0.0f;
    TESSERA_CUDA_CHECK(cudnnSetConvolutionMathType(c.conv, c.bwdFilter.math));
    TESSERA_CUDA_CHECK(cudnnConvolutionBackwardFilter(
        cudnn_, low ? &one : &scale, c.in->get(), in.raw(), c.out->get(), outGrad.raw(), c.conv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.bwdFilter.algo), workspace(c.bwdFilter.bytes), c.bwdFilter.bytes,
        low ? &zero : &momentum, c.filter, dwLow.raw()));
    if (low) cudak::castAxpby(scale, dwLow.raw(), static_cast<int>(c.type), momentum, fp(dw), dw.numel(), s());
    if (db.defined()) {
        const Tensor dyF = dyIn.plain().convertedTo(DType::float32); // itself when float32
        const cudnnTensorDescriptor_t dyDesc = p.transposed ? c.inF32->get() : c.outF32->get();
        TESSERA_CUDA_CHECK(
            cudnnConvolutionBackwardBias(cudnn_, &scale, dyDesc, fp(dyF), &momentum, c.bias->get(), fp(db)));
    }
}

int64_t CudaBackend::convKeptBytes(const ConvParams& p, const Shape& x, const Shape&, const Shape&, bool) {
    if (!p.state || p.compute == DType::float32) return 0;
    return allocationBytes(static_cast<int64_t>(Tensor::storageBytes(x, p.compute, Layout::plain)));
}

void CudaBackend::optimizeConv(const ConvParams& p, const Shape& xShape, const Shape& wShape, const Shape& yShape,
                               size_t memlimit) {
    s();
    const ConvShapes cs = convShapes(p, xShape, yShape);
    ConvProblem& c = convProblem(*dnn_, cudnn_, allowTF32_, deterministic_, p, cs, wShape);
    // Timings differ from run to run, and so would the algorithms they choose (and the
    // bits of the results): a deterministic backend keeps the heuristic's choice.
    if (deterministic_) return;
    // Scratch operands in the compute type: the timings need real buffers, not real values.
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

// ---- pooling --------------------------------------------------------------------------------------

namespace {

cudak::Window3 window3(const PoolParams& p, const Shape& x, const Shape& y) {
    if (x.rank() < 3 || x.rank() > 5)
        throw ShapeError("CudaBackend: pooling needs 1 to 3 spatial dims, got " + x.str());
    return element::window3(p, x, y);
}

} // namespace

// Average pooling's cuDNN descriptor (symmetric padding only).
static cudnnPoolingDescriptor_t avgPoolDesc(CudaBackend::DnnState& dnn, const PoolParams& p) {
    for (size_t d = 0; d < p.padLo.size(); ++d) {
        if (p.padLo[d] != p.padHi[d]) {
            throw BackendError("CudaBackend: cuDNN average pooling pads both sides alike; got pad " +
                               std::to_string(p.padLo[d]) + " before and " + std::to_string(p.padHi[d]) + " after");
        }
    }
    std::vector<int> window = ints(p.kernel), pad = ints(p.padLo), stride = ints(p.stride);
    while (window.size() < 2) { // 1-D pooling as 2-D over [N, C, L, 1]
        window.push_back(1);
        pad.push_back(0);
        stride.push_back(1);
    }
    const bool includePad = p.kind == PoolKind::avgWithPad;
    const std::string key = keyOf(includePad ? "avg-pad" : "avg", {window, pad, stride});
    std::lock_guard<std::mutex> lock(dnn.mutex);
    auto& slot = dnn.pools[key];
    if (!slot) {
        auto desc = std::make_unique<PoolDesc>();
        TESSERA_CUDA_CHECK(cudnnCreatePoolingDescriptor(&desc->d));
        TESSERA_CUDA_CHECK(cudnnSetPoolingNdDescriptor(
            desc->d,
            includePad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
            CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(window.size()), window.data(), pad.data(), stride.data()));
        slot = std::move(desc);
    }
    return slot->d;
}

Tensor CudaBackend::poolForward(const PoolParams& p, const Tensor& xIn, const Shape& yShape, bool training,
                                Tensor& workspace) {
    const Tensor x = xIn.plain();
    Tensor y = Tensor::empty(yShape, DType::float32, device());
    if (p.kind == PoolKind::max) {
        workspace = training ? Tensor::empty(yShape, DType::int32, device()) : Tensor();
        cudak::maxPoolForward(fp(x), fp(y), training ? static_cast<int32_t*>(workspace.raw()) : nullptr,
                              window3(p, x.shape(), yShape), x.shape()[0] * x.shape()[1], s());
        return y;
    }
    workspace = Tensor();
    const float one = 1.0f, zero = 0.0f;
    s();
    TESSERA_CUDA_CHECK(cudnnPoolingForward(cudnn_, avgPoolDesc(*dnn_, p), &one, dnn_->tensor(nd(x.shape())), fp(x),
                                           &zero, dnn_->tensor(nd(yShape)), fp(y)));
    return y;
}

Tensor CudaBackend::poolBackward(const PoolParams& p, const Tensor& dyIn, const Tensor& workspace, const Shape& xShape,
                                 Layout xLayout) {
    const Tensor dy = dyIn.plain();
    Tensor dx = Tensor::empty(xShape, DType::float32, device());
    if (p.kind == PoolKind::max) {
        if (!workspace.defined()) throw BackendError("CudaBackend::poolBackward: no argmax from a training forward");
        const cudak::Window3 w = window3(p, xShape, dy.shape());
        cudak::maxPoolBackward(fp(dy), static_cast<const int32_t*>(workspace.raw()), fp(dx), xShape[0] * xShape[1],
                               w.in[0] * w.in[1] * w.in[2], w.out[0] * w.out[1] * w.out[2], s());
    } else {
        // Average pooling's gradient depends on neither x nor y; cuDNN still takes both
        // pointers, so dy and dx (of the same shapes) stand in for them.
        const float one = 1.0f, zero = 0.0f;
        s();
        const cudnnTensorDescriptor_t yDesc = dnn_->tensor(nd(dy.shape())), xDesc = dnn_->tensor(nd(xShape));
        TESSERA_CUDA_CHECK(cudnnPoolingBackward(cudnn_, avgPoolDesc(*dnn_, p), &one, yDesc, fp(dy), yDesc, fp(dy),
                                                xDesc, fp(dx), &zero, xDesc, fp(dx)));
    }
    return xLayout == Layout::plain ? dx : dx.toLayout(xLayout);
}

void CudaBackend::maxPoolIndices(const PoolParams& p, const Tensor& xIn, const Tensor& idx) {
    const Tensor x = xIn.plain();
    cudak::maxPoolForward(fp(x), nullptr, static_cast<int32_t*>(idx.raw()), window3(p, x.shape(), idx.shape()),
                          x.shape()[0] * x.shape()[1], s());
}

// ---- batch norm, softmax ------------------------------------------------------------------------

Tensor CudaBackend::batchNormForward(const Tensor& xIn, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                     const Tensor& var, float eps, bool training) {
    const Tensor x = xIn.plain();
    if (x.shape().rank() < 2)
        throw ShapeError("CudaBackend::batchNormForward: needs [N, C, ...], got " + x.shape().str());
    Tensor y = Tensor::empty(x.shape(), DType::float32, device());
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()));
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    if (training) {
        // Batch statistics: cuDNN saves the mean and the inverse standard deviation; the
        // biased variance the interface promises is recovered from the latter.
        Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
        TESSERA_CUDA_CHECK(cudnnBatchNormalizationForwardTraining(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xDesc,
                                                                  fp(x), xDesc, fp(y), pDesc, fp(scale), fp(shift), 1.0,
                                                                  nullptr, nullptr, eps, fp(mean), fp(invstd)));
        cudak::varianceFromInvStd(fp(invstd), eps, fp(var), x.shape()[1], s());
    } else {
        TESSERA_CUDA_CHECK(cudnnBatchNormalizationForwardInference(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xDesc,
                                                                   fp(x), xDesc, fp(y), pDesc, fp(scale), fp(shift),
                                                                   fp(mean), fp(var), eps));
    }
    return y;
}

Tensor CudaBackend::batchNormBackward(const Tensor& xIn, const Tensor& dyIn, const Tensor& scale, const Tensor& mean,
                                      const Tensor& var, float eps, const Tensor& dscale, const Tensor& dshift) {
    const Tensor x = xIn.plain(), dy = dyIn.plain();
    Tensor dx = Tensor::empty(x.shape(), DType::float32, device());
    Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
    cudak::invStdFromVariance(fp(var), eps, fp(invstd), x.shape()[1], s());
    const float one = 1.0f, zero = 0.0f;
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()));
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    TESSERA_CUDA_CHECK(cudnnBatchNormalizationBackward(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xDesc,
                                                       fp(x), xDesc, fp(dy), xDesc, fp(dx), pDesc, fp(scale),
                                                       fp(dscale), fp(dshift), eps, fp(mean), fp(invstd)));
    return dx;
}

void CudaBackend::softmaxForward(const Tensor& x, const Tensor& y) {
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t d = dnn_->tensor(channelView(x.shape()));
    TESSERA_CUDA_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d, fp(x),
                                           &zero, d, fp(y)));
}

void CudaBackend::softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t d = dnn_->tensor(channelView(y.shape()));
    TESSERA_CUDA_CHECK(cudnnSoftmaxBackward(cudnn_, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d, fp(y),
                                            d, fp(dy), &zero, d, fp(dx)));
}

} // namespace tessera
