#include "modules/MulAddConst.h"

#include "backend/Backend.h"

namespace tessera {

Tensors MulAddConst::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(data[0].shape(), DType::float32, data[0].device());
    backendOf(y).affine(data[0], a_, b_, y);
    return {y};
}

Tensors MulAddConst::updateGrad(const Tensors& grad) {
    Tensor dx = Tensor::empty(grad[0].shape(), DType::float32, grad[0].device());
    backendOf(dx).affine(grad[0], a_, 0.0f, dx);
    return {dx};
}

Blueprint MulAddConst::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("a", static_cast<double>(a_));
    bp.scheme.emplace_back("b", static_cast<double>(b_));
    return bp;
}

} // namespace tessera
