#include "models/ResNet.h"

#include <stdexcept>

#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Conv.h"
#include "modules/Flatten.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/Pool.h"

namespace tessera {

namespace {

// conv (no bias) -> batch norm [-> relu]
NodePtr convBn(const NodePtr& x, int64_t in, int64_t out, int64_t size, int64_t stride, const std::string& name,
               bool relu) {
    auto conv =
        node(std::make_shared<Conv2D>(
                 in, out, size,
                 ConvOptions{.stride = {stride}, .pad = {size / 2}, .useBias = false, .initscheme = InitScheme::he}),
             x, name + "_conv");
    auto bn = node(std::make_shared<BatchNorm2D>(out), conv, name + "_bn");
    return relu ? node(std::make_shared<Activation>(ActivationKind::relu), bn, name + "_relu") : bn;
}

// One residual block; `bottleneck` selects 1x1-3x3-1x1 (expansion 4) over 3x3-3x3.
NodePtr block(const NodePtr& x, int64_t in, int64_t width, int64_t stride, bool bottleneck, const std::string& name) {
    const int64_t out = bottleneck ? 4 * width : width;
    NodePtr body;
    if (bottleneck) {
        body = convBn(x, in, width, 1, 1, name + "_a", true);
        body = convBn(body, width, width, 3, stride, name + "_b", true);
        body = convBn(body, width, out, 1, 1, name + "_c", false);
    } else {
        body = convBn(x, in, width, 3, stride, name + "_a", true);
        body = convBn(body, width, out, 3, 1, name + "_b", false);
    }
    NodePtr shortcut = stride != 1 || in != out ? convBn(x, in, out, 1, stride, name + "_proj", false) : x;
    auto sum = node(std::make_shared<Add>(), {body, shortcut}, name + "_add");
    return node(std::make_shared<Activation>(ActivationKind::relu), sum, name + "_relu");
}

} // namespace

std::shared_ptr<Graph> loadResNet(int depth, ResNetStem stem, int64_t classes) {
    std::vector<int> counts;
    bool bottleneck = depth >= 50;
    switch (depth) {
    case 18: counts = {2, 2, 2, 2}; break;
    case 34: counts = {3, 4, 6, 3}; break;
    case 50: counts = {3, 4, 6, 3}; break;
    case 101: counts = {3, 4, 23, 3}; break;
    case 152: counts = {3, 8, 36, 3}; break;
    default: throw ModuleError("loadResNet: depth must be 18, 34, 50, 101 or 152, got " + std::to_string(depth));
    }
    auto data = node(std::make_shared<Identity>(), {}, "data");
    NodePtr x;
    if (stem == ResNetStem::imagenet) {
        x = convBn(data, 3, 64, 7, 2, "stem", true);
        x = node(std::make_shared<MaxPool2D>(3, PoolOptions{.stride = {2}, .pad = {1}}), x, "stem_pool");
    } else {
        x = convBn(data, 3, 64, 3, 1, "stem", true);
    }
    int64_t in = 64;
    for (size_t stage = 0; stage < 4; ++stage) {
        const int64_t width = 64 << stage;
        for (int b = 0; b < counts[stage]; ++b) {
            const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
            x = block(x, in, width, stride, bottleneck, "layer" + std::to_string(stage + 1) + "_" + std::to_string(b));
            in = bottleneck ? 4 * width : width;
        }
    }
    x = node(std::make_shared<GlobalAvgPool>(), x, "avgpool");
    x = node(std::make_shared<Flatten>(), x, "flatten");
    x = node(std::make_shared<Linear>(in, classes), x, "fc");
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{x},
                                   "resnet" + std::to_string(depth));
}

} // namespace tessera
