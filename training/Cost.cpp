#include "training/Cost.h"

namespace tessera {

void Cost::requireCounts(const Tensors& pred, const Tensors& target, size_t count) const {
    if (pred.size() != count || target.size() != count) {
        throw error("expects " + std::to_string(count) + " prediction and " + std::to_string(count) +
                    " target tensor(s), got " + std::to_string(pred.size()) + " and " + std::to_string(target.size()));
    }
    for (size_t i = 0; i < count; ++i) {
        if (!pred[i].defined() || !target[i].defined()) throw error("undefined prediction or target tensor");
        if (pred[i].dtype() != DType::float32) {
            throw error("predictions must be float32, got " + str(pred[i].dtype()));
        }
    }
}

void Cost::accumulate(double err, int64_t batch) {
    sum_ += err * static_cast<double>(batch);
    samples_ += batch;
}

namespace {
// Costs read float32 predictions row-major: 16-bit outputs of a network (its last layer's
// in calcMode(bfloat16|float16)) are converted and blocked ones reordered here; the
// float32 gradient a cost returns is one a 16-bit output takes (Module::backward).
Tensors float32Plain(const Tensors& pred) { return plainAll(float32All(pred)); }
} // namespace

CostResult Cost::operator()(const Tensors& predIn, const Tensors& target) {
    const Tensors pred = float32Plain(predIn);
    checkInputs(pred, target);
    CostResult r = compute(pred, target);
    accumulate(r.error, batchSize(pred));
    return r;
}

CostResult Cost::operator()(const Tensor& pred, const Tensor& target) {
    return (*this)(Tensors{pred}, Tensors{target});
}

double Cost::validate(const Tensors& predIn, const Tensors& target) {
    const Tensors pred = float32Plain(predIn);
    checkInputs(pred, target);
    const double e = validationError(pred, target);
    accumulate(e, batchSize(pred));
    return e;
}

double Cost::validate(const Tensor& pred, const Tensor& target) { return validate(Tensors{pred}, Tensors{target}); }

double Cost::validationError(const Tensors& pred, const Tensors& target) { return compute(pred, target).error; }

} // namespace tessera
