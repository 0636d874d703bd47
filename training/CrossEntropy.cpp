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
    if (s.rank() < 2)
        throw error(std::string("expects scores ") + (options_.classesLast ? "[N, ..., C]" : "[N, C, ...]") + ", got " +
                    s.str());
    const int64_t classes = options_.classesLast ? s[s.rank() - 1] : s[1];
    if (target[0].dtype() == DType::float32) { // probabilities
        if (l != s) {
            throw error("scores " + s.str() + " need int32 labels or float32 probabilities " + s.str() +
                        ", got float32 " + l.str());
        }
        if (weights_.defined()) throw error("class weights need int32 labels, not probabilities");
    } else if (target[0].dtype() != DType::int32) {
        throw error("expects int32 labels or float32 probabilities, got " + str(target[0].dtype()));
    }
    if (options_.maxlabels && classes != options_.maxlabels) {
        throw error("expects " + std::to_string(options_.maxlabels) + " classes, got scores " + s.str());
    }
    if (target[0].dtype() == DType::float32) return;
    std::vector<int64_t> want{s[0]};
    if (options_.classesLast) {
        want.assign(s.dims().begin(), s.dims().end() - 1);
    } else {
        for (size_t d = 2; d < s.rank(); ++d) want.push_back(s[d]);
    }
    if (l != Shape(want)) {
        throw error("scores " + s.str() + " need labels " + Shape(want).str() + ", got " + l.str());
    }
    if (weights_.defined() && weights_.numel() != classes) {
        throw error(std::to_string(weights_.numel()) + " class weights for " + std::to_string(classes) + " classes");
    }
}

Tensors CrossEntropy::asRows(const Tensors& t, bool labels) const {
    if (!options_.classesLast) return t;
    Tensors out;
    for (const Tensor& x : t) {
        if (!x.defined() || x.shape().rank() <= 1) {
            out.push_back(x);
        } else if (labels && x.dtype() == DType::int32) {
            out.push_back(x.plain().reshape({x.numel()}));
        } else {
            const int64_t c = x.shape()[x.shape().rank() - 1];
            out.push_back(x.plain().reshape({c ? x.numel() / c : 0, c}));
        }
    }
    return out;
}

double CrossEntropy::runSoft(const Tensor& scores, const Tensor& probabilities, const Tensor& grad) {
    const int64_t c = scores.shape()[1];
    Tensor t = probabilities;
    if (options_.labelSmoothing > 0.0f) {
        if (!smoothed_.defined() || smoothed_.shape() != probabilities.shape() ||
            smoothed_.device() != probabilities.device()) {
            smoothed_ = Tensor::empty(probabilities.shape(), DType::float32, probabilities.device());
        }
        t = smoothed_;
        const float e = options_.labelSmoothing;
        backendOf(t).affine(probabilities, 1.0f - e, e / static_cast<float>(c), t);
    }
    Tensor g = grad.defined() ? grad : Tensor::empty(scores.shape(), DType::float32, scores.device());
    double err = backendOf(scores).pointwiseCost(CostKind::softCrossEntropy, scores, t, g); // a mean over N
    const int64_t n = scores.shape()[0], inner = scores.numel() / (n * c);
    if (inner > 1) { // ... made one over samples and positions, as with labels
        err /= static_cast<double>(inner);
        if (grad.defined()) backendOf(g).affine(g, 1.0f / static_cast<float>(inner), 0.0f, g);
    }
    // Hits, for validation only (lastAccuracy): the largest score's class is the target's
    // largest (first maxima), counted on the host, so a training step copies nothing back.
    if (grad.defined()) return err;
    const Tensor hs = scores.device().isCpu() ? scores : scores.toHost();
    const Tensor ht = t.device().isCpu() ? t : t.toHost();
    const float* sp = hs.data<float>();
    const float* tp = ht.data<float>();
    int64_t correct = 0;
    for (int64_t i = 0; i < n * inner; ++i) {
        const int64_t base = i / inner * c * inner + i % inner;
        int64_t bs = 0, bt = 0;
        for (int64_t k = 1; k < c; ++k) {
            if (sp[base + k * inner] > sp[base + bs * inner]) bs = k;
            if (tp[base + k * inner] > tp[base + bt * inner]) bt = k;
        }
        correct += bs == bt;
    }
    lastAccuracy_ = static_cast<double>(correct) / static_cast<double>(n * inner);
    return err;
}

double CrossEntropy::run(const Tensors& pred, const Tensors& target, const Tensor& grad) {
    if (target[0].dtype() == DType::float32) return runSoft(pred[0], target[0], grad);
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
    const double err = run(asRows(pred, false), asRows(target, true), asRows({grad}, false)[0]);
    return {err, {grad}};
}

// Accuracy only: no gradient is computed.
double CrossEntropy::validationError(const Tensors& pred, const Tensors& target) {
    run(asRows(pred, false), asRows(target, true), Tensor());
    return 1.0 - lastAccuracy_;
}

} // namespace tessera
