#pragma once
/// \file Activation: element-wise nonlinearities.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

class FusedRelu;

struct ActivationOptions {
    float slope = 0.01f;           ///< leakyRelu: y = slope * x for x < 0
    float alpha = 1.0f;            ///< elu: y = alpha * (exp(x) - 1) for x < 0
    float min = 0.0f;              ///< clip: lower bound
    float max = 6.0f;              ///< clip: upper bound
    float hardSlope = 1.0f / 6.0f; ///< hardSigmoid: y = clip(hardSlope * x + hardOffset, 0, 1)
    float hardOffset = 0.5f;       ///< hardSigmoid's offset
    std::string name = {};
};

/// x: any shape -> y: same shape, y = f(x) for f in sigmoid, tanh, relu, leakyRelu, elu,
/// softPlus (log(1 + exp(x))), clip (min(max(x, min), max)), gelu (x * Phi(x), exact erf form),
/// hardSigmoid (clip(hardSlope * x + hardOffset, 0, 1); ONNX's HardSigmoid), hardSwish
/// (x * clip(x / 6 + 1/2, 0, 1); ONNX's HardSwish), silu, mish, exp, log and abs.
class Activation : public Module {
public:
    explicit Activation(ActivationKind kind, const ActivationOptions& options = {});

    std::string classname() const override { return "Activation"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    ActivationKind kind() const { return params_.kind; }
    /// The kind and its constants, as the backend takes them.
    const ActivationParams& params() const { return params_; }

    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input tensor of any shape.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Every kind but those the CPU computes by float32 loops on plain tensors (hardSigmoid,
    /// log, and sin onwards: plainFloat32Only) runs on blocked layouts too.
    bool handlesLayouts() const override { return !plainFloat32Only(params_.kind); }
    /// On the CPU, but for the plainFloat32Only kinds.
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    Blueprint blueprint() const override;
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

    /// Fusion (containers/Fusion.h): a container whose plan feeds this activation from
    /// `source` alone sets it around its forward (nullptr clears it). When `source`'s forward
    /// applied the activation already, this module's forward passes its input through, and
    /// its backward passes the gradient through where `source` differentiates it (a ReLU's
    /// kept mask; another kind, applied in eval mode, always), or else masks it as usual
    /// (a ReLU's input being its output).
    void setFusedInto(const FusedRelu* source) { fusedInto_ = source; }
    const FusedRelu* fusedInto() const { return fusedInto_; }
    /// Whether the last forward passed its input through (fused upstream).
    bool passedThrough() const { return passedThrough_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    ActivationParams params_;
    ActivationOptions options_;
    const FusedRelu* fusedInto_ = nullptr;
    bool passedThrough_ = false, maskedUpstream_ = false;
};

/// "relu" <-> ActivationKind::relu. fromString throws ModuleError listing names.
std::string str(ActivationKind kind);
ActivationKind activationFromString(const std::string& name);

} // namespace tessera
