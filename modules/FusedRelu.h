#pragma once
/// \file FusedRelu: a layer that can apply the ReLU that alone consumes its output inside its
/// own forward (containers/Fusion.h): batch norm and the sum `Add`. And SumFusedNorm: a
/// batch norm whose output only a sum consumes, which leaves its normalisation to that sum.

#include "backend/DType.h"
#include "backend/Tensor.h"

namespace tessera {

class FusedRelu {
public:
    virtual ~FusedRelu() = default;
    /// Set by a container around its forward when a ReLU alone consumes this layer's output.
    virtual void setFuseRelu(bool on) = 0;
    virtual bool fuseRelu() const = 0;
    /// Whether a forward on `device` would apply the ReLU now (for plans).
    virtual bool fusesReluOn(Device device) const = 0;
    /// Whether a train-mode forward on `device` keeps the ReLU's mask, so that its backward
    /// takes the ReLU's output gradient and applies the mask itself (for plans).
    virtual bool masksReluGradientOn(Device device) const = 0;
    /// Whether the last forward applied a ReLU to its output.
    virtual bool appliedRelu() const = 0;
    /// Whether the last forward kept the ReLU's mask (see masksReluGradientOn).
    virtual bool keptReluMask() const = 0;
};

/// Batch norm -> Add [-> ReLU] (containers/Fusion.h): with the setting on, the batch norm's
/// forward passes its input through, and the sum computes relu(bn(x) + z) itself through
/// normaliseAdd, in one backend call (Backend::batchNormAddForward). The batch norm's
/// output then costs no memory of its own. Backward mirrors it: the sum differentiates the
/// ReLU, itself and the normalisation through sumBackward (Backend::batchNormAddBackward),
/// and the batch norm's backward passes that gradient through and adds the parameter
/// gradients sumBackward recorded.
class SumFusedNorm {
public:
    virtual ~SumFusedNorm() = default;
    /// Set by a container around its forward when an Add alone consumes this layer's output;
    /// `sumRelu`: the Add applies a fused ReLU (what cuDNN's fused form needs, for plans).
    virtual void setFuseIntoSum(bool on, bool sumRelu) = 0;
    virtual bool fuseIntoSum() const = 0;
    /// Whether a forward now would pass its input through for the sum (for plans).
    virtual bool defersToSum() const = 0;
    /// Whether the last forward passed its input through, leaving its normalisation to the
    /// sum (its output is then its input).
    virtual bool deferredToSum() const = 0;
    /// The sum's call after a deferred forward: the normalisation of `x` (that forward's
    /// input), with `z` added when given and the ReLU applied when `relu`; it records what
    /// the forward would have (batch and running statistics). ModuleError when the last
    /// forward did not defer.
    virtual Tensor normaliseAdd(const Tensor& x, const Tensor* z, bool relu) = 0;
    /// The sum's backward after normaliseAdd: from `dy`, the gradient of the sum's result,
    /// the gradient of the normalisation's input (returned; the batch norm's own backward
    /// then passes it through). With `reluOutput` (the sum's result, when the sum applied
    /// the ReLU) dy is masked first. `dz`, when given, receives the addend's gradient: dy
    /// masked, or dy. ModuleError when the last forward did not defer.
    virtual Tensor sumBackward(const Tensor& dy, const Tensor* reluOutput, Tensor* dz) = 0;
};

} // namespace tessera
