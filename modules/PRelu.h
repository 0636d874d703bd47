#pragma once
/// \file PRelu: a leaky ReLU whose negative slope is learned, per channel or shared.

#include "modules/Module.h"

namespace tessera {

struct PReluOptions {
    bool sharedMaps = false; ///< one slope for all channels
    float init = 0.25f;
    std::string name = {};
};

/// x: [N, maps, ...] -> y = x > 0 ? x : slope[c] * x. Parameter `slopes`: [maps] (or [1]
/// when shared).
class PRelu : public Module {
public:
    explicit PRelu(int64_t maps, const PReluOptions& options = {});
    std::string classname() const override { return "PRelu"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, maps, ...] (any maps when shared).
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    /// One backend op gives the input and slope gradients: backward runs it once.
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;

private:
    int64_t maps_;
    PReluOptions options_;
};

} // namespace tessera
