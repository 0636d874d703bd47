#include "modules/SoftMax.h"

#include "backend/Backend.h"

namespace tessera {

void SoftMax::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() < 2 || s.rank() > 6) throw shapeError("expects input [N, C, ...] of rank 2 to 6, got " + s.str());
}

// x: [N, C, ...] -> y: [N, C, ...]
Tensors SoftMax::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    backendOf(x).softmaxForward(x, y);
    return {y};
}

Tensors SoftMax::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    backendOf(dy).softmaxBackward(data(), dy, dx);
    return {dx};
}

} // namespace tessera
