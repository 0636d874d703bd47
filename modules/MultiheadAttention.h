#pragma once
/// \file MultiheadAttention: PyTorch's nn.MultiheadAttention (its parameters, their names
/// and layouts) on ScaledDotProductAttention's compute.

#include "modules/Attention.h"

namespace tessera {

struct MultiheadAttentionOptions {
    float dropout = 0.0f;        ///< the attention weights' dropout in train mode (PyTorch's dropout)
    bool bias = true;            ///< in_proj_bias and out_proj_bias
    bool batchFirst = true;      ///< [N, T, E]; false: [T, N, E] (PyTorch's default)
    bool causal = false;         ///< query i attends to keys j <= i only
    bool keyPaddingMask = false; ///< an input [N, S] after the sequences (PyTorch's key_padding_mask)
    bool attnMask = false;       ///< an input [L, S] or [N * numHeads, L, S] last (PyTorch's attn_mask)
    int64_t seed = -1;           ///< the dropout stream's seed; -1: drawn from the global generator
    std::string name = {};
};

/// Multi-head attention as PyTorch's nn.MultiheadAttention computes it (kdim = vdim =
/// embedDim): q = query Wq^T + bq, k = key Wk^T + bk, v = value Wv^T + bv (Wq, Wk, Wv the
/// thirds of in_proj_weight), each split into numHeads heads of d = embedDim / numHeads;
/// per head softmax(q k^T / sqrt(d) + masks) v, its probabilities dropped in train mode;
/// the heads joined and projected: y = attn Wo^T + bo.
///
/// Inputs: [x] (self-attention: query = key = value = x) or [query, key, value]; then the
/// key-padding mask when `keyPaddingMask`, then the attention mask when `attnMask`.
/// query [N, L, E], key and value [N, S, E] ([L, N, E] and [S, N, E] without batchFirst)
/// -> y with query's shape. The masks are additive float32: 0 keeps a score, -inf drops it
/// (PyTorch's boolean masks are -inf where true). key_padding_mask [N, S] is added to
/// every score of sample n, attn_mask [L, S] to every sample's, [N * numHeads, L, S] per
/// sample and head. A query whose keys are all dropped gets NaN, as in PyTorch.
///
/// Parameters, with PyTorch's layouts: `in_proj_weight` [3E, E] (xavier-uniform),
/// `in_proj_bias` [3E], `out_proj_weight` [E, E] (uniform in +-1/sqrt(E), as PyTorch's
/// out_proj.weight), `out_proj_bias` [E]; biases start at zero. A PyTorch state dict maps
/// name for name, `out_proj.weight` to `out_proj_weight`.
/// Not output: the averaged attention weights PyTorch also returns (they would need every
/// head's scores at once; the scores of a block of heads exist at a time). Gradients reach
/// the inputs and the masks.
class MultiheadAttention : public Module {
public:
    MultiheadAttention(int64_t embedDim, int64_t numHeads, const MultiheadAttentionOptions& options = {});
    std::string classname() const override { return "MultiheadAttention"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return {inShapes[0]}; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// The inputs above, each [batch, time, embedDim] in the options' order of dims.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    /// Takes 16-bit sequences of its compute type that its backend carries (the heads and
    /// scores stay float32); writes its output as a Linear does (Backend::gemmOutputDType).
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    int64_t embedDim() const { return embedDim_; }
    int64_t numHeads() const { return numHeads_; }
    const MultiheadAttentionOptions& options() const { return options_; }
    /// The dropout masks' generator (reseed it to replay masks).
    Generator* randomStream() override { return &gen_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override {
        return {&q_, &k_, &v_, &mask_, &joined_, &stream_, &fused_.y, &fused_.stats};
    }

private:
    // How many of the inputs are sequences (1 or 3) and masks.
    size_t sequenceCount(size_t inputs) const;
    // Input i as batch-first rows [N * T, E].
    Tensor rowsOf(const Tensor& x) const;
    int64_t embedDim_, numHeads_;
    MultiheadAttentionOptions options_;
    AttentionKernel kernel_;
    Generator gen_;
    // Kept from the forward: the projected heads [N, H, T, d], the mask the kernel added,
    // the heads joined [N * L, E] (out_proj's input), the dropout stream.
    Tensor q_, k_, v_, mask_, joined_, stream_;
    AttentionKernel::Fused fused_; // what a fused train-mode forward keeps for its backward
};

} // namespace tessera
