#pragma once
/// \file Resampling: Upsample2D and Upsample3D (an integer factor) and Resize2D and Resize3D
/// (a fixed output size, PyTorch's `F.interpolate(size=...)`), nearest, nearest-exact,
/// linear or cubic.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

/// "nearest", "linear", "nearest-exact", "cubic" (PyTorch's names, less the bi- and tri-
/// of its "bilinear", "trilinear" and "bicubic"; as blueprints write them).
std::string str(ResampleMode mode);
/// The mode by its name (str's inverse); ModuleError listing the names otherwise.
ResampleMode resampleModeFromString(const std::string& name);

struct UpsampleOptions {
    ResampleMode mode = ResampleMode::nearest; ///< linear: bi-/trilinear; cubic: bi-/tricubic
    /// Linear and cubic only: the corner pixels' centres of input and output align
    /// (PyTorch's align_corners=True); false: half-pixel centres (align_corners=False).
    bool alignCorners = false;
    std::string name = {};
};

/// What Upsample and Resize share: x: [N, C, *spatial] -> y: [N, C, *out], where output
/// position o of `out` along a dim of `in` reads input floor(o * in / out) (nearest, as
/// PyTorch's `nearest`), or the input whose centre is nearest, floor((o + 0.5) * in / out)
/// (nearestExact, PyTorch's `nearest-exact`), or interpolates between the two inputs around
/// (o + 0.5) * in / out - 0.5 (linear), or o * (in - 1) / (out - 1) with alignCorners,
/// clamped to the edges, or from the four inputs around the same position (cubic: Keys'
/// kernel with a = -0.75, PyTorch's `bicubic`; edge values repeated) (backend/ElementMath.h:
/// resampleTaps).
class ResampleND : public Module {
public:
    ResampleND(size_t spatialDims, const UpsampleOptions& options, const char* kind);
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    ResampleParams params() const { return {options_.mode, options_.alignCorners}; }

protected:
    /// The output's spatial dims for an input [N, C, *spatial].
    virtual std::vector<int64_t> outSpatial(const Shape& in) const = 0;
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    size_t spatialDims() const { return spatialDims_; }

private:
    size_t spatialDims_;
    UpsampleOptions options_;
};

/// x: [N, C, *spatial] -> y: [N, C, *(spatial * scale)].
class UpsampleND : public ResampleND {
public:
    UpsampleND(size_t spatialDims, int64_t scale, const UpsampleOptions& options);
    using Module::dataShapeFrom, Module::gradShapeFrom;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// A gradient whose spatial dims divide by the scale.
    void checkGradShape(const Shapes& outGradShapes) const override;
    Blueprint blueprint() const override;

protected:
    std::vector<int64_t> outSpatial(const Shape& in) const override;

private:
    int64_t scale_;
};

class Upsample2D : public UpsampleND {
public:
    explicit Upsample2D(int64_t scale = 2, const UpsampleOptions& options = {}) : UpsampleND(2, scale, options) {}
    std::string classname() const override { return "Upsample2D"; }
};

class Upsample3D : public UpsampleND {
public:
    explicit Upsample3D(int64_t scale = 2, const UpsampleOptions& options = {}) : UpsampleND(3, scale, options) {}
    std::string classname() const override { return "Upsample3D"; }
};

/// x: [N, C, *spatial] -> y: [N, C, *size]: any input size resampled to `size` (one
/// positive size per spatial dim), larger or smaller.
class ResizeND : public ResampleND {
public:
    ResizeND(size_t spatialDims, std::vector<int64_t> size, const UpsampleOptions& options);
    using Module::dataShapeFrom, Module::gradShapeFrom;
    /// Spatial dims of at least 1 (an empty one has nothing to resample from).
    void checkDataShape(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    Blueprint blueprint() const override;
    const std::vector<int64_t>& size() const { return size_; }

protected:
    std::vector<int64_t> outSpatial(const Shape& in) const override;

private:
    std::vector<int64_t> size_;
};

class Resize2D : public ResizeND {
public:
    explicit Resize2D(std::vector<int64_t> size, const UpsampleOptions& options = {})
        : ResizeND(2, std::move(size), options) {}
    std::string classname() const override { return "Resize2D"; }
};

class Resize3D : public ResizeND {
public:
    explicit Resize3D(std::vector<int64_t> size, const UpsampleOptions& options = {})
        : ResizeND(3, std::move(size), options) {}
    std::string classname() const override { return "Resize3D"; }
};

} // namespace tessera
