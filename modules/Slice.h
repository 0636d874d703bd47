#pragma once
/// \file Slice: a range along one axis.

#include "modules/Module.h"

namespace tessera {

/// x: [..., D, ...] -> y: [..., end - start, ...], the elements [start, end) along `axis`.
/// Negative start/end count from the end of the axis (end = 0 means "to the end").
class Slice : public Module {
public:
    Slice(int axis, int64_t start, int64_t end, std::string name = {});

    std::string classname() const override { return "Slice"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input with a non-empty range along the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// [begin, end) resolved for `dim`; begin >= end when empty.
    std::pair<int64_t, int64_t> range(int64_t dim) const;

    int axis_;
    int64_t start_, end_;
};

} // namespace tessera
