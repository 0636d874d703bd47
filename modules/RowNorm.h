#pragma once
/// \file Normalisation by each sample's own statistics, as transformers and modern
/// convolutional networks use it: LayerNorm, RMSNorm and GroupNorm, with PyTorch's
/// semantics and parameter names (`weight`, `bias`). The same in train and eval mode (no
/// running statistics). All three run on one backend op (Backend::rowNormForward).

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

struct LayerNormOptions {
    float epsilon = 1e-5f;
    bool affine = true;  ///< a learned `weight` (ones) ...
    bool useBias = true; ///< ... and `bias` (zeros), each of the normalised shape (only with affine)
    std::string name = {};
};

struct RMSNormOptions {
    float epsilon = 1.1920928955078125e-07f; ///< float32's machine epsilon, as PyTorch's default
    bool affine = true;                      ///< a learned `weight` (ones) of the normalised shape
    std::string name = {};
};

struct GroupNormOptions {
    float epsilon = 1e-5f;
    bool affine = true; ///< a learned per-channel `weight` (ones) and `bias` (zeros), [maps]
    std::string name = {};
};

/// What the three share: a forward that keeps each row's mean and 1 / std for backward,
/// and one backward pass for the input and parameter gradients.
class RowNorm : public Module {
public:
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// 16-bit activations its backend carries, in and out (statistics, parameters and
    /// their gradients float32; the input gradient in the input's dtype).
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;

protected:
    explicit RowNorm(std::string name) : Module(std::move(name)) {}
    /// x's [rows, D] and the op's parameters for an input of shape `x`.
    virtual RowNormParams paramsFor(const Shape& x, int64_t& rows, int64_t& D) const = 0;
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    /// One pass gives the input and parameter gradients: backward runs it once.
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override { return {&mean_, &rstd_}; }
    /// ShapeError unless the last dims of `s` are `shape` (LayerNorm's and RMSNorm's input).
    void checkTrailing(const Shape& s, const std::vector<int64_t>& shape) const;

private:
    Tensor param(const char* name) const;
    Tensor mean_, rstd_; // per row, of the last forward
};

/// x: [..., *shape] -> y: the same shape; each sample's last `shape.size()` dims are
/// normalised together by their mean and biased variance, then y = weight * xhat + bias
/// (PyTorch's nn.LayerNorm(shape, eps, elementwise_affine, bias)). Parameters `weight`
/// (ones) and `bias` (zeros) of `shape`, per options.
class LayerNorm : public RowNorm {
public:
    explicit LayerNorm(std::vector<int64_t> shape, const LayerNormOptions& options = {});
    std::string classname() const override { return "LayerNorm"; }
    /// One input whose last dims are `shape`.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    const std::vector<int64_t>& normalizedShape() const { return shape_; }
    const LayerNormOptions& options() const { return options_; }

protected:
    RowNormParams paramsFor(const Shape& x, int64_t& rows, int64_t& D) const override;

private:
    std::vector<int64_t> shape_;
    LayerNormOptions options_;
};

/// x: [..., *shape] -> y = weight * x / sqrt(mean(x^2) + epsilon) over the last
/// `shape.size()` dims (PyTorch's nn.RMSNorm). Parameter `weight` (ones) of `shape`.
class RMSNorm : public RowNorm {
public:
    explicit RMSNorm(std::vector<int64_t> shape, const RMSNormOptions& options = {});
    std::string classname() const override { return "RMSNorm"; }
    /// One input whose last dims are `shape`.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    const std::vector<int64_t>& normalizedShape() const { return shape_; }
    const RMSNormOptions& options() const { return options_; }

protected:
    RowNormParams paramsFor(const Shape& x, int64_t& rows, int64_t& D) const override;

private:
    std::vector<int64_t> shape_;
    RMSNormOptions options_;
};

/// x: [N, maps, *spatial] -> y: the same shape; the maps are split into `groups` groups of
/// maps / groups, each (sample, group) normalised by its mean and biased variance, then
/// y = weight[c] * xhat + bias[c] (PyTorch's nn.GroupNorm(groups, maps, eps, affine)).
/// Parameters `weight` (ones) and `bias` (zeros): [maps].
class GroupNorm : public RowNorm {
public:
    GroupNorm(int64_t groups, int64_t maps, const GroupNormOptions& options = {});
    std::string classname() const override { return "GroupNorm"; }
    /// One input [N, maps, ...].
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    int64_t groups() const { return groups_; }
    int64_t maps() const { return maps_; }
    const GroupNormOptions& options() const { return options_; }

protected:
    RowNormParams paramsFor(const Shape& x, int64_t& rows, int64_t& D) const override;

private:
    int64_t groups_, maps_;
    GroupNormOptions options_;
};

} // namespace tessera
