#pragma once
/// \file The model zoo by name, for `tessera check / summary / draw` and for users:
/// lenet, mlp, nin, vgg11, vgg16, vgg19, resnet18 ... resnet152 (ImageNet stem) and
/// resnet18-cifar ... resnet152-cifar (CIFAR stem, 10 classes).

#include <string>
#include <vector>

#include "containers/Sequential.h"

namespace tessera {

struct ZooEntry {
    std::string name;
    std::string input;       ///< a typical input, as "1x3x224x224"
    int64_t publishedParams; ///< the published parameter count (0: none published)
    std::string source;      ///< where that count comes from
};

/// Every model the zoo can build.
const std::vector<ZooEntry>& zooModels();

/// Builds the model `name`; throws std::invalid_argument listing the names when unknown.
ModulePtr loadZooModel(const std::string& name);

/// Network in Network (Lin et al.) for 224x224 ImageNet images, as in the Caffe model zoo
/// definition: four mlpconv blocks (11x11/4, 5x5, 3x3, 3x3 convolutions each followed by
/// two 1x1 convolutions), max pooling between them, global average pooling at the end.
std::shared_ptr<Sequential> loadNiN(int64_t classes = 1000);

/// VGG-11, -16 or -19 (configurations A, D, E of Simonyan & Zisserman) for 224x224
/// images: 3x3 convolutions with bias and relu, 2x2 max pooling, then
/// 25088-4096-4096-classes with relu and dropout.
std::shared_ptr<Sequential> loadVGG(int depth, int64_t classes = 1000);

} // namespace tessera
