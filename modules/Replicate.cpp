#include "modules/Replicate.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

Replicate::Replicate(int times, std::string name) : Module(std::move(name)), times_(times) {
    if (times < 1) throw ModuleError("Replicate: times must be >= 1, got " + std::to_string(times));
}

void Replicate::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, static_cast<size_t>(times_), "gradient");
    for (const Shape& s : outGradShapes) {
        if (s != outGradShapes[0]) throw shapeError("gradients differ in shape: " + tessera::str(outGradShapes));
    }
}

Tensors Replicate::updateGrad(const Tensors& grad) {
    Tensor dx = grad[0].clone();
    for (size_t i = 1; i < grad.size(); ++i) backendOf(dx).axpby(1.0f, grad[i], 1.0f, dx);
    return {dx};
}

Blueprint Replicate::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("times", static_cast<int64_t>(times_));
    return bp;
}

} // namespace tessera
