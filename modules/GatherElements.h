#pragma once
/// \file GatherElements: values taken along an axis at positions given as data;
/// ScatterElements: values put there.

#include "modules/Module.h"

namespace tessera {

/// x: float [d0, ..., A, ..., dr-1] and idx: int32 of x's rank, x's dims but along `axis`
/// (negative from the end), where it holds J positions in [-A, A) (negative ones counted from
/// the end, as ONNX and NumPy count them) -> y: idx's shape,
/// y[..., j, ...] = x[..., idx[..., j, ...], ...]: PyTorch's torch.gather(x, axis, idx) and
/// ONNX's GatherElements (x.gather(1, labels[:, None]), the values of a top-k). A position
/// outside [-A, A) is a ShapeError naming it (a negative one plus A) when the layer runs. dx scatters dy back (adding
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
    Tensor positions_; ///< the last forward's, negative ones counted from the end
};

/// [data, idx, updates] -> y: data's shape, data with updates[..., j, ...] put at
/// [..., idx[..., j, ...], ...] along `axis` (negative from the end): PyTorch's
/// x.scatter(axis, idx, src) (`add`: x.scatter_add(axis, idx, src)) and ONNX's
/// ScatterElements. idx: int32 of data's rank and dims but along the axis, where it holds
/// positions in [-A, A) (negative ones counted from the end; one outside is a ShapeError
/// naming it, a negative one plus A, when the layer runs); updates:
/// float of idx's shape. Without `add`, a position given twice takes the sum of its updates
/// (ONNX leaves it undefined, PyTorch takes one). dx: dy where nothing was put (everywhere
/// with `add`); dupdates: dy at the positions; the positions get no gradient.
class ScatterElements : public Module {
public:
    explicit ScatterElements(int axis = 0, bool add = false, std::string name = {});
    std::string classname() const override { return "ScatterElements"; }
    int axis() const { return axis_; }
    bool add() const { return add_; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return {inShapes[0]}; }
    /// The inputs' shapes from the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// Three inputs of one rank with the axis: idx and updates of one shape, data's but
    /// along the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Float data and updates (16-bit types as float32 copies), int32 idx.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>&, Device) const override {
        return {DType::float32};
    }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// 1 where nothing is put, 0 at the positions (data's shape, as lines along the axis).
    Tensor untouched(const Tensor& idx, const Shape& dataShape, int a) const;
    int axis_;
    bool add_;
    Tensor positions_; ///< the last forward's, negative ones counted from the end
};

} // namespace tessera
