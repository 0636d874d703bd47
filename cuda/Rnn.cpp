// Recurrent layers through cuDNN's RNN API (cudnnRNNForward and the _v8 backward calls):
// one layer and one or two directions per call, as Backend::rnnForward asks. The weights
// stay in PyTorch's layout outside; each call copies them gate by gate into cuDNN's weight
// space (cuDNN's gate order is PyTorch's: LSTM i, f, g, o; GRU r, z, n, with the reset gate
// applied after the recurrent product as PyTorch computes it), and backward copies the
// weight gradients back out. Descriptors and space sizes are cached per shape.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "cuda/CudaBackend.h"

namespace tessera {

namespace {

float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }

cudnnRNNMode_t cellOf(RnnMode mode) {
    switch (mode) {
    case RnnMode::relu: return CUDNN_RNN_RELU;
    case RnnMode::tanh: return CUDNN_RNN_TANH;
    case RnnMode::lstm: return CUDNN_LSTM;
    case RnnMode::gru: return CUDNN_GRU;
    }
    throw BackendError("CudaBackend::rnn: unknown mode");
}

// One layer's descriptors at one shape: T steps of N sequences of I features, hidden H,
// D directions.
struct RnnPlan {
    int64_t T, N, I, H, D, G;
    cudnnRNNDescriptor_t rnn = nullptr;
    cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
    cudnnTensorDescriptor_t h = nullptr;
    cudnnTensorDescriptor_t mat = nullptr, vec = nullptr; // filled by cudnnGetRNNWeightParams
    size_t weightBytes = 0, workInfer = 0, workTrain = 0, reserve = 0;
    Tensor seqLengths; ///< int32 [N] on the device, all T

    RnnPlan() = default;
    RnnPlan(const RnnPlan&) = delete;
    RnnPlan& operator=(const RnnPlan&) = delete;
    ~RnnPlan() {
        if (rnn) cudnnDestroyRNNDescriptor(rnn);
        if (x) cudnnDestroyRNNDataDescriptor(x);
        if (y) cudnnDestroyRNNDataDescriptor(y);
        for (cudnnTensorDescriptor_t t : {h, mat, vec}) {
            if (t) cudnnDestroyTensorDescriptor(t);
        }
    }
};

void setData(cudnnRNNDataDescriptor_t d, int64_t T, int64_t N, int64_t C) {
    std::vector<int> lengths(static_cast<size_t>(N), static_cast<int>(T));
    float fill = 0.0f;
    TESSERA_CUDA_CHECK(cudnnSetRNNDataDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                                 static_cast<int>(T), static_cast<int>(N), static_cast<int>(C),
                                                 lengths.data(), &fill));
}

// The elements a weight-params descriptor covers.
int64_t elementsOf(cudnnTensorDescriptor_t d) {
    cudnnDataType_t type;
    int rank = 0, dims[8], strides[8];
    TESSERA_CUDA_CHECK(cudnnGetTensorNdDescriptor(d, 8, &type, &rank, dims, strides));
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
}

struct Plans {
    std::mutex mutex;
    std::map<std::vector<int64_t>, std::unique_ptr<RnnPlan>> plans;
};

RnnPlan& planFor(cudnnHandle_t handle, Device device, bool allowTF32, const RnnParams& p, const Shape& x) {
    static Plans cache;
    if (x.rank() != 3) throw ShapeError("CudaBackend::rnn: expects x [T, N, I], got " + x.str());
    if (p.mode == RnnMode::gru && !p.linearBeforeReset) {
        throw BackendError("CudaBackend::rnn: a GRU with linearBeforeReset false (the reset applied to h before "
                           "its product: ONNX's linear_before_reset 0): cuDNN computes only the linear-before-reset "
                           "GRU; run this layer on the CPU");
    }
    if (p.directions != 1 && p.directions != 2) throw BackendError("CudaBackend::rnn: directions must be 1 or 2");
    const std::vector<int64_t> key{
        device.index, static_cast<int64_t>(p.mode), p.directions, p.hidden, x[0], x[1], x[2], allowTF32 ? 1 : 0};
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto& slot = cache.plans[key];
    if (slot) return *slot;
    auto plan = std::make_unique<RnnPlan>();
    RnnPlan& q = *plan;
    q.T = x[0], q.N = x[1], q.I = x[2], q.H = p.hidden, q.D = p.directions, q.G = rnnGates(p.mode);
    TESSERA_CUDA_CHECK(cudnnCreateRNNDescriptor(&q.rnn));
    TESSERA_CUDA_CHECK(cudnnSetRNNDescriptor_v8(
        q.rnn, CUDNN_RNN_ALGO_STANDARD, cellOf(p.mode), CUDNN_RNN_DOUBLE_BIAS,
        q.D == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
        allowTF32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, static_cast<int32_t>(q.I), static_cast<int32_t>(q.H),
        static_cast<int32_t>(q.H), 1, nullptr, CUDNN_RNN_PADDED_IO_ENABLED));
    TESSERA_CUDA_CHECK(cudnnCreateRNNDataDescriptor(&q.x));
    TESSERA_CUDA_CHECK(cudnnCreateRNNDataDescriptor(&q.y));
    setData(q.x, q.T, q.N, q.I);
    setData(q.y, q.T, q.N, q.D * q.H);
    TESSERA_CUDA_CHECK(cudnnCreateTensorDescriptor(&q.h));
    const int dims[3] = {static_cast<int>(q.D), static_cast<int>(q.N), static_cast<int>(q.H)};
    const int strides[3] = {static_cast<int>(q.N * q.H), static_cast<int>(q.H), 1};
    TESSERA_CUDA_CHECK(cudnnSetTensorNdDescriptor(q.h, CUDNN_DATA_FLOAT, 3, dims, strides));
    TESSERA_CUDA_CHECK(cudnnCreateTensorDescriptor(&q.mat));
    TESSERA_CUDA_CHECK(cudnnCreateTensorDescriptor(&q.vec));
    TESSERA_CUDA_CHECK(cudnnGetRNNWeightSpaceSize(handle, q.rnn, &q.weightBytes));
    size_t unused = 0;
    TESSERA_CUDA_CHECK(cudnnGetRNNTempSpaceSizes(handle, q.rnn, CUDNN_FWD_MODE_INFERENCE, q.x, &q.workInfer, &unused));
    TESSERA_CUDA_CHECK(
        cudnnGetRNNTempSpaceSizes(handle, q.rnn, CUDNN_FWD_MODE_TRAINING, q.x, &q.workTrain, &q.reserve));
    q.seqLengths =
        Tensor::fromVector({q.N}, std::vector<int32_t>(static_cast<size_t>(q.N), static_cast<int32_t>(q.T))).to(device);
    slot = std::move(plan);
    return *slot;
}

void checkWeights(const RnnPlan& q, const RnnWeights& w) {
    if (w.wIh.size() != static_cast<size_t>(q.D) || w.wHh.size() != w.wIh.size() || w.bIh.size() != w.wIh.size() ||
        w.bHh.size() != w.wIh.size()) {
        throw BackendError("CudaBackend::rnn: one set of weights per direction expected");
    }
    for (size_t k = 0; k < w.wIh.size(); ++k) {
        if (w.wIh[k].shape() != Shape{q.G * q.H, q.I} || w.wHh[k].shape() != Shape{q.G * q.H, q.H} ||
            w.bIh[k].numel() != q.G * q.H || w.bHh[k].numel() != q.G * q.H) {
            throw ShapeError("CudaBackend::rnn: weights " + w.wIh[k].shape().str() + ", " + w.wHh[k].shape().str() +
                             " do not fit input size " + std::to_string(q.I) + " and hidden size " +
                             std::to_string(q.H));
        }
    }
}

// Copies between the weights in PyTorch's layout and cuDNN's weight space `space`:
// toSpace packs w into it, else the space's contents go out to w.
void transfer(cudnnHandle_t handle, cudaStream_t stream, const RnnPlan& q, void* space, const RnnWeights& w,
              bool toSpace) {
    for (int64_t dir = 0; dir < q.D; ++dir) {
        const auto d = static_cast<size_t>(dir);
        for (int64_t lin = 0; lin < 2 * q.G; ++lin) { // [0, G): on the input, [G, 2 G): on the hidden state
            const bool recurrent = lin >= q.G;
            const int64_t gate = lin % q.G, cols = recurrent ? q.H : q.I;
            void *mAddr = nullptr, *bAddr = nullptr;
            TESSERA_CUDA_CHECK(cudnnGetRNNWeightParams(handle, q.rnn, static_cast<int32_t>(dir), q.weightBytes, space,
                                                       static_cast<int32_t>(lin), q.mat, &mAddr, q.vec, &bAddr));
            if (elementsOf(q.mat) != q.H * cols || elementsOf(q.vec) != q.H) {
                throw BackendError("CudaBackend::rnn: cuDNN's weight matrix " + std::to_string(lin) + " holds " +
                                   std::to_string(elementsOf(q.mat)) + " elements, expected " +
                                   std::to_string(q.H * cols));
            }
            float* m = fp(recurrent ? w.wHh[d] : w.wIh[d]) + gate * q.H * cols;
            float* b = fp(recurrent ? w.bHh[d] : w.bIh[d]) + gate * q.H;
            const auto mBytes = static_cast<size_t>(q.H * cols) * sizeof(float), bBytes = q.H * sizeof(float);
            TESSERA_CUDA_CHECK(
                cudaMemcpyAsync(toSpace ? mAddr : m, toSpace ? m : mAddr, mBytes, cudaMemcpyDeviceToDevice, stream));
            TESSERA_CUDA_CHECK(cudaMemcpyAsync(toSpace ? bAddr : b, toSpace ? b : bAddr, static_cast<size_t>(bBytes),
                                               cudaMemcpyDeviceToDevice, stream));
        }
    }
}

Tensor weightSpace(const RnnPlan& q, Device device) {
    return Tensor::empty({static_cast<int64_t>((q.weightBytes + 3) / 4)}, DType::float32, device);
}

} // namespace

void CudaBackend::rnnForward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0,
                             const Tensor& c0, bool training, const Tensor& y, const Tensor& hN, const Tensor& cN,
                             Tensor& reserve) {
    cudaStream_t stream = s();
    RnnPlan& q = planFor(cudnn_, device(), allowTF32_, p, x.shape());
    checkWeights(q, w);
    const Tensor space = weightSpace(q, device());
    transfer(cudnn_, stream, q, space.raw(), w, true);
    const size_t workBytes = training ? q.workTrain : q.workInfer;
    void* work = workBytes ? workspace(workBytes) : nullptr;
    if (training) reserve = Tensor::empty({static_cast<int64_t>((q.reserve + 3) / 4) + 1}, DType::int32, device());
    const bool lstm = p.mode == RnnMode::lstm;
    TESSERA_CUDA_CHECK(cudnnRNNForward(cudnn_, q.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                       static_cast<const int32_t*>(q.seqLengths.raw()), q.x, x.raw(), q.y, y.raw(), q.h,
                                       h0.raw(), hN.raw(), q.h, lstm ? c0.raw() : nullptr, lstm ? cN.raw() : nullptr,
                                       q.weightBytes, space.raw(), workBytes, work, training ? q.reserve : 0,
                                       training ? reserve.raw() : nullptr));
}

int64_t CudaBackend::rnnWorkspaceBytes(const RnnParams& p, const Shape& x) {
    s();
    const RnnPlan& q = planFor(cudnn_, device(), allowTF32_, p, x);
    return allocationBytes(static_cast<int64_t>(((q.reserve + 3) / 4 + 1) * 4));
}

void CudaBackend::rnnBackward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0,
                              const Tensor& c0, const Tensor& y, const Tensor& /*hN*/, const Tensor& /*cN*/,
                              const Tensor& dy, const Tensor& dhN, const Tensor& dcN, const Tensor& reserve,
                              const Tensor& dx, const Tensor& dh0, const Tensor& dc0, const RnnWeights& g) {
    cudaStream_t stream = s();
    RnnPlan& q = planFor(cudnn_, device(), allowTF32_, p, x.shape());
    checkWeights(q, w);
    checkWeights(q, g);
    const Tensor space = weightSpace(q, device()), dspace = weightSpace(q, device());
    transfer(cudnn_, stream, q, space.raw(), w, true);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dspace.raw(), 0, q.weightBytes, stream)); // the weights' call adds
    void* work = q.workTrain ? workspace(q.workTrain) : nullptr;
    const bool lstm = p.mode == RnnMode::lstm;
    const auto* lengths = static_cast<const int32_t*>(q.seqLengths.raw());
    TESSERA_CUDA_CHECK(cudnnRNNBackwardData_v8(cudnn_, q.rnn, lengths, q.y, y.raw(), dy.raw(), q.x, dx.raw(), q.h,
                                               h0.raw(), dhN.raw(), dh0.raw(), q.h, lstm ? c0.raw() : nullptr,
                                               lstm ? dcN.raw() : nullptr, lstm ? dc0.raw() : nullptr, q.weightBytes,
                                               space.raw(), q.workTrain, work, q.reserve, reserve.raw()));
    TESSERA_CUDA_CHECK(cudnnRNNBackwardWeights_v8(cudnn_, q.rnn, CUDNN_WGRAD_MODE_ADD, lengths, q.x, x.raw(), q.h,
                                                  h0.raw(), q.y, y.raw(), q.weightBytes, dspace.raw(), q.workTrain,
                                                  work, q.reserve, reserve.raw()));
    transfer(cudnn_, stream, q, dspace.raw(), g, false);
}

} // namespace tessera
