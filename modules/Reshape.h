#pragma once
/// \file Reshape: a view with another shape.

#include "modules/Module.h"

namespace tessera {

/// x: any shape -> y: `shape`, a view of x with the same number of elements. `shape`
/// includes the batch dim; one entry may be -1 (inferred) and a 0 keeps the input's dim
/// at that position (`{0, -1}` flattens, `{0, 1, 28, 28}` unflattens a batch).
/// gradShapeFrom answers for the input shape last seen by dataShapeFrom or forward.
class Reshape : public Module {
public:
    explicit Reshape(Shape shape, std::string name = {});

    std::string classname() const override { return "Reshape"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input whose element count fits `shape`.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Any dtype: a view of floats (16-bit ones included) or of int32 values (ids, masks).
    void checkDataType(const std::vector<DType>& /*dtypes*/) const override {}
    /// A view of any floating input, 16-bit ones included.
    bool takes16Bit(const Tensors&) const override { return true; }
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return inDTypes;
    }
    Blueprint blueprint() const override;

    /// A view of the (plain) input; the input gradient a view of the output gradient.
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override {
        return viewMemoryUse(inShapes, inLayouts, train, device);
    }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    Shape resolve(const Shape& in) const;

    Shape shape_;
};

} // namespace tessera
