#pragma once
/// \file LCN: local contrast normalisation, PuzzleLib's LCN: each element divided by a power
/// of its window's spread about the window's mean.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

struct LCNOptions {
    int64_t N = 5; ///< the window's side, odd and > 1
    float alpha = 1e-4f;
    float beta = 0.75f;
    float K = 2.0f;
    bool includePad = true; ///< the window mean divides by N^2 (zeros outside), else by the inside count
    std::string name = {};
};

/// x: [N, C, H, W] -> y = x / (K + alpha / N^2 * sum_j (x_j - m)^2)^beta, per element, the
/// sum over the N x N window centred on it (inside the map) and m the window's mean (an
/// average pooling of stride 1). Backward differentiates through the mean and the spread.
class LCN : public Module {
public:
    explicit LCN(const LCNOptions& options = {});
    std::string classname() const override { return "LCN"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, C, H, W].
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    /// The window means m of the last forward (undefined before one).
    const Tensor& means() const { return mean_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&mean_, &sum_, &count_, &norm_}; }

private:
    /// The window sums' pooling (average with padding: N^2 times it is the inside sum) and
    /// the mean's (by includePad).
    PoolParams sumPool() const;
    PoolParams meanPool() const;

    LCNOptions options_;
    Tensor mean_, sum_, count_, norm_; // of the last forward: m, the inside sum, the inside count, the norm
};

} // namespace tessera
