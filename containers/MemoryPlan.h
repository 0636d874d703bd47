#pragma once
/// \file The static memory plan: from the input shapes alone, the peak bytes that an
/// inference and a training step of a model allocate, before anything is allocated.
///
/// The plan replays what the containers do (docs/architecture.md) on sizes instead of
/// tensors: each module says what it allocates (`Module::memoryUse`: outputs of its own
/// or views, kept state, gradients of their own or shared), plain copies are made where a
/// module that does not handle layouts meets a blocked value, values are released in eval
/// mode after their last consumer, and in backward a gradient goes once every parent has
/// used it. Buffers are counted by reference, so views and shared gradients cost nothing.

#include <cstdint>

#include "modules/Module.h"

namespace tessera {

/// Peaks in bytes beyond what is live before the call: the inputs, the parameters, their
/// gradients and any optimizer state are not counted (they exist before a step).
struct MemoryPlan {
    int64_t inference = 0;    ///< an eval-mode forward
    int64_t trainForward = 0; ///< a train-mode forward (every value kept for backward)
    int64_t training = 0;     ///< a training step: train forward, then backward for parameter gradients
};

/// Plans `model` at `inShapes` on `device` (layouts as that device's backend chooses them).
/// Throws the model's ShapeError when the shapes do not fit it.
MemoryPlan planMemory(Module& model, const Shapes& inShapes, Device device = Device::cpu());

} // namespace tessera
