#pragma once
/// \file ActivationParams: the element-wise activations the backends compute (Backend.h),
/// in a header of their own for the modules that only name them.

namespace tessera {

/// Element-wise activation functions. silu: x * sigmoid(x) (swish); mish: x * tanh(softplus(x));
/// exp, log (NaN below 0, -inf at 0), abs (gradient 0 at 0), sin and cos, as PyTorch's.
enum class ActivationKind {
    sigmoid,
    tanh,
    relu,
    leakyRelu,
    elu,
    softPlus,
    clip,
    gelu,
    hardSigmoid,
    hardSwish,
    silu,
    mish,
    exp,
    log,
    abs,
    sin,
    cos
};

/// An activation and its constants: leakyRelu slope in `alpha`; elu alpha in `alpha`;
/// clip bounds in `alpha` (min) and `beta` (max); hardSigmoid's slope in `alpha` and offset
/// in `beta`.
struct ActivationParams {
    ActivationKind kind = ActivationKind::relu;
    float alpha = 0.0f;
    float beta = 0.0f;
    bool operator==(const ActivationParams&) const = default;
};

} // namespace tessera
