#pragma once
/// \file Pow: y = scale * x^exponent, element-wise, with constant exponent and scale.

#include "modules/Module.h"

namespace tessera {

/// x: any shape -> y = scale * x^exponent (std::pow's values: a negative x to a
/// non-integer exponent is NaN, 0 to a negative one inf); dx = scale * exponent *
/// x^(exponent - 1) * dy (0 for the exponent 0). ONNX's Pow by a constant, Sqrt (0.5),
/// Reciprocal (-1) and a constant divided by data (c / x: exponent -1, scale c) import as
/// it. ModuleError for an exponent or a scale that is not finite.
class Pow : public Module {
public:
    explicit Pow(float exponent, float scale = 1.0f, std::string name = {});
    std::string classname() const override { return "Pow"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    float exponent() const { return exponent_; }
    float scale() const { return scale_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    float exponent_, scale_;
};

} // namespace tessera
