#pragma once
// The model the HDF5 and checkpoint harnesses load into, and that fuzz_seeds saves: a
// Linear, a BatchNorm1D (attributes and a batch counter), a ReLU, a Dropout (a random
// stream) and a second Linear, trained by Adam (optimizer state).
#include <memory>

#include "backend/Random.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/BatchNormND.h"
#include "modules/Dropout.h"
#include "modules/Linear.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera::fuzz {

inline std::shared_ptr<Sequential> smallNet() {
    manualSeed(1);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(6, 16))
        .append(std::make_shared<BatchNorm1D>(16))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Dropout>(DropoutOptions{.p = 0.2f}))
        .append(std::make_shared<Linear>(16, 3));
    return net;
}

inline HandlerOptions trainerOptions() { return {.batchsize = 8, .shuffle = true, .seed = 3, .progress = false}; }

} // namespace tessera::fuzz
