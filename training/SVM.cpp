#include "training/SVM.h"

#include "backend/Backend.h"

namespace tessera {

void SVM::checkInputs(const Tensors& pred, const Tensors& target) const {
    requireCounts(pred, target, 1);
    const Shape& s = pred[0].shape();
    if (s.rank() != 2) throw error("expects scores [N, C], got " + s.str());
    if (target[0].dtype() != DType::int32) throw error("expects int32 labels, got " + str(target[0].dtype()));
    if (target[0].shape() != Shape{s[0]}) {
        throw error("scores " + s.str() + " need labels [" + std::to_string(s[0]) + "], got " +
                    target[0].shape().str());
    }
}

CostResult SVM::compute(const Tensors& pred, const Tensors& target) {
    Tensor grad = Tensor::empty(pred[0].shape(), DType::float32, pred[0].device());
    try {
        const double err = backendOf(grad).svmCost(pred[0], target[0], l2_, grad);
        return {err, {grad}};
    } catch (const ShapeError& e) {
        throw error(e.what());
    }
}

// The share of rows whose top score is not the label's.
double SVM::validationError(const Tensors& pred, const Tensors& target) {
    compute(pred, target); // checks the labels
    const std::vector<float> s = pred[0].toVector<float>();
    const std::vector<int32_t> l = target[0].toVector<int32_t>();
    const int64_t n = pred[0].shape()[0], c = pred[0].shape()[1];
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t arg = 0;
        for (int64_t k = 1; k < c; ++k) {
            if (s[static_cast<size_t>(i * c + k)] > s[static_cast<size_t>(i * c + arg)]) arg = k;
        }
        wrong += arg != l[static_cast<size_t>(i)];
    }
    return static_cast<double>(wrong) / static_cast<double>(n);
}

} // namespace tessera
