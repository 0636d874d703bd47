#pragma once
/// \file Multi: one cost per output of a multi-output network.

#include <memory>
#include <vector>

#include "training/Cost.h"

namespace tessera {

/// pred and target: one tensor per cost, in order. The error is the sum of the costs'
/// errors, the gradient the list of their gradients; `validate` sums their validation
/// errors. Each part keeps its own accumulator too, and `errors()` / `validationErrors()`
/// are each part's error in the last call.
class Multi : public Cost {
public:
    explicit Multi(std::vector<std::shared_ptr<Cost>> costs);
    std::string classname() const override { return "Multi"; }
    const std::vector<std::shared_ptr<Cost>>& costs() const { return costs_; }
    /// Each cost's error in the last call (empty before one).
    const std::vector<double>& errors() const { return errors_; }
    /// Each cost's validation error in the last validate (empty before one).
    const std::vector<double>& validationErrors() const { return valErrors_; }

protected:
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;
    double validationError(const Tensors& pred, const Tensors& target) override;

private:
    std::vector<std::shared_ptr<Cost>> costs_;
    std::vector<double> errors_, valErrors_;
};

} // namespace tessera
