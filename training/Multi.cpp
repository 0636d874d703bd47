#include "training/Multi.h"

#include <stdexcept>

namespace tessera {

Multi::Multi(std::vector<std::shared_ptr<Cost>> costs) : costs_(std::move(costs)) {
    if (costs_.empty()) throw ModuleError("Multi: needs at least one cost");
    for (const auto& c : costs_) {
        if (!c) throw ModuleError("Multi: null cost");
    }
}

void Multi::checkInputs(const Tensors& pred, const Tensors& target) const {
    if (pred.size() != costs_.size() || target.size() != costs_.size()) {
        throw error("has " + std::to_string(costs_.size()) + " costs, got " + std::to_string(pred.size()) +
                    " predictions and " + std::to_string(target.size()) + " targets");
    }
}

CostResult Multi::compute(const Tensors& pred, const Tensors& target) {
    CostResult r;
    errors_.clear();
    for (size_t i = 0; i < costs_.size(); ++i) {
        CostResult part = (*costs_[i])(pred[i], target[i]);
        errors_.push_back(part.error);
        r.error += part.error;
        r.grad.push_back(part.grad[0]);
    }
    return r;
}

double Multi::validationError(const Tensors& pred, const Tensors& target) {
    double e = 0.0;
    valErrors_.clear();
    for (size_t i = 0; i < costs_.size(); ++i) {
        valErrors_.push_back(costs_[i]->validate(pred[i], target[i]));
        e += valErrors_.back();
    }
    return e;
}

} // namespace tessera
