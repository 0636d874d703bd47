#pragma once
/// \file Linear: a fully connected layer, y = x W + b.

#include <optional>

#include "modules/FusedRelu.h"
#include "modules/Init.h"
#include "modules/Module.h"

namespace tessera {

struct LinearOptions {
    float wscale = 1.0f;
    bool useBias = true;
    InitScheme initscheme = InitScheme::xavier;
    std::string name = {};
    /// `W` stored [outsize, insize] (PyTorch's layout), y = x W^T + b: the layout of an
    /// Embedder's table [vocabulary, embsize], so that a language model's output layer can
    /// share it (setVar("W", embedder.getVar("W")): a head tied to the token table).
    bool transposed = false;
};

/// x: [..., insize] -> y: [..., outsize] (PyTorch's nn.Linear: over the last axis of any
/// rank, the leading dims kept). Parameters `W`: [insize, outsize] ([outsize, insize] with
/// `transposed`) and, with useBias, `b`: [outsize] (initialised to zero).
///
/// Fusion (containers/Fusion.h): a ReLU that alone consumes its output runs inside its
/// GEMM (a oneDNN post-op on the CPU), in train and eval mode; in eval mode any other
/// activation the backend's GEMM applies (Backend::gemmFusesActivation: on the CPU every
/// kind but hardSigmoid and log) does too, GELU among them (a transformer's MLP).
class Linear : public Module, public FusedRelu {
public:
    Linear(int64_t insize, int64_t outsize, const LinearOptions& options = {});

    std::string classname() const override { return "Linear"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    int64_t insize() const { return insize_; }
    int64_t outsize() const { return outsize_; }
    /// Whether `W` is stored [outsize, insize] (LinearOptions::transposed).
    bool transposed() const { return options_.transposed; }

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// Throws ShapeError unless the input is one [..., insize] tensor.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Throws ShapeError unless the gradient is one [..., outsize] tensor.
    void checkGradShape(const Shapes& outGradShapes) const override;
    Blueprint blueprint() const override;
    /// Takes 16-bit activations of its compute type that its backend carries; writes its
    /// output in Backend::gemmOutputDType (bfloat16 under calcMode(bfloat16) on a CPU with
    /// bfloat16 kernels), its input gradient in its input's dtype.
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    /// Default, plus the bfloat16 copy of `W` a train-mode step keeps from its forward until
    /// its backward (see convertsWeightsPerStep).
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

    // FusedRelu: the activation applied to the GEMM's sums before its output is written.
    void setFuseRelu(bool on) override;
    bool fuseRelu() const override { return fused_ && fused_->kind == ActivationKind::relu; }
    bool fusesReluOn(Device device) const override;
    bool masksReluGradientOn(Device) const override { return false; } // the ReLU's backward masks
    bool appliedRelu() const override { return applied_ && applied_->kind == ActivationKind::relu; }
    bool keptReluMask() const override { return false; }
    /// Eval mode, any kind (whether the backend's GEMM applies it is decided at the forward).
    bool takesActivation(const ActivationParams& act, bool train) const override;
    void setFuseActivation(const ActivationParams* act) override;
    /// A ReLU in either mode, another kind when the plan's mode is eval (Activation::memoryUse).
    bool fusesActivationOn(const ActivationParams& act, Device device) const override;
    bool appliedActivation(const ActivationParams& act) const override { return applied_ && *applied_ == act; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override { return {&stepW_}; }

private:
    /// Whether a step's forward on `device` converts `W` to bfloat16 once, for its backward
    /// too: train mode (`train`), calcMode(bfloat16), a CPU whose GEMMs run on bfloat16
    /// kernels (Backend::gemmOutputDType is bfloat16), float32 weights. The products would
    /// each convert it otherwise; the bits are the same.
    bool convertsWeightsPerStep(bool train, Device device) const;
    // Whether a forward now applies `act` in its GEMM on `device` (train: ReLU only).
    bool appliesActivation(const ActivationParams& act, bool train, Device device) const;

    int64_t insize_, outsize_;
    LinearOptions options_;
    Tensor stepW_; // W in bfloat16, from a train-mode forward until its backward
    // The activation a container fuses (setFuseRelu, setFuseActivation) and the one the last
    // forward applied (its backward differentiates another kind than ReLU itself).
    std::optional<ActivationParams> fused_, applied_;
};

} // namespace tessera
