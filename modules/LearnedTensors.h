#pragma once
/// \file Learned tensors in a graph: Parameter (a learned value as a graph value: class
/// tokens, positional tables) and Scale (a learned factor: layer scale). DropPath, the
/// per-sample dropout of residual branches (stochastic depth), is in modules/DropPath.h.

#include "modules/Module.h"

namespace tessera {

struct ParameterOptions {
    float std = 0.0f; ///< initial values N(0, std^2); 0: zeros (ViT's class token; its positions take 0.02)
    std::string name = {};
};

/// x [N, ...] -> y [N, *shape]: the learned `weight` [*shape] repeated for every sample of
/// x's batch (x gives only its batch size; its gradient is zero). A value in a graph that
/// is a parameter, not computed: ViT's class token ([1, D], joined to the patches by a
/// Concat) and positional table ([T, D], added by an Add).
class Parameter : public Module {
public:
    explicit Parameter(std::vector<int64_t> shape, const ParameterOptions& options = {});
    std::string classname() const override { return "Parameter"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input [N, ...] (only N is read).
    void checkDataShape(const Shapes& inShapes) const override;
    /// Any dtype: only the batch size is read (a language model's table may follow its int32 ids).
    void checkDataType(const std::vector<DType>& /*dtypes*/) const override {}
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;

private:
    std::vector<int64_t> shape_;
    ParameterOptions options_;
};

struct ScaleOptions {
    float init = 1.0f; ///< the factors' initial value (ConvNeXt's layer scale: 1e-6)
    std::string name = {};
};

/// x -> y = x * weight, `weight` [*shape] broadcast against x by NumPy's rules without
/// changing x's shape: [C] on channels-last [N, H, W, C] or tokens [N, T, C], [C, 1, 1] on
/// [N, C, H, W] (torchvision's ConvNeXt layer_scale). Parameter `weight` of `shape`.
class Scale : public Module {
public:
    explicit Scale(std::vector<int64_t> shape, const ScaleOptions& options = {});
    std::string classname() const override { return "Scale"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input that `shape` broadcasts to.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;

private:
    std::vector<int64_t> shape_;
    ScaleOptions options_;
};

} // namespace tessera
