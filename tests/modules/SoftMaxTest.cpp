#include <cmath>

#include "GradCheck.h"
#include "modules/SoftMax.h"

namespace tessera {
namespace {
using namespace testing;

TEST(SoftMax, Reference) {
    SoftMax sm;
    // Rows [0, 1, 2] and [5, 5, 5].
    const float e0 = 1.0f, e1 = std::exp(1.0f), e2 = std::exp(2.0f), s = e0 + e1 + e2;
    const std::vector<float> p = {e0 / s, e1 / s, e2 / s, 1.0f / 3, 1.0f / 3, 1.0f / 3};
    EXPECT_TRUE(allClose(sm(Tensor::fromVector({2, 3}, std::vector<float>{0, 1, 2, 5, 5, 5})), p));
    // dx = y * (dy - sum(dy * y)); with dy = one-hot(0) per row.
    const std::vector<float> dy = {1, 0, 0, 1, 0, 0};
    std::vector<float> dx(6);
    for (int r = 0; r < 2; ++r) {
        const float dot = p[3 * r];
        for (int c = 0; c < 3; ++c) dx[3 * r + c] = p[3 * r + c] * (dy[3 * r + c] - dot);
    }
    EXPECT_TRUE(allClose(sm.backward(Tensor::fromVector({2, 3}, dy)), dx));
}

TEST(SoftMax, ReferenceOverChannelsOf4D) {
    SoftMax sm;
    // [1, 2, 1, 2]: channel 0 holds pixels [0, 3], channel 1 holds [1, 0]; softmax pairs the
    // two channels at each pixel.
    Tensor y = sm(Tensor::fromVector({1, 2, 1, 2}, std::vector<float>{0, 3, 1, 0}));
    const float e = std::exp(1.0f), e3 = std::exp(3.0f);
    EXPECT_TRUE(allClose(y, {1 / (1 + e), e3 / (1 + e3), e / (1 + e), 1 / (1 + e3)}));
}

TEST(SoftMax, Gradient) {
    SoftMax sm;
    EXPECT_TRUE(checkGradients(sm, {randomTensor({3, 5}, 1, -2, 2)}));
    EXPECT_TRUE(checkGradients(sm, {randomTensor({2, 4, 3, 3}, 2, -2, 2)}));
}

TEST(SoftMax, Shape) {
    SoftMax sm;
    EXPECT_TRUE(checkShapes(sm, {randomTensor({4, 10}, 1)}));
    EXPECT_TRUE(checkShapes(sm, {randomTensor({2, 3, 4, 5}, 1)}));
}

TEST(SoftMax, BadInput) {
    SoftMax sm("probs");
    EXPECT_TRUE(throwsShapeError([&] { sm(randomTensor({10}, 1)); }, {"SoftMax 'probs'", "[N, C, ...]", "got [10]"}));
    EXPECT_TRUE(throwsShapeError([&] { sm(Tensor::zeros({2, 3}, DType::int32)); }, {"probs", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { sm(Tensor::empty({0, 3})); }, {"probs", "empty"}));
}

} // namespace
} // namespace tessera
