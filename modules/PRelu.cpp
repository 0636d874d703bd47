#include "modules/PRelu.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

PRelu::PRelu(int64_t maps, const PReluOptions& options) : Module(options.name), maps_(maps), options_(options) {
    if (maps <= 0) throw ModuleError("PRelu: maps must be positive, got " + std::to_string(maps));
    setVar("slopes", Variable::of(Tensor::full({options.sharedMaps ? 1 : maps}, options.init)));
}

void PRelu::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() < 2 || (!options_.sharedMaps && s[1] != maps_)) {
        throw shapeError("expects input [N, " + std::to_string(maps_) + ", ...], got " + s.str());
    }
}

Tensors PRelu::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(data[0].shape(), DType::float32, data[0].device());
    backendOf(y).preluForward(data[0], getVar("slopes")->data, y);
    return {y};
}

// The backend computes dx and the slopes' gradient together: backward runs it once;
// updateGrad alone sends the slopes' part to scratch.
Tensors PRelu::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    const auto& v = getVar("slopes");
    Tensor dx = Tensor::empty(grad[0].shape(), DType::float32, grad[0].device());
    if (updParamGrads && isTrain()) {
        backendOf(dx).preluBackward(inData(), v->data, grad[0], dx, scale, momentum, v->grad);
    } else {
        Tensor dslopes = Tensor::empty(v->data.shape(), DType::float32, dx.device());
        backendOf(dx).preluBackward(inData(), v->data, grad[0], dx, 1.0f, 0.0f, dslopes);
    }
    if (!updGrad) return {};
    return {dx};
}

Tensors PRelu::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

Blueprint PRelu::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("maps", maps_);
    bp.scheme.emplace_back("sharedMaps", options_.sharedMaps);
    bp.scheme.emplace_back("init", static_cast<double>(options_.init));
    return bp;
}

} // namespace tessera
