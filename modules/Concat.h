#pragma once
/// \file Concat: join tensors along an axis.

#include "modules/Module.h"

namespace tessera {

/// [x_0: [..., d_0, ...], x_1: [..., d_1, ...], ...] -> y: [..., d_0 + d_1 + ..., ...]
/// along `axis` (negative counts from the end); all other dims must agree.
class Concat : public Module {
public:
    explicit Concat(int axis = 1, std::string name = {}) : Module(std::move(name)), axis_(axis) {}

    std::string classname() const override { return "Concat"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shapes of the last dataShapeFrom / forward to know where to cut.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// At least one input; same rank; dims equal except along the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Float inputs, or all int32 (ids joined: a start token before a sequence), which have
    /// no gradient.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    /// Inputs of one dtype, 16-bit ones included: copies move any type (so bfloat16 and
    /// float16 activations go through without conversions, on any backend).
    bool takes16Bit(const Tensors& data) const override;
    /// The inputs' dtype when they share one; float32 otherwise.
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int axis_;
};

} // namespace tessera
