#pragma once
/// \file The op interface every backend implements. Modules call these ops and never
/// know which library runs them; a tensor's device picks the backend (`backendFor`).
///
/// Conventions: every tensor argument is contiguous; outputs are allocated by the
/// caller with the shape given in the comment above each op; shapes are checked by the
/// modules before the call, so the ops only assert what they rely on.
///
/// Layouts: ops take plain tensors unless their comment says "any layout". Ops that
/// return their output (convolution, pooling, batch norm, LRN) pick its layout
/// themselves: a backend may keep activations blocked between such ops; element-wise ops
/// marked "any layout" follow the layout of their first input.

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/ActivationParams.h"
#include "backend/Tensor.h"

namespace tessera {

class Generator;
struct AttentionSpec; // backend/AttentionSpec.h

/// Bytes of tensor storage a backend has handed out and not yet got back.
struct MemoryStats {
    size_t current = 0; ///< live now
    size_t peak = 0;    ///< most live at once since the last resetPeak
};

/// Recurrent cells (Backend::rnnForward): vanilla RNNs with relu or tanh, LSTM, and GRU in
/// its linear-before-reset form (the GRU of cuDNN and PyTorch).
enum class RnnMode { relu, tanh, lstm, gru };

/// One layer of a recurrent network, read forwards, and backwards too when `directions`
/// is 2: x [T, N, I] -> y [T, N, directions * hidden] (the forward direction's features
/// first).
struct RnnParams {
    RnnMode mode = RnnMode::lstm;
    int64_t directions = 1;
    int64_t hidden = 0;
    /// GRU: n = tanh(W_in x + b_in + r (W_hn h + b_hn)) (PyTorch's, cuDNN's); false:
    /// n = tanh(W_in x + b_in + W_hn (r h) + b_hn) (ONNX's linear_before_reset 0).
    bool linearBeforeReset = true;
};

/// The gates of a recurrent cell: 1, LSTM 4 (i, f, g, o), GRU 3 (r, z, n).
inline int64_t rnnGates(RnnMode mode) { return mode == RnnMode::lstm ? 4 : mode == RnnMode::gru ? 3 : 1; }

/// One layer's weights, one entry per direction, in PyTorch's layout and gate order:
/// wIh [G H, I], wHh [G H, H], bIh and bHh [G H]. A gradient set has the same shapes.
struct RnnWeights {
    std::vector<Tensor> wIh, wHh, bIh, bHh;
};

/// Element-wise binary operations (Backend::binaryBroadcast).
enum class BinaryOp { add, sub, mul, div };

/// Normalisation of rows by their own statistics (Backend::rowNormForward): x seen as
/// [rows, D], each row normalised, xhat = (x - mean) * rstd with rstd = 1 / sqrt(var + eps)
/// and var the biased variance; without `subtractMean` the mean is taken as 0 and var is
/// the mean square (RMS normalisation). Then y = gamma[c] * xhat + beta[c], the channel of
/// element (row, d) being c = (row % groups) * (D / inner) + d / inner:
/// - LayerNorm over the last D values: groups 1, inner 1 (the channel is d);
/// - GroupNorm of x [N, C, S] in G groups: rows N * G, D = C / G * S, groups G, inner S.
struct RowNormParams {
    int64_t groups = 1;
    int64_t inner = 1;
    float eps = 1e-5f;
    bool subtractMean = true;
};

/// What a backend keeps for one layer between its forward and its backward calls (the
/// CPU backend: the layer's input in bfloat16). Backends derive from it.
struct BackendState {
    virtual ~BackendState() = default;
};

/// One layer's slot for a BackendState. The layer owns it; a backend fills it on forward
/// and reads it on backward, and only trusts it for the input it was made from.
struct LayerState {
    std::shared_ptr<BackendState> data;
};

/// Counts the changes of parameters made through the library (optimizer updates,
/// Module::setVar and setAttr, loading weights, calcMode, Module::packWeights): weights a
/// backend packed, and convolutions' folded batch norms (containers/Fusion.h), made before
/// a change are made again. Process-wide; writes through a tensor's memory
/// are not counted.
uint64_t parameterGeneration();
void noteParameterChange();

/// Convolution geometry; every vector has one entry per spatial dim. `transposed`
/// turns the op into a deconvolution (the adjoint of the convolution with the same
/// parameters).
struct ConvParams {
    std::vector<int64_t> stride, padLo, padHi, dilation;
    int64_t groups = 1;
    bool transposed = false;
    /// What the products run in: float32, or bfloat16 (inputs and weights rounded to it;
    /// products summed and results written in float32; Module::calcMode).
    DType compute = DType::float32;
    /// The layer's state when it trains (see LayerState), else null: the backend keeps
    /// nothing between calls. Not part of the geometry.
    std::shared_ptr<LayerState> state;
    /// The layer's slot for its weights in the forward kernel's layout and type, when its
    /// weights are packed (Module::packWeights) and it runs in eval mode, else null: the
    /// backend converts the weights on every forward. Not part of the geometry.
    std::shared_ptr<LayerState> packed;
    /// convForward only: apply a ReLU to the output inside the convolution (an eval-mode
    /// batch norm and its ReLU folded into the layer, containers/Fusion.h). The CPU runs it
    /// as a oneDNN post-op; CUDA in place after the bias. Not part of the geometry.
    bool relu = false;
};

enum class PoolKind { max, avgWithPad, avgNoPad };

/// Pooling geometry; one entry per spatial dim.
struct PoolParams {
    PoolKind kind = PoolKind::max;
    std::vector<int64_t> kernel, stride, padLo, padHi;
};

/// Local response normalisation: y = x / (k + alpha / n * sum x^2)^beta, the sum over
/// `size` neighbouring channels (acrossChannels) or a size x size spatial window
/// (n = size^2) within each channel.
struct LrnParams {
    bool acrossChannels = true;
    int64_t size = 5;
    float alpha = 1e-4f, beta = 0.75f, k = 2.0f;
};

/// Costs computed element by element (see `pointwiseCost`).
enum class CostKind { mse, abs, smoothL1, bce, hinge, klDivergence, softCrossEntropy };

/// An optimizer's update rule and constants (see `optimizerUpdate`).
enum class UpdateRule {
    sgd,
    momentumSGD,
    nesterovSGD,
    adam,
    adaGrad,
    adaDelta,
    rmsProp,
    rmsPropGraves,
    smorms3,
    adamW
};

struct UpdateParams {
    UpdateRule rule = UpdateRule::sgd;
    float lr = 0.01f;
    float momentum = 0.9f; ///< momentum and Nesterov SGD
    float beta1 = 0.9f;    ///< Adam
    float beta2 = 0.999f;  ///< Adam
    float rho = 0.95f;     ///< AdaDelta, RMSProp, RMSPropGraves: the decay of the running averages
    float epsilon = 1e-8f;
    float weightDecay = 0.0f; ///< L2: grad + weightDecay * param enters the rule (adamW: decoupled)
    float gradScale = 1.0f;   ///< the gradient enters the rule multiplied by this (clipping)
    int64_t step = 1;         ///< 1-based update count (Adam's bias correction)
};

/// Padding: a constant, the input mirrored without repeating its edge (reflect), or its edge
/// value repeated (edge; PyTorch's "replicate").
enum class PadMode { constant, reflect, edge };
enum class ResampleMode { nearest, linear, nearestExact, cubic };

/// How resampling maps output positions to input ones (backend/ElementMath.h:
/// resampleTaps): nearest takes floor(o * in / out); nearestExact the input whose centre is
/// nearest, floor((o + 0.5) * in / out) (PyTorch's `nearest-exact`); linear interpolates
/// around half-pixel centres, or with alignCorners around o * (in - 1) / (out - 1); cubic
/// likewise from four inputs (Keys' kernel, a = -0.75: PyTorch's `bicubic`).
struct ResampleParams {
    ResampleMode mode = ResampleMode::nearest;
    bool alignCorners = false; ///< linear and cubic only
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;

    // ---- memory ---------------------------------------------------------------------
    /// `bytes` of device memory (CPU: 64-byte aligned).
    virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;
    /// `bytes` of zeros from memory that holds zeros already (fresh pages from the OS, which
    /// take no time to clear and no room until written), or null where the backend has none
    /// cheaper than allocate and a fill (Tensor::zeros then does those).
    virtual std::shared_ptr<Storage> allocateZeroed(size_t bytes) {
        (void)bytes;
        return nullptr;
    }
    /// dst <- src, same numel and dtype; at least one of them is on this backend's device.
    virtual void copy(const Tensor& src, const Tensor& dst) = 0;
    /// Block copy between tensors of the same dtype, in elements: for r in [0, rows),
    /// dst[dstOffset + r * dstStride + i] <- src[srcOffset + r * srcStride + i], i < width.
    /// (Concat, Split and Slice along any axis are such copies.)
    virtual void copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst,
                             int64_t dstOffset, int64_t dstStride, int64_t rows, int64_t width) = 0;
    /// Every storage byte of `t` (padding included) <- byte. Any layout.
    virtual void fillBytes(const Tensor& t, unsigned char byte) = 0;
    /// dst <- src in dst's layout; same shape and dtype (the CPU backend also converts
    /// between float32 and bfloat16). Any layouts.
    virtual void reorder(const Tensor& src, const Tensor& dst) = 0;
    /// Live and peak bytes of storage from this backend.
    virtual MemoryStats memoryStats() const = 0;
    /// Start a new peak measurement from the current live bytes.
    virtual void resetPeak() = 0;
    /// Wait until every op queued on this backend's device has finished (ops on a GPU run
    /// asynchronously; the CPU's have finished when they return).
    virtual void synchronize() {}
    /// A copy of host tensor `host` on this backend's device, for the device's next ops.
    /// From page-locked memory (pinnedEmpty) a GPU backend copies on a stream of its own
    /// while earlier work computes, and the device's next ops wait for the copy, not the
    /// host; from other memory, or on the CPU, it is `host.to(device())`.
    virtual Tensor upload(const Tensor& host) { return host.to(device()); }

    // ---- fills and random ------------------------------------------------------------
    /// Every element of `t` <- value (converted to its dtype).
    virtual void fill(const Tensor& t, float value) = 0;
    /// t ~ U[lo, hi), counters taken from `gen`.
    virtual void fillUniform(const Tensor& t, float lo, float hi, Generator& gen) = 0;
    /// t ~ N(mean, stddev^2), counters taken from `gen`.
    virtual void fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) = 0;

    // ---- BLAS -------------------------------------------------------------------------
    /// A: [M, K] ([K, M] if transA), B: [K, N] ([N, K] if transB), C: [M, N]:
    /// C <- alpha * op(A) op(B) + beta * C, the products in `compute` (float32, or a 16-bit
    /// type: A and B rounded to it, sums in float32). A and B are float32 or, with a 16-bit
    /// `compute`, a 16-bit type the backend carries (carries16Bit); C is float32 or the
    /// compute type itself, the result rounded once to it (gemmOutputDType says which a
    /// layer's GEMM writes).
    virtual void gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                      const Tensor& C, DType compute) = 0;
    void gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta, const Tensor& C) {
        gemm(transA, transB, alpha, A, B, beta, C, DType::float32);
    }
    /// gemm whose B is a layer's weights, plus a bias. `bias`: undefined, or [N] float32
    /// added to every row before C is rounded to its type: C <- op(A) op(B) + bias (alpha
    /// 1 and beta 0 with a bias, else BackendError). `packed`: the
    /// layer's slot for B in the kernel's layout and type when its weights are packed
    /// (Module::packWeights) and it runs in eval mode, else null (see ConvParams::packed).
    /// A backend may keep B converted there between calls (the CPU's oneDNN matmul does).
    /// The default broadcasts the bias into C and calls gemm (it needs beta 0 with a bias,
    /// and rounds the bias to a 16-bit C's type first), keeping nothing.
    virtual void gemmWeights(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B,
                             const Tensor& bias, float beta, const Tensor& C, DType compute,
                             const std::shared_ptr<LayerState>& packed);
    /// gemmWeights (alpha 1, beta 0), then C <- act(C): with gemmFusesActivation inside the
    /// product, on its float32 sums before C is rounded to its type (one pass over C). The
    /// default calls gemmWeights, then activationForward on C in place.
    virtual void gemmWeightsActivation(bool transA, bool transB, const Tensor& A, const Tensor& B, const Tensor& bias,
                                       const Tensor& C, DType compute, const ActivationParams& act,
                                       const std::shared_ptr<LayerState>& packed);
    /// Whether gemmWeightsActivation applies `act` inside the product when computing in
    /// `compute` (a Linear takes the activation after it only then; containers/Fusion.h).
    /// Default: no.
    virtual bool gemmFusesActivation(const ActivationParams& act, DType compute) const {
        (void)act, (void)compute;
        return false;
    }
    /// Throws BackendError unless alpha is 1 and beta 0 (gemmWeights with a bias).
    static void requireBiasable(const char* op, float alpha, float beta);
    /// The dtype a layer's GEMM (Linear's) writes its output and input gradient in when it
    /// computes in `compute`: that type where the backend carries it as activations (the
    /// CPU: bfloat16 where it has bfloat16 kernels and setBfloat16Activations is on, as its
    /// convolutions; CUDA: under setCuda16BitActivations), else float32. Default: float32.
    virtual DType gemmOutputDType(DType compute) const {
        (void)compute;
        return DType::float32;
    }
    /// A: [B, M, K] ([B, K, M] if transA), B: [B, K, N] ([B, N, K] if transB), C: [B, M, N],
    /// plain float32: C[i] <- alpha * op(A[i]) op(B[i]) + beta * C[i] for every i (attention's
    /// heads). The default is one gemm per i; a backend may run them together.
    virtual void gemmBatched(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                             const Tensor& C) {
        auto at = [](const Tensor& t, int64_t i) { return t.slice(i, i + 1).reshape({t.shape()[1], t.shape()[2]}); };
        for (int64_t i = 0; i < C.shape()[0]; ++i) gemm(transA, transB, alpha, at(A, i), at(B, i), beta, at(C, i));
    }
    /// How many bytes of scores one block of attention heads may take (AttentionKernel runs
    /// heads in such blocks): small enough to stay in a CPU's cache (the default, 2 MiB),
    /// large enough on a GPU that each batched product fills the device.
    virtual int64_t attentionBlockBytes() const { return int64_t{2} << 20; }
    /// Whether fusedAttentionForward takes this problem (`spec`; no mask, no dropout): q [B,
    /// Tq, d], k [B, Tk, d], v [B, Tk, dv] in `dtype` (a GPU: its 16-bit types; the CPU:
    /// float32); with `backward`, whether its training form (with statistics) and
    /// fusedAttentionBackward both do. Default: no.
    virtual bool fusesAttention(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v, DType dtype,
                                bool backward) const {
        (void)spec, (void)q, (void)k, (void)v, (void)dtype, (void)backward;
        return false;
    }
    /// The device memory fusedAttentionForward (with or without `stats`) or
    /// fusedAttentionBackward (`backward`) takes besides its arguments, for the memory plan.
    /// Default: 0.
    virtual int64_t fusedAttentionScratchBytes(const AttentionSpec& spec, const Shape& q, const Shape& k,
                                               const Shape& v, DType dtype, bool backward, bool stats) const {
        (void)spec, (void)q, (void)k, (void)v, (void)dtype, (void)backward, (void)stats;
        return 0;
    }
    /// Attention in one fused pass whose scores never reach memory (flash attention): y =
    /// softmax(q k^T spec.scale [causally masked]) v for q [B, Tq, d], k [B, Tk, d], v [B, Tk,
    /// dv], y [B, Tq, dv], plain, all of one type. `stats` [B, Tq] float32, or undefined in
    /// inference: each row's log-sum-exp, which fusedAttentionBackward reads. Returns false,
    /// having written nothing, where the backend has no fused kernel for the problem
    /// (AttentionKernel then runs its blocks of heads). Default: false.
    virtual bool fusedAttentionForward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& y, const Tensor& stats) {
        (void)spec, (void)q, (void)k, (void)v, (void)y, (void)stats;
        return false;
    }
    /// The gradients dq, dk, dv (q's, k's and v's shapes and type) of a fused forward's y
    /// for dy, from its y (undefined where the backend's backward does not read it) and
    /// stats. False, having written nothing, where it did not run.
    virtual bool fusedAttentionBackward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& y, const Tensor& dy, const Tensor& stats, const Tensor& dq,
                                        const Tensor& dk, const Tensor& dv) {
        (void)spec, (void)q, (void)k, (void)v, (void)y, (void)dy, (void)stats, (void)dq, (void)dk, (void)dv;
        return false;
    }
    /// row: [M], y: [N, M] -> y[n, :] <- row for every n.
    virtual void broadcastRows(const Tensor& row, const Tensor& y) = 0;
    /// x: [N, M] (float32, or a 16-bit type the backend carries), y: [M] float32 ->
    /// y <- alpha * sum_n x[n, :] + beta * y, summed in float32.
    virtual void sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) = 0;

    // ---- element-wise -----------------------------------------------------------------
    /// x, y: same numel -> y <- alpha * x + beta * y. Any layout (x is reordered to
    /// y's when they differ).
    virtual void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) = 0;
    /// x, y, z: same numel, z a tensor of its own or y (never x) -> z <- alpha * x +
    /// beta * y. Default: two axpby passes into z; a backend may do it in one.
    virtual void axpbyz(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
        axpby(beta, y, 0.0f, z);
        axpby(alpha, x, 1.0f, z);
    }
    /// z <- max(0, alpha * x + beta * y): a sum with the ReLU after it fused
    /// (containers/Fusion.h); z may be y, as in axpbyz. Default: axpbyz, then the ReLU in
    /// place; a backend may do both in one pass.
    virtual void axpbyzRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
        axpbyz(alpha, x, beta, y, z);
        activationForward(ActivationParams{ActivationKind::relu}, z, z);
    }
    /// a, b, y: same numel -> y <- a * b.
    virtual void mul(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
    /// x, y: same shape -> y <- f(x). Any layout; y in x's layout.
    virtual void activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) = 0;
    /// x (input), y (output of forward), dy, dx: same shape -> dx <- f'(x) * dy. Any
    /// layout; x, y and dx share one layout, dy is reordered to it when it differs.
    virtual void activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                                    const Tensor& dx) = 0;
    /// A ReLU's input gradient from its output y (relu(v)'s mask is v's): dy where y > 0,
    /// else 0, in y's dtype and layout (dy reordered to it).
    Tensor reluGradient(const Tensor& y, const Tensor& dy);

    /// x, y: same numel -> y <- a * x + b.
    virtual void affine(const Tensor& x, float a, float b, const Tensor& y) = 0;
    /// x, y: same numel -> y <- x ^ p (std::pow's rules: NaN for x < 0 and p not whole).
    virtual void power(const Tensor& x, float p, const Tensor& y) = 0;
    /// a, b: shapes that each broadcast (NumPy's rules, at most 8 dims) to y's -> y <- a op b
    /// (y may be larger than both: broadcasting one operand expands it). Plain float32.
    virtual void binaryBroadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) = 0;
    /// x: a shape that y's broadcasts to -> y <- alpha * (x summed over the dims y
    /// broadcasts along): the gradient of a broadcast operand. Plain float32.
    virtual void sumTo(const Tensor& x, float alpha, const Tensor& y) = 0;
    // ---- recurrent layers ---------------------------------------------------------------
    /// One layer (RnnParams) over x [T, N, I] from the states h0 (and, for LSTM, c0)
    /// [D, N, H] -> y [T, N, D H] and the final states hN (cN) [D, N, H]. With `training`
    /// the workspace backward needs is allocated into `workspace`. c0, cN: undefined unless
    /// LSTM. Default: BackendError (a backend without recurrent layers).
    virtual void rnnForward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0,
                            const Tensor& c0, bool training, const Tensor& y, const Tensor& hN, const Tensor& cN,
                            Tensor& workspace);
    /// The bytes of the workspace a training rnnForward of `p` over x [T, N, I] allocates.
    virtual int64_t rnnWorkspaceBytes(const RnnParams& /*p*/, const Shape& /*x*/) { return 0; }
    /// The gradients of rnnForward's outputs dy, dhN (dcN) -> dx, dh0 (dc0) and the weight
    /// gradients `g` (overwritten), from the training forward's tensors and workspace.
    virtual void rnnBackward(const RnnParams& p, const RnnWeights& w, const Tensor& x, const Tensor& h0,
                             const Tensor& c0, const Tensor& y, const Tensor& hN, const Tensor& cN, const Tensor& dy,
                             const Tensor& dhN, const Tensor& dcN, const Tensor& workspace, const Tensor& dx,
                             const Tensor& dh0, const Tensor& dc0, const RnnWeights& g);

    /// x, y: [N, C, ...], m: [N, C] -> y[n, c, ...] <- x[n, c, ...] * m[n, c].
    virtual void mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) = 0;
    /// x, y: same numel, plain, any dtypes (float to int rounds toward zero; to bfloat16 and
    /// float16 rounds to nearest even).
    virtual void cast(const Tensor& x, const Tensor& y) = 0;

    // ---- convolution ------------------------------------------------------------------
    /// x: [N, C, *in] (any layout), w: [K, C/g, *k] (transposed: [C, K/g, *k]),
    /// b: [K] or undefined -> y: [N, K, *out] = yShape, returned in a layout of the
    /// backend's choice.
    virtual Tensor convForward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                               const Shape& yShape) = 0;
    /// dy: [N, K, *out] (any layout), w -> dx: [N, C, *in] = xShape (backend's layout).
    virtual Tensor convBackwardData(const ConvParams& p, const Tensor& dy, const Tensor& w, const Shape& xShape) = 0;
    /// x, dy (any layouts) -> dw <- scale * dL/dw + momentum * dw, and the same for db
    /// when it is defined.
    virtual void convBackwardWeights(const ConvParams& p, const Tensor& x, const Tensor& dy, float scale,
                                     float momentum, const Tensor& dw, const Tensor& db) = 0;
    /// What memoryStats counts for a request of `bytes` (an allocator's size class; for the
    /// memory plan). Default: the bytes themselves.
    virtual int64_t allocationBytes(int64_t bytes) const { return bytes; }
    /// The layout convForward returns for these shapes (for the memory plan; creates no
    /// tensor). Default: plain.
    virtual Layout convOutputLayout(const ConvParams& /*p*/, const Shape& /*x*/, const Shape& /*w*/, const Shape& /*y*/,
                                    bool /*bias*/) {
        return Layout::plain;
    }
    /// The dtype convForward writes for these parameters (for the memory plan). Default:
    /// float32.
    virtual DType convOutputDType(const ConvParams& /*p*/) { return DType::float32; }
    /// Whether layers on this backend take activations of the 16-bit type `dtype` as they
    /// come and write theirs in it (batch norm, activations, pooling, sums; convolutions in
    /// the matching calcMode, see convOutputDType), so that 16-bit values flow from layer to
    /// layer instead of through float32 copies. The CPU carries bfloat16 (its convolutions
    /// write it while `CpuBackend::setBfloat16Activations` is on); CUDA carries both 16-bit
    /// types where `setCuda16BitActivations` is on. Default: neither.
    virtual bool carries16Bit(DType /*dtype*/) const { return false; }
    /// Bytes convForward keeps in `p.state` from a forward for the backward calls (for the
    /// memory plan). Default: none.
    virtual int64_t convKeptBytes(const ConvParams& /*p*/, const Shape& /*x*/, const Shape& /*w*/, const Shape& /*y*/,
                                  bool /*bias*/) {
        return 0;
    }
    /// The most bytes a convForward (`backward` false) or its backward calls, convBackwardData
    /// then convBackwardWeights (true), allocate and free inside themselves at once: copies
    /// of the filter and operands in the compute type or order (for the memory plan).
    /// Default: none.
    virtual int64_t convScratchBytes(const ConvParams& /*p*/, const Shape& /*x*/, const Shape& /*w*/,
                                     const Shape& /*y*/, bool /*bias*/, bool /*backward*/) {
        return 0;
    }
    /// Time the algorithms for this convolution that need at most `memlimit` bytes of
    /// workspace and keep the fastest (CUDA: of those within 2% of it, the one needing the
    /// least workspace) for its later calls. Backends with one algorithm (the CPU's) do
    /// nothing.
    virtual void optimizeConv(const ConvParams& /*p*/, const Shape& /*xShape*/, const Shape& /*wShape*/,
                              const Shape& /*yShape*/, size_t /*memlimit*/) {}

    // ---- pooling ----------------------------------------------------------------------
    /// x: [N, C, *in] (any layout) -> y: [N, C, *out] = yShape in x's layout. For max
    /// pooling in training, `workspace` receives what backward needs.
    virtual Tensor poolForward(const PoolParams& p, const Tensor& x, const Shape& yShape, bool training,
                               Tensor& workspace) = 0;
    /// Bytes of the workspace a training max-pooling forward keeps for x in `xLayout` (for
    /// the memory plan). Default: one int32 index per output element.
    virtual int64_t poolWorkspaceBytes(const PoolParams& /*p*/, const Shape& /*x*/, const Shape& y,
                                       Layout /*xLayout*/) {
        return y.numel() * 4;
    }
    /// dy (any layout), the forward's workspace -> dx: xShape in layout `xLayout`.
    virtual Tensor poolBackward(const PoolParams& p, const Tensor& dy, const Tensor& workspace, const Shape& xShape,
                                Layout xLayout) = 0;
    /// Max pooling's argmax: x: [N, C, *in] -> idx: [N, C, *out] int32, the flat index
    /// within x's (n, c) plane of each window's first maximum.
    virtual void maxPoolIndices(const PoolParams& p, const Tensor& x, const Tensor& idx) = 0;

    // ---- gathers and scatters ---------------------------------------------------------
    /// x: [O, A, I], idx: [O, J, I] int32 in [0, A) -> y: [O, J, I],
    /// y[o, j, i] <- x[o, idx[o, j, i], i].
    virtual void gatherAxis(const Tensor& x, const Tensor& idx, const Tensor& y) = 0;
    /// src, idx: [O, J, I], dst: [O, A, I] -> dst[o, idx[o, j, i], i] += src[o, j, i].
    virtual void scatterAddAxis(const Tensor& src, const Tensor& idx, const Tensor& dst) = 0;
    /// Whether gatherTaps and gatherTapsBackward have a kernel here (for float32 plain
    /// operands), so that a caller builds their tap table only where it will be read.
    /// Default: false.
    virtual bool gathersTaps() const { return false; }
    /// Weighted taps (GridSample's kernel): x [N, C, A], idx [T, N, P] int32 in [0, A), w
    /// [T, N, P], all float32 but idx, plain -> y [N, C, P], y[n, c, p] <- sum_t w[t, n, p]
    /// x[n, c, idx[t, n, p]]. False, having written nothing, where the backend has no kernel
    /// for it (the caller then runs a gather per tap). Default: false.
    virtual bool gatherTaps(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& y) {
        (void)x, (void)idx, (void)w, (void)y;
        return false;
    }
    /// gatherTaps' gradients for dy [N, C, P]: dx [N, C, A] += each tap's w dy at its
    /// position, and, where `dw` [T, N, P] is defined, dw[t, n, p] <- sum_c dy[n, c, p] x[n,
    /// c, idx[t, n, p]]. False, having written nothing, where the backend has no kernel.
    virtual bool gatherTapsBackward(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& dy,
                                    const Tensor& dx, const Tensor& dw) {
        (void)x, (void)idx, (void)w, (void)dy, (void)dx, (void)dw;
        return false;
    }
    /// x: [O, A, I] -> idx: [O, k, I], the positions of the k largest values along A in
    /// ascending position order (ties: the earlier). With k = 1 (one pass) a NaN counts as
    /// the largest value; for k > 1 a line holding NaN gives unspecified positions.
    virtual void topKIndices(const Tensor& x, int64_t k, const Tensor& idx) = 0;
    /// table: [V, D], idx: [M] int32 -> y: [M, D], y[m] <- table[idx[m]]. Throws
    /// ShapeError naming the first index outside [0, V).
    virtual void gatherRows(const Tensor& table, const Tensor& idx, const Tensor& y) = 0;
    /// src: [M, D], idx: [M] -> table[idx[m]] += scale * src[m].
    virtual void scatterAddRows(const Tensor& src, const Tensor& idx, float scale, const Tensor& table) = 0;
    /// x: [d0, ..., dr-1] -> y with dims permuted: y.dims[i] = x.dims[perm[i]].
    virtual void permute(const Tensor& x, const std::vector<int64_t>& perm, const Tensor& y) = 0;

    // ---- normalisation ----------------------------------------------------------------
    /// x: [N, C, ...] (any layout); scale, shift, mean, var: [C]. Training: mean and var
    /// receive the batch statistics (biased variance) and normalise; otherwise they are
    /// read. y is returned in x's layout.
    virtual Tensor batchNormForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                    const Tensor& var, float eps, bool training) = 0;
    /// The backward of a training forward: x, dy (any layouts), scale, mean, var ->
    /// dx (returned, x's layout); dscale and dshift are overwritten.
    virtual Tensor batchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& mean,
                                     const Tensor& var, float eps, const Tensor& dscale, const Tensor& dshift) = 0;
    /// Whether batchNormReluForward/Backward run here: batch norm with a ReLU applied to
    /// its output inside the same primitive (one pass over memory instead of two, and in
    /// backward the ReLU's mask applied while the normalisation's gradient is computed).
    virtual bool fusesBatchNormRelu() const { return false; }
    /// relu(batchNormForward(...)). Training: `mask` receives what backward needs to apply
    /// the ReLU's gradient (opaque; kept by the caller until then); otherwise it is left
    /// undefined. Throws BackendError where fusesBatchNormRelu() is false.
    virtual Tensor batchNormReluForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                        const Tensor& var, float eps, bool training, Tensor& mask);
    /// The backward of a training batchNormReluForward, dy being the ReLU's output
    /// gradient: dx (x's layout) returned, dscale and dshift overwritten.
    virtual Tensor batchNormReluBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& shift,
                                         const Tensor& mean, const Tensor& var, float eps, const Tensor& mask,
                                         const Tensor& dscale, const Tensor& dshift);
    /// The bytes of a training batchNormReluForward's mask for x (0 where not fused).
    virtual int64_t batchNormReluMaskBytes(const Shape& /*x*/, Layout /*layout*/) { return 0; }
    /// batchNormForward(x, ...) + z, and the ReLU of that when `relu`: a batch norm whose
    /// output only a sum consumes (containers/Fusion.h). z: x's shape, any layout; the
    /// result is what batchNormForward returns (its layout and dtype) with z added in
    /// place, as an Add of the two computes it. `reserve` receives what a training
    /// forward's backward needs beyond x, the result and the statistics (opaque; kept by
    /// the caller until batchNormAddBackward; undefined where nothing is needed).
    /// Default: batchNormForward, then z added (and the ReLU) in one pass, nothing
    /// reserved; a backend may do all of it in one call.
    virtual Tensor batchNormAddForward(const Tensor& x, const Tensor& z, const Tensor& scale, const Tensor& shift,
                                       const Tensor& mean, const Tensor& var, float eps, bool training, bool relu,
                                       Tensor& reserve) {
        reserve = Tensor();
        Tensor y = batchNormForward(x, scale, shift, mean, var, eps, training);
        if (relu) {
            axpbyzRelu(1.0f, z, 1.0f, y, y);
        } else {
            axpby(1.0f, z, 1.0f, y);
        }
        return y;
    }
    /// The bytes of the `reserve` a training batchNormAddForward with the ReLU keeps for x
    /// in `layout` and `dtype` (for plans; 0 where it keeps none).
    virtual int64_t batchNormAddReserveBytes(const Shape& /*x*/, Layout /*layout*/, DType /*dtype*/) { return 0; }
    /// The backward of a training batchNormAddForward: dy, the gradient of its result y
    /// (which masks dy when `relu`), and its `reserve` -> dx (returned, x's layout and
    /// dtype); dz receives z's gradient (dy masked by the ReLU, or dy itself without one);
    /// dscale and dshift are overwritten. Default: the ReLU's backward, then
    /// batchNormBackward; a backend may do both in one call.
    virtual Tensor batchNormAddBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& scale,
                                        const Tensor& shift, const Tensor& mean, const Tensor& var, float eps,
                                        bool relu, const Tensor& reserve, Tensor& dz, const Tensor& dscale,
                                        const Tensor& dshift);
    /// x, y: [rows, D] plain, float32 or a 16-bit type the backend carries, each its own
    /// (statistics in float32); gamma, beta: [channels] float32, or undefined (1 and 0);
    /// mean, rstd: [rows] float32, written (mean 0 without subtractMean). RowNormParams
    /// says what is normalised and which channel each value's gamma and beta are.
    virtual void rowNormForward(const RowNormParams& p, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
    /// The backward of rowNormForward from its x, gamma, mean and rstd: dx [rows, D]
    /// overwritten with dL/dx (x, dy and dx each float32 or a carried 16-bit type); dgamma and dbeta [channels], when
    /// defined, overwritten with dL/dgamma and dL/dbeta.
    virtual void rowNormBackward(const RowNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                 const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                                 const Tensor& dbeta) = 0;
    /// x: [N, C, ...] (any layout) -> y in x's layout; workspace for backward.
    virtual Tensor lrnForward(const LrnParams& p, const Tensor& x, Tensor& workspace) = 0;
    virtual Tensor lrnBackward(const LrnParams& p, const Tensor& x, const Tensor& dy, const Tensor& workspace) = 0;

    // ---- resampling, padding, prelu ----------------------------------------------------
    /// x: [N, C, *in] -> y: [N, C, *out] (1 to 3 spatial dims, any sizes; plain float32),
    /// nearest or linear as `p` says.
    virtual void resampleForward(const ResampleParams& p, const Tensor& x, const Tensor& y) = 0;
    virtual void resampleBackward(const ResampleParams& p, const Tensor& dy, const Tensor& dx) = 0;
    /// x: [N, C, H, W], theta: [N, 2, 3] -> y: [N, C, Ho, Wo]: a spatial transformer's affine
    /// grid and bilinear sampling, zero outside (backend/ElementMath.h: spatialTfSource).
    virtual void spatialTfForward(const Tensor& x, const Tensor& theta, const Tensor& y) = 0;
    /// dy -> dx (x's shape) and dtheta ([N, 2, 3]), both overwritten.
    virtual void spatialTfBackward(const Tensor& x, const Tensor& theta, const Tensor& dy, const Tensor& dx,
                                   const Tensor& dtheta) = 0;
    /// x: [N, C, *in] -> y: [N, C, in + lo + hi] per spatial dim. Reflect mirrors without
    /// repeating the edge and needs lo, hi < in. x and y float32, or, with constant
    /// padding, both of one 16-bit type (the value rounded to it).
    virtual void padForward(PadMode mode, float value, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                            const Tensor& x, const Tensor& y) = 0;
    /// BackendError (naming `op`) unless `from` and `to` are both float32, or of one 16-bit
    /// type with constant padding (whose adjoint moves values without adding them).
    static void requirePadTypes(const char* op, PadMode mode, const Tensor& from, const Tensor& to);
    /// dy: padded -> dx: the adjoint (reflected positions add up). Types as padForward's.
    virtual void padBackward(PadMode mode, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                             const Tensor& dy, const Tensor& dx) = 0;
    /// x: [N, C, ...], slopes: [C] or [1] -> y = x > 0 ? x : slope * x.
    virtual void preluForward(const Tensor& x, const Tensor& slopes, const Tensor& y) = 0;
    /// -> dx, and dslopes <- scale * dL/dslopes + momentum * dslopes.
    virtual void preluBackward(const Tensor& x, const Tensor& slopes, const Tensor& dy, const Tensor& dx, float scale,
                               float momentum, const Tensor& dslopes) = 0;

    // ---- costs -------------------------------------------------------------------------
    /// Softmax cross-entropy. scores: [N, C, ...], labels: [N, ...] int32 in [0, C),
    /// weights: [C] or undefined -> grad (undefined: not computed): scores' shape, the
    /// gradient of the mean over the N * positions samples of weight[label] * -sum_k q_k
    /// log softmax(scores)_k, with the target q = (1 - smoothing) onehot(label) + smoothing
    /// / C (label smoothing; 0: the plain -log softmax(scores)[label]). Returns that mean in
    /// `error` and the number of argmax hits in `correct`. Throws ShapeError naming the
    /// first label outside [0, C).
    virtual void crossEntropy(const Tensor& scores, const Tensor& labels, const Tensor& weights, float smoothing,
                              const Tensor& grad, double& error, int64_t& correct) = 0;
    /// pred, target, grad: same shape [N, ...] -> grad of the cost, returns the cost:
    /// mse: sum (p - t)^2 / 2N; abs: sum |p - t| / N; smoothL1: sum huber(p - t) / N
    /// (0.5 d^2 below 1, |d| - 0.5 above); bce: pred are logits, sum softplus(p) - t p / N;
    /// hinge: targets +-1, sum max(0, 1 - t p) / N; klDivergence: pred are scores over
    /// dim 1, target probabilities, sum t (log t - log softmax(p)) / N; softCrossEntropy:
    /// the same with -sum t log softmax(p) / N (cross-entropy against probabilities).
    virtual double pointwiseCost(CostKind kind, const Tensor& pred, const Tensor& target, const Tensor& grad) = 0;
    /// Multi-class SVM: scores [N, C], labels [N] -> grad; returns
    /// sum_n sum_{j != y} max(0, 1 + s_j - s_y)^(l2 ? 2 : 1) / N.
    virtual double svmCost(const Tensor& scores, const Tensor& labels, bool l2, const Tensor& grad) = 0;

    /// Connectionist temporal classification. scores [T, N, V] (logits: a log-softmax over
    /// V comes first), labels [N, S] int32, labelLengths and inputLengths [N] int32, all
    /// valid (the caller checks: labels in [0, V) and not `blank`, sample n's first
    /// labelLengths[n] labels aligning within its first inputLengths[n] steps) ->
    /// losses[n] = -log p(labels of n | its steps), and grad (scores' shape; undefined: not
    /// computed) <- sum_n gradScale[n] d losses[n] / d scores, zero past each input's end.
    virtual void ctc(const Tensor& scores, const Tensor& labels, const Tensor& labelLengths, const Tensor& inputLengths,
                     int32_t blank, const std::vector<float>& gradScale, const Tensor& grad,
                     std::vector<double>& losses) = 0;

    /// t <- t * factor in place (any layout, float32); returns whether every element is
    /// finite (no Inf, no NaN): loss scaling's unscale-and-check, one pass.
    virtual bool scaleCheckFinite(const Tensor& t, float factor) = 0;
    /// The sum of the squares of a float32 tensor's elements (any layout), accumulated in
    /// double: the squared L2 norm that gradient clipping measures. NaN or Inf when an
    /// element is not finite.
    virtual double sumSquares(const Tensor& t) = 0;

    // ---- optimizers --------------------------------------------------------------------
    /// One fused update of `param` from `grad` by `p.rule`, with up to three state tensors
    /// of param's numel (the rule's running averages; unused ones may be undefined).
    virtual void optimizerUpdate(const UpdateParams& p, const Tensor& param, const Tensor& grad, const Tensor& s1,
                                 const Tensor& s2, const Tensor& s3) = 0;

    // ---- softmax ----------------------------------------------------------------------
    /// x, y: [N, C, ...] -> y <- softmax over dim 1.
    virtual void softmaxForward(const Tensor& x, const Tensor& y) = 0;
    /// y (forward output), dy, dx: [N, C, ...] -> dx <- y * (dy - sum_c(dy * y)).
    virtual void softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;
    /// x, y: [N, C, ...] -> y <- log softmax over dim 1 (x - log sum_c exp(x), without
    /// forming the probabilities, so that y stays finite where they underflow).
    virtual void logSoftmaxForward(const Tensor& x, const Tensor& y) = 0;
    /// y (forward output), dy, dx: [N, C, ...] -> dx <- dy - exp(y) * sum_c(dy).
    virtual void logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;

    // ---- dropout ----------------------------------------------------------------------
    /// x, mask, y: same numel. mask <- 0 with probability p, else 1 / (1 - p);
    /// y <- x * mask. Counters taken from `gen`.
    virtual void dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask, const Tensor& y) = 0;
    /// y <- x * m, m_i = 0 where randomUniform(seed, first + i) < p, else 1 / (1 - p): the
    /// mask dropoutForward draws at those counters, applied without being stored, so that
    /// a backward applies it to dy from the same counters. x, y: same numel, plain, float
    /// dtypes this backend carries (each product rounds once, to y's type).
    virtual void dropoutApply(const Tensor& x, float p, uint64_t seed, uint64_t first, const Tensor& y) = 0;
};

/// The backend that runs ops on tensors of `device`. Throws BackendError when Tessera was
/// built without support for that device kind.
Backend& backendFor(Device device);
/// The backend of `t`'s device.
inline Backend& backendOf(const Tensor& t) { return backendFor(t.device()); }

/// How many CUDA devices this process can use: 0 when Tessera was built without CUDA, or
/// when there is no driver or no GPU.
int cudaDeviceCount();
/// Why no CUDA device can be used: "Tessera was built without CUDA", "no usable CUDA
/// driver (...)", "no CUDA device (...)"; empty when there is one.
std::string cudaUnavailableReason();

/// A host tensor in page-locked ("pinned") memory, from which `Backend::upload` to a GPU
/// copies asynchronously, when this build has CUDA and a CUDA device is present; an
/// ordinary host tensor (`Tensor::empty`) otherwise. Freed blocks are kept for reuse (a
/// page-locked allocation is slow), each once the copies from it have finished.
Tensor pinnedEmpty(const Shape& shape, DType dtype = DType::float32);
/// Whether `t`'s memory came from pinnedEmpty.
bool isPinned(const Tensor& t);

/// Let cuBLAS and cuDNN use TF32 tensor cores for float32 work on every CUDA device (on by
/// default: about 10 bits of mantissa in products, much faster on Ampere and later). A
/// no-op without CUDA.
void setCudaAllowTF32(bool allow);

/// Run-to-run reproducible CUDA training (off by default): convolutions use only the cuDNN
/// algorithms that give the same bits on every run (those summing with atomics are
/// skipped, at some cost in speed), so the same seeds on the same GPU, cuDNN and cuBLAS
/// give the same weights. Kernels that scatter-add into overlapping places (docs/gpu.md
/// lists them) still sum in an unspecified order. `optimizeForShape` times nothing while it
/// is on (timings, and so the algorithms they pick, vary between runs). It applies from the
/// next convolution on (each problem's algorithms are chosen per setting). A no-op
/// without CUDA.
void setCudaDeterministic(bool on);

/// 16-bit activations between layers on every CUDA device (on by default; the environment
/// variable `TESSERA_CUDA_16BIT_ACTIVATIONS=0` turns it off at start, `=1` on). With it,
/// in `calcMode(float16)` or `calcMode(bfloat16)` convolutions write their outputs and input
/// gradients in that type, and batch norm, activations, pooling and sums read and write it
/// (`Backend::carries16Bit`), so a step converts nothing between those layers; weights,
/// their gradients, optimizer state and costs stay float32. Without it each 16-bit
/// convolution converts its float32 input and its output back. It applies from the next
/// forward on. A no-op without CUDA.
void setCuda16BitActivations(bool on);
/// Whether setCuda16BitActivations is on now.
bool cuda16BitActivations();

/// Channels-last (NHWC) activations on every CUDA device (on by default; the environment
/// variable `TESSERA_CUDA_CHANNELS_LAST=0` turns it off at start, `=1` on). With it, 2-D
/// convolutions whose 16-bit type is carried (`setCuda16BitActivations`, in
/// `calcMode(float16)` or `calcMode(bfloat16)`) write `Layout::channelsLast` outputs and
/// input gradients (their weights go to cuDNN as [K, R, S, C]), and batch norm, pooling,
/// activations and sums read and write that layout, so a ResNet step transposes nothing
/// between those layers; any other layer gets a plain copy at its boundary. It is the
/// layout of cuDNN's fastest 16-bit kernels; float32 convolutions stay plain (cuDNN's
/// channels-last batch norm is several times slower than its NCHW one in float32). It
/// applies from the next forward on. A no-op without CUDA.
void setCudaChannelsLast(bool on);
/// Whether setCudaChannelsLast is on now.
bool cudaChannelsLast();

/// cuDNN's fused attention (its SDPA operation, cuDNN 9.17 or later) on every CUDA device
/// (off by default; the environment variable `TESSERA_CUDA_FUSED_ATTENTION=1` turns it on at
/// start). With it, ScaledDotProductAttention and MultiheadAttention in `calcMode(float16)` or
/// `calcMode(bfloat16)` without a mask, causal masking or train-mode dropout run forward and
/// backward as one fused pass each, keeping no scores (`Backend::fusedAttentionForward`);
/// where cuDNN refuses a problem they run as without it. A no-op without CUDA.
void setCudaFusedAttention(bool on);
/// Whether setCudaFusedAttention is on now.
bool cudaFusedAttention();

/// Opens (`true`) or closes the range that a CUDA profiler started with collection off
/// records (`ncu --profile-from-start off`, `nsys --capture-range=cudaProfilerApi`). A
/// no-op without CUDA or without a profiler.
void cudaProfilerRange(bool start);

} // namespace tessera
