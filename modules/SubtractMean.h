#pragma once
/// \file SubtractMean: subtracts each element's local mean (subtractive normalisation).
/// PuzzleLib's SubtractMean.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

struct SubtractMeanOptions {
    int64_t size = 5;       ///< the window's side, odd and > 1
    bool includePad = true; ///< the mean divides by size^2 (zeros outside), else by the window's inside
    std::string name = {};
};

/// x: [N, C, H, W] -> y = x - mean, the mean over the size x size window centred on each
/// element within its map (an average pooling of stride 1 and padding size / 2). dx =
/// dy - the pooling's adjoint applied to dy.
class SubtractMean : public Module {
public:
    explicit SubtractMean(const SubtractMeanOptions& options = {});
    std::string classname() const override { return "SubtractMean"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, C, H, W].
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    PoolParams params() const;
    SubtractMeanOptions options_;
};

} // namespace tessera
