#pragma once
/// \file The CUDA backend: cuBLAS for GEMM; cuDNN for convolution, deconvolution, average
/// pooling, batch norm and softmax; Tessera's kernels (cuda/*.cu) for the rest. One
/// stream, one cuBLAS handle and one cuDNN handle per device; storage comes from a caching
/// allocator, so the steady state calls no cudaMalloc. Private to the library.
///
/// Every op runs asynchronously on the device's stream, except the ones that return a
/// value to the host (costs, index checks, device-to-host copies), which wait for it.
/// Tensors on this backend are plain, or channels-last where setCudaChannelsLast is on
/// (2-D convolutions write that layout; batch norm, pooling and element-wise ops keep it).
/// Inputs in a blocked layout (moved from the CPU) are reordered on arrival.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/Backend.h"
#include "cuda/Check.h"

namespace tessera {

/// Device memory in size classes, kept for reuse when freed. All use is ordered on the
/// device's one stream, so a freed block can be handed out again at once.
class CachingAllocator {
public:
    explicit CachingAllocator(int device) : device_(device) {}
    /// A block of at least `bytes`; on cudaMalloc failure, frees the cache and tries once more.
    void* allocate(size_t bytes);
    void release(void* ptr);
    /// Give every cached block back to the driver.
    void emptyCache();
    MemoryStats stats() const;
    void resetPeak();
    /// Bytes held in the cache (free for reuse).
    size_t cachedBytes() const;
    /// The size class of a request: what `stats` counts for it (a block reused from the
    /// cache may be up to twice as big).
    static size_t roundUp(size_t bytes);

private:
    struct Block {
        size_t size;    // of the block
        size_t counted; // its request's size class
    };

    int device_;
    mutable std::mutex mutex_;
    std::multimap<size_t, void*> free_;
    std::unordered_map<void*, Block> live_;
    size_t cached_ = 0;
    MemoryStats stats_;
};

/// Page-locked host memory, kept for reuse when freed. Each block remembers the event
/// after the last copy out of it (recordCopy), and is handed out again only once that copy
/// has finished. Process-wide; thread-safe.
class PinnedHostPool {
public:
    void* allocate(size_t bytes);
    void release(void* ptr);
    /// Whether `ptr` lies in a block of this pool.
    bool contains(const void* ptr) const;
    /// Marks the block holding `ptr` as read by the work queued on `stream` so far.
    void recordCopy(const void* ptr, cudaStream_t stream, int device);

private:
    struct Block {
        size_t size;
        bool live;
        cudaEvent_t copied = nullptr; // after the last copy out of it
        int eventDevice = -1;
    };
    // The block holding `ptr`, or end() (mutex_ held).
    template <class Blocks> static auto find(Blocks& blocks, const void* ptr);
    mutable std::mutex mutex_;
    std::map<const void*, Block> blocks_;
};

PinnedHostPool& pinnedHostPool();
/// A plain host tensor in page-locked memory from pinnedHostPool().
Tensor pinnedHostTensor(const Shape& shape, DType dtype);

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int index);
    ~CudaBackend() override;
    Device device() const override { return Device::cuda(index_); }

    cudaStream_t stream() const { return stream_; }
    CachingAllocator& allocator() { return allocator_; }
    void synchronize() override;
    /// From page-locked memory: copied on the copy stream into an upload buffer whose last
    /// readers have finished, and the compute stream waits for the copy (see Backend).
    Tensor upload(const Tensor& host) override;
    /// Called when an upload's tensor is freed: its buffer is free for the next upload once
    /// the work queued on the compute stream so far has finished.
    void releaseUpload(void* ptr);
    /// Allow TF32 tensor-core math in cuBLAS and cuDNN for float32 (default: on).
    void setAllowTF32(bool allow);
    /// Choose only cuDNN algorithms that give the same bits on every run (default: off).
    void setDeterministic(bool on) { deterministic_ = on; }
    /// Carry float16 and bfloat16 activations between layers (setCuda16BitActivations; on
    /// by default).
    void set16BitActivations(bool on) { activations16_ = on; }
    bool carries16Bit(DType dtype) const override { return activations16_ && is16Bit(dtype); }
    /// The type a carrying op (batch norm, pooling) runs on for an input of `dtype`: that
    /// 16-bit type where it is carried, float32 otherwise.
    DType carriedOrFloat32(DType dtype) const { return carries16Bit(dtype) ? dtype : DType::float32; }
    /// The compute type of a 16-bit convolution where 16-bit activations are carried.
    DType convOutputDType(const ConvParams& p) override { return carries16Bit(p.compute) ? p.compute : DType::float32; }
    /// Channels-last activations (setCudaChannelsLast; on by default).
    void setChannelsLast(bool on) { channelsLast_ = on; }
    /// The layout a convolution of input shape `x` computing in `compute` runs in and
    /// writes: channelsLast for a 2-D one where that is on and its 16-bit type is carried
    /// (cuDNN's fast NHWC kernels, batch norm's above all, are 16-bit ones; in float32 its
    /// channels-last batch norm runs generic kernels several times slower than NCHW's),
    /// plain otherwise.
    Layout convLayout(const Shape& x, DType compute) const {
        return channelsLast_ && x.rank() == 4 && carries16Bit(compute) ? Layout::channelsLast : Layout::plain;
    }
    Layout convOutputLayout(const ConvParams& p, const Shape& x, const Shape&, const Shape&, bool) override {
        return convLayout(x, p.compute);
    }
    int64_t convScratchBytes(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias,
                             bool backward) override;
    /// The layout batch norm and pooling run in for an input in `layout`: channelsLast
    /// stays, anything else runs plain.
    static Layout carriedLayout(Layout layout) {
        return layout == Layout::channelsLast ? Layout::channelsLast : Layout::plain;
    }
    /// `t` in `layout` and of `dtype`: itself where it is, otherwise one reorder that
    /// converts too.
    Tensor arranged(const Tensor& t, Layout layout, DType dtype);

    std::shared_ptr<Storage> allocate(size_t bytes) override;
    void copy(const Tensor& src, const Tensor& dst) override;
    void copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst, int64_t dstOffset,
                     int64_t dstStride, int64_t rows, int64_t width) override;
    void fillBytes(const Tensor& t, unsigned char byte) override;
    void reorder(const Tensor& src, const Tensor& dst) override;
    MemoryStats memoryStats() const override;
    int64_t allocationBytes(int64_t bytes) const override {
        return static_cast<int64_t>(CachingAllocator::roundUp(static_cast<size_t>(bytes)));
    }
    void resetPeak() override;

    void fill(const Tensor& t, float value) override;
    void fillUniform(const Tensor& t, float lo, float hi, Generator& gen) override;
    void fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) override;

    using Backend::gemm;
    void gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta, const Tensor& C,
              DType compute) override;
    void gemmBatched(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                     const Tensor& C) override;
    void gemmWeights(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, const Tensor& bias,
                     float beta, const Tensor& C, DType compute, const std::shared_ptr<LayerState>& packed) override;
    /// The compute type where it carries it (setCuda16BitActivations), as convOutputDType.
    DType gemmOutputDType(DType compute) const override { return carriedOrFloat32(compute); }
    void broadcastRows(const Tensor& row, const Tensor& y) override;
    /// 16-bit x: Tensor's own column sums (float32 accumulation, the same on every run).
    void sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) override;
    /// A whole batch of heads at once, up to 256 MiB of scores: products big enough to fill the device.
    int64_t attentionBlockBytes() const override { return int64_t{256} << 20; }
    /// cuDNN's SDPA operations (cuda/Attention.cpp) under setCudaFusedAttention (off by
    /// default), not causal, where the cuDNN loaded (9.17 or later) builds a plan for the problem;
    /// refused problems are remembered, the first one said on stderr.
    bool fusesAttention(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v, DType dtype,
                        bool backward) const override;
    int64_t fusedAttentionScratchBytes(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v,
                                       DType dtype, bool backward, bool stats) const override;
    bool fusedAttentionForward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& y, const Tensor& stats) override;
    bool fusedAttentionBackward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& y, const Tensor& dy, const Tensor& stats, const Tensor& dq,
                                const Tensor& dk, const Tensor& dv) override;
    void setFusedAttention(bool on) { fusedAttention_ = on; }
    /// A fused attention problem's cuDNN plan, and those made so far (cuda/Attention.cpp).
    struct AttentionPlan;
    struct AttentionPlans;

    void axpbyz(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) override;

    void axpbyzRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) override;
    void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) override;
    void mul(const Tensor& a, const Tensor& b, const Tensor& y) override;
    void binaryBroadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) override;
    void sumTo(const Tensor& x, float alpha, const Tensor& y) override;
    void activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) override;
    void activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                            const Tensor& dx) override;
    void affine(const Tensor& x, float a, float b, const Tensor& y) override;
    void power(const Tensor& x, float p, const Tensor& y) override;
    void mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) override;
    void cast(const Tensor& x, const Tensor& y) override;

    Tensor convForward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                       const Shape& yShape) override;
    Tensor convBackwardData(const ConvParams& p, const Tensor& dy, const Tensor& w, const Shape& xShape) override;
    void convBackwardWeights(const ConvParams& p, const Tensor& x, const Tensor& dy, float scale, float momentum,
                             const Tensor& dw, const Tensor& db) override;
    void optimizeConv(const ConvParams& p, const Shape& xShape, const Shape& wShape, const Shape& yShape,
                      size_t memlimit) override;
    /// A training 16-bit convolution keeps its input's 16-bit copy for backward-weights.
    int64_t convKeptBytes(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) override;

    Tensor poolForward(const PoolParams& p, const Tensor& x, const Shape& yShape, bool training,
                       Tensor& workspace) override;
    Tensor poolBackward(const PoolParams& p, const Tensor& dy, const Tensor& workspace, const Shape& xShape,
                        Layout xLayout) override;
    void maxPoolIndices(const PoolParams& p, const Tensor& x, const Tensor& idx) override;

    void gatherAxis(const Tensor& x, const Tensor& idx, const Tensor& y) override;
    void scatterAddAxis(const Tensor& src, const Tensor& idx, const Tensor& dst) override;
    void topKIndices(const Tensor& x, int64_t k, const Tensor& idx) override;
    void gatherRows(const Tensor& table, const Tensor& idx, const Tensor& y) override;
    void scatterAddRows(const Tensor& src, const Tensor& idx, float scale, const Tensor& table) override;
    void permute(const Tensor& x, const std::vector<int64_t>& perm, const Tensor& y) override;

    Tensor batchNormForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                            const Tensor& var, float eps, bool training) override;
    Tensor batchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& mean,
                             const Tensor& var, float eps, const Tensor& dscale, const Tensor& dshift) override;
    /// Batch norm with its ReLU (containers/Fusion.h) where 16-bit activations are carried
    /// (setCuda16BitActivations): cuDNN's normalisation, the ReLU in place on its output,
    /// which is the mask too (no memory of its own); backward masks the gradient, then
    /// normalises it back.
    bool fusesBatchNormRelu() const override { return activations16_; }
    Tensor batchNormReluForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                const Tensor& var, float eps, bool training, Tensor& mask) override;
    Tensor batchNormReluBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& shift,
                                 const Tensor& mean, const Tensor& var, float eps, const Tensor& mask,
                                 const Tensor& dscale, const Tensor& dshift) override;
    int64_t batchNormReluMaskBytes(const Shape&, Layout) override { return 0; }
    /// Training with the ReLU on 16-bit channels-last x and z of one type: cuDNN's fused
    /// batch norm + add + ReLU, one call (cudnnBatchNormalizationForwardTrainingEx), which
    /// reserves what its backward reads. Where cuDNN does not take the problem (it answers
    /// NOT_SUPPORTED; this backend then stops asking), and in every other case: the
    /// normalisation, then the sum, as by default.
    Tensor batchNormAddForward(const Tensor& x, const Tensor& z, const Tensor& scale, const Tensor& shift,
                               const Tensor& mean, const Tensor& var, float eps, bool training, bool relu,
                               Tensor& reserve) override;
    /// cuDNN's reserve for 16-bit channels-last x (setCuda16BitActivations, setCudaChannelsLast).
    int64_t batchNormAddReserveBytes(const Shape& x, Layout layout, DType dtype) override;
    /// After a forward that reserved: the ReLU's, the sum's and the normalisation's
    /// gradients in one call (cudnnBatchNormalizationBackwardEx); else, and where cuDNN
    /// answers NOT_SUPPORTED (said once; the forward stops fusing too), as by default.
    Tensor batchNormAddBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& scale,
                                const Tensor& shift, const Tensor& mean, const Tensor& var, float eps, bool relu,
                                const Tensor& reserve, Tensor& dz, const Tensor& dscale, const Tensor& dshift) override;
    void rowNormForward(const RowNormParams& p, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
    void rowNormBackward(const RowNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                         const Tensor& dbeta) override;
    Tensor lrnForward(const LrnParams& p, const Tensor& x, Tensor& workspace) override;
    Tensor lrnBackward(const LrnParams& p, const Tensor& x, const Tensor& dy, const Tensor& workspace) override;

    void resampleForward(const ResampleParams& p, const Tensor& x, const Tensor& y) override;
    void resampleBackward(const ResampleParams& p, const Tensor& dy, const Tensor& dx) override;
    void spatialTfForward(const Tensor& x, const Tensor& theta, const Tensor& y) override;
    void spatialTfBackward(const Tensor& x, const Tensor& theta, const Tensor& dy, const Tensor& dx,
                           const Tensor& dtheta) override;
    void padForward(PadMode mode, float value, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                    const Tensor& x, const Tensor& y) override;
    void padBackward(PadMode mode, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi, const Tensor& dy,
                     const Tensor& dx) override;
    void preluForward(const Tensor& x, const Tensor& slopes, const Tensor& y) override;
    void preluBackward(const Tensor& x, const Tensor& slopes, const Tensor& dy, const Tensor& dx, float scale,
                       float momentum, const Tensor& dslopes) override;

    void crossEntropy(const Tensor& scores, const Tensor& labels, const Tensor& weights, float smoothing,
                      const Tensor& grad, double& error, int64_t& correct) override;
    double pointwiseCost(CostKind kind, const Tensor& pred, const Tensor& target, const Tensor& grad) override;
    double svmCost(const Tensor& scores, const Tensor& labels, bool l2, const Tensor& grad) override;
    void ctc(const Tensor& scores, const Tensor& labels, const Tensor& labelLengths, const Tensor& inputLengths,
             int32_t blank, const std::vector<float>& gradScale, const Tensor& grad,
             std::vector<double>& losses) override;
    bool scaleCheckFinite(const Tensor& t, float factor) override;
    double sumSquares(const Tensor& t) override;
    void optimizerUpdate(const UpdateParams& p, const Tensor& param, const Tensor& grad, const Tensor& s1,
                         const Tensor& s2, const Tensor& s3) override;
    /// cuDNN's RNN API (cuda/Rnn.cpp).
    void rnnForward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0, const Tensor& c0,
                    bool training, const Tensor& y, const Tensor& hN, const Tensor& cN, Tensor& reserve) override;
    int64_t rnnWorkspaceBytes(const RnnParams& p, const Shape& x) override;
    void rnnBackward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0, const Tensor& c0,
                     const Tensor& y, const Tensor& hN, const Tensor& cN, const Tensor& dy, const Tensor& dhN,
                     const Tensor& dcN, const Tensor& reserve, const Tensor& dx, const Tensor& dh0, const Tensor& dc0,
                     const RnnWeights& g) override;

    void softmaxForward(const Tensor& x, const Tensor& y) override;
    void softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
    void logSoftmaxForward(const Tensor& x, const Tensor& y) override;
    void logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
    void dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) override;
    void dropoutApply(const Tensor& x, float p, uint64_t seed, uint64_t first, const Tensor& y) override;

    /// cuDNN descriptors and convolution algorithms, cached per shape (cuda/Dnn.h).
    struct DnnState;

private:
    void axpbyzMaybeRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z, bool relu);
    /// Makes this backend's device current on the calling thread; returns its stream.
    cudaStream_t s() const;
    /// A device scratch buffer of at least `bytes`, kept and grown as needed.
    void* workspace(size_t bytes);
    /// Hands the workspace back to the allocator's cache (the next workspace() allocates).
    void releaseWorkspace();
    /// Eight 8-byte device slots for results the host reads back (sums, counts, bad indices).
    void* scalars();
    /// Throws ShapeError naming `op` and the first index outside [0, limit), if any.
    void checkIndexRange(const char* op, const Tensor& idx, int64_t limit, const char* what = "index");

    int index_;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    cudnnHandle_t cudnn_ = nullptr;
    CachingAllocator allocator_;
    void* workspace_ = nullptr;
    size_t workspaceBytes_ = 0;
    void* scalars_ = nullptr;
    bool allowTF32_ = true;
    bool activations16_ = false;
    bool channelsLast_ = false;
    bool deterministic_ = false;
    bool fusedAttention_ = false;
    // The plan of a fused attention problem (its key: see cuda/Attention.cpp), made on first use.
    AttentionPlan& attentionPlan(const std::vector<int64_t>& key) const;
    void runAttentionPlan(const AttentionPlan& plan, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                          bool zeroWorkspace);
    mutable std::once_flag attentionPlansMade_;
    mutable std::shared_ptr<AttentionPlans> attentionPlans_; // shared: its type is complete in Attention.cpp only
    bool batchNormAddRefused_ = false;                       // cuDNN answered NOT_SUPPORTED to its fused form once
    bool persistentNormRefused_ = false;                     // cuDNN refused its persistent batch norm once
    /// The workspace bytes of cuDNN's persistent batch norm (the larger of forward's and
    /// backward's) per shape and type it has taken.
    std::map<std::pair<std::vector<int64_t>, DType>, size_t> persistentNormBytes_;
    /// After cuDNN's fused batch norm + add + ReLU (`pass`: "" or " backward") answered
    /// `status` for x: NOT_SUPPORTED and BAD_PARAM are said once and stop the fusing; any
    /// other status throws.
    void stopFusingNormAdd(cudnnStatus_t status, const char* pass, const Shape& x, DType t);
    /// Runs `call(workspace, bytes)`, one of cuDNN's persistent batch norm calls, where x
    /// takes it (16-bit, channels-last, no reserve needed); false where it did not run.
    template <class Call>
    bool persistentNorm(const Tensor& x, cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t pDesc, Call&& call);
    std::unique_ptr<DnnState> dnn_;
    // Uploads from page-locked memory: their stream, and their device buffers (from the
    // allocator, kept), each with the events ordering its copies against its readers.
    struct UploadBuffer {
        void* ptr;
        size_t bytes;
        bool busy = false;
        cudaEvent_t copied = nullptr;   // on copyStream_, after the copy into it
        cudaEvent_t released = nullptr; // on stream_, when its tensor was freed
        bool wasReleased = false;
    };
    cudaStream_t copyStream_ = nullptr;
    std::mutex uploadMutex_;
    // A vector of ones on the device (its own cudaMalloc, outside the allocator's
    // statistics), for column sums as matrix-vector products; grown on demand.
    const float* ones(int64_t n);
    void sumColumns(const float* x, int64_t rows, int64_t cols, int64_t ld, float alpha, float beta, float* y);
    std::mutex onesMutex_;
    float* ones_ = nullptr;
    int64_t onesLength_ = 0;
    std::vector<std::unique_ptr<UploadBuffer>> uploads_;
};

/// The backend of CUDA device `index` (created on first use; lives until the process ends).
CudaBackend& cudaBackend(int index);
/// The backends made so far.
std::vector<CudaBackend*> madeBackends();

} // namespace tessera
