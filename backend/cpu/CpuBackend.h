#pragma once
/// \file The CPU backend: oneDNN's matmul for GEMM (float32 on OpenBLAS's sgemm where
/// setFloat32Gemm says so); oneDNN for convolution, deconvolution, pooling with
/// overlapping windows, batch norm, LRN, resampling, PReLU, activations, softmax and layout
/// reorders; own loops (OpenMP) for max pooling of blocked inputs with disjoint windows,
/// fused attention and the rest. Its definitions are split by op family over
/// backend/cpu/*.cpp.

#include "backend/Backend.h"
#include "backend/Errors.h"

namespace tessera {

/// How CpuBackend computes a bfloat16 2-D convolution's backward passes: oneDNN's direct
/// kernels, or GEMMs (an im2col and oneDNN's matmul for the weight gradient; a matmul and a
/// col2im for the input gradient). `automatic` takes the GEMMs where the CPU has AMX and
/// the output plane is small (weights: at most 16 pixels, or strided with at most 64 or a
/// 1x1 kernel; data: at most 16 pixels, or strided 1x1), where oneDNN 2.6's AMX kernels
/// were measured slower.
enum class ConvBackwardAlgo { automatic, direct, gemm };

/// How a GEMM on oneDNN's matmul (CpuBackend::gemm in bfloat16, and in float32 on the
/// oneDNN engine; Linear's) takes its B operand: converted into oneDNN's blocked layout on
/// every call, read plain with B's own strides (in bfloat16: converted to plain bfloat16;
/// the matmul packs it inside), or (automatic) whichever a timing of both on the first call
/// of each shape found faster (in float32, of each power-of-two range of M, and plain
/// below 16 rows or columns). B kept packed (gemmWeights) is converted once, so automatic
/// takes the blocked layout there (float32 always). All three give the same results (in
/// float32 from 16 rows and columns on; a single row of a transposed B rounds otherwise
/// blocked than plain on AVX2).
enum class GemmWeightsLayout { automatic, blocked, plain };

/// What float32 GEMMs (CpuBackend::gemm, Linear's) run on: oneDNN's matmul (the
/// default), or OpenBLAS's sgemm. Their results differ in rounding only.
enum class Float32Gemm { onednn, openblas };

class CpuBackend final : public Backend {
public:
    /// The float32 GEMM engine, for every CpuBackend (initially TESSERA_FLOAT32_GEMM:
    /// onednn or openblas; onednn when unset).
    static void setFloat32Gemm(Float32Gemm engine);
    static Float32Gemm float32Gemm();

    /// The B layout of GEMMs on oneDNN, for every CpuBackend (initially automatic).
    static void setGemmWeightsLayout(GemmWeightsLayout layout);
    static GemmWeightsLayout gemmWeightsLayout();

    /// Whether gemmWeights keeps a converted copy of B for a layer that packs its weights
    /// (Module::packWeights) at these sizes and compute type: true where the kernels read
    /// the weights in another layout or type (bfloat16 compute; float32 on AVX-512 CPUs,
    /// whose kernels take blocked weights). False where they read the layer's own weights
    /// as they are (float32 on AVX2 CPUs, or on OpenBLAS): packing then keeps nothing,
    /// costs no memory, and a write through the weights' memory is seen at once.
    static bool gemmPacksWeights(bool transA, bool transB, int64_t M, int64_t N, int64_t K, DType compute);

    /// The backward algorithm of bfloat16 convolutions, for every CpuBackend (initially
    /// TESSERA_CONV_BACKWARD_ALGO: auto, direct or gemm; auto when unset).
    static void setConvBackwardAlgo(ConvBackwardAlgo algo);
    static ConvBackwardAlgo convBackwardAlgo();

    /// Whether oneDNN has bfloat16 kernels for this CPU (AVX-512 and up: native BF16
    /// instructions or AMX where present, emulated on plain AVX-512). Without them (an
    /// AVX2-only CPU), bfloat16 compute is emulated: convolutions and GEMMs round their
    /// operands to bfloat16 and run the float32 kernels, so results match the bfloat16
    /// kernels' up to accumulation order, at float32's speed or a little below.
    /// TESSERA_BF16_EMULATE=1 forces the emulation (to test it on any CPU).
    static bool bfloat16Kernels();

    /// Whether bfloat16 convolutions (calcMode(bfloat16), on a CPU with bfloat16 kernels)
    /// write their outputs, and their input gradients, in bfloat16, so that the layers
    /// after them (batch norm, activations, sums, the next convolution) run on bfloat16
    /// activations instead of converting float32 ones at every convolution. Initially
    /// TESSERA_BF16_ACTIVATIONS (1 or 0; on when unset). Off: outputs and gradients are
    /// float32, the inputs converted on the way in.
    static void setBfloat16Activations(bool on);
    static bool bfloat16Activations();
    DType convOutputDType(const ConvParams& p) override;
    /// bfloat16 (which convolutions write while setBfloat16Activations is on); float16 goes
    /// through float32.
    bool carries16Bit(DType dtype) const override { return dtype == DType::bfloat16; }

    /// Sets flush-to-zero and denormals-are-zero on the calling thread and on every thread
    /// of the OpenMP pool, unless TESSERA_FLUSH_DENORMALS=0: training drives many values
    /// into the denormal range, where every float op costs around a hundred cycles.
    CpuBackend();
    /// The same for the calling thread and its OpenMP team. backendFor calls it once in each
    /// thread that reaches the CPU backend, so ops compute alike in every thread (one
    /// started before the backend existed inherits no mode).
    static void prepareThread();
    Device device() const override { return Device::cpu(); }

    std::shared_ptr<Storage> allocate(size_t bytes) override;
    std::shared_ptr<Storage> allocateZeroed(size_t bytes) override;
    void copy(const Tensor& src, const Tensor& dst) override;
    void copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst, int64_t dstOffset,
                     int64_t dstStride, int64_t rows, int64_t width) override;
    MemoryStats memoryStats() const override;
    void resetPeak() override;

    void fill(const Tensor& t, float value) override;
    void fillUniform(const Tensor& t, float lo, float hi, Generator& gen) override;
    void fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) override;

    using Backend::gemm;
    void gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta, const Tensor& C,
              DType compute) override;
    /// With a slot, B is converted once and kept there: in bfloat16, blocked unless
    /// setGemmWeightsLayout(plain); in float32 on oneDNN, in the layout its kernel picks
    /// (OpenBLAS reads B as it is).
    /// One oneDNN matmul over the whole batch (small attention heads cost one call, not one
    /// per head); with the OpenBLAS float32 engine the products shared out among the
    /// threads, one single-threaded sgemm each.
    void gemmBatched(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                     const Tensor& C) override;
    /// Whether attention runs fused (fusesAttention), for every CpuBackend (initially
    /// TESSERA_CPU_FUSED_ATTENTION: 1 or 0; on when unset).
    static void setFusedAttention(bool on);
    static bool fusedAttention();
    /// Whether gatherTaps and gatherTapsBackward run their kernels (on, initially) or decline
    /// (GridSample then runs a gather per tap, as on CUDA), for every CpuBackend.
    static void setTapKernels(bool on);
    static bool tapKernels();
    /// Fused attention in float32 (any other type: not taken), with or without an additive
    /// mask, causal masking and dropout: each thread takes one head's chunk of query rows at
    /// a time, whose scores (at most 256 KiB) stay in cache from q k^T through the softmax
    /// to P v; causally, only the keys the chunk's last row sees are computed. The scratch
    /// is one such chunk per thread (in backward two, three with dropout, and with a mask
    /// a sum of its gradient). The backward recomputes the probabilities from `stats` and
    /// takes the softmax's row sums from them: it does not read y (which may be undefined).
    bool fusesAttention(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v, DType dtype,
                        bool backward) const override;
    int64_t fusedAttentionScratchBytes(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v,
                                       DType dtype, bool backward, bool stats) const override;
    bool fusedAttentionForward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& y, const Tensor& stats) override;
    bool fusedAttentionBackward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& y, const Tensor& dy, const Tensor& stats, const Tensor& dq,
                                const Tensor& dk, const Tensor& dv) override;
    /// The bias is the matmul's own (added in float32 before C is rounded).
    void gemmWeights(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, const Tensor& bias,
                     float beta, const Tensor& C, DType compute, const std::shared_ptr<LayerState>& packed) override;
    /// The activation as the matmul's eltwise post-op on oneDNN (every kind but hardSigmoid
    /// and log), in float32 and bfloat16 compute; not with the OpenBLAS float32 engine.
    void gemmWeightsActivation(bool transA, bool transB, const Tensor& A, const Tensor& B, const Tensor& bias,
                               const Tensor& C, DType compute, const ActivationParams& act,
                               const std::shared_ptr<LayerState>& packed) override;
    bool gemmFusesActivation(const ActivationParams& act, DType compute) const override;
    /// bfloat16 for bfloat16 compute where the CPU has bfloat16 kernels and
    /// setBfloat16Activations is on (as convOutputDType), else float32.
    DType gemmOutputDType(DType compute) const override;
    /// y may be bfloat16 (each value rounded once).
    void broadcastRows(const Tensor& row, const Tensor& y) override;
    void sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) override;

    void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) override;
    void axpbyz(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) override;
    void axpbyzRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) override;
    void mul(const Tensor& a, const Tensor& b, const Tensor& y) override;
    void binaryBroadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) override;
    void sumTo(const Tensor& x, float alpha, const Tensor& y) override;
    void rnnForward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0, const Tensor& c0,
                    bool training, const Tensor& y, const Tensor& hN, const Tensor& cN, Tensor& workspace) override;
    int64_t rnnWorkspaceBytes(const RnnParams& p, const Shape& x) override;
    void rnnBackward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0, const Tensor& c0,
                     const Tensor& y, const Tensor& hN, const Tensor& cN, const Tensor& dy, const Tensor& dhN,
                     const Tensor& dcN, const Tensor& workspace, const Tensor& dx, const Tensor& dh0, const Tensor& dc0,
                     const RnnWeights& g) override;
    void activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) override;
    void activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                            const Tensor& dx) override;

    void softmaxForward(const Tensor& x, const Tensor& y) override;
    void softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
    void logSoftmaxForward(const Tensor& x, const Tensor& y) override;
    void logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;

    void dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) override;
    void dropoutApply(const Tensor& x, float p, uint64_t seed, uint64_t first, const Tensor& y) override;
    void fillBytes(const Tensor& t, unsigned char byte) override;
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
    void reorder(const Tensor& src, const Tensor& dst) override;
    void affine(const Tensor& x, float a, float b, const Tensor& y) override;
    void power(const Tensor& x, float p, const Tensor& y) override;
    void mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) override;
    void cast(const Tensor& x, const Tensor& y) override;
    Tensor convForward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                       const Shape& yShape) override;
    Tensor convBackwardData(const ConvParams& p, const Tensor& dy, const Tensor& w, const Shape& xShape) override;
    void convBackwardWeights(const ConvParams& p, const Tensor& x, const Tensor& dy, float scale, float momentum,
                             const Tensor& dw, const Tensor& db) override;
    Tensor poolForward(const PoolParams& p, const Tensor& x, const Shape& yShape, bool training,
                       Tensor& workspace) override;
    Tensor poolBackward(const PoolParams& p, const Tensor& dy, const Tensor& workspace, const Shape& xShape,
                        Layout xLayout) override;
    int64_t poolWorkspaceBytes(const PoolParams& p, const Shape& x, const Shape& y, Layout xLayout) override;
    Layout convOutputLayout(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) override;
    /// A training bfloat16 convolution keeps its input in bfloat16 from forward for
    /// backward-weights (when that runs on oneDNN's kernel), so it is reordered once.
    int64_t convKeptBytes(const ConvParams& p, const Shape& x, const Shape& w, const Shape& y, bool bias) override;
    void maxPoolIndices(const PoolParams& p, const Tensor& x, const Tensor& idx) override;
    void gatherAxis(const Tensor& x, const Tensor& idx, const Tensor& y) override;
    void scatterAddAxis(const Tensor& src, const Tensor& idx, const Tensor& dst) override;
    bool gathersTaps() const override;
    bool gatherTaps(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& y) override;
    bool gatherTapsBackward(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& dy, const Tensor& dx,
                            const Tensor& dw) override;
    void topKIndices(const Tensor& x, int64_t k, const Tensor& idx) override;
    void gatherRows(const Tensor& table, const Tensor& idx, const Tensor& y) override;
    void scatterAddRows(const Tensor& src, const Tensor& idx, float scale, const Tensor& table) override;
    void permute(const Tensor& x, const std::vector<int64_t>& perm, const Tensor& y) override;
    Tensor batchNormForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                            const Tensor& var, float eps, bool training) override;
    Tensor batchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& mean,
                             const Tensor& var, float eps, const Tensor& dscale, const Tensor& dshift) override;
    bool fusesBatchNormRelu() const override { return true; }
    Tensor batchNormReluForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                const Tensor& var, float eps, bool training, Tensor& mask) override;
    Tensor batchNormReluBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& shift,
                                 const Tensor& mean, const Tensor& var, float eps, const Tensor& mask,
                                 const Tensor& dscale, const Tensor& dshift) override;
    int64_t batchNormReluMaskBytes(const Shape& x, Layout layout) override;
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

private:
    // gemmWeights with an activation on the sums (`act`, a post-op; null: none).
    void matmul(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, const Tensor& bias, float beta,
                const Tensor& C, DType compute, const std::shared_ptr<LayerState>& packed, const ActivationParams* act);
};

namespace cpu_util {
/// ShapeError naming `CpuBackend::op` unless a and b have as many elements.
void requireSameNumel(const char* op, const Tensor& a, const Tensor& b);
} // namespace cpu_util

} // namespace tessera
