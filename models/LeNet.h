#pragma once
/// \file The small classic networks: LeNet, the multilayer perceptron, and an LSTM that
/// reads an image row by row.

#include <vector>

#include "containers/Sequential.h"

namespace tessera {

/// PuzzleLib's LeNet for 28x28 single-channel images: Conv2D(1,16,3), MaxPool2D, relu,
/// Conv2D(16,32,4), MaxPool2D, relu, Flatten, Linear(800,1024), relu, Linear(1024,10).
/// x: [N, 1, 28, 28] -> class scores [N, classes] (10: Linear(1024, 10)). Initialised from
/// the global generator.
std::shared_ptr<Sequential> loadLeNet(int64_t classes = 10);

/// A relu MLP: Flatten, then Linear layers through `sizes` (insize, hidden..., classes)
/// with relu between them. loadMLP() is 784-1024-1024-10.
std::shared_ptr<Sequential> loadMLP(const std::vector<int64_t>& sizes = {784, 1024, 1024, 10});

/// A sequence classifier for 28x28 single-channel images read as 28 rows of 28 pixels:
/// Reshape to [N, 28, 28], a 2-layer LSTM of `hidden` units (batch first, the last step's
/// output), Linear(hidden, classes). x: [N, 1, 28, 28] -> class scores [N, classes].
std::shared_ptr<Sequential> loadLSTM(int64_t hidden = 128, int64_t classes = 10);

} // namespace tessera
