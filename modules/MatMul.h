#pragma once
/// \file MatMul: the matrix product of two data inputs, batched and broadcast as NumPy's
/// and PyTorch's matmul (attention's q k^T and its weights times v).

#include "modules/Module.h"

namespace tessera {

struct MatMulOptions {
    bool transB = false; ///< multiply by b's transpose in its last two dims (q k^T without a Transpose)
    float alpha = 1.0f;  ///< scales the product (attention's 1 / sqrt(d))
    std::string name = {};
};

/// [a, b] -> y = alpha * a b over the last two dims: a [..., M, K], b [..., K, N] (with
/// transB, [..., N, K]) -> y [..., M, N]. The leading (batch) dims broadcast by NumPy's
/// rules, aligned from the right: [N, heads, T, d] by [N, heads, d, T], or [N, T, K] by a
/// shared [K, N]. Both inputs of rank 2 or more. Gradients to both, each summed over
/// the batch dims it was broadcast along. No parameters.
class MatMul : public Module {
public:
    explicit MatMul(const MatMulOptions& options = {});
    std::string classname() const override { return "MatMul"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// Two inputs of rank 2 or more whose inner dims agree and whose batch dims broadcast.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    const MatMulOptions& options() const { return options_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    MatMulOptions options_;
};

} // namespace tessera
