#pragma once
/// \file L1Hinge: a contrastive hinge on the L1 distance between two embeddings.

#include "training/Cost.h"

namespace tessera {

/// pred: two [N, D] embeddings, target: [N] int32, 1 for a similar pair and 0 for a
/// dissimilar one. With d = sum |a - b| per row, the error is the mean over N of d for
/// similar pairs and max(0, margin - d) for dissimilar ones.
///
/// Computed on the host (the tensors are copied there when on a device).
class L1Hinge : public Cost {
public:
    explicit L1Hinge(float margin = 1.0f) : margin_(margin) {}
    std::string classname() const override { return "L1Hinge"; }

protected:
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;

private:
    float margin_;
};

} // namespace tessera
