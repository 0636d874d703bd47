#pragma once
/// \file ResNet-18/34/50/101/152 as graphs (basic blocks for 18 and 34, bottlenecks
/// above), with the ImageNet stem (7x7/2 convolution and 3x3/2 max pooling, 224x224
/// inputs) or the CIFAR stem (one 3x3 convolution, 32x32 inputs). Convolutions have no
/// bias and are followed by batch norm, as in the published networks.

#include <memory>

#include "containers/Graph.h"

namespace tessera {

enum class ResNetStem { imagenet, cifar };

/// depth in {18, 34, 50, 101, 152}; x: [N, 3, H, W] -> class scores [N, classes].
/// Throws ModuleError for another depth. With the ImageNet stem and 1000
/// classes the parameter counts are the published ones (ResNet-18: 11 689 512).
std::shared_ptr<Graph> loadResNet(int depth, ResNetStem stem = ResNetStem::imagenet, int64_t classes = 1000);

} // namespace tessera
