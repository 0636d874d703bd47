#pragma once
/// \file GatherElements: values taken along an axis at positions given as data.

#include "modules/Module.h"

namespace tessera {

/// x: float [d0, ..., A, ..., dr-1] and idx: int32 of x's rank, x's dims but along `axis`
/// (negative from the end), where it holds J positions in [0, A) -> y: idx's shape,
/// y[..., j, ...] = x[..., idx[..., j, ...], ...]: PyTorch's torch.gather(x, axis, idx) and
/// ONNX's GatherElements (x.gather(1, labels[:, None]), the values of a top-k). A position
/// outside [0, A) is a ShapeError naming it when the layer runs. dx scatters dy back (adding
/// where positions repeat), zeros elsewhere; the positions get no gradient (undefined).
class GatherElements : public Module {
public:
    explicit GatherElements(int axis = 0, std::string name = {});
    std::string classname() const override { return "GatherElements"; }
    int axis() const { return axis_; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return {inShapes[1]}; }
    /// x's and idx's shapes from the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// Two inputs of one rank with the axis, equal dims but along it.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Float x (16-bit types as a float32 copy), int32 idx.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>&, Device) const override {
        return {DType::float32};
    }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int axis_;
};

} // namespace tessera
