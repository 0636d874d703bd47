#pragma once
/// \file MulAddConst: y = a * x + b with constants a and b.

#include "modules/Module.h"

namespace tessera {

/// x: any shape -> y = a * x + b; dx = a * dy. The constants are numbers, or tensors whose
/// shapes broadcast to the input's without changing it (NumPy's rules): a per-channel
/// [C, 1, 1] scale of an [N, C, H, W] input, as ONNX models' constant Mul and Add by
/// tensors give.
class MulAddConst : public Module {
public:
    explicit MulAddConst(float a = 1.0f, float b = 0.0f, std::string name = {})
        : Module(std::move(name)), a_(a), b_(b) {}
    /// Tensor constants (plain float32 copies kept as the attributes "a" and "b", so model
    /// files hold them); an undefined one is the number 1 (a) or 0 (b). ModuleError for a
    /// tensor that is not float32 or holds no elements.
    MulAddConst(const Tensor& a, const Tensor& b, std::string name = {});
    std::string classname() const override { return "MulAddConst"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input; tensor constants must broadcast to its shape without changing it.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    /// Whether a (b) is a tensor (the attribute "a" ("b")) rather than a number.
    bool tensorScale() const { return tensorA_; }
    bool tensorShift() const { return tensorB_; }
    float scale() const { return a_; }
    float shift() const { return b_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    float a_ = 1.0f, b_ = 0.0f;
    bool tensorA_ = false, tensorB_ = false;
};

} // namespace tessera
