#pragma once
// Helpers of the fusion tests (FusionTest.cpp, FoldTest.cpp).
#include <memory>

#include "containers/Fusion.h"
#include "modules/Activation.h"

namespace tessera::testing {

// Sets the process-wide fusion switch, and turns it back on however a test ends.
struct FusionSwitch {
    explicit FusionSwitch(bool on) { setFusion(on); }
    ~FusionSwitch() { setFusion(true); }
    FusionSwitch(const FusionSwitch&) = delete;
    FusionSwitch& operator=(const FusionSwitch&) = delete;
};

inline std::shared_ptr<Activation> relu() { return std::make_shared<Activation>(ActivationKind::relu); }

} // namespace tessera::testing
