#include "modules/Penalty.h"

#include "backend/Backend.h"

namespace tessera {

std::string str(PenaltyMode mode) { return mode == PenaltyMode::l1 ? "l1" : "l2"; }

PenaltyMode penaltyModeFromString(const std::string& name) {
    if (name == "l1") return PenaltyMode::l1;
    if (name == "l2") return PenaltyMode::l2;
    throw ModuleError("unknown penalty mode '" + name + "'; expected l1 or l2");
}

Penalty::Penalty(const PenaltyOptions& options) : Module(options.name), options_(options) {
    if (!(options.weight >= 0.0f)) {
        throw ModuleError("Penalty: weight must be non-negative, got " + std::to_string(options.weight));
    }
}

void Penalty::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() < 1) throw shapeError("expects input [N, ...], got a scalar " + inShapes[0].str());
}

// The batch-mean penalty and its gradient come from the backend's pointwise costs against
// zero: abs gives sum |x| / N and sign(x) / N, mse gives sum x^2 / 2N and x / N.
double Penalty::penaltyOf(const Tensor& x, const Tensor& grad) const {
    Tensor zero = Tensor::zeros(x.shape(), DType::float32, x.device());
    Tensor g = grad.defined() ? grad : Tensor::empty(x.shape(), DType::float32, x.device());
    const CostKind kind = options_.mode == PenaltyMode::l1 ? CostKind::abs : CostKind::mse;
    return options_.weight * backendOf(x).pointwiseCost(kind, x, zero, g);
}

double Penalty::penalty() const {
    if (inDataList().empty()) throw moduleError("penalty() before a forward");
    return penaltyOf(inData(), Tensor());
}

Tensors Penalty::updateData(const Tensors& data) { return {data[0]}; }

Tensors Penalty::updateGrad(const Tensors& grad) {
    const Tensor& x = inData();
    const Tensor& dy = grad[0];
    Backend& be = backendOf(dy);
    Tensor g = Tensor::empty(x.shape(), DType::float32, x.device());
    penaltyOf(x, g); // g <- sign(x) / N or x / N
    Tensor dx = Tensor::empty(x.shape(), DType::float32, x.device());
    be.axpbyz(options_.weight, g, 1.0f, dy, dx);
    return {dx};
}

MemoryUse Penalty::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                             Device device) const {
    MemoryUse use = viewMemoryUse(inShapes, inLayouts, train, device); // y is x
    use.gradViews.assign(inShapes.size(), -1);                         // dx is its own
    return use;
}

Blueprint Penalty::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("mode", tessera::str(options_.mode));
    bp.scheme.emplace_back("weight", static_cast<double>(options_.weight));
    return bp;
}

} // namespace tessera
