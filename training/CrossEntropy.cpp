#include "training/CrossEntropy.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

CrossEntropy::CrossEntropy(const CrossEntropyOptions& options) : options_(options) {
    if (options.maxlabels < 0) throw ModuleError("CrossEntropy: maxlabels must not be negative");
    if (!(options.labelSmoothing >= 0.0f && options.labelSmoothing < 1.0f)) {
        throw ModuleError("CrossEntropy: labelSmoothing must lie in [0, 1), got " +
                          std::to_string(options.labelSmoothing));
    }
    if (!options.weights.empty()) {
        if (options.maxlabels && static_cast<int64_t>(options.weights.size()) != options.maxlabels) {
            throw ModuleError("CrossEntropy: " + std::to_string(options.weights.size()) +
                              " class weights for maxlabels " + std::to_string(options.maxlabels));
        }
        weights_ = Tensor::fromVector({static_cast<int64_t>(options.weights.size())}, options.weights);
    }
}

void CrossEntropy::checkInputs(const Tensors& pred, const Tensors& target) const {
    requireCounts(pred, target, 1);
    const Shape& s = pred[0].shape();
    const Shape& l = target[0].shape();
    if (s.rank() < 2) throw error("expects scores [N, C, ...], got " + s.str());
    if (target[0].dtype() != DType::int32) throw error("expects int32 labels, got " + str(target[0].dtype()));
    std::vector<int64_t> want{s[0]};
    for (size_t d = 2; d < s.rank(); ++d) want.push_back(s[d]);
    if (l != Shape(want)) {
        throw error("scores " + s.str() + " need labels " + Shape(want).str() + ", got " + l.str());
    }
    if (options_.maxlabels && s[1] != options_.maxlabels) {
        throw error("expects " + std::to_string(options_.maxlabels) + " classes, got scores " + s.str());
    }
    if (weights_.defined() && weights_.numel() != s[1]) {
        throw error(std::to_string(weights_.numel()) + " class weights for " + std::to_string(s[1]) + " classes");
    }
}

double CrossEntropy::run(const Tensors& pred, const Tensors& target, const Tensor& grad) {
    double err = 0.0;
    int64_t correct = 0;
    // Class weights follow the scores to their device (once).
    if (weights_.defined() && weights_.device() != pred[0].device()) weights_ = weights_.to(pred[0].device());
    try {
        backendOf(pred[0]).crossEntropy(pred[0], target[0], weights_, options_.labelSmoothing, grad, err, correct);
    } catch (const ShapeError& e) {
        throw error(e.what());
    }
    lastAccuracy_ = static_cast<double>(correct) / static_cast<double>(target[0].numel());
    return err;
}

CostResult CrossEntropy::compute(const Tensors& pred, const Tensors& target) {
    Tensor grad = Tensor::empty(pred[0].shape(), DType::float32, pred[0].device());
    const double err = run(pred, target, grad);
    return {err, {grad}};
}

// Accuracy only: no gradient is computed.
double CrossEntropy::validationError(const Tensors& pred, const Tensors& target) {
    run(pred, target, Tensor());
    return 1.0 - lastAccuracy_;
}

} // namespace tessera
