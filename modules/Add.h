#pragma once
/// \file Add (also known as Sum): a weighted sum of same-shaped tensors.

#include "modules/Module.h"

namespace tessera {

/// [x_0, ..., x_k] (same shape) -> y = sum_i c_i x_i; dx_i = c_i dy. Without coefficients
/// every c_i is 1; with them there must be one per input.
class Add : public Module {
public:
    explicit Add(std::vector<float> coefficients = {}, std::string name = {});

    std::string classname() const override { return "Add"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override { return {inShapes[0]}; }
    /// Needs the input count of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// At least one input, all of the same shape, as many as coefficients (when given).
    void checkDataShape(const Shapes& inShapes) const override;
    bool handlesLayouts() const override { return true; }
    Blueprint blueprint() const override;

    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    float coefficient(size_t i) const { return coefficients_.empty() ? 1.0f : coefficients_[i]; }

    std::vector<float> coefficients_;
};

/// PuzzleLib's other name for the same merge.
using Sum = Add;

/// [x_0, ..., x_k] (same shape) -> y = x_0 * x_1 * ... element-wise;
/// dx_i = dy * prod_{j != i} x_j. Two inputs may also be x [N, C, ...] and a per-channel
/// gate g [N, C, 1, ...] of the same rank, in either order (a squeeze-and-excitation
/// block's scaling): y = x * g broadcast over the plane, dg the plane sums of dy * x.
class Mul : public Module {
public:
    explicit Mul(std::string name = {}) : Module(std::move(name)) {}

    std::string classname() const override { return "Mul"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// At least two inputs, all of the same shape, or x and its per-channel gate.
    void checkDataShape(const Shapes& inShapes) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
};

} // namespace tessera
