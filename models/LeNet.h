#pragma once
/// \file The small classic networks: LeNet and the multilayer perceptron.

#include <vector>

#include "containers/Sequential.h"

namespace tessera {

/// PuzzleLib's LeNet for 28x28 single-channel images: Conv2D(1,16,3), MaxPool2D, relu,
/// Conv2D(16,32,4), MaxPool2D, relu, Flatten, Linear(800,1024), relu, Linear(1024,10).
/// x: [N, 1, 28, 28] -> class scores [N, 10]. Initialised from the global generator.
std::shared_ptr<Sequential> loadLeNet();

/// A relu MLP: Flatten, then Linear layers through `sizes` (insize, hidden..., classes)
/// with relu between them. loadMLP() is 784-1024-1024-10.
std::shared_ptr<Sequential> loadMLP(const std::vector<int64_t>& sizes = {784, 1024, 1024, 10});

} // namespace tessera
