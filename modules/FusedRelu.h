#pragma once
/// \file FusedRelu: a layer that can apply the ReLU that alone consumes its output inside its
/// own forward (containers/Fusion.h): batch norm and the sum `Add`. And SumFusedNorm: a
/// batch norm whose output only a sum consumes, which leaves its normalisation to that sum.
/// And ConvFoldedNorm: an eval-mode batch norm folded into the convolution before it.

#include <cstdint>
#include <vector>

#include "backend/ActivationParams.h"
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

    /// Activations besides ReLU (a Linear's GEMM post-op, eval mode): whether this layer, in
    /// mode `train`, can take `act` into its forward. Default: no (ReLU goes through
    /// setFuseRelu).
    virtual bool takesActivation(const ActivationParams& act, bool train) const;
    /// Set by a container around its forward when such an activation alone consumes this
    /// layer's output (nullptr clears it). Default: nothing.
    virtual void setFuseActivation(const ActivationParams* act);
    /// Whether a forward on `device` would apply `act` now (for plans). Default: a ReLU
    /// where fusesReluOn.
    virtual bool fusesActivationOn(const ActivationParams& act, Device device) const;
    /// Whether the last forward applied `act` to its output. Default: a ReLU where appliedRelu.
    virtual bool appliedActivation(const ActivationParams& act) const;
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

/// Convolution -> batch norm in eval mode (containers/Fusion.h): with the setting on, the
/// convolution runs with the normalisation folded into its weights and bias (and the
/// batch norm's fused ReLU applied inside it), and the batch norm's forward passes its
/// input through. Its output then costs no memory of its own, and its pass over the
/// activations is gone. Backward (eval mode: input gradients only) passes the gradient
/// through to the convolution, which differentiates the folded layer.
class ConvFoldedNorm {
public:
    virtual ~ConvFoldedNorm() = default;
    /// Set by a container around an eval-mode forward when a convolution's output feeds
    /// this module alone (and nothing else).
    virtual void setFoldIntoConv(bool on) = 0;
    virtual bool foldsIntoConv() const = 0;
    /// Whether the normalisation is per channel of `maps` channels, so that a convolution
    /// of `maps` outputs can take it.
    virtual bool foldableOver(int64_t maps) const = 0;
    /// Whether the convolution applies the ReLU that this module fuses (FusedRelu).
    virtual bool foldsRelu() const = 0;
    /// The eval-mode normalisation as y = a * x + c per channel (float32 on the host, from
    /// the running statistics, scale and bias).
    virtual void evalAffine(std::vector<float>& a, std::vector<float>& c) const = 0;
    /// Changes whenever evalAffine's result may have without a parameter change counted by
    /// parameterGeneration() (a train-mode forward updating the running statistics).
    virtual int64_t statisticsVersion() const = 0;
};

} // namespace tessera
