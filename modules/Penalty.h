#pragma once
/// \file Penalty: an identity in the forward pass whose backward adds the gradient of an L1
/// or L2 penalty on what passes through, so a regulariser can sit anywhere in a graph.
/// PuzzleLib's Penalty.

#include "modules/Module.h"

namespace tessera {

enum class PenaltyMode { l1, l2 };

struct PenaltyOptions {
    PenaltyMode mode = PenaltyMode::l1;
    float weight = 1e-2f; ///< the penalty's coefficient, >= 0
    std::string name = {};
};

/// x: [N, ...] float32 -> y = x (the same tensor); dx = dy + weight / N * sign(x) (l1) or
/// dy + weight / N * x (l2): the gradient of weight times the batch mean of sum |x| (or of
/// sum x^2 / 2). `penalty()` is that value for the last forward's input.
class Penalty : public Module {
public:
    explicit Penalty(const PenaltyOptions& options = {});
    std::string classname() const override { return "Penalty"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, ...] of rank >= 1.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    /// weight * mean over the batch of sum |x| (l1) or sum x^2 / 2 (l2) for the last
    /// forward's input (ModuleError before one).
    double penalty() const;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// The penalty of x; writes d penalty / d x divided by weight into `grad` when defined.
    double penaltyOf(const Tensor& x, const Tensor& grad) const;

    PenaltyOptions options_;
};

/// "l1" <-> PenaltyMode::l1; fromString throws ModuleError listing the names.
std::string str(PenaltyMode mode);
PenaltyMode penaltyModeFromString(const std::string& name);

} // namespace tessera
