#include "training/PointwiseCosts.h"

namespace tessera {

void PointwiseCost::checkInputs(const Tensors& pred, const Tensors& target) const {
    requireCounts(pred, target, 1);
    if (target[0].dtype() != DType::float32) throw error("expects float32 targets, got " + str(target[0].dtype()));
    if (pred[0].shape() != target[0].shape()) {
        throw error("prediction " + pred[0].shape().str() + " and target " + target[0].shape().str() +
                    " differ in shape");
    }
    if (kind_ == CostKind::klDivergence && pred[0].shape().rank() < 2) {
        throw error("expects scores [N, C, ...], got " + pred[0].shape().str());
    }
}

CostResult PointwiseCost::compute(const Tensors& pred, const Tensors& target) {
    Tensor grad = Tensor::empty(pred[0].shape(), DType::float32, pred[0].device());
    const double err = backendOf(grad).pointwiseCost(kind_, pred[0], target[0], grad);
    return {err, {grad}};
}

} // namespace tessera
