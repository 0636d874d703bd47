#include <cstdio>
#include <memory>
#include <span>

#include "GradCheck.h"
#include "PackedWeights.h"
#include "Reference.h"
#include "containers/Sequential.h"
#include "io/Hdf5.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Flatten.h"
#include "modules/Linear.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {
using namespace testing;

// One convolution case: rank, channels, kernel and geometry.
struct Case {
    const char* what;
    size_t dims;
    int64_t inmaps, outmaps, size;
    ConvOptions options;
    std::vector<int64_t> spatial; // input spatial dims
};

std::unique_ptr<ConvND> make(bool transposed, const Case& c) {
    ConvOptions o = c.options;
    o.initscheme = InitScheme::uniform;
    switch (c.dims) {
    case 1:
        return transposed ? std::unique_ptr<ConvND>(new Deconv1D(c.inmaps, c.outmaps, c.size, o))
                          : std::unique_ptr<ConvND>(new Conv1D(c.inmaps, c.outmaps, c.size, o));
    case 2:
        return transposed ? std::unique_ptr<ConvND>(new Deconv2D(c.inmaps, c.outmaps, c.size, o))
                          : std::unique_ptr<ConvND>(new Conv2D(c.inmaps, c.outmaps, c.size, o));
    default:
        return transposed ? std::unique_ptr<ConvND>(new Deconv3D(c.inmaps, c.outmaps, c.size, o))
                          : std::unique_ptr<ConvND>(new Conv3D(c.inmaps, c.outmaps, c.size, o));
    }
}

Shape inputShape(const Case& c, int64_t n = 2) {
    std::vector<int64_t> d{n, c.inmaps};
    d.insert(d.end(), c.spatial.begin(), c.spatial.end());
    return Shape(d);
}

const Case kCases[] = {
    {"1d plain", 1, 3, 4, 3, {}, {9}},
    {"1d stride pad dilation", 1, 4, 6, 3, {.stride = {2}, .pad = {2}, .dilation = {2}}, {11}},
    {"2d plain", 2, 3, 5, 3, {}, {6, 7}},
    {"2d stride pad", 2, 4, 4, 3, {.stride = {2}, .pad = {1}}, {7, 6}},
    {"2d groups no bias", 2, 4, 6, 3, {.pad = {1}, .groups = 2, .useBias = false}, {5, 5}},
    {"2d dilation", 2, 2, 3, 2, {.stride = {1, 2}, .dilation = {2, 1}}, {6, 7}},
    {"2d blocked channels", 2, 16, 32, 3, {.pad = {1}}, {5, 5}},
    {"3d", 3, 2, 3, 2, {.stride = {1, 2, 1}, .pad = {1, 0, 1}}, {3, 4, 4}},
    {"3d groups", 3, 4, 4, 3, {.pad = {1}, .groups = 4}, {3, 3, 3}},
};

// Deconvolutions with postpad (PyTorch's output_padding): the outputs past the cropped end.
const Case kPostpadCases[] = {
    {"1d postpad", 1, 3, 2, 3, {.stride = {2}, .pad = {1}, .postpad = {1}}, {5}},
    {"2d postpad beyond the pad", 2, 3, 4, 3, {.stride = {2}, .pad = {0}, .postpad = {1}}, {4, 3}},
    {"2d postpad per dim, dilation",
     2,
     2,
     4,
     3,
     {.stride = {3, 2}, .pad = {2, 1}, .dilation = {2}, .postpad = {2, 1}},
     {3, 4}},
    {"3d postpad groups", 3, 4, 2, 2, {.stride = {2}, .pad = {1}, .groups = 2, .postpad = {1, 0, 1}}, {2, 3, 2}},
};

reference::Geometry geometryOf(const ConvND& m) {
    const ConvParams& p = m.params();
    return {p.stride, p.padLo, p.dilation, p.groups};
}

std::vector<float> biasOf(const Module& m) {
    return m.hasVar("b") ? m.getVar("b")->data.toVector<float>() : std::vector<float>{};
}

void checkReference(bool transposed, std::span<const Case> cases = kCases) {
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        auto m = make(transposed, c);
        if (m->hasVar("b")) backendOf(m->getVar("b")->data).fillUniform(m->getVar("b")->data, -1, 1, globalGenerator());
        Tensor x = randomTensor(inputShape(c), 3);
        Tensor y = (*m)(x);
        const Shape ys = m->dataShapeFrom(x.shape());
        const auto expected = transposed ? reference::deconv(x, m->getVar("W")->data, biasOf(*m), geometryOf(*m), ys)
                                         : reference::conv(x, m->getVar("W")->data, biasOf(*m), geometryOf(*m), ys);
        EXPECT_TRUE(allClose(y, expected, 1e-4f));
    }
}

void checkGradient(bool transposed, std::span<const Case> cases = kCases) {
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        auto m = make(transposed, c);
        GradCheckOptions opts;
        opts.maxElements = 24;
        EXPECT_TRUE(checkGradients(*m, {randomTensor(inputShape(c), 4)}, opts));
    }
}

void checkShape(bool transposed, std::span<const Case> cases = kCases) {
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        auto m = make(transposed, c);
        EXPECT_TRUE(checkShapes(*m, {randomTensor(inputShape(c, 3), 5)}));
    }
}

TEST(Conv, Reference) { checkReference(false); }
TEST(Deconv, Reference) { checkReference(true); }
TEST(Conv, Gradient) { checkGradient(false); }
TEST(Deconv, Gradient) { checkGradient(true); }
TEST(Conv, Shape) { checkShape(false); }
TEST(Deconv, Shape) { checkShape(true); }
TEST(Deconv, PostpadReferenceGradientShape) {
    checkReference(true, kPostpadCases);
    checkGradient(true, kPostpadCases);
    checkShape(true, kPostpadCases);
    // stride 2, pad 1, postpad 1: the output doubles (PyTorch's U-Net up step).
    Deconv2D up(4, 2, 3, {.stride = {2}, .pad = {1}, .postpad = {1}});
    EXPECT_EQ(up.dataShapeFrom(Shape{1, 4, 7, 5}), (Shape{1, 2, 14, 10}));
    EXPECT_EQ(up.gradShapeFrom(Shape{1, 2, 14, 10}), (Shape{1, 4, 7, 5}));
    EXPECT_EQ(up.postpad(), (std::vector<int64_t>{1, 1}));
    EXPECT_NE(up.blueprint().toJson().find("\"postpad\": [1, 1]"), std::string::npos);
    EXPECT_EQ(Conv2D(1, 1, 3).blueprint().toJson().find("postpad"), std::string::npos);
    // Bad arguments: a postpad as large as the stride, negative, on a convolution.
    EXPECT_TRUE(throwsModuleError([] { Deconv2D(2, 2, 3, {.stride = {2}, .postpad = {2}}); },
                                  {"Deconv2D", "postpad 2", "less than its stride 2"}));
    EXPECT_TRUE(
        throwsModuleError([] { Deconv1D(2, 2, 3, {.stride = {2}, .postpad = {-1}}); }, {"Deconv1D", "postpad", "-1"}));
    EXPECT_TRUE(throwsModuleError([] { Conv2D(2, 2, 3, {.stride = {2}, .postpad = {1}}); },
                                  {"Conv2D", "postpad is for deconvolutions"}));
}

TEST(Conv, OutputSizeFormula) {
    Conv2D conv(3, 8, 3, {.stride = {2}, .pad = {1}});
    EXPECT_EQ(conv.dataShapeFrom(Shape{4, 3, 32, 32}), (Shape{4, 8, 16, 16}));
    Deconv2D deconv(8, 3, 4, {.stride = {2}, .pad = {1}});
    EXPECT_EQ(deconv.dataShapeFrom(Shape{4, 8, 16, 16}), (Shape{4, 3, 32, 32}));
    Conv3D c3(1, 2, {3, 1, 1});
    EXPECT_EQ(c3.dataShapeFrom(Shape{1, 1, 5, 4, 3}), (Shape{1, 2, 3, 4, 3}));
    // Strided: two input sizes give one output; the last input decides gradShapeFrom.
    conv.dataShapeFrom(Shape{4, 3, 33, 33});
    EXPECT_EQ(conv.gradShapeFrom(Shape{2, 8, 17, 17}), (Shape{2, 3, 33, 33}));
}

TEST(Conv, AccGradParamsHonoursScaleAndMomentum) {
    Conv2D conv(4, 16, 3, {.pad = {1}});
    Tensor x = randomTensor({2, 4, 6, 6}, 8);
    Tensor dy = randomTensor({2, 16, 6, 6}, 9);
    conv(x);
    conv.zeroGradParams();
    conv.backward(dy);
    const std::vector<float> g1 = conv.getVar("W")->grad.toVector<float>();
    const std::vector<float> b1 = conv.getVar("b")->grad.toVector<float>();
    conv.backward(dy, true, true, 0.5f, 2.0f); // 0.5 * g + 2 * g
    std::vector<float> w2, b2;
    for (float v : g1) w2.push_back(2.5f * v);
    for (float v : b1) b2.push_back(2.5f * v);
    EXPECT_TRUE(allClose(conv.getVar("W")->grad, w2, 1e-4f));
    EXPECT_TRUE(allClose(conv.getVar("b")->grad, b2, 1e-4f));
}

TEST(Conv, BlockedOutputsFlowIntoTheNextConvolution) {
    // Two convolutions in a row, then layers that need plain data: the values must equal
    // the ones computed layer by layer on plain copies.
    Sequential net;
    net.append(std::make_shared<Conv2D>(16, 32, 3, ConvOptions{.pad = {1}}));
    net.append(std::make_shared<Conv2D>(32, 16, 3, ConvOptions{.pad = {1}}));
    net.append(std::make_shared<Flatten>());
    net.append(std::make_shared<Linear>(16 * 6 * 6, 5));
    Tensor x = randomTensor({2, 16, 6, 6}, 10);
    Tensor y = net(x);
    EXPECT_TRUE(y.isPlain());
    std::printf("first convolution output layout: %s\n", str(net[0].data().layout()).c_str());
    Tensor h = net[0](x).plain();
    h = net[1](h.clone()).plain();
    h = net[3](net[2](h));
    EXPECT_TRUE(allClose(y, h.toVector<float>(), 1e-4f));
    GradCheckOptions opts;
    opts.maxElements = 16;
    EXPECT_TRUE(checkGradients(net, {x}, opts));
}

TEST(Conv, ScalarOrPerDimOptions) {
    // One number stands for every spatial dim: {.stride = 2, .pad = 1} is {.stride = {2}, .pad = {1}}.
    Conv2D scalar(3, 4, 3, {.stride = 2, .pad = 1, .dilation = 1});
    Conv2D lists(3, 4, 3, {.stride = {2, 2}, .pad = {1, 1}});
    EXPECT_EQ(scalar.params().stride, lists.params().stride);
    EXPECT_EQ(scalar.params().padLo, lists.params().padLo);
    EXPECT_EQ(scalar.dataShapeFrom(Shape{1, 3, 9, 8}), (Shape{1, 4, 5, 4}));
    Deconv2D up(4, 2, 3, {.stride = 2, .pad = 1, .postpad = 1});
    EXPECT_EQ(up.dataShapeFrom(Shape{1, 4, 5, 4}), (Shape{1, 2, 10, 8}));
    Conv3D mixed(1, 1, 3, {.pad = {1, 0, 1}});
    EXPECT_EQ(mixed.params().padLo, (std::vector<int64_t>{1, 0, 1}));
}

TEST(Conv, BadInput) {
    Conv2D conv(3, 8, 3, {.name = "conv1"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            conv(Tensor::zeros({2, 4, 8, 8}));
        },
        {"Conv2D 'conv1'", "[N, 3, H, W]", "[2, 4, 8, 8]"}));
    EXPECT_TRUE(throwsShapeError([&] { conv(Tensor::zeros({2, 3, 8})); }, {"conv1", "[2, 3, 8]"}));
    EXPECT_TRUE(throwsShapeError([&] { conv(Tensor::zeros({2, 3, 2, 8})); }, {"smaller than the kernel"}));
    conv(Tensor::zeros({2, 3, 8, 8}));
    EXPECT_TRUE(throwsShapeError([&] { conv.backward(Tensor::zeros({2, 7, 6, 6})); }, {"conv1", "[2, 7, 6, 6]"}));
    Deconv1D deconv(4, 2, 3);
    EXPECT_TRUE(throwsShapeError([&] { deconv(Tensor::zeros({2, 2, 5})); }, {"Deconv1D", "[N, 4, W]"}));
    Deconv1D cropping(4, 2, 1, {.pad = {2}});
    EXPECT_TRUE(throwsShapeError([&] { cropping(Tensor::zeros({2, 4, 3})); }, {"Deconv1D", "empty output"}));
    EXPECT_THROW(Conv2D(4, 6, 3, {.groups = 4}), ModuleError);
    EXPECT_THROW(Conv2D(4, 6, 3, {.stride = {1, 2, 3}}), ModuleError);
    EXPECT_THROW(Conv2D(4, 6, 0), ModuleError);
}

TEST(Conv, Blueprint) {
    Conv2D conv(3, 8, 3, {.stride = {2}, .pad = {1}, .groups = 1, .useBias = false});
    const std::string json = conv.blueprint().toJson();
    for (const char* part : {"\"classname\": \"Conv2D\"", "\"inmaps\": 3", "\"outmaps\": 8", "\"size\": [3, 3]",
                             "\"stride\": [2, 2]", "\"pad\": [1, 1]", "\"useBias\": false"}) {
        EXPECT_NE(json.find(part), std::string::npos) << part << " in " << json;
    }
    EXPECT_NE(Deconv3D(2, 2, 2).blueprint().toJson().find("\"classname\": \"Deconv3D\""), std::string::npos);
    EXPECT_EQ(Deconv2D(6, 4, 3, {.groups = 2}).getVar("W")->data.shape(), (Shape{6, 2, 3, 3}));
}

// Module::packWeights on convolutions and deconvolutions, float32 and bfloat16: both keep
// their weights in oneDNN's blocked layout (tests/modules/PackedWeights.h).
TEST(Conv, PackedWeightsGiveTheSameOutputsAndFollowTheLibrarysChanges) {
    for (bool transposed : {false, true}) {
        for (DType compute : {DType::float32, DType::bfloat16}) {
            SCOPED_TRACE(std::string(transposed ? "deconvolution" : "convolution") + " in " + str(compute));
            Sequential net;
            if (transposed) {
                net.append(std::make_shared<Deconv2D>(16, 32, 3, ConvOptions{.pad = {1}}));
                net.append(std::make_shared<Deconv2D>(32, 16, 3, ConvOptions{.pad = {1}}));
            } else {
                net.append(std::make_shared<Conv2D>(16, 32, 3, ConvOptions{.pad = {1}}));
                net.append(std::make_shared<Conv2D>(32, 16, 3, ConvOptions{.pad = {1}}));
            }
            net.calcMode(compute);
            // Both layers' weights (bfloat16: their rounded copy).
            const int64_t weights = 2 * 16 * 32 * 9;
            expectPackedWeightsFollowTheLibrary(net, randomTensor({2, 16, 8, 8}, 21),
                                                weights * (compute == DType::bfloat16 ? 2 : 4),
                                                "conv" + std::to_string(transposed) + str(compute));
        }
    }
}

} // namespace
} // namespace tessera
