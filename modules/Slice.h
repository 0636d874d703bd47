#pragma once
/// \file Slice: a range along one axis, or along several.

#include <vector>

#include "modules/Module.h"

namespace tessera {

struct SliceOptions {
    std::vector<int64_t> steps = {}; ///< one per axis, not 0 (none: all 1); negative ones walk backwards
    std::string name = {};
};

/// x: [..., D, ...] -> y: [..., end - start, ...], the elements [start, end) along `axis`.
/// Negative start/end count from the end of the axis (end = 0 means "to the end").
/// With several axes (distinct), each takes its own range and the others stay whole:
/// `Slice({2, 3}, {1, 1}, {-1, -1})` is x[:, :, 1:-1, 1:-1].
/// With steps (positive), every step-th element of each range from its start:
/// `Slice({1, 2}, {0, 1}, {0, 0}, SliceOptions{.steps = {2, 2}})` is x[:, 0::2, 1::2] (ceil((end - start) / step)
/// elements along each axis). A negative step walks from start down to end (exclusive), as
/// in Python, except that end 0 again means "to the end", here through index 0 (-D stops
/// before it): `Slice({1}, {-1}, {0}, SliceOptions{.steps = {-1}})` is x[:, ::-1], and
/// `Slice({1}, {5}, {-D}, SliceOptions{.steps = {-2}})` is x[:, 5:0:-2].
class Slice : public Module {
public:
    Slice(int axis, int64_t start, int64_t end, std::string name = {});
    Slice(std::vector<int> axes, std::vector<int64_t> starts, std::vector<int64_t> ends, std::string name = {});
    Slice(std::vector<int> axes, std::vector<int64_t> starts, std::vector<int64_t> ends, const SliceOptions& options);

    std::string classname() const override { return "Slice"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input with a non-empty range along each axis, no axis twice.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Float data, or int32 (ids or positions: `input_ids[:, :-1]`); int32 has no gradient.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return {!inDTypes.empty() && inDTypes[0] == DType::int32 ? DType::int32 : DType::float32};
    }
    /// One axis: integers, as files before several axes wrote them; several: lists. "step"
    /// only where a step is not 1.
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// Range k resolved for `dim`: [begin, end) for a positive step, begin down to end
    /// (exclusive, -1 for through index 0) for a negative one.
    std::pair<int64_t, int64_t> range(size_t k, int64_t dim) const;
    /// The input shape after the first k ranges are applied (k = 0: the input).
    Shape shapeAfter(const Shape& in, size_t k) const;
    /// The elements range k picks from an axis of `dim` (0 when empty).
    int64_t count(size_t k, int64_t dim) const;

    std::vector<int> axes_;
    std::vector<int64_t> starts_, ends_, steps_;
};

} // namespace tessera
