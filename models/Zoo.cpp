#include "models/Zoo.h"

#include <stdexcept>

#include "models/LeNet.h"
#include "models/ResNet.h"
#include "models/Transformer.h"
#include "modules/Activation.h"
#include "modules/BatchNormND.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Dropout.h"
#include "modules/Flatten.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/Pool.h"

namespace tessera {

namespace {
ModulePtr relu(const std::string& name) {
    return std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = name});
}

ModulePtr conv(int64_t in, int64_t out, int64_t size, int64_t stride, int64_t pad, const std::string& name) {
    return std::make_shared<Conv2D>(
        in, out, size, ConvOptions{.stride = {stride}, .pad = {pad}, .initscheme = InitScheme::he, .name = name});
}
} // namespace

std::shared_ptr<Sequential> loadNiN(int64_t classes) {
    auto net = std::make_shared<Sequential>("nin");
    struct Block {
        int64_t in, out, size, stride, pad;
    };
    const Block blocks[] = {{3, 96, 11, 4, 0}, {96, 256, 5, 1, 2}, {256, 384, 3, 1, 1}, {384, 1024, 3, 1, 1}};
    for (int b = 0; b < 4; ++b) {
        const Block& k = blocks[b];
        const std::string p = "block" + std::to_string(b + 1);
        const int64_t last = b == 3 ? classes : k.out;
        net->append(conv(k.in, k.out, k.size, k.stride, k.pad, p + "_conv"));
        net->append(relu(p + "_relu0"));
        net->append(conv(k.out, k.out, 1, 1, 0, p + "_cccp1"));
        net->append(relu(p + "_relu1"));
        net->append(conv(k.out, last, 1, 1, 0, p + "_cccp2"));
        net->append(relu(p + "_relu2"));
        if (b < 3) net->append(std::make_shared<MaxPool2D>(3, PoolOptions{.stride = {2}, .name = p + "_pool"}));
        if (b == 2) net->append(std::make_shared<Dropout>(DropoutOptions{.p = 0.5f, .name = "drop"}));
    }
    net->append(std::make_shared<GlobalAvgPool>("avgpool"));
    net->append(std::make_shared<Flatten>("flatten"));
    return net;
}

std::shared_ptr<Sequential> loadVGG(int depth, int64_t classes) {
    std::vector<std::vector<int64_t>> stages;
    switch (depth) {
    case 11: stages = {{64}, {128}, {256, 256}, {512, 512}, {512, 512}}; break;
    case 16: stages = {{64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}, {512, 512, 512}}; break;
    case 19: stages = {{64, 64}, {128, 128}, {256, 256, 256, 256}, {512, 512, 512, 512}, {512, 512, 512, 512}}; break;
    default: throw ModuleError("loadVGG: depth must be 11, 16 or 19, got " + std::to_string(depth));
    }
    auto net = std::make_shared<Sequential>("vgg" + std::to_string(depth));
    int64_t in = 3;
    for (size_t s = 0; s < stages.size(); ++s) {
        for (size_t c = 0; c < stages[s].size(); ++c) {
            const std::string n = "conv" + std::to_string(s + 1) + "_" + std::to_string(c + 1);
            net->append(conv(in, stages[s][c], 3, 1, 1, n));
            net->append(relu("relu" + std::to_string(s + 1) + "_" + std::to_string(c + 1)));
            in = stages[s][c];
        }
        net->append(std::make_shared<MaxPool2D>(2, PoolOptions{.name = "pool" + std::to_string(s + 1)}));
    }
    net->append(std::make_shared<Flatten>("flatten"));
    net->append(std::make_shared<Linear>(512 * 7 * 7, 4096, LinearOptions{.name = "fc6"}));
    net->append(relu("relu6"));
    net->append(std::make_shared<Dropout>(DropoutOptions{.p = 0.5f, .name = "drop6"}));
    net->append(std::make_shared<Linear>(4096, 4096, LinearOptions{.name = "fc7"}));
    net->append(relu("relu7"));
    net->append(std::make_shared<Dropout>(DropoutOptions{.p = 0.5f, .name = "drop7"}));
    net->append(std::make_shared<Linear>(4096, classes, LinearOptions{.name = "fc8"}));
    return net;
}

ModulePtr loadUNet(int64_t inmaps, int64_t classes) {
    auto twoConvs = [](const NodePtr& x, int64_t in, int64_t out, const std::string& p) {
        auto a = node(conv(in, out, 3, 1, 1, p + "_conv1"), x, p + "_conv1");
        auto ra = node(relu(p + "_relu1"), a, p + "_relu1");
        auto b = node(conv(out, out, 3, 1, 1, p + "_conv2"), ra, p + "_conv2");
        return node(relu(p + "_relu2"), b, p + "_relu2");
    };
    auto data = node(std::make_shared<Identity>(), {}, "data");
    std::vector<NodePtr> skips;
    NodePtr x = data;
    int64_t in = inmaps;
    for (int d = 0; d < 4; ++d) {
        const int64_t out = 64 << d;
        const std::string p = "down" + std::to_string(d + 1);
        x = twoConvs(x, in, out, p);
        skips.push_back(x);
        x = node(std::make_shared<MaxPool2D>(2, PoolOptions{.name = p + "_pool"}), x, p + "_pool");
        in = out;
    }
    x = twoConvs(x, 512, 1024, "bottom");
    in = 1024;
    for (int u = 0; u < 4; ++u) {
        const int64_t out = in / 2;
        const std::string p = "up" + std::to_string(u + 1);
        auto up = node(std::make_shared<Deconv2D>(in, out, 2, ConvOptions{.stride = {2}, .name = p + "_deconv"}), x,
                       p + "_deconv");
        auto cat = node(std::make_shared<Concat>(1, p + "_concat"), {skips[3 - u], up}, p + "_concat");
        x = twoConvs(cat, in, out, p);
        in = out;
    }
    x = node(conv(64, classes, 1, 1, 0, "head"), x, "head");
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{x}, "unet");
}

namespace {
// conv (with bias) -> batch norm -> relu, as every convolution of BN-Inception.
NodePtr convBnRelu(const NodePtr& x, int64_t in, int64_t out, int64_t size, int64_t stride, const std::string& name) {
    auto c = node(conv(in, out, size, stride, size / 2, name), x, name);
    auto bn = node(std::make_shared<BatchNorm2D>(out, BatchNormOptions{.name = name + "_bn"}), c, name + "_bn");
    return node(relu(name + "_relu"), bn, name + "_relu");
}

// One BN-Inception unit. `reduce` units (3c, 4e) have no 1x1 branch, stride 2 in their 3x3
// branches and a max-pooling branch with no projection. Returns the concatenation and
// its channel count.
struct InceptionUnit {
    const char* name;
    int64_t mid3, mid33;                ///< 1x1 reductions before the 3x3 and the double-3x3 branches
    int64_t out1, out3, out33, outPool; ///< branch outputs (out1 and outPool 0 in reduce units)
    bool reduce, maxPool;
};

NodePtr inceptionUnit(const NodePtr& x, int64_t in, const InceptionUnit& u, int64_t& out) {
    const std::string p = std::string("inception_") + u.name;
    const int64_t stride = u.reduce ? 2 : 1;
    Parents branches;
    if (!u.reduce) branches.push_back(convBnRelu(x, in, u.out1, 1, 1, p + "_1x1"));
    auto r3 = convBnRelu(x, in, u.mid3, 1, 1, p + "_3x3_reduce");
    branches.push_back(convBnRelu(r3, u.mid3, u.out3, 3, stride, p + "_3x3"));
    auto r33 = convBnRelu(x, in, u.mid33, 1, 1, p + "_double_3x3_reduce");
    auto d1 = convBnRelu(r33, u.mid33, u.out33, 3, 1, p + "_double_3x3_1");
    branches.push_back(convBnRelu(d1, u.out33, u.out33, 3, stride, p + "_double_3x3_2"));
    const PoolOptions pool{.stride = {stride}, .pad = {1}, .name = p + "_pool"};
    NodePtr pooled = u.maxPool ? node(std::make_shared<MaxPool2D>(3, pool), x, p + "_pool")
                               : node(std::make_shared<AvgPool2D>(3, pool), x, p + "_pool");
    branches.push_back(u.reduce ? pooled : convBnRelu(pooled, in, u.outPool, 1, 1, p + "_pool_proj"));
    out = u.out1 + u.out3 + u.out33 + (u.reduce ? in : u.outPool);
    return node(std::make_shared<Concat>(1, p + "_output"), branches, p + "_output");
}
} // namespace

ModulePtr loadInceptionBN(int64_t classes) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    NodePtr x = convBnRelu(data, 3, 64, 7, 2, "conv1_7x7_s2");
    x = node(std::make_shared<MaxPool2D>(3, PoolOptions{.stride = {2}, .pad = {1}, .name = "pool1_3x3_s2"}), x,
             "pool1_3x3_s2");
    x = convBnRelu(x, 64, 64, 1, 1, "conv2_3x3_reduce");
    x = convBnRelu(x, 64, 192, 3, 1, "conv2_3x3");
    x = node(std::make_shared<MaxPool2D>(3, PoolOptions{.stride = {2}, .pad = {1}, .name = "pool2_3x3_s2"}), x,
             "pool2_3x3_s2");
    const InceptionUnit units[] = {
        {"3a", 64, 64, 64, 64, 96, 32, false, false},       {"3b", 64, 64, 64, 96, 96, 64, false, false},
        {"3c", 128, 64, 0, 160, 96, 0, true, true},         {"4a", 64, 96, 224, 96, 128, 128, false, false},
        {"4b", 96, 96, 192, 128, 128, 128, false, false},   {"4c", 128, 128, 160, 160, 160, 128, false, false},
        {"4d", 128, 160, 96, 192, 192, 128, false, false},  {"4e", 128, 192, 0, 192, 256, 0, true, true},
        {"5a", 192, 160, 352, 320, 224, 128, false, false}, {"5b", 192, 192, 352, 320, 224, 128, false, true},
    };
    int64_t in = 192;
    for (const InceptionUnit& u : units) {
        int64_t out = 0;
        x = inceptionUnit(x, in, u, out);
        in = out;
    }
    x = node(std::make_shared<GlobalAvgPool>("global_pool"), x, "global_pool");
    x = node(std::make_shared<Flatten>("flatten"), x, "flatten");
    x = node(std::make_shared<Linear>(in, classes, LinearOptions{.name = "fc"}), x, "fc");
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{x}, "inception-bn");
}

const std::vector<ZooEntry>& zooModels() {
    static const std::vector<ZooEntry> entries = [] {
        std::vector<ZooEntry> e = {
            {"lenet", "1x1x28x28", 0, ""},
            {"mlp", "1x1x28x28", 0, ""},
            {"lstm", "1x1x28x28", 0, ""},
            {"nin", "1x3x224x224", 7595176, "Caffe model zoo NiN-ImageNet definition"},
            {"vgg11", "1x3x224x224", 132863336, "torchvision vgg11"},
            {"vgg16", "1x3x224x224", 138357544, "torchvision vgg16"},
            {"vgg19", "1x3x224x224", 143667240, "torchvision vgg19"},
            {"resnet18", "1x3x224x224", 11689512, "torchvision resnet18"},
            {"resnet34", "1x3x224x224", 21797672, "torchvision resnet34"},
            {"resnet50", "1x3x224x224", 25557032, "torchvision resnet50"},
            {"resnet101", "1x3x224x224", 44549160, "torchvision resnet101"},
            {"resnet152", "1x3x224x224", 60192808, "torchvision resnet152"},
            {"unet", "1x1x256x256", 31030658,
             "the layers of Ronneberger et al. 2015 with 1 input map and 2 classes (the paper prints no count)"},
            {"inception-bn", "1x3x224x224", 11295240,
             "BN-Inception (Ioffe & Szegedy 2015) as published with pretrained weights: biased convolutions, "
             "each followed by batch norm"},
        };
        for (int d : {18, 34, 50, 101, 152}) e.push_back({"resnet" + std::to_string(d) + "-cifar", "1x3x32x32", 0, ""});
        e.push_back({"vit", "1x3x224x224", 86567656, "torchvision vit_b_16"});
        e.push_back({"vit-tiny", "1x1x28x28", 0, ""});
        e.push_back({"vit-tiny-cifar", "1x3x32x32", 308042,
                     "torchvision VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=4, "
                     "hidden_dim=64, mlp_dim=256, num_classes=10)"});
        e.push_back({"convnext-tiny", "1x3x224x224", 28589128, "torchvision convnext_tiny"});
        e.push_back({"gpt-mini", "1x64", 0, ""});
        return e;
    }();
    return entries;
}

ModulePtr loadZooModel(const std::string& name, int64_t classes) {
    if (classes < 0)
        throw ModuleError("loadZooModel: classes must be >= 0 (0: the model's own), got " + std::to_string(classes));
    auto k = [classes](int64_t own) { return classes > 0 ? classes : own; };
    auto vit = [&](ViTConfig c) {
        c.classes = k(c.classes);
        return loadViT(c);
    };
    if (name == "lenet") return loadLeNet(k(10));
    if (name == "mlp") return loadMLP({784, 1024, 1024, k(10)});
    if (name == "lstm") return loadLSTM(128, k(10));
    if (name == "nin") return loadNiN(k(1000));
    if (name == "unet") return loadUNet(1, k(2));
    if (name == "inception-bn") return loadInceptionBN(k(1000));
    if (name == "vit") return vit(vitB16());
    if (name == "vit-tiny") return vit(vitTiny(28, 1));
    if (name == "vit-tiny-cifar") return vit(vitTiny(32, 3));
    if (name == "convnext-tiny") return loadConvNeXt(k(1000));
    if (name == "gpt-mini") {
        if (classes > 0) {
            throw ModuleError("loadZooModel: gpt-mini scores its 128 byte values, not classes (classes " +
                              std::to_string(classes) + " given)");
        }
        return loadGPT();
    }
    for (int d : {11, 16, 19}) {
        if (name == "vgg" + std::to_string(d)) return loadVGG(d, k(1000));
    }
    for (int d : {18, 34, 50, 101, 152}) {
        if (name == "resnet" + std::to_string(d)) return loadResNet(d, ResNetStem::imagenet, k(1000));
        if (name == "resnet" + std::to_string(d) + "-cifar") return loadResNet(d, ResNetStem::cifar, k(10));
    }
    std::string known;
    for (const ZooEntry& e : zooModels()) known += (known.empty() ? "" : ", ") + e.name;
    throw ModuleError("unknown zoo model '" + name + "'; the zoo has: " + known);
}

} // namespace tessera
