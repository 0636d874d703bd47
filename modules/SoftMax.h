#pragma once
/// \file SoftMax over one axis (the channel dim unless told).

#include "modules/Module.h"

namespace tessera {

/// x -> y: same shape, y = exp(x) / sum exp(x) along `axis` (1, the channels of [N, C, ...],
/// unless told; negative from the end: -1 is the last axis, attention's scores).
class SoftMax : public Module {
public:
    explicit SoftMax(std::string name = {}) : Module(std::move(name)) {}
    explicit SoftMax(int axis, std::string name = {}) : Module(std::move(name)), axis_(axis) {}
    int axis() const { return axis_; }

    std::string classname() const override { return "SoftMax"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input with the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    // [outer, C, inner] around the axis of a tensor of shape s ([outer, C] for the last axis):
    // the backend's softmax runs over dim 1.
    Shape around(const Shape& s) const;
    int axis_ = 1;
};

} // namespace tessera
