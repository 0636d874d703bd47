#include "modules/Upsample.h"

#include <stdexcept>

namespace tessera {

UpsampleND::UpsampleND(size_t spatialDims, int64_t scale, const UpsampleOptions& options)
    : Module(options.name), spatialDims_(spatialDims), scale_(scale), options_(options) {
    if (scale < 1) {
        throw ModuleError("Upsample" + std::to_string(spatialDims) + "D: scale must be at least 1, got " +
                          std::to_string(scale));
    }
}

void UpsampleND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() != spatialDims_ + 2) {
        throw shapeError("expects input [N, C, ...] with " + std::to_string(spatialDims_) + " spatial dims, got " +
                         inShapes[0].str());
    }
}

void UpsampleND::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    bool ok = s.rank() == spatialDims_ + 2;
    for (size_t d = 0; ok && d < spatialDims_; ++d) ok = s[2 + d] % scale_ == 0;
    if (!ok)
        throw shapeError("gradient " + s.str() + " has spatial dims that do not divide by " + std::to_string(scale_));
}

Shapes UpsampleND::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    for (size_t d = 0; d < spatialDims_; ++d) y[2 + d] *= scale_;
    return {y};
}

Shapes UpsampleND::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape x = outGradShapes[0];
    for (size_t d = 0; d < spatialDims_; ++d) x[2 + d] /= scale_;
    return {x};
}

Tensors UpsampleND::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{data[0].shape()})[0], DType::float32, data[0].device());
    backendOf(y).resampleForward(options_.mode, data[0], y);
    return {y};
}

Tensors UpsampleND::updateGrad(const Tensors& grad) {
    Tensor dx = Tensor::empty(inData().shape(), DType::float32, grad[0].device());
    backendOf(dx).resampleBackward(options_.mode, grad[0], dx);
    return {dx};
}

Blueprint UpsampleND::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("scale", scale_);
    bp.scheme.emplace_back("mode", std::string(options_.mode == ResampleMode::nearest ? "nearest" : "linear"));
    return bp;
}

} // namespace tessera
