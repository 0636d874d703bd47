// Parameter, Scale and DropPath: references, gradients (input and parameter), shapes and
// bad input.
#include <cmath>

#include "GradCheck.h"
#include "modules/DropPath.h"
#include "modules/LearnedTensors.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Parameter, RepeatsItsValueForEverySample) {
    Parameter cls({1, 4}, {.std = 0.02f, .name = "cls"});
    const std::vector<float> w = cls.getVar("weight")->data.toVector<float>();
    double sq = 0;
    for (float v : w) sq += v * v;
    EXPECT_GT(sq, 0.0); // drawn, not zeros
    const Tensor y = cls(randomTensor({3, 7, 2}, 1));
    EXPECT_EQ(y.shape(), (Shape{3, 1, 4}));
    std::vector<float> want;
    for (int n = 0; n < 3; ++n) want.insert(want.end(), w.begin(), w.end());
    EXPECT_TRUE(allClose(y, want, 0.0f));
    EXPECT_TRUE(checkGradients(cls, {randomTensor({3, 7, 2}, 1)}));
    EXPECT_TRUE(checkShapes(cls, {randomTensor({2, 5}, 2)}));
    // The weight's gradient sums the samples'; the input's is zero.
    Parameter pos({2, 2});
    EXPECT_TRUE(allClose(pos(randomTensor({3, 1}, 3)), std::vector<float>(12, 0.0f), 0.0f)); // std 0: zeros
    const Tensor dx =
        pos.backward(Tensor::fromVector({3, 2, 2}, std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
    EXPECT_TRUE(allClose(pos.getVar("weight")->grad, {3, 6, 9, 12}, 1e-6f));
    EXPECT_TRUE(allClose(dx, {0, 0, 0}, 0.0f));
    EXPECT_TRUE(throwsModuleError([] { Parameter({}); }, {"Parameter", "empty"}));
    EXPECT_TRUE(throwsModuleError([] { Parameter({2, 0}); }, {"at least 1"}));
    EXPECT_TRUE(throwsModuleError([] { Parameter({2}, {.std = -1.0f}); }, {"std"}));
}

TEST(Scale, BroadcastsOverTheInput) {
    Scale layer({3, 1, 1}, {.init = 0.5f});
    layer.getVar("weight")->data.copyFrom(Tensor::fromVector({3, 1, 1}, std::vector<float>{1.0f, -2.0f, 0.5f}));
    const Tensor x = randomTensor({2, 3, 2, 2}, 4);
    const std::vector<float> xs = x.toVector<float>();
    std::vector<float> want(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) want[i] = xs[i] * std::vector<float>{1.0f, -2.0f, 0.5f}[i / 4 % 3];
    EXPECT_TRUE(allClose(layer(x), want, 1e-6f));
    EXPECT_TRUE(checkGradients(layer, {x}));
    EXPECT_TRUE(checkShapes(layer, {x}));
    Scale tokens({6}, {.init = 1e-6f, .name = "ls"}); // layer scale on [N, T, C]
    EXPECT_TRUE(allClose(tokens.getVar("weight")->data, std::vector<float>(6, 1e-6f), 0.0f));
    EXPECT_TRUE(checkGradients(tokens, {randomTensor({2, 5, 6}, 5)}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            tokens(randomTensor({2, 5, 4}, 6));
        },
        {"Scale 'ls'", "factors [6]", "[2, 5, 4]"}));
    EXPECT_TRUE(throwsShapeError([&] { Scale({2, 6})(randomTensor({6}, 6)); }, {"do not broadcast"}));
    EXPECT_TRUE(throwsModuleError([] { Scale({}); }, {"Scale", "empty"}));
}

TEST(DropPath, DropsWholeSamplesInTrainModeOnly) {
    DropPath drop({.p = 0.5f, .seed = 3});
    const Tensor x = Tensor::full({64, 3, 2}, 1.0f);
    const std::vector<float> y = drop(x).toVector<float>();
    int dropped = 0;
    for (int n = 0; n < 64; ++n) {
        const float v = y[static_cast<size_t>(n * 6)];
        EXPECT_TRUE(v == 0.0f || v == 2.0f) << v; // kept samples scaled by 1 / (1 - p)
        for (int i = 1; i < 6; ++i) EXPECT_EQ(y[static_cast<size_t>(n * 6 + i)], v) << "sample " << n;
        dropped += v == 0.0f;
    }
    EXPECT_GT(dropped, 16);
    EXPECT_LT(dropped, 48);
    EXPECT_EQ(drop.mask().shape(), (Shape{64, 1, 1}));
    GradCheckOptions opts;
    opts.beforeForward = [&] { drop.randomStream()->manualSeed(4); }; // the same mask each forward
    EXPECT_TRUE(checkGradients(drop, {randomTensor({8, 5}, 3)}, opts));
    EXPECT_TRUE(checkShapes(drop, {randomTensor({8, 5}, 3)}));
    drop.evalMode();
    EXPECT_TRUE(allClose(drop(x), std::vector<float>(x.numel(), 1.0f), 0.0f));
    EXPECT_TRUE(throwsModuleError([] { DropPath({.p = 1.0f}); }, {"DropPath", "[0, 1)"}));
}

} // namespace
} // namespace tessera
