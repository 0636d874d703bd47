#pragma once
/// \file DropPath: stochastic depth, the dropout of whole samples of a residual branch.

#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {

struct DropPathOptions {
    float p = 0.1f;    ///< probability of dropping a sample's branch, in [0, 1)
    int64_t seed = -1; ///< -1: drawn from the global generator when built
    std::string name = {};
};

/// x [N, ...] -> y: same shape. Train mode: y[n] = x[n] * m[n] with m = 0 (probability p)
/// or 1 / (1 - p), one draw per sample and forward (timm's and torchvision's
/// StochasticDepth "row" mode), put on a residual branch before its Add; eval mode: y = x.
class DropPath : public Module {
public:
    explicit DropPath(const DropPathOptions& options = {});
    std::string classname() const override { return "DropPath"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, ...].
    void checkDataShape(const Shapes& inShapes) const override;
    Generator* randomStream() override { return &gen_; }
    /// The per-sample factors of the last train-mode forward, [N, 1, ...] (undefined before one).
    const Tensor& mask() const { return mask_; }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&mask_}; }

private:
    float p_;
    Generator gen_;
    Tensor mask_;
};

} // namespace tessera
