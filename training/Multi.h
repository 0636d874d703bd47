#pragma once
/// \file Multi: one cost per output of a multi-output network.

#include <memory>
#include <vector>

#include "training/Cost.h"

namespace tessera {

/// pred and target: one tensor per cost, in order. The error is the sum of the costs'
/// errors, the gradient the list of their gradients; `validate` sums their validation
/// errors. Each part keeps its own accumulator too.
class Multi : public Cost {
public:
    explicit Multi(std::vector<std::shared_ptr<Cost>> costs);
    std::string classname() const override { return "Multi"; }
    const std::vector<std::shared_ptr<Cost>>& costs() const { return costs_; }

protected:
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;
    double validationError(const Tensors& pred, const Tensors& target) override;

private:
    std::vector<std::shared_ptr<Cost>> costs_;
};

} // namespace tessera
