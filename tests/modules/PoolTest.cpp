#include <cmath>
#include <memory>

#include "GradCheck.h"
#include "Reference.h"
#include "containers/Sequential.h"
#include "modules/Conv.h"
#include "modules/KMaxPool.h"
#include "modules/MaxUnpool2D.h"
#include "modules/Pool.h"

namespace tessera {
namespace {
using namespace testing;
using F = std::vector<float>;

struct Case {
    const char* what;
    size_t dims;
    bool max;
    std::vector<int64_t> size;
    PoolOptions options;
    Shape x;
};

std::unique_ptr<PoolND> make(const Case& c) {
    const auto& s = c.size;
    const auto& o = c.options;
    switch (c.dims) {
    case 1: return c.max ? std::unique_ptr<PoolND>(new MaxPool1D(s, o)) : std::unique_ptr<PoolND>(new AvgPool1D(s, o));
    case 2: return c.max ? std::unique_ptr<PoolND>(new MaxPool2D(s, o)) : std::unique_ptr<PoolND>(new AvgPool2D(s, o));
    default: return c.max ? std::unique_ptr<PoolND>(new MaxPool3D(s, o)) : std::unique_ptr<PoolND>(new AvgPool3D(s, o));
    }
}

const Case kCases[] = {
    {"max1d", 1, true, {3}, {.stride = {2}, .pad = {1}}, {2, 3, 9}},
    {"avg1d", 1, false, {2}, {}, {2, 3, 8}},
    {"max2d", 2, true, {2}, {}, {2, 3, 6, 8}},
    {"max2d overlap pad", 2, true, {3}, {.stride = {2}, .pad = {1}}, {2, 2, 7, 7}},
    {"avg2d with pad", 2, false, {3}, {.stride = {2}, .pad = {1}, .includePad = true}, {2, 2, 7, 6}},
    {"avg2d without pad", 2, false, {3}, {.stride = {2}, .pad = {1}, .includePad = false}, {2, 2, 7, 6}},
    {"max2d blocked", 2, true, {2}, {}, {2, 16, 4, 4}},
    {"max3d", 3, true, {2}, {}, {1, 2, 4, 4, 4}},
    {"avg3d", 3, false, {2, 1, 2}, {.stride = {1}}, {1, 2, 3, 4, 4}},
};

reference::Pool kindOf(const PoolND& m) {
    switch (m.params().kind) {
    case PoolKind::max: return reference::Pool::max;
    case PoolKind::avgWithPad: return reference::Pool::avgWithPad;
    default: return reference::Pool::avgNoPad;
    }
}

TEST(Pool, Reference) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(c.what);
        auto m = make(c);
        Tensor x = randomTensor(c.x, 3);
        const Shape ys = m->dataShapeFrom(x.shape());
        const PoolParams& p = m->params();
        EXPECT_TRUE(allClose((*m)(x), reference::pool(x, kindOf(*m), p.kernel, p.stride, p.padLo, ys), 1e-5f));
    }
}

TEST(Pool, Gradient) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(c.what);
        auto m = make(c);
        // Distinct, well-separated values keep max pooling away from ties.
        Tensor x = randomTensor(c.x, 4, -4.0f, 4.0f);
        GradCheckOptions opts;
        opts.maxElements = 32;
        opts.eps = 1e-3f;
        EXPECT_TRUE(checkGradients(*m, {x}, opts));
    }
}

TEST(Pool, Shape) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(c.what);
        auto m = make(c);
        EXPECT_TRUE(checkShapes(*m, {randomTensor(c.x, 5)}));
    }
}

TEST(Pool, ScalarOrPerDimOptions) {
    MaxPool2D scalar(3, {.stride = 2, .pad = 1});
    MaxPool2D lists(3, {.stride = {2, 2}, .pad = {1, 1}});
    EXPECT_EQ(scalar.dataShapeFrom(Shape{1, 2, 9, 7}), lists.dataShapeFrom(Shape{1, 2, 9, 7}));
    EXPECT_EQ(scalar.dataShapeFrom(Shape{1, 2, 9, 7}), (Shape{1, 2, 5, 4}));
    AvgPool2D perDim(2, {.stride = {2, 1}});
    EXPECT_EQ(perDim.dataShapeFrom(Shape{1, 2, 8, 8}), (Shape{1, 2, 4, 7}));
}

TEST(Pool, BlockedInputFromConvolutionKeepsItsLayout) {
    Conv2D conv(8, 16, 3, {.pad = {1}});
    MaxPool2D pool(2);
    Tensor h = conv(randomTensor({2, 8, 6, 6}, 6));
    Tensor y = pool(h);
    EXPECT_EQ(y.layout(), h.layout());
    EXPECT_TRUE(
        allClose(y, reference::pool(h.plain(), reference::Pool::max, {2, 2}, {2, 2}, {0, 0}, y.shape()), 1e-6f));
}

// Max pooling of a channel-blocked input (what convolutions hand on) with windows that do
// not overlap runs the CPU backend's own loop; overlapping windows go to oneDNN. Every
// window shape must agree with the loop-by-loop reference, forward and backward: tiled,
// ragged, padded and overlapping windows, channels that do not fill a block, and ties,
// where the first maximum takes the gradient (as it does for plain inputs).
TEST(Pool, MaxOfBlockedInputsMatchesTheReference) {
    struct Blocked {
        Case c;
        Layout layout;
    };
    const Blocked cases[] = {
        {{"2x2 tiled", 2, true, {2}, {}, {2, 16, 6, 8}}, Layout::blocked16},
        {{"2x2 ragged", 2, true, {2}, {}, {2, 16, 7, 7}}, Layout::blocked8},
        {{"2x2, 5 of 8 channels", 2, true, {2}, {}, {2, 5, 6, 6}}, Layout::blocked8},
        {{"2x2 pad 1", 2, true, {2}, {.pad = {1}}, {2, 20, 7, 6}}, Layout::blocked16},
        {{"1d size 3 pad 1", 1, true, {3}, {.pad = {1}}, {2, 8, 10}}, Layout::blocked8},
        {{"3x3 stride 2 pad 1 (overlapping)", 2, true, {3}, {.stride = {2}, .pad = {1}}, {2, 20, 7, 7}},
         Layout::blocked16},
        // plain inputs (oneDNN) break ties the same way
        {{"2x2 plain", 2, true, {2}, {}, {2, 3, 6, 7}}, Layout::plain},
        {{"3x3 stride 2 pad 1 plain", 2, true, {3}, {.stride = {2}, .pad = {1}}, {2, 3, 7, 7}}, Layout::plain},
        {{"3d", 3, true, {2}, {}, {1, 16, 4, 4, 4}}, Layout::blocked16},
    };
    for (const Blocked& b : cases) {
        for (bool ties : {false, true}) {
            SCOPED_TRACE(std::string(b.c.what) + (ties ? ", ties" : ""));
            auto m = make(b.c);
            Tensor x = randomTensor(b.c.x, 7, -2.0f, 2.0f);
            if (ties) { // three levels: most windows hold their maximum more than once
                std::vector<float> v = x.toVector<float>();
                for (float& e : v) e = std::round(e / 2.0f);
                x = Tensor::fromVector(x.shape(), v);
            }
            const PoolParams& p = m->params();
            Tensor y = (*m)(x.toLayout(b.layout));
            EXPECT_EQ(y.layout(), b.layout);
            EXPECT_TRUE(allClose(y, reference::pool(x, reference::Pool::max, p.kernel, p.stride, p.padLo, y.shape())));
            // The gradient arrives plain once and blocked once.
            Tensor dy = randomTensor(y.shape(), 8);
            Tensor dx = m->backward(ties ? dy.toLayout(b.layout) : dy);
            EXPECT_EQ(dx.layout(), b.layout);
            EXPECT_TRUE(allClose(dx, reference::maxPoolBackward(x, dy, p.kernel, p.stride, p.padLo)));
        }
    }
}

// The numerical gradient through the blocked path: an identity 1x1 convolution hands the
// input on unchanged but channel-blocked, so the pooling's input can hold well-separated
// values away from ties.
TEST(Pool, MaxOfBlockedInputGradientCheck) {
    const int64_t c = 16;
    auto identity = std::make_shared<Conv2D>(c, c, 1, ConvOptions{.useBias = false});
    float* w = identity->namedParams()[0].second->data.data<float>();
    for (int64_t i = 0; i < c; ++i) {
        for (int64_t j = 0; j < c; ++j) w[i * c + j] = i == j ? 1.0f : 0.0f;
    }
    Sequential net;
    net.append(identity);
    net.append(std::make_shared<MaxPool2D>(2, PoolOptions{.pad = {1}}));
    const Tensor x = randomTensor({2, c, 7, 6}, 9, -4.0f, 4.0f);
    ASSERT_NE((*identity)(x).layout(), Layout::plain);
    GradCheckOptions opts;
    opts.checkParams = false;
    opts.maxElements = 32;
    opts.eps = 1e-3f;
    EXPECT_TRUE(checkGradients(net, {x}, opts));
}

TEST(Pool, BadInput) {
    MaxPool2D pool(3, {.name = "pool1"});
    EXPECT_TRUE(throwsShapeError([&] { pool(Tensor::zeros({2, 3, 8})); }, {"MaxPool2D 'pool1'", "[2, 3, 8]"}));
    EXPECT_TRUE(throwsShapeError([&] { pool(Tensor::zeros({2, 3, 2, 8})); }, {"smaller than the window"}));
    EXPECT_THROW(MaxPool2D(2, {.pad = {2}}), ModuleError);
    MaxPool2D evalPool(2);
    evalPool.evalMode();
    evalPool(Tensor::zeros({1, 1, 4, 4}));
    EXPECT_TRUE(throwsShapeError([&] { evalPool.backward(Tensor::zeros({1, 1, 2, 2})); }, {"eval-mode"}));
}

TEST(Pool, Blueprint) {
    const std::string json = AvgPool2D(3, {.stride = {2}, .pad = {1}, .includePad = false}).blueprint().toJson();
    for (const char* part : {"\"classname\": \"AvgPool2D\"", "\"size\": [3, 3]", "\"stride\": [2, 2]",
                             "\"pad\": [1, 1]", "\"includePad\": false"}) {
        EXPECT_NE(json.find(part), std::string::npos) << part << " in " << json;
    }
    EXPECT_NE(MaxPool3D(2).blueprint().toJson().find("MaxPool3D"), std::string::npos);
}

// ---- GlobalAvgPool --------------------------------------------------------------------

TEST(GlobalAvgPool, ReferenceGradientShape) {
    GlobalAvgPool gap;
    Tensor x = Tensor::fromVector({1, 2, 2, 2}, F{1, 2, 3, 4, -1, -2, -3, 2});
    EXPECT_TRUE(allClose(gap(x), {2.5f, -1.0f}));
    EXPECT_TRUE(allClose(gap.backward(Tensor::fromVector({1, 2, 1, 1}, F{4, 8})), {1, 1, 1, 1, 2, 2, 2, 2}));
    EXPECT_TRUE(checkGradients(gap, {randomTensor({2, 3, 4, 5}, 7)}));
    EXPECT_TRUE(checkShapes(gap, {randomTensor({2, 3, 4}, 8)}));
    EXPECT_TRUE(checkShapes(gap, {randomTensor({2, 3, 2, 2, 3}, 8)}));
    EXPECT_TRUE(throwsShapeError([&] { gap(Tensor::zeros({2, 3})); }, {"GlobalAvgPool", "[2, 3]"}));
    EXPECT_EQ(gap.blueprint().toJson(), "{\"classname\": \"GlobalAvgPool\", \"scheme\": {}}");
}

// ---- MaxUnpool2D ----------------------------------------------------------------------

TEST(MaxUnpool2D, Reference) {
    auto pool = std::make_shared<MaxPool2D>(2);
    MaxUnpool2D unpool(pool);
    Tensor x = Tensor::fromVector({1, 1, 2, 4}, F{1, 5, 2, 0, 3, 4, 7, 6});
    EXPECT_TRUE(allClose((*pool)(x), {5, 7}));
    Tensor y = unpool(Tensor::fromVector({1, 1, 1, 2}, F{10, 20}));
    EXPECT_TRUE(allClose(y, {0, 10, 0, 0, 0, 0, 20, 0}));
    EXPECT_TRUE(allClose(unpool.backward(Tensor::fromVector({1, 1, 2, 4}, F{1, 2, 3, 4, 5, 6, 7, 8})), {2, 7}));
}

TEST(MaxUnpool2D, GradientShapeBadInput) {
    auto pool = std::make_shared<MaxPool2D>(2);
    MaxUnpool2D unpool(pool, "unpool1");
    EXPECT_TRUE(throwsShapeError([&] { unpool(Tensor::zeros({1, 1, 2, 2})); }, {"unpool1", "has not run forward"}));
    (*pool)(randomTensor({2, 3, 6, 4}, 9, -4.0f, 4.0f));
    EXPECT_TRUE(checkGradients(unpool, {randomTensor({2, 3, 3, 2}, 10)}));
    EXPECT_TRUE(checkShapes(unpool, {randomTensor({2, 3, 3, 2}, 11)}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            unpool(Tensor::zeros({2, 3, 2, 2}));
        },
        {"unpool1", "[2, 3, 3, 2]", "[2, 3, 2, 2]"}));
}

// ---- KMaxPool -------------------------------------------------------------------------

TEST(KMaxPool, Reference) {
    KMaxPool kmax(2, 1);
    Tensor x = Tensor::fromVector({2, 4}, F{3, 1, 4, 2, 0, 9, 9, 5});
    EXPECT_TRUE(allClose(kmax(x), {3, 4, 9, 9}));
    EXPECT_TRUE(allClose(kmax.backward(Tensor::fromVector({2, 2}, F{1, 2, 3, 4})), {1, 0, 2, 0, 0, 3, 4, 0}));
    KMaxPool mid(1, -2);
    EXPECT_TRUE(allClose(mid(Tensor::fromVector({1, 3, 2}, F{1, 6, 5, 2, 3, 4})), {5, 6}));
}

TEST(KMaxPool, GradientShapeBadInput) {
    KMaxPool kmax(3, 2, "kmax");
    EXPECT_TRUE(checkGradients(kmax, {randomTensor({2, 3, 7}, 12, -4.0f, 4.0f)}));
    EXPECT_TRUE(checkShapes(kmax, {randomTensor({2, 3, 7}, 13)}));
    EXPECT_TRUE(throwsShapeError([&] { kmax(Tensor::zeros({2, 3, 2})); }, {"kmax", "fewer than topk = 3"}));
    EXPECT_TRUE(throwsShapeError([&] { kmax(Tensor::zeros({2, 3})); }, {"kmax", "axis 2"}));
    EXPECT_NE(kmax.blueprint().toJson().find("\"topk\": 3"), std::string::npos);
}

} // namespace
} // namespace tessera
