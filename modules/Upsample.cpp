#include "modules/Upsample.h"

#include <stdexcept>

namespace tessera {

std::string str(ResampleMode mode) {
    switch (mode) {
    case ResampleMode::nearest: return "nearest";
    case ResampleMode::linear: return "linear";
    case ResampleMode::nearestExact: return "nearest-exact";
    case ResampleMode::cubic: return "cubic";
    }
    return "?";
}

ResampleMode resampleModeFromString(const std::string& name) {
    for (ResampleMode m :
         {ResampleMode::nearest, ResampleMode::linear, ResampleMode::nearestExact, ResampleMode::cubic}) {
        if (str(m) == name) return m;
    }
    throw ModuleError("resampling mode must be nearest, nearest-exact, linear or cubic, got '" + name + "'");
}

ResampleND::ResampleND(size_t spatialDims, const UpsampleOptions& options, const char* kind)
    : Module(options.name), spatialDims_(spatialDims), options_(options) {
    if (options.alignCorners && options.mode != ResampleMode::linear && options.mode != ResampleMode::cubic) {
        throw ModuleError(std::string(kind) + std::to_string(spatialDims) +
                          "D: alignCorners applies to linear and cubic modes only (" + tessera::str(options.mode) +
                          " has no corners to align)");
    }
}

void ResampleND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() != spatialDims_ + 2) {
        throw shapeError("expects input [N, C, ...] with " + std::to_string(spatialDims_) + " spatial dims, got " +
                         inShapes[0].str());
    }
}

Shapes ResampleND::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    const std::vector<int64_t> out = outSpatial(y);
    for (size_t d = 0; d < spatialDims_; ++d) y[static_cast<int64_t>(2 + d)] = out[d];
    return {y};
}

Tensors ResampleND::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{data[0].shape()})[0], DType::float32, data[0].device());
    backendOf(y).resampleForward(params(), data[0], y);
    return {y};
}

Tensors ResampleND::updateGrad(const Tensors& grad) {
    Tensor dx = Tensor::empty(inData().shape(), DType::float32, grad[0].device());
    backendOf(dx).resampleBackward(params(), grad[0], dx);
    return {dx};
}

Blueprint ResampleND::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("mode", tessera::str(options_.mode));
    if (options_.alignCorners) bp.scheme.emplace_back("alignCorners", true); // written only when set
    return bp;
}

// ---- Upsample ---------------------------------------------------------------------------

UpsampleND::UpsampleND(size_t spatialDims, int64_t scale, const UpsampleOptions& options)
    : ResampleND(spatialDims, options, "Upsample"), scale_(scale) {
    if (scale < 1) {
        throw ModuleError("Upsample" + std::to_string(spatialDims) + "D: scale must be at least 1, got " +
                          std::to_string(scale));
    }
}

std::vector<int64_t> UpsampleND::outSpatial(const Shape& in) const {
    std::vector<int64_t> out;
    for (size_t d = 0; d < spatialDims(); ++d) out.push_back(in[static_cast<int64_t>(2 + d)] * scale_);
    return out;
}

void UpsampleND::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    bool ok = s.rank() == spatialDims() + 2;
    for (size_t d = 0; ok && d < spatialDims(); ++d) ok = s[static_cast<int64_t>(2 + d)] % scale_ == 0;
    if (!ok)
        throw shapeError("gradient " + s.str() + " has spatial dims that do not divide by " + std::to_string(scale_));
}

Shapes UpsampleND::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape x = outGradShapes[0];
    for (size_t d = 0; d < spatialDims(); ++d) x[static_cast<int64_t>(2 + d)] /= scale_;
    return {x};
}

Blueprint UpsampleND::blueprint() const {
    Blueprint bp = ResampleND::blueprint();
    bp.scheme.insert(bp.scheme.begin(), {"scale", scale_});
    return bp;
}

// ---- Resize -----------------------------------------------------------------------------

ResizeND::ResizeND(size_t spatialDims, std::vector<int64_t> size, const UpsampleOptions& options)
    : ResampleND(spatialDims, options, "Resize"), size_(std::move(size)) {
    bool ok = size_.size() == spatialDims;
    for (int64_t v : size_) ok = ok && v >= 1;
    if (!ok) {
        std::string got;
        for (int64_t v : size_) got += (got.empty() ? "" : ", ") + std::to_string(v);
        throw ModuleError("Resize" + std::to_string(spatialDims) + "D: size must hold " + std::to_string(spatialDims) +
                          " positive dims (the output's spatial dims), got [" + got + "]");
    }
}

void ResizeND::checkDataShape(const Shapes& inShapes) const {
    ResampleND::checkDataShape(inShapes);
    for (size_t d = 2; d < inShapes[0].rank(); ++d) {
        if (inShapes[0][static_cast<int64_t>(d)] < 1)
            throw shapeError("expects spatial dims of at least 1 to resample from, got " + inShapes[0].str());
    }
}

std::vector<int64_t> ResizeND::outSpatial(const Shape&) const { return size_; }

Shapes ResizeND::gradShapeFrom(const Shapes&) const { return lastInShapes("gradShapeFrom"); }

Blueprint ResizeND::blueprint() const {
    Blueprint bp = ResampleND::blueprint();
    bp.scheme.insert(bp.scheme.begin(), {"size", size_});
    return bp;
}

} // namespace tessera
