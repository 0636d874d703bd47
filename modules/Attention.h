#pragma once
/// \file ScaledDotProductAttention: softmax(q k^T * scale + mask) v, a block of heads' scores
/// at a time (PyTorch's F.scaled_dot_product_attention), and AttentionKernel, its compute,
/// which MultiheadAttention shares.

#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {

class Backend;
struct AttentionSpec;

struct AttentionOptions {
    bool causal = false; ///< position i attends to positions j <= i only (PyTorch's is_causal)
    float scale = 0.0f;  ///< the scores' factor; 0: 1 / sqrt(d)
    /// In train mode each probability is dropped with this chance and the others scaled by
    /// 1 / (1 - dropout) (PyTorch's dropout_p); eval mode drops none.
    float dropout = 0.0f;
    int64_t seed = -1; ///< the dropout stream's seed; -1: drawn from the global generator when built
    std::string name = {};
};

/// The attention compute on plain float32 tensors {q, k, v[, mask]} as
/// ScaledDotProductAttention describes them: fused where the backend takes the problem
/// (fuses: the CPU's float32 kernel, cuDNN's 16-bit one), otherwise a block of heads at a
/// time (as many as have [Tq, Tk] scores of 2 MiB together, at least one). With
/// dropout, the masks of a forward come from the counters of a generator from `at` on, and
/// its backward draws them again from there: nothing but the stream's position is kept.
class AttentionKernel {
public:
    explicit AttentionKernel(const AttentionOptions& options);
    const AttentionOptions& options() const { return options_; }
    /// Where a forward's dropout masks are drawn: the stream's seed and first counter.
    struct Stream {
        uint64_t seed = 0, at = 0;
    };
    /// What a fused forward (Backend::fusedAttentionForward) leaves for its backward: its
    /// 16-bit output [heads, Tq, dv] (where the backend's backward reads it: keepsOutput)
    /// and each row's log-sum-exp [heads, Tq]. Undefined where the forward ran in blocks.
    struct Fused {
        Tensor y, stats;
    };
    /// y = softmax(q k^T s + mask) v, with dropout when `stream` is given (then the
    /// probabilities are dropped with options().dropout). Sets `used` to the
    /// counters it drew. On a backend that fuses the problem (Backend::fusesAttention: the
    /// CPU's kernel, with or without a mask, causal or not, with or without dropout, whose
    /// masks it draws as the blocks do) in fusedType, one fused pass in that type; then
    /// `fused`, if given (train mode) and the backward fuses too, gets what that backward
    /// reads.
    Tensor forward(const Tensors& in, const Stream* stream, uint64_t* used = nullptr, DType compute = DType::float32,
                   Fused* fused = nullptr) const;
    /// The gradients {dq, dk, dv[, dmask]} for dy, recomputing each head's probabilities
    /// (and dropout masks, from the same `stream`); after a fused forward (`fused` given
    /// and defined), one fused pass.
    Tensors backward(const Tensors& in, const Tensor& dy, const Stream* stream, const Fused* fused = nullptr) const;
    /// Whether forward (or, with `backward`, forward and backward) runs fused for inputs of
    /// these shapes ({q, k, v[, mask]}) in `compute` on `device` (`dropout`: a stream is given).
    bool fuses(const Shapes& in, bool dropout, DType compute, Device device, bool backward = false) const;
    /// The type a fused pass runs in: a 16-bit `compute` on a GPU; float32 on the CPU
    /// (whose attention runs in float32 in every compute type) and in float32 compute.
    static DType fusedType(DType compute, Device device);
    /// Whether a fused train-mode forward keeps its output for the backward (a GPU's fused
    /// backward reads it; the CPU's takes the softmax's row sums from the probabilities).
    static bool keepsOutput(Device device);
    /// A Stream kept as a tensor (int32 [4], on the CPU), so that a run's state can move.
    static Tensor keep(const Stream& s);
    static Stream kept(const Tensor& t);
    /// The causal mask [Tq, Tk] on the CPU: 0 on and below the diagonal, -inf above.
    static Tensor causalTable(int64_t Tq, int64_t Tk);
    /// The bytes of one of the [heads in a block, Tq, Tk] float32 buffers forward (two)
    /// and backward (three; five with dropout) hold while they run on `be`.
    static int64_t blockBytes(const Backend& be, int64_t heads, int64_t Tq, int64_t Tk);
    /// The scratch bytes of a fused forward (backward = false; `stats`: in train mode, its
    /// backward fused too; `dropout`: with a stream) or backward: the 16-bit copies of its arguments and results
    /// (but a kept output; none in float32), and the backend's own.
    int64_t fusedScratchBytes(const Backend& be, const Shapes& in, DType compute, bool dropout, bool backward,
                              bool stats) const;
    /// The bytes a fused train-mode forward keeps for its fused backward (Fused).
    static int64_t fusedKeptBytes(const Backend& be, const Shapes& in, DType compute);

private:
    float scaleFor(int64_t d) const;
    /// The fused pass's for inputs of these shapes: scaleFor(d), options().causal, the mask's
    /// matrices' shape, and with a stream its dropout.
    AttentionSpec specFor(const Shapes& in, const Stream* stream) const;
    // For each head, the matrix of the mask it adds (empty without a mask).
    static std::vector<int64_t> maskOfHead(const Tensors& in);
    // Heads h0 .. h0 + g - 1: their probabilities P = softmax(q k^T * scale + mask) into p
    // [g, Tq, Tk], their scores into `scores` on the way.
    void probabilities(const Tensors& in, int64_t h0, int64_t g, const std::vector<int64_t>& maskOf,
                       const Tensor& scores, const Tensor& p) const;
    // [Tq, Tk]: 0 on and below the diagonal, -inf above; made again when the shape changes.
    const Tensor& causalMask(int64_t Tq, int64_t Tk, Device device) const;
    AttentionOptions options_;
    mutable Tensor causalMask_;
};

/// [q, k, v] or [q, k, v, mask] -> y = softmax(q k^T * scale + mask) v: q [..., Tq, d],
/// k [..., Tk, d], v [..., Tk, dv] with the same leading dims (batch, heads) -> y
/// [..., Tq, dv]. `mask`: additive float scores [..., Tq or 1, Tk] whose leading dims
/// broadcast to q's (0 to keep, -inf to drop: a key-padding mask [N, 1, 1, Tk], a causal
/// one [Tq, Tk]). A row whose scores are all -inf has no defined output (NaN, as in PyTorch).
/// The scores of a block of heads (2 MiB of them, or one head's) exist at a time, whatever
/// the batch: backward recomputes each head's scores (and dropout masks) instead of keeping
/// them all. Where the backend takes the problem, attention runs fused
/// (AttentionKernel::fuses): on the CPU in float32, always (CpuBackend's kernel: a chunk of
/// query rows' scores at a time, with the mask, causal masking and dropout); on CUDA with
/// setCudaFusedAttention, without mask, causal masking or train-mode dropout, in
/// calcMode(float16|bfloat16), as cuDNN's fused attention. Gradients to q, k, v and the
/// mask. No parameters.
class ScaledDotProductAttention : public Module {
public:
    explicit ScaledDotProductAttention(const AttentionOptions& options = {});
    std::string classname() const override { return "ScaledDotProductAttention"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// Three or four inputs as above.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    /// The kernel's blocks of scores as scratch (see AttentionKernel::blockBytes).
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    const AttentionOptions& options() const { return kernel_.options(); }
    /// The dropout masks' generator (reseed it to replay masks).
    Generator* randomStream() override { return &gen_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&stream_, &fused_.y, &fused_.stats}; }

private:
    AttentionKernel kernel_;
    Generator gen_;
    Tensor stream_;                // the last train-mode forward's dropout stream (AttentionKernel::keep)
    AttentionKernel::Fused fused_; // a fused train-mode forward's output and statistics
};

} // namespace tessera
