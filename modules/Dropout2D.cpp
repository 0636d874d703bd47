#include "modules/Dropout2D.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

Dropout2D::Dropout2D(const Dropout2DOptions& options)
    : Module(options.name), p_(options.p), gen_(resolveSeed(options.seed)) {
    if (!(p_ >= 0.0f && p_ < 1.0f)) throw ModuleError("Dropout2D: p must be in [0, 1), got " + std::to_string(p_));
}

void Dropout2D::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() != 4) throw shapeError("expects input [N, C, H, W], got " + inShapes[0].str());
}

// The per-map mask is dropout applied to a [N, C] tensor of ones.
Tensors Dropout2D::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    if (!isTrain() || p_ == 0.0f) { // p = 0: the identity, no mask drawn
        mask_ = Tensor();
        return {x};
    }
    Backend& be = backendOf(x);
    Tensor ones = Tensor::full({x.shape()[0], x.shape()[1]}, 1.0f, x.device());
    mask_ = Tensor::empty(ones.shape(), DType::float32, x.device());
    be.dropoutForward(ones, p_, gen_, mask_, ones);
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    be.mulChannels(x, mask_, y);
    return {y};
}

Tensors Dropout2D::updateGrad(const Tensors& grad) {
    if (!mask_.defined()) return {grad[0]};
    Tensor dx = Tensor::empty(grad[0].shape(), DType::float32, grad[0].device());
    backendOf(dx).mulChannels(grad[0], mask_, dx);
    return {dx};
}

Blueprint Dropout2D::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("p", static_cast<double>(p_));
    return bp;
}

MemoryUse Dropout2D::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                               Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (train && p_ != 0.0f) {
        use.keptBytes = inShapes[0][0] * inShapes[0][1] * static_cast<int64_t>(sizeof(float)); // the [N, C] mask
    } else {
        use.outputViews[0] = 0; // eval, or p = 0: the output is the input
    }
    return use;
}

} // namespace tessera
