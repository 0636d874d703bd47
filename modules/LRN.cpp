#include "modules/LRN.h"

#include <stdexcept>

namespace tessera {

LRN::LRN(bool acrossChannels, const LRNOptions& options) : Module(options.name) {
    if (options.N < 1 || options.N % 2 == 0) {
        throw ModuleError("LRN: N must be a positive odd window, got " + std::to_string(options.N));
    }
    params_ = {acrossChannels, options.N, options.alpha, options.beta, options.K};
}

void LRN::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() != 4) throw shapeError("expects input [N, C, H, W], got " + inShapes[0].str());
}

Tensors LRN::updateData(const Tensors& data) { return {backendOf(data[0]).lrnForward(params_, data[0], workspace_)}; }

Tensors LRN::updateGrad(const Tensors& grad) {
    return {backendOf(grad[0]).lrnBackward(params_, inData(), grad[0], workspace_)};
}

Blueprint LRN::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("N", params_.size);
    bp.scheme.emplace_back("alpha", static_cast<double>(params_.alpha));
    bp.scheme.emplace_back("beta", static_cast<double>(params_.beta));
    bp.scheme.emplace_back("K", static_cast<double>(params_.k));
    return bp;
}

} // namespace tessera
