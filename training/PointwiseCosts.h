#pragma once
/// \file MSE, Abs, SmoothL1, BCE, Hinge, KLDivergence: costs between a prediction and a
/// float target of the same shape, computed element by element (formulas at
/// `Backend::pointwiseCost`; every error is a mean over the batch dim).

#include "backend/Backend.h"
#include "training/Cost.h"

namespace tessera {

class PointwiseCost : public Cost {
public:
    explicit PointwiseCost(CostKind kind) : kind_(kind) {}

protected:
    /// One float32 target of the prediction's shape.
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;

private:
    CostKind kind_;
};

/// sum (pred - target)^2 / 2N.
class MSE : public PointwiseCost {
public:
    MSE() : PointwiseCost(CostKind::mse) {}
    std::string classname() const override { return "MSE"; }
};

/// sum |pred - target| / N.
class Abs : public PointwiseCost {
public:
    Abs() : PointwiseCost(CostKind::abs) {}
    std::string classname() const override { return "Abs"; }
};

/// sum huber(pred - target) / N: 0.5 d^2 for |d| < 1, |d| - 0.5 beyond.
class SmoothL1 : public PointwiseCost {
public:
    SmoothL1() : PointwiseCost(CostKind::smoothL1) {}
    std::string classname() const override { return "SmoothL1"; }
};

/// Binary cross-entropy on logits: sum softplus(p) - t p / N with targets in [0, 1].
class BCE : public PointwiseCost {
public:
    BCE() : PointwiseCost(CostKind::bce) {}
    std::string classname() const override { return "BCE"; }
};

/// sum max(0, 1 - t p) / N with targets -1 or +1.
class Hinge : public PointwiseCost {
public:
    Hinge() : PointwiseCost(CostKind::hinge) {}
    std::string classname() const override { return "Hinge"; }
};

/// KL(target || softmax(pred)) over dim 1, summed / N; targets are probabilities.
class KLDivergence : public PointwiseCost {
public:
    KLDivergence() : PointwiseCost(CostKind::klDivergence) {}
    std::string classname() const override { return "KLDivergence"; }
};

} // namespace tessera
