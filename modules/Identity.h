#pragma once
/// \file Identity: passes its input through.

#include "modules/Module.h"

namespace tessera {

/// x: any shape and dtype -> y = x (the same tensor, no copy); dx = dy.
class Identity : public Module {
public:
    explicit Identity(std::string name = {}) : Module(std::move(name)) {}

    std::string classname() const override { return "Identity"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input of any shape.
    void checkDataShape(const Shapes& inShapes) const override { requireCount(inShapes, 1, "input"); }
    /// Any dtype (a graph's input node passes int32 ids on to an Embedder).
    void checkDataType(const std::vector<DType>& /*dtypes*/) const override {}
    bool handlesLayouts() const override { return true; }
    bool takes16Bit(const Tensors&) const override { return true; }
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return inDTypes;
    }
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override {
        return viewMemoryUse(inShapes, inLayouts, train, device); // the output is the input
    }

protected:
    Tensors updateData(const Tensors& data) override { return data; }
    Tensors updateGrad(const Tensors& grad) override { return grad; }
};

} // namespace tessera
