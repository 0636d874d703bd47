#pragma once
/// \file MulAddConst: y = a * x + b with constants a and b.

#include "modules/Module.h"

namespace tessera {

/// x: any shape -> y = a * x + b; dx = a * dy.
class MulAddConst : public Module {
public:
    explicit MulAddConst(float a = 1.0f, float b = 0.0f, std::string name = {})
        : Module(std::move(name)), a_(a), b_(b) {}
    std::string classname() const override { return "MulAddConst"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    void checkDataShape(const Shapes& inShapes) const override { requireCount(inShapes, 1, "input"); }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    float a_, b_;
};

} // namespace tessera
