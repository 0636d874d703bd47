#include "modules/Pad.h"

#include <stdexcept>

namespace tessera {

std::string str(PadMode mode) {
    switch (mode) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::edge: return "edge";
    }
    return "?";
}

PadMode padModeFromString(const std::string& name) {
    for (PadMode m : {PadMode::constant, PadMode::reflect, PadMode::edge}) {
        if (str(m) == name) return m;
    }
    throw ModuleError("pad mode must be constant, reflect or edge, got '" + name + "'");
}

PadND::PadND(size_t spatialDims, std::vector<int64_t> pad, const PadOptions& options)
    : Module(options.name), spatialDims_(spatialDims), options_(options) {
    const std::string cls = "Pad" + std::to_string(spatialDims) + "D";
    if (pad.size() == 1) pad.assign(2 * spatialDims, pad[0]);
    if (pad.size() != 2 * spatialDims) {
        throw ModuleError(cls + ": pad needs 1 or " + std::to_string(2 * spatialDims) + " values, got " +
                          std::to_string(pad.size()));
    }
    for (size_t d = 0; d < spatialDims; ++d) {
        if (pad[2 * d] < 0 || pad[2 * d + 1] < 0) throw ModuleError(cls + ": pads must not be negative");
        lo_.push_back(pad[2 * d]);
        hi_.push_back(pad[2 * d + 1]);
    }
}

void PadND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() != spatialDims_ + 2) {
        throw shapeError("expects input [N, C, ...] with " + std::to_string(spatialDims_) + " spatial dim(s), got " +
                         s.str());
    }
    if (options_.mode != PadMode::reflect) return;
    for (size_t d = 0; d < spatialDims_; ++d) {
        if (lo_[d] >= s[2 + d] || hi_[d] >= s[2 + d]) {
            throw shapeError("reflect padding (" + std::to_string(lo_[d]) + ", " + std::to_string(hi_[d]) +
                             ") must be smaller than spatial dim " + std::to_string(d) + " of " + s.str());
        }
    }
}

void PadND::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    bool ok = s.rank() == spatialDims_ + 2;
    for (size_t d = 0; ok && d < spatialDims_; ++d) ok = s[2 + d] > lo_[d] + hi_[d];
    if (!ok) throw shapeError("gradient " + s.str() + " is not the shape of a padded output");
}

Shapes PadND::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    for (size_t d = 0; d < spatialDims_; ++d) y[2 + d] += lo_[d] + hi_[d];
    return {y};
}

Shapes PadND::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape x = outGradShapes[0];
    for (size_t d = 0; d < spatialDims_; ++d) x[2 + d] -= lo_[d] + hi_[d];
    return {x};
}

Tensors PadND::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{x.shape()})[0], DType::float32, x.device());
    backendOf(x).padForward(options_.mode, options_.fillValue, lo_, hi_, x, y);
    return {y};
}

Tensors PadND::updateGrad(const Tensors& grad) {
    Tensor dx = Tensor::empty(inData().shape(), DType::float32, grad[0].device());
    backendOf(dx).padBackward(options_.mode, lo_, hi_, grad[0], dx);
    return {dx};
}

Blueprint PadND::blueprint() const {
    Blueprint bp = Module::blueprint();
    std::vector<int64_t> pad;
    for (size_t d = 0; d < spatialDims_; ++d) {
        pad.push_back(lo_[d]);
        pad.push_back(hi_[d]);
    }
    bp.scheme.emplace_back("pad", pad);
    bp.scheme.emplace_back("mode", tessera::str(options_.mode));
    bp.scheme.emplace_back("fillValue", static_cast<double>(options_.fillValue));
    return bp;
}

} // namespace tessera
