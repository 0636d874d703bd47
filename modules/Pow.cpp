#include "modules/Pow.h"

#include <cmath>

#include "backend/Backend.h"

namespace tessera {

Pow::Pow(float exponent, float scale, std::string name) : Module(std::move(name)), exponent_(exponent), scale_(scale) {
    if (!std::isfinite(exponent) || !std::isfinite(scale)) {
        throw moduleError("exponent and scale must be finite, got exponent " + std::to_string(exponent) +
                          " and scale " + std::to_string(scale));
    }
}

void Pow::checkDataShape(const Shapes& inShapes) const { requireCount(inShapes, 1, "input"); }

Tensors Pow::updateData(const Tensors& data) {
    const Tensor& x = data[0]; // plain: the module does not handle layouts
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    Backend& be = backendOf(y);
    be.power(x, exponent_, y);
    if (scale_ != 1.0f) be.affine(y, scale_, 0.0f, y);
    return {y};
}

// dx = scale * exponent * x^(exponent - 1) * dy
Tensors Pow::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    Backend& be = backendOf(dx);
    const float factor = scale_ * exponent_;
    if (factor == 0.0f) {
        be.fill(dx, 0.0f);
    } else if (exponent_ == 1.0f) {
        be.affine(dy, factor, 0.0f, dx);
    } else {
        be.power(inData(), exponent_ - 1.0f, dx);
        be.mul(dx, dy, dx);
        if (factor != 1.0f) be.affine(dx, factor, 0.0f, dx);
    }
    return {dx};
}

Blueprint Pow::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("exponent", static_cast<double>(exponent_));
    bp.scheme.emplace_back("scale", static_cast<double>(scale_));
    return bp;
}

} // namespace tessera
