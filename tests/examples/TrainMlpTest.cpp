// The first example end to end: the MLP learns the spirals.
#include <gtest/gtest.h>

#include <cmath>

#include "examples/Spirals.h"

namespace tessera {
namespace {

TEST(TrainMlp, LossDropsAndAccuracyReachesBar) {
    examples::TrainConfig config;
    config.epochs = 60;
    float accuracy = 0.0f;
    const std::vector<float> losses = examples::trainMlpOnSpirals(config, accuracy);
    ASSERT_EQ(losses.size(), 60u);
    EXPECT_LT(losses.back(), 0.5f * losses.front()) << "first " << losses.front() << ", last " << losses.back();
    EXPECT_GE(accuracy, 0.95f);
}

TEST(TrainMlp, SoftmaxCrossEntropyReference) {
    // Logits [0, ln 3] for label 1: p = [1/4, 3/4], loss = -ln(3/4).
    Tensor logits = Tensor::fromVector({1, 2}, std::vector<float>{0.0f, std::log(3.0f)});
    const int32_t label = 1;
    examples::LossResult r = examples::softmaxCrossEntropy(logits, &label);
    EXPECT_NEAR(r.loss, -std::log(0.75f), 1e-6);
    EXPECT_EQ(r.accuracy, 1.0f);
    EXPECT_NEAR(r.grad.data<float>()[0], 0.25f, 1e-6);
    EXPECT_NEAR(r.grad.data<float>()[1], -0.25f, 1e-6);
}

} // namespace
} // namespace tessera
