#pragma once
/// \file InstanceNorm2D: per-sample, per-channel normalisation of images.

#include "modules/Module.h"

namespace tessera {

struct InstanceNormOptions {
    float epsilon = 1e-5f;
    std::string name = {};
};

/// x: [N, maps, H, W] -> y: same shape; each (n, c) plane is normalised by its own mean and
/// (biased) variance, then y = scale[c] * xhat + bias[c]. Parameters `scale` (ones) and
/// `bias` (zeros): [maps]. The same in train and eval mode (no running statistics).
class InstanceNorm2D : public Module {
public:
    explicit InstanceNorm2D(int64_t maps, const InstanceNormOptions& options = {});
    std::string classname() const override { return "InstanceNorm2D"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, maps, H, W] with H * W >= 2.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    /// One primitive gives the input and parameter gradients: backward runs it once.
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override { return {&mean_, &var_}; }

private:
    Tensor tiled(const Tensor& perChannel, int64_t n) const;
    Tensor fusedBackward(const Tensor& dy, Tensor& dscale, Tensor& dbias) const;
    void addParamGrads(const Tensor& dscale, const Tensor& dbias, float scale, float momentum);

    int64_t maps_;
    InstanceNormOptions options_;
    Tensor mean_, var_; // per-plane statistics of the last forward
};

} // namespace tessera
