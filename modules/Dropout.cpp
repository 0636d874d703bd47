#include "modules/Dropout.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

Dropout::Dropout(const DropoutOptions& options) : Module(options.name), p_(options.p), gen_(resolveSeed(options.seed)) {
    if (!(p_ >= 0.0f && p_ < 1.0f)) {
        throw ModuleError("Dropout: p must be in [0, 1), got " + std::to_string(p_));
    }
}

Tensors Dropout::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    if (!isTrain()) {
        mask_ = Tensor();
        return {x};
    }
    if (!mask_.defined() || mask_.shape() != x.shape() || mask_.device() != x.device()) {
        mask_ = Tensor::empty(x.shape(), DType::float32, x.device());
    }
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    backendOf(x).dropoutForward(x, p_, gen_, mask_, y);
    return {y};
}

Tensors Dropout::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    if (!mask_.defined()) return {dy}; // the forward ran in eval mode
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    backendOf(dy).mul(dy, mask_, dx);
    return {dx};
}

Blueprint Dropout::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("p", static_cast<double>(p_));
    return bp;
}

MemoryUse Dropout::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                             Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (train) {
        use.keptBytes = inShapes[0].numel() * static_cast<int64_t>(sizeof(float)); // the mask
    } else {
        use.outputViews[0] = 0; // eval: the output is the input
    }
    return use;
}

} // namespace tessera
