#pragma once
/// \file GridSample: sampling of an image at the positions a grid gives (PyTorch's
/// F.grid_sample, ONNX's GridSample).

#include "modules/Module.h"

namespace tessera {

/// How a sample between pixels is made: from the 2 x 2 pixels around it, weighted by
/// distance (bilinear), from the nearest pixel (halves to the even one), or from the 4 x 4
/// around it by Keys' cubic kernel with a = -0.75 (bicubic).
enum class GridSampleMode { bilinear, nearest, bicubic };
/// What a position outside the image reads: zeros, the nearest edge pixel (border), or the
/// image mirrored at its edges (reflection; at the corner pixels' centres with
/// alignCorners, else at the image's outer edges), then the edge.
enum class GridPadding { zeros, border, reflection };

/// "bilinear", "nearest", "bicubic" (ONNX opset 20's "linear" and "cubic" too); ModuleError otherwise.
GridSampleMode gridSampleModeFromString(const std::string& s);
std::string str(GridSampleMode m);
/// "zeros", "border", "reflection"; ModuleError otherwise.
GridPadding gridPaddingFromString(const std::string& s);
std::string str(GridPadding p);

struct GridSampleOptions {
    GridSampleMode mode = GridSampleMode::bilinear;
    GridPadding padding = GridPadding::zeros;
    /// -1 and 1 are the corner pixels' centres (PyTorch's align_corners=True); false: the
    /// image's outer edges (align_corners=False, PyTorch's default).
    bool alignCorners = false;
    std::string name = {};
};

/// Inputs x [N, C, H, W] and grid [N, Ho, Wo, 2] -> y [N, C, Ho, Wo]: output pixel (i, j)
/// of sample n samples x[n] at grid[n, i, j] = (u, v), u running from -1 (left) to 1 (right)
/// over the width and v from -1 (top) to 1 (bottom) over the height; as
/// `F.grid_sample(x, grid, mode, padding_mode, align_corners)`. Gradients flow to x (the sum
/// over the samples that read each pixel) and, but with `nearest`, to the grid (PyTorch's:
/// 0 where border or reflection padding clips a position; at a position exactly on a pixel
/// or a mirror, one side's). Flow warping, deformable sampling and spatial transformers
/// with a grid of their own use it; `SpatialTf` is the affine grid's special case.
///
/// The taps' positions and weights ([T, N, Ho * Wo] for T = 4 bilinear, 16 bicubic, 1
/// nearest) come from the backend's element-wise ops; the backend's gatherTaps reads them
/// in one pass over x (the CPU's kernel), or, where a backend has none (CUDA today), each
/// tap is one gather over [N, C, Ho * Wo] forward and one scatter backward. A NaN in the
/// grid gives an unspecified value.
class GridSample : public Module {
public:
    explicit GridSample(const GridSampleOptions& options = {});
    std::string classname() const override { return "GridSample"; }
    const GridSampleOptions& options() const { return options_; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// x [N, C, H, W] and grid [N, Ho, Wo, 2] of one N.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    GridSampleOptions options_;
};

} // namespace tessera
