#pragma once
/// \file ReduceMean: the mean over some dims.

#include "modules/Module.h"

namespace tessera {

/// x: any shape -> y: the mean of x over `axes` (dims of the input, batch included;
/// negative ones count from the end; none: every dim). With keepDims the reduced dims stay
/// as 1 ([N, C, H, W] over {2, 3} -> [N, C, 1, 1]), else they go ([N, C]; [1] when every
/// dim goes). dx = dy / count,
/// spread over the reduced dims. ONNX's ReduceMean.
class ReduceMean : public Module {
public:
    explicit ReduceMean(std::vector<int64_t> axes = {}, bool keepDims = true, std::string name = {});
    std::string classname() const override { return "ReduceMean"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input with every axis in range and none twice, at most 8 dims.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// x's shape with the reduced dims as 1.
    Shape keptShape(const Shape& in) const;
    std::vector<int64_t> axes_;
    bool keepDims_;
};

} // namespace tessera
