#include "modules/DropPath.h"

#include "backend/Backend.h"

namespace tessera {

DropPath::DropPath(const DropPathOptions& options)
    : Module(options.name), p_(options.p), gen_(resolveSeed(options.seed)) {
    if (!(p_ >= 0.0f && p_ < 1.0f)) throw ModuleError("DropPath: p must be in [0, 1), got " + std::to_string(p_));
}

void DropPath::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() < 1) throw shapeError("expects an input [N, ...], got " + inShapes[0].str());
}

// The per-sample factors are dropout applied to [N, 1, ...] ones.
Tensors DropPath::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    if (!isTrain() || p_ == 0.0f) {
        mask_ = Tensor();
        return {data[0]};
    }
    std::vector<int64_t> d(x.shape().rank(), 1);
    d[0] = x.shape()[0];
    Backend& be = backendOf(x);
    Tensor ones = Tensor::full(Shape(d), 1.0f, x.device());
    mask_ = Tensor::empty(ones.shape(), DType::float32, x.device());
    be.dropoutForward(ones, p_, gen_, mask_, ones);
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    be.binaryBroadcast(BinaryOp::mul, x, mask_, y);
    return {y};
}

Tensors DropPath::updateGrad(const Tensors& grad) {
    if (!mask_.defined()) return {grad[0]};
    const Tensor dy = grad[0].plain();
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    backendOf(dx).binaryBroadcast(BinaryOp::mul, dy, mask_, dx);
    return {dx};
}

Blueprint DropPath::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("p", static_cast<double>(p_));
    return bp;
}

} // namespace tessera
