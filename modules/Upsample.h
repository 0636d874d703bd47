#pragma once
/// \file Upsample2D and Upsample3D: integer-factor upsampling, nearest or linear.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

struct UpsampleOptions {
    ResampleMode mode = ResampleMode::nearest; ///< linear: bi-/trilinear, half-pixel centres
    std::string name = {};
};

/// x: [N, C, *spatial] -> y: [N, C, *(spatial * scale)].
class UpsampleND : public Module {
public:
    UpsampleND(size_t spatialDims, int64_t scale, const UpsampleOptions& options);
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    /// A gradient whose spatial dims divide by the scale.
    void checkGradShape(const Shapes& outGradShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    size_t spatialDims_;
    int64_t scale_;
    UpsampleOptions options_;
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

} // namespace tessera
