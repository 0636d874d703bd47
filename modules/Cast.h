#pragma once
/// \file Cast: converts between float32 and int32.

#include "modules/Module.h"

namespace tessera {

/// x: any shape of `intype` -> y: same shape of `outtype` (float to int rounds toward
/// zero). The gradient passes through as float32 when both types are float32, and is
/// undefined otherwise (integers carry no gradient).
class Cast : public Module {
public:
    Cast(DType intype, DType outtype, std::string name = {})
        : Module(std::move(name)), intype_(intype), outtype_(outtype) {}
    std::string classname() const override { return "Cast"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    void checkDataShape(const Shapes& inShapes) const override { requireCount(inShapes, 1, "input"); }
    /// The input must be `intype`.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    DType intype_, outtype_;
};

} // namespace tessera
