#pragma once
/// \file SpatialTf: a spatial transformer's sampler: an affine grid from a per-sample
/// transform, and bilinear sampling of the input there. PuzzleLib's SpatialTf.

#include "modules/Module.h"

namespace tessera {

struct SpatialTfOptions {
    int64_t height = 0; ///< output rows; 0: the input's
    int64_t width = 0;  ///< output columns; 0: the input's
    std::string name = {};
};

/// Inputs x [N, C, H, W] and theta [N, 2, 3] -> y [N, C, Ho, Wo]. Output pixel (i, j)
/// reads the input at theta [x_t, y_t, 1] in normalised coordinates (x_t, y_t run from -1
/// to 1 over the output's columns and rows; -1 and 1 are the input's corner pixel
/// centres), bilinearly, zero outside; the identity transform [[1, 0, 0], [0, 1, 0]]
/// copies x when the sizes agree. Gradients flow to both x and theta.
class SpatialTf : public Module {
public:
    explicit SpatialTf(const SpatialTfOptions& options = {});
    std::string classname() const override { return "SpatialTf"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// x [N, C, H, W] and theta [N, 2, 3] of one N.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    SpatialTfOptions options_;
};

} // namespace tessera
