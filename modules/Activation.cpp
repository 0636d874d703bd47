#include "modules/Activation.h"

#include <stdexcept>

#include "modules/FusedRelu.h"

namespace tessera {

namespace {
constexpr std::pair<ActivationKind, const char*> kNames[] = {{ActivationKind::sigmoid, "sigmoid"},
                                                             {ActivationKind::tanh, "tanh"},
                                                             {ActivationKind::relu, "relu"},
                                                             {ActivationKind::leakyRelu, "leakyRelu"},
                                                             {ActivationKind::elu, "elu"},
                                                             {ActivationKind::softPlus, "softPlus"},
                                                             {ActivationKind::clip, "clip"},
                                                             {ActivationKind::gelu, "gelu"},
                                                             {ActivationKind::hardSigmoid, "hardSigmoid"},
                                                             {ActivationKind::hardSwish, "hardSwish"},
                                                             {ActivationKind::silu, "silu"},
                                                             {ActivationKind::mish, "mish"},
                                                             {ActivationKind::exp, "exp"},
                                                             {ActivationKind::log, "log"},
                                                             {ActivationKind::abs, "abs"},
                                                             {ActivationKind::sin, "sin"},
                                                             {ActivationKind::cos, "cos"},
                                                             {ActivationKind::tan, "tan"},
                                                             {ActivationKind::asin, "asin"},
                                                             {ActivationKind::acos, "acos"},
                                                             {ActivationKind::atan, "atan"},
                                                             {ActivationKind::sinh, "sinh"},
                                                             {ActivationKind::cosh, "cosh"},
                                                             {ActivationKind::asinh, "asinh"},
                                                             {ActivationKind::acosh, "acosh"},
                                                             {ActivationKind::atanh, "atanh"},
                                                             {ActivationKind::erf, "erf"},
                                                             {ActivationKind::sign, "sign"}};
} // namespace

std::string str(ActivationKind kind) {
    for (auto [k, n] : kNames) {
        if (k == kind) return n;
    }
    return "?";
}

ActivationKind activationFromString(const std::string& name) {
    std::string known;
    for (auto [k, n] : kNames) {
        if (name == n) return k;
        known += (known.empty() ? "" : ", ") + std::string(n);
    }
    throw ModuleError("unknown activation '" + name + "'; expected one of: " + known);
}

Activation::Activation(ActivationKind kind, const ActivationOptions& options)
    : Module(options.name), options_(options) {
    params_.kind = kind;
    switch (kind) {
    case ActivationKind::leakyRelu: params_.alpha = options.slope; break;
    case ActivationKind::elu: params_.alpha = options.alpha; break;
    case ActivationKind::clip:
        if (!(options.min < options.max)) {
            throw ModuleError("Activation clip: min (" + std::to_string(options.min) + ") must be below max (" +
                              std::to_string(options.max) + ")");
        }
        params_.alpha = options.min;
        params_.beta = options.max;
        break;
    case ActivationKind::hardSigmoid:
        if (!(options.hardSlope > 0.0f)) {
            throw ModuleError("Activation hardSigmoid: hardSlope must be positive, got " +
                              std::to_string(options.hardSlope));
        }
        params_.alpha = options.hardSlope;
        params_.beta = options.hardOffset;
        break;
    default: break;
    }
}

bool Activation::takes16Bit(const Tensors& data) const {
    return handlesLayouts() && backendCarries(data); // not the float32 loops
}

std::vector<DType> Activation::outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const {
    return inDTypes; // its input's (a float32 copy where it does not take bfloat16)
}

void Activation::checkDataShape(const Shapes& inShapes) const { requireCount(inShapes, 1, "input"); }

bool FusedRelu::takesActivation(const ActivationParams&, bool) const { return false; }
void FusedRelu::setFuseActivation(const ActivationParams*) {}
bool FusedRelu::fusesActivationOn(const ActivationParams& act, Device device) const {
    return act.kind == ActivationKind::relu && fusesReluOn(device);
}
bool FusedRelu::appliedActivation(const ActivationParams& act) const {
    return act.kind == ActivationKind::relu && appliedRelu();
}

Tensors Activation::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    passedThrough_ = fusedInto_ && fusedInto_->appliedActivation(params_);
    // The source differentiates the activation: it kept the ReLU's mask, or (another kind,
    // eval mode) it alone has the activation's input.
    maskedUpstream_ = passedThrough_ && (params_.kind != ActivationKind::relu || fusedInto_->keptReluMask());
    if (passedThrough_) return {x}; // applied upstream
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), x.layout());
    backendOf(x).activationForward(params_, x, y);
    return {y};
}

Tensors Activation::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    // The layer upstream applies the mask (or the activation's derivative) in its own
    // backward. A ReLU without its mask (an eval-mode forward) is right below too: the mask
    // of the input, relu(v), is v's.
    if (maskedUpstream_) return {dy};
    Tensor dx = Tensor::empty(dy.shape(), inData().dtype(), dy.device(), inData().layout());
    backendOf(dy).activationBackward(params_, inData(), data(), dy, dx);
    return {dx};
}

MemoryUse Activation::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    const bool relu = params_.kind == ActivationKind::relu;
    if (fusedInto_ && (relu || !train) && fusedInto_->fusesActivationOn(params_, device)) {
        use.outputViews[0] = 0; // its input, passed through
        if (!relu || (train && fusedInto_->masksReluGradientOn(device))) use.gradViews[0] = 0; // and its gradient
    }
    return use;
}

Blueprint Activation::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("activation", tessera::str(params_.kind));
    switch (params_.kind) {
    case ActivationKind::leakyRelu: bp.scheme.emplace_back("slope", static_cast<double>(options_.slope)); break;
    case ActivationKind::elu: bp.scheme.emplace_back("alpha", static_cast<double>(options_.alpha)); break;
    case ActivationKind::clip:
        bp.scheme.emplace_back("min", static_cast<double>(options_.min));
        bp.scheme.emplace_back("max", static_cast<double>(options_.max));
        break;
    case ActivationKind::hardSigmoid:
        bp.scheme.emplace_back("hardSlope", static_cast<double>(options_.hardSlope));
        bp.scheme.emplace_back("hardOffset", static_cast<double>(options_.hardOffset));
        break;
    default: break;
    }
    return bp;
}

} // namespace tessera
