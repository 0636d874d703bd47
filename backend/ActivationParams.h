#pragma once
/// \file ActivationParams: the element-wise activations the backends compute (Backend.h),
/// in a header of their own for the modules that only name them.

namespace tessera {

/// Element-wise activation functions. silu: x * sigmoid(x) (swish); mish: x * tanh(softplus(x));
/// exp, log (NaN below 0, -inf at 0), abs (gradient 0 at 0), sin and cos, tan, the inverse
/// trigonometric functions asin, acos (NaN outside [-1, 1]) and atan, the hyperbolic sinh and
/// cosh and their inverses asinh, acosh (NaN below 1) and atanh (NaN outside [-1, 1]), erf,
/// and sign (-1, 0 or 1; gradient 0), as PyTorch's.
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
    cos,
    tan,
    asin,
    acos,
    atan,
    sinh,
    cosh,
    asinh,
    acosh,
    atanh,
    erf,
    sign
};

/// The kinds the CPU computes by loops of its own over plain float32 tensors (oneDNN has
/// none, or not an exact one): no blocked layouts, and 16-bit data through a float32 copy.
inline bool plainFloat32Only(ActivationKind k) {
    return k == ActivationKind::hardSigmoid || k == ActivationKind::log || k >= ActivationKind::sin;
}

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
