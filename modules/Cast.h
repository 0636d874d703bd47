#pragma once
/// \file Cast: converts between float32, int32, bfloat16 and float16.

#include "modules/Module.h"

namespace tessera {

/// x: any shape of `intype` -> y: same shape of `outtype` (float to int rounds toward
/// zero; to bfloat16 and float16 rounds to nearest even). Between floating types the
/// gradient converts back: the output gradient (in `outtype` or float32) comes back in
/// `intype`, as PuzzleLib's Cast does. With an int32 side it is undefined (integers carry
/// no gradient). The input reaches the cast as it comes (a bfloat16 input is not widened
/// first).
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
    bool takes16Bit(const Tensors&) const override { return true; }
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>&, Device) const override {
        return {outtype_};
    }
    DType intype() const { return intype_; }
    DType outtype() const { return outtype_; }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    DType intype_, outtype_;
};

} // namespace tessera
