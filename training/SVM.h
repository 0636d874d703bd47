#pragma once
/// \file SVM: the multi-class hinge loss on class scores with integer labels.

#include "training/Cost.h"

namespace tessera {

/// scores: [N, C], labels: [N] int32 in [0, C). Error: sum over wrong classes of
/// max(0, 1 + s_j - s_y) (l1) or its square (l2), averaged over N. `validate` returns
/// the misclassification rate.
class SVM : public Cost {
public:
    explicit SVM(bool l2 = false) : l2_(l2) {}
    std::string classname() const override { return "SVM"; }

protected:
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;
    double validationError(const Tensors& pred, const Tensors& target) override;

private:
    bool l2_;
};

} // namespace tessera
