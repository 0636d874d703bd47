#pragma once
/// \file Tile: repeats a tensor along one axis.

#include "modules/Module.h"

namespace tessera {

/// x: [..., a, ...] -> y: [..., a * times, ...] along `axis` (negative counts from the
/// end): y is `times` copies of x laid end to end; dx is the sum of dy's copies.
class Tile : public Module {
public:
    Tile(int axis, int64_t times, std::string name = {});
    std::string classname() const override { return "Tile"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    /// A gradient whose axis divides by `times`.
    void checkGradShape(const Shapes& outGradShapes) const override;
    /// Float data, or int32 (ONNX's Expand of a bool or integer mask); int32 has no gradient.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return {!inDTypes.empty() && inDTypes[0] == DType::int32 ? DType::int32 : DType::float32};
    }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int axis_;
    int64_t times_;
};

} // namespace tessera
