#pragma once
/// \file ScaledDotProductAttention: softmax(q k^T * scale + mask) v, one head's scores at a
/// time (PyTorch's F.scaled_dot_product_attention without dropout).

#include "modules/Module.h"

namespace tessera {

struct AttentionOptions {
    bool causal = false; ///< position i attends to positions j <= i only (PyTorch's is_causal)
    float scale = 0.0f;  ///< the scores' factor; 0: 1 / sqrt(d)
    std::string name = {};
};

/// [q, k, v] or [q, k, v, mask] -> y = softmax(q k^T * scale + mask) v: q [..., Tq, d],
/// k [..., Tk, d], v [..., Tk, dv] with the same leading dims (batch, heads) -> y
/// [..., Tq, dv]. `mask`: additive float scores [..., Tq or 1, Tk] whose leading dims
/// broadcast to q's (0 to keep, -inf to drop: a key-padding mask [N, 1, 1, Tk], a causal
/// one [Tq, Tk]). A row whose scores are all -inf has no defined output (NaN, as in PyTorch).
/// Only one [Tq, Tk] score matrix exists at a time: backward recomputes each head's scores
/// instead of keeping them all. Gradients to q, k, v and the mask. No parameters.
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
    const AttentionOptions& options() const { return options_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    float scaleFor(int64_t d) const;
    // For each head, the matrix of the mask it adds (empty without a mask).
    static std::vector<int64_t> maskOfHead(const Tensors& in);
    // Head h's probabilities P = softmax(q k^T * scale + mask) into p [Tq, Tk], its scores
    // into `scores` on the way.
    void probabilities(const Tensors& in, int64_t h, const std::vector<int64_t>& maskOf, const Tensor& scores,
                       const Tensor& p) const;
    // [Tq, Tk]: 0 on and below the diagonal, -inf above; made again when the shape changes.
    const Tensor& causalMask(int64_t Tq, int64_t Tk, Device device) const;
    AttentionOptions options_;
    mutable Tensor causalMask_;
};

} // namespace tessera
