#include "training/L1Hinge.h"

#include <cmath>

namespace tessera {

void L1Hinge::checkInputs(const Tensors& pred, const Tensors& target) const {
    if (pred.size() != 2 || target.size() != 1) {
        throw error("expects two embeddings and one label tensor, got " + std::to_string(pred.size()) + " and " +
                    std::to_string(target.size()));
    }
    const Shape& a = pred[0].shape();
    if (a.rank() != 2 || pred[1].shape() != a) {
        throw error("expects two [N, D] embeddings of one shape, got " + a.str() + " and " + pred[1].shape().str());
    }
    if (target[0].dtype() != DType::int32 || target[0].shape() != Shape{a[0]}) {
        throw error("expects int32 labels [" + std::to_string(a[0]) + "], got " + str(target[0].dtype()) + " " +
                    target[0].shape().str());
    }
}

CostResult L1Hinge::compute(const Tensors& pred, const Tensors& target) {
    const int64_t n = pred[0].shape()[0], d = pred[0].shape()[1];
    const std::vector<float> a = pred[0].toVector<float>(), b = pred[1].toVector<float>();
    const std::vector<int32_t> y = target[0].toVector<int32_t>();
    std::vector<float> ga(a.size()), gb(a.size());
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t label = y[static_cast<size_t>(i)];
        if (label != 0 && label != 1) {
            throw error("label " + std::to_string(label) + " at position " + std::to_string(i) + " is not 0 or 1");
        }
        double dist = 0;
        for (int64_t k = 0; k < d; ++k)
            dist += std::fabs(a[static_cast<size_t>(i * d + k)] - b[static_cast<size_t>(i * d + k)]);
        float coef = 0.0f; // d error / d dist
        if (label == 1) {
            sum += dist;
            coef = 1.0f;
        } else if (dist < margin_) {
            sum += margin_ - dist;
            coef = -1.0f;
        }
        for (int64_t k = 0; k < d; ++k) {
            const auto at = static_cast<size_t>(i * d + k);
            const float diff = a[at] - b[at];
            const float g = coef * static_cast<float>((diff > 0) - (diff < 0)) / static_cast<float>(n);
            ga[at] = g;
            gb[at] = -g;
        }
    }
    return {sum / static_cast<double>(n),
            {Tensor::fromVector(pred[0].shape(), ga, pred[0].device()),
             Tensor::fromVector(pred[1].shape(), gb, pred[1].device())}};
}

} // namespace tessera
