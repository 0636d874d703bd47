#pragma once
/// \file KMaxPool: keeps the k largest values along an axis, in their original order.

#include "modules/Module.h"

namespace tessera {

/// x: [..., a, ...] -> y: [..., topk, ...] along `axis` (negative counts from the end):
/// the topk largest values of each line, in the order they appear (ties: the earlier
/// one). dx routes dy back to the chosen positions, zeros elsewhere.
class KMaxPool : public Module {
public:
    KMaxPool(int64_t topk, int axis, std::string name = {});
    std::string classname() const override { return "KMaxPool"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// The last input shape with the gradient's other dims.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// The axis exists and holds at least topk values.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&indices_}; }

private:
    int64_t topk_;
    int axis_;
    Tensor indices_;
};

} // namespace tessera
