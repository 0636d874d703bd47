#include "modules/SubtractMean.h"

#include "backend/Backend.h"
#include "modules/SpatialUtil.h"

namespace tessera {

SubtractMean::SubtractMean(const SubtractMeanOptions& options) : Module(options.name), options_(options) {
    if (options.size < 3 || options.size % 2 != 1) {
        throw ModuleError("SubtractMean: size must be odd and > 1, got " + std::to_string(options.size));
    }
}

PoolParams SubtractMean::params() const {
    return spatial::centredWindow(options_.includePad ? PoolKind::avgWithPad : PoolKind::avgNoPad, options_.size);
}

void SubtractMean::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() != 4) throw shapeError("expects input [N, C, H, W], got " + inShapes[0].str());
}

Tensors SubtractMean::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Backend& be = backendOf(x);
    Tensor unused;
    const Tensor mean = be.poolForward(params(), x, x.shape(), false, unused).plain();
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    be.axpbyz(-1.0f, mean, 1.0f, x, y);
    return {y};
}

Tensors SubtractMean::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Backend& be = backendOf(dy);
    const Tensor back = be.poolBackward(params(), dy, Tensor(), dy.shape(), Layout::plain).plain();
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    be.axpbyz(-1.0f, back, 1.0f, dy, dx);
    return {dx};
}

Blueprint SubtractMean::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("size", options_.size);
    bp.scheme.emplace_back("includePad", options_.includePad);
    return bp;
}

} // namespace tessera
