#pragma once

// What the cuDNN-backed op files of the CUDA backend (Conv, Pool, Norm, Softmax) share:
// data types, descriptors built once per shape and kept, the convolution problem and its
// algorithm choice, and CudaBackend::DnnState, which holds them. Private to cuda/.
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/Errors.h"
#include "cuda/CudaBackend.h"

namespace tessera {

// Named rather than anonymous: CudaBackend::DnnState holds these types.
namespace cudnn_util {

/// Workspace the default (heuristic) algorithm choice may use per convolution call.
inline constexpr size_t kDefaultWorkspaceLimit = size_t{512} << 20;

inline cudnnDataType_t dnnType(DType t) {
    switch (t) {
    case DType::float32: return CUDNN_DATA_FLOAT;
    case DType::float16: return CUDNN_DATA_HALF;
    case DType::bfloat16: return CUDNN_DATA_BFLOAT16;
    case DType::int32: break;
    }
    throw BackendError("cuDNN tensors of " + str(t) + " are not used by Tessera");
}

inline std::vector<int> ints(const std::vector<int64_t>& v) {
    std::vector<int> out;
    out.reserve(v.size());
    for (int64_t x : v) out.push_back(static_cast<int>(x));
    return out;
}

// cuDNN needs 4 or 5 dims: 1-D problems become 2-D with a trailing unit dim.
inline std::vector<int> nd(const Shape& s) {
    std::vector<int> d = ints(s.dims());
    while (d.size() < 4) d.push_back(1);
    return d;
}

// [N, C, everything else, 1]: the view batch norm and softmax run over.
inline std::vector<int> channelView(const Shape& s) {
    const int64_t n = s[0], c = s.rank() > 1 ? s[1] : 1;
    return {static_cast<int>(n), static_cast<int>(c), static_cast<int>((n * c) != 0 ? s.numel() / (n * c) : 1), 1};
}

inline std::string keyOf(const char* tag, std::initializer_list<std::vector<int>> parts) {
    std::string k = tag;
    for (const auto& p : parts) {
        k += '|';
        for (int v : p) k += std::to_string(v) + ',';
    }
    return k;
}

// The strides of a packed [N, C, *spatial] tensor: row-major, or channels-last ([N, *spatial,
// C] in memory: C's stride 1, the last spatial dim's C, N's C times every spatial dim).
inline std::vector<int> packedStrides(const std::vector<int>& dims, bool channelsLast) {
    std::vector<int> strides(dims.size(), 1);
    if (!channelsLast || dims.size() < 3) {
        for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
        return strides;
    }
    int acc = dims[1];
    for (size_t i = dims.size(); i-- > 2;) {
        strides[i] = acc;
        acc *= dims[i];
    }
    strides[1] = 1;
    strides[0] = acc;
    return strides;
}

class TensorDesc {
public:
    explicit TensorDesc(const std::vector<int>& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT,
                        bool channelsLast = false) {
        TESSERA_CUDA_CHECK(cudnnCreateTensorDescriptor(&d_));
        const std::vector<int> strides = packedStrides(dims, channelsLast);
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
// In channels-last, `in` and `out` are [N, *spatial, C] and the filter [K, *k, C/g].
struct ConvProblem {
    std::unique_ptr<TensorDesc> in, out, bias, inF32, outF32;
    DType type = DType::float32;
    bool channelsLast = false;
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
// `deterministic`, gives the same bits on every run. Among timed results (cudnnFind*'s,
// fastest first), the one of least workspace of those within 2% of the fastest such: the
// workspace stays allocated once grown (CudaBackend::workspace), so that much of one
// convolution's time (about the timings' own noise) is worth up to hundreds of MiB of a
// step's peak.
template <class Perf>
ConvProblem::Choice pick(const Perf* results, int count, size_t limit, bool allowTF32, bool deterministic,
                         const char* what) {
    auto eligible = [&](const Perf& r) {
        if (r.status != CUDNN_STATUS_SUCCESS || r.memory > limit) return false;
        if (!allowTF32 && r.mathType != CUDNN_FMA_MATH && r.mathType != CUDNN_DEFAULT_MATH) return false;
        return !deterministic || r.determinism == CUDNN_DETERMINISTIC;
    };
    const Perf* first = nullptr; // the heuristic's choice, or the fastest timed one
    for (int i = 0; i < count; ++i) {
        const Perf& r = results[i];
        if (!eligible(r)) continue;
        if (!first || (r.time > 0 && first->time > 0 && r.time < first->time)) first = &r;
        if (!(first->time > 0)) break; // a heuristic's ranking: no times to weigh
    }
    if (!first) {
        throw BackendError(std::string("cuDNN offers no ") + (deterministic ? "deterministic " : "") + what +
                           " algorithm within " + std::to_string(limit) + " bytes of workspace");
    }
    const Perf* chosen = first;
    if (first->time > 0) {
        for (int i = 0; i < count; ++i) {
            const Perf& r = results[i];
            if (eligible(r) && r.time > 0 && r.time <= first->time * 1.02f && r.memory < chosen->memory) chosen = &r;
        }
    }
    return {static_cast<int>(chosen->algo), chosen->mathType, chosen->memory};
}

} // namespace cudnn_util

// The descriptors and convolution problems of one device, built once per shape and kept.
struct CudaBackend::DnnState {
    std::mutex mutex;
    std::map<std::tuple<std::vector<int>, DType, bool>, std::unique_ptr<cudnn_util::TensorDesc>> tensors;
    std::map<std::string, std::unique_ptr<cudnn_util::ConvProblem>> convs;
    std::map<std::string, std::unique_ptr<cudnn_util::PoolDesc>> pools;

    cudnnActivationDescriptor_t reluDesc = nullptr;

    ~DnnState() {
        if (reluDesc) cudnnDestroyActivationDescriptor(reluDesc);
    }

    /// A ReLU activation descriptor (for cuDNN's fused batch norm + add + ReLU).
    cudnnActivationDescriptor_t relu() {
        std::lock_guard<std::mutex> lock(mutex);
        if (!reluDesc) {
            TESSERA_CUDA_CHECK(cudnnCreateActivationDescriptor(&reluDesc));
            TESSERA_CUDA_CHECK(
                cudnnSetActivationDescriptor(reluDesc, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
        }
        return reluDesc;
    }

    /// A packed tensor descriptor of these dims and elements, row-major or channels-last.
    cudnnTensorDescriptor_t tensor(const std::vector<int>& dims, DType dtype = DType::float32,
                                   Layout layout = Layout::plain) {
        const bool last = layout == Layout::channelsLast;
        std::lock_guard<std::mutex> lock(mutex);
        auto& slot = tensors[{dims, dtype, last}];
        if (!slot) slot = std::make_unique<cudnn_util::TensorDesc>(dims, cudnn_util::dnnType(dtype), last);
        return slot->get();
    }
};

} // namespace tessera
