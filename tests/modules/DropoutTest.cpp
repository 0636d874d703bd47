#include "modules/Dropout.h"
#include "GradCheck.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Dropout, Reference) {
    Dropout drop({.p = 0.25f, .seed = 5});
    Tensor x = randomTensor({64, 64}, 1, 0.5f, 1.5f); // never zero
    const std::vector<float> xv = x.toVector<float>();
    const std::vector<float> y = drop(x).toVector<float>();
    const std::vector<float> mask = drop.mask().toVector<float>();
    int64_t zeros = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(mask[i] == 0.0f || mask[i] == 1.0f / 0.75f) << mask[i];
        ASSERT_FLOAT_EQ(y[i], xv[i] * mask[i]);
        zeros += y[i] == 0.0f;
    }
    // 4096 draws with p = 0.25: 1024 expected, standard deviation ~28.
    EXPECT_NEAR(static_cast<double>(zeros), 1024.0, 150.0);
    // The input gradient uses the same mask.
    const std::vector<float> dx = drop.backward(Tensor::full({64, 64}, 2.0f)).toVector<float>();
    for (size_t i = 0; i < dx.size(); ++i) ASSERT_FLOAT_EQ(dx[i], 2.0f * mask[i]);
    // A second forward draws a new mask.
    drop(x);
    EXPECT_NE(drop.mask().toVector<float>(), mask);
}

// Backward draws the mask again from the forward's counters: nothing is kept but them,
// and draws from the generator between forward and backward change nothing.
TEST(Dropout, BackwardDrawsTheForwardsMaskAgain) {
    Dropout drop({.p = 0.4f, .seed = 7});
    const Tensor x = randomTensor({16, 32}, 1, 0.5f, 1.5f), dy = randomTensor({16, 32}, 2);
    const std::vector<float> y = drop(x).toVector<float>(), xs = x.toVector<float>();
    drop.generator().advance(1000); // another layer's draws
    const std::vector<float> dx = drop.backward(dy).toVector<float>(), dys = dy.toVector<float>();
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(dx[i] == 0.0f, y[i] == 0.0f) << i;
    for (size_t i = 0; i < y.size(); ++i) {
        if (y[i] != 0.0f) {
            ASSERT_FLOAT_EQ(dx[i] / dys[i], y[i] / xs[i]) << i;
        }
    }
    EXPECT_EQ(drop.memoryUse({{16, 32}}, {Layout::plain}, true, Device{}).keptBytes, 0);
    drop.reset();
    EXPECT_FALSE(drop.mask().defined());
}

// In bfloat16 (which the CPU carries) dropout reads and writes bfloat16: each value is the
// float32 product with the same mask, rounded once.
TEST(Dropout, BFloat16InAndOut) {
    Dropout drop({.p = 0.3f, .seed = 11});
    drop.calcMode(DType::bfloat16);
    const Tensor x = randomTensor({8, 40}, 3).convertedTo(DType::bfloat16);
    const Tensor dy = randomTensor({8, 40}, 4).convertedTo(DType::bfloat16);
    const Tensor y = drop(x);
    ASSERT_EQ(y.dtype(), DType::bfloat16);
    const Tensor m = drop.mask();
    const Tensor dx = drop.backward(dy);
    ASSERT_EQ(dx.dtype(), DType::bfloat16);
    const std::vector<float> ms = m.toVector<float>(), xs = x.convertedTo(DType::float32).toVector<float>(),
                             dys = dy.convertedTo(DType::float32).toVector<float>();
    auto rounded = [](float v) {
        return Tensor::full({1}, v).convertedTo(DType::bfloat16).convertedTo(DType::float32).toVector<float>()[0];
    };
    const std::vector<float> ys = y.convertedTo(DType::float32).toVector<float>(),
                             dxs = dx.convertedTo(DType::float32).toVector<float>();
    size_t dropped = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
        ASSERT_EQ(ys[i], rounded(xs[i] * ms[i])) << i;
        ASSERT_EQ(dxs[i], rounded(dys[i] * ms[i])) << i;
        dropped += ms[i] == 0.0f;
    }
    EXPECT_GT(dropped, 60u);
    EXPECT_LT(dropped, 140u);
}

TEST(Dropout, EvalModeIsIdentity) {
    Dropout drop({.p = 0.5f});
    drop.evalMode();
    Tensor x = randomTensor({4, 8}, 1);
    EXPECT_TRUE(drop(x).sharesStorage(x));
    Tensor dy = randomTensor({4, 8}, 2);
    EXPECT_TRUE(drop.backward(dy).sharesStorage(dy));
}

// At p = 0 train mode is the identity as well: the input passes through, no mask is drawn and
// the generator is left where it was; the memory plan makes the output a view.
TEST(Dropout, ZeroRateInTrainModeIsIdentity) {
    Dropout drop({.p = 0.0f, .seed = 4});
    ASSERT_TRUE(drop.isTrain());
    const Tensor x = randomTensor({4, 8}, 1), dy = randomTensor({4, 8}, 2);
    EXPECT_TRUE(drop(x).sharesStorage(x));
    EXPECT_TRUE(drop.backward(dy).sharesStorage(dy));
    EXPECT_FALSE(drop.mask().defined());
    EXPECT_EQ(drop.generator().offset(), 0u);
    EXPECT_EQ(drop.memoryUse({{4, 8}}, {Layout::plain}, true, Device{}).outputViews[0], 0);
    EXPECT_NE(Dropout({.p = 0.1f}).memoryUse({{4, 8}}, {Layout::plain}, true, Device{}).outputViews[0], 0);
}

TEST(Dropout, SeedReplaysMasks) {
    Dropout a({.p = 0.5f, .seed = 9}), b({.p = 0.5f, .seed = 9});
    Tensor x = randomTensor({8, 8}, 1);
    EXPECT_EQ(a(x).toVector<float>(), b(x).toVector<float>());
}

TEST(Dropout, Gradient) {
    Dropout drop({.p = 0.3f, .seed = 1});
    GradCheckOptions opts;
    opts.beforeForward = [&] { drop.generator().manualSeed(1); }; // the same mask each forward
    EXPECT_TRUE(checkGradients(drop, {randomTensor({4, 6}, 3)}, opts));
    drop.evalMode();
    EXPECT_TRUE(checkGradients(drop, {randomTensor({4, 6}, 3)}));
}

TEST(Dropout, Shape) {
    Dropout drop;
    EXPECT_TRUE(checkShapes(drop, {randomTensor({2, 3, 4}, 1)}));
    drop.evalMode();
    EXPECT_TRUE(checkShapes(drop, {randomTensor({2, 3, 4}, 1)}));
}

TEST(Dropout, BadInput) {
    Dropout drop({.name = "drop"});
    EXPECT_TRUE(throwsShapeError([&] { drop(Tensor::zeros({2, 3}, DType::int32)); }, {"Dropout 'drop'", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { drop(Tensor::empty({0, 3})); }, {"drop", "empty"}));
    EXPECT_THROW(Dropout({.p = 1.0f}), ModuleError);
    EXPECT_THROW(Dropout({.p = -0.1f}), ModuleError);
}

} // namespace
} // namespace tessera
