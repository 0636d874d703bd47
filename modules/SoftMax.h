#pragma once
/// \file SoftMax over the channel dim.

#include "modules/Module.h"

namespace tessera {

/// x: [N, C, ...] -> y: same shape, y = exp(x) / sum_c exp(x) over dim 1.
class SoftMax : public Module {
public:
    explicit SoftMax(std::string name = {}) : Module(std::move(name)) {}

    std::string classname() const override { return "SoftMax"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input of rank 2 to 6.
    void checkDataShape(const Shapes& inShapes) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
};

} // namespace tessera
