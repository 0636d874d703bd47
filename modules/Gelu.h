#pragma once
/// \file Gelu: the Gaussian error linear unit, y = x * Phi(x) (exact, with erf).

#include "modules/Activation.h"

namespace tessera {

/// x: any shape -> y: same shape. The gelu kind of Activation under its own name.
class Gelu : public Activation {
public:
    explicit Gelu(std::string name = {}) : Activation(ActivationKind::gelu, {.name = std::move(name)}) {}
    std::string classname() const override { return "Gelu"; }
    Blueprint blueprint() const override { return Module::blueprint(); }
};

} // namespace tessera
