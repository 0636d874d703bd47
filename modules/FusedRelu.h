#pragma once
/// \file FusedRelu: a layer that can apply the ReLU that alone consumes its output inside its
/// own forward (containers/Fusion.h): batch norm and the sum `Add`.

#include "backend/DType.h"

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

} // namespace tessera
