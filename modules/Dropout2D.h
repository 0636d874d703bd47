#pragma once
/// \file Dropout2D: drops whole feature maps in train mode.

#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {

struct Dropout2DOptions {
    float p = 0.5f;    ///< probability of zeroing a map, in [0, 1)
    int64_t seed = -1; ///< -1: drawn from the global generator when built
    std::string name = {};
};

/// x: [N, C, H, W] -> y: same shape. Train mode: y[n, c] = x[n, c] * m[n, c] with
/// m = 0 (probability p) or 1 / (1 - p), fresh per forward; eval mode (and p = 0): y = x.
class Dropout2D : public Module {
public:
    explicit Dropout2D(const Dropout2DOptions& options = {});
    std::string classname() const override { return "Dropout2D"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Generator& generator() { return gen_; }
    Generator* randomStream() override { return &gen_; }
    /// The [N, C] mask of the last train-mode forward (undefined in eval mode and at p = 0).
    const Tensor& mask() const { return mask_; }
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    void checkDataShape(const Shapes& inShapes) const override;
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
