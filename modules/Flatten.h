#pragma once
/// \file Flatten: [N, d1, d2, ...] -> [N, d1 * d2 * ...].

#include "modules/Module.h"

namespace tessera {

/// x: [N, d1, ..., dk] (k >= 1) -> y: [N, d1 * ... * dk], a view of x; dx is a view of dy.
/// gradShapeFrom answers for the input shape last seen by dataShapeFrom or forward (the
/// output alone does not say how to unflatten); before either it throws ShapeError.
class Flatten : public Module {
public:
    explicit Flatten(std::string name = {}) : Module(std::move(name)) {}

    std::string classname() const override { return "Flatten"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input of rank >= 2.
    void checkDataShape(const Shapes& inShapes) const override;

    /// A view of any floating input, 16-bit ones included.
    bool takes16Bit(const Tensors&) const override { return true; }
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return inDTypes;
    }
    /// A view of the (plain) input; the input gradient a view of the output gradient.
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override {
        return viewMemoryUse(inShapes, inLayouts, train, device);
    }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
};

} // namespace tessera
