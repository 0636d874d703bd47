#pragma once
/// \file The model zoo by name, for `tessera check / summary / draw` and for users:
/// lenet, mlp, nin, vgg11, vgg16, vgg19, resnet18 ... resnet152 (ImageNet stem) and
/// resnet18-cifar ... resnet152-cifar (CIFAR stem, 10 classes), unet, inception-bn, vit (ViT-B/16),
/// vit-tiny (1x28x28), vit-tiny-cifar (3x32x32), convnext-tiny, gpt-mini (models/Transformer.h).

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

/// Builds the model `name`, for `classes` classes (its head, or a U-Net's output maps;
/// 0: the model's own count, as its entry says); throws ModuleError listing the names when
/// unknown, and for classes given to gpt-mini (whose scores are its byte values).
ModulePtr loadZooModel(const std::string& name, int64_t classes = 0);

/// Network in Network (Lin et al.) for 224x224 ImageNet images, as in the Caffe model zoo
/// definition: four mlpconv blocks (11x11/4, 5x5, 3x3, 3x3 convolutions each followed by
/// two 1x1 convolutions), max pooling between them, global average pooling at the end.
std::shared_ptr<Sequential> loadNiN(int64_t classes = 1000);

/// VGG-11, -16 or -19 (configurations A, D, E of Simonyan & Zisserman) for 224x224
/// images: 3x3 convolutions with bias and relu, 2x2 max pooling, then
/// 25088-4096-4096-classes with relu and dropout.
std::shared_ptr<Sequential> loadVGG(int depth, int64_t classes = 1000);

/// UNet (Ronneberger et al.) with padded 3x3 convolutions, so the output has the input's
/// size (which must divide by 16): four down steps (two conv+relu, 2x2 max pooling), a
/// 1024-channel bottom, four up steps (2x2 stride-2 deconvolution, concatenation with the
/// skip, two conv+relu), then a 1x1 convolution to `classes` maps. x: [N, inmaps, H, W]
/// -> [N, classes, H, W].
ModulePtr loadUNet(int64_t inmaps = 1, int64_t classes = 2);

/// Inception with batch normalisation (BN-Inception, Ioffe & Szegedy 2015) for 224x224
/// images: a 7x7/2 stem, ten inception units (3a-3c, 4a-4e, 5a-5b) whose 5x5 branches are
/// two 3x3 convolutions, and 3c and 4e reducing with stride 2; every convolution has a bias
/// and is followed by batch norm and relu; global average pooling and one Linear.
/// The stride-2 max poolings pad by 1 where the original used ceil rounding: the output
/// sizes are the same, the windows start one pixel earlier.
ModulePtr loadInceptionBN(int64_t classes = 1000);

} // namespace tessera
