// ScaledDotProductAttention against softmax(q k^T s + mask) v computed in double, with a
// causal mask and an additive key-padding mask; gradients, shapes, bad input.
#include <cmath>
#include <limits>

#include "GradCheck.h"
#include "modules/Attention.h"

namespace tessera {
namespace {
using namespace testing;

// heads [H, T, d] each; mask [H or 1, Tq, Tk] additive (empty: none).
std::vector<float> reference(const Tensor& qt, const Tensor& kt, const Tensor& vt, const std::vector<float>& mask,
                             int64_t maskHeads, bool causal, float scale) {
    const std::vector<float> q = qt.toVector<float>(), k = kt.toVector<float>(), v = vt.toVector<float>();
    const Shape& qs = qt.shape();
    const int64_t d = qs[qs.rank() - 1], Tq = qs[qs.rank() - 2], Tk = kt.shape()[qs.rank() - 2];
    const int64_t dv = vt.shape()[qs.rank() - 1], H = qt.numel() / (Tq * d);
    std::vector<float> y(static_cast<size_t>(H * Tq * dv));
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
            std::vector<double> s(static_cast<size_t>(Tk));
            double top = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < Tk; ++j) {
                double dot = 0;
                for (int64_t c = 0; c < d; ++c) dot += double(q[(h * Tq + i) * d + c]) * k[(h * Tk + j) * d + c];
                s[j] = dot * scale + (mask.empty() ? 0.0 : mask[((h % maskHeads) * Tq + i) * Tk + j]);
                if (causal && j > i) s[j] = -std::numeric_limits<double>::infinity();
                top = std::max(top, s[j]);
            }
            double sum = 0;
            for (double& e : s) sum += (e = std::exp(e - top));
            for (int64_t c = 0; c < dv; ++c) {
                double o = 0;
                for (int64_t j = 0; j < Tk; ++j) o += s[j] / sum * v[(h * Tk + j) * dv + c];
                y[(h * Tq + i) * dv + c] = static_cast<float>(o);
            }
        }
    return y;
}

TEST(ScaledDotProductAttention, ReferenceGradientShape) {
    ScaledDotProductAttention att;
    const Tensor q = randomTensor({2, 3, 5, 8}, 1), k = randomTensor({2, 3, 6, 8}, 2),
                 v = randomTensor({2, 3, 6, 4}, 3);
    const Tensor y = att(Tensors{q, k, v})[0];
    EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 4}));
    EXPECT_TRUE(allClose(y, reference(q, k, v, {}, 1, false, 1.0f / std::sqrt(8.0f)), 1e-5f));
    EXPECT_TRUE(checkGradients(att, {q, k, v}));
    EXPECT_TRUE(checkShapes(att, {q, k, v}));
}

TEST(ScaledDotProductAttention, CausalAndScale) {
    ScaledDotProductAttention att({.causal = true, .scale = 0.5f});
    const Tensor q = randomTensor({4, 6, 8}, 4), k = randomTensor({4, 6, 8}, 5), v = randomTensor({4, 6, 3}, 6);
    EXPECT_TRUE(allClose(att(Tensors{q, k, v})[0], reference(q, k, v, {}, 1, true, 0.5f), 1e-5f));
    EXPECT_TRUE(checkGradients(att, {q, k, v}));
    // The first position sees only itself: its output is v's first row.
    const std::vector<float> y = att(Tensors{q, k, v})[0].toVector<float>(), vs = v.toVector<float>();
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(y[c], vs[c], 1e-6f);
}

TEST(ScaledDotProductAttention, AdditiveMaskBroadcastOverHeads) {
    // A key-padding mask [N, 1, 1, Tk] over [N, heads, T, d]: the last two keys of sample 1 dropped.
    ScaledDotProductAttention att;
    const Tensor q = randomTensor({2, 2, 3, 4}, 7), k = randomTensor({2, 2, 5, 4}, 8),
                 v = randomTensor({2, 2, 5, 4}, 9);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> pad = {0, 0, 0, 0, 0, 0, 0, 0, -inf, -inf};
    const Tensor mask = Tensor::fromVector({2, 1, 1, 5}, pad);
    // the reference takes a mask per head [4 heads, 3, 5]
    std::vector<float> full;
    for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 3; ++i) full.insert(full.end(), pad.begin() + n * 5, pad.begin() + n * 5 + 5);
    EXPECT_TRUE(allClose(att(Tensors{q, k, v, mask})[0], reference(q, k, v, full, 4, false, 0.5f), 1e-5f));
    EXPECT_TRUE(checkGradients(att, {q, k, v, Tensor::fromVector({2, 1, 1, 5}, std::vector<float>(10, 0.25f))}));
}

TEST(ScaledDotProductAttention, BadInput) {
    ScaledDotProductAttention att({.name = "att"});
    const Tensor q = randomTensor({2, 5, 8}, 1);
    EXPECT_TRUE(throwsShapeError(
        [&] {
            att(Tensors{q, randomTensor({2, 5, 7}, 2), randomTensor({2, 5, 4}, 3)});
        },
        {"ScaledDotProductAttention 'att'", "one d"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            att(Tensors{q, randomTensor({3, 5, 8}, 2), randomTensor({3, 5, 4}, 3)});
        },
        {"same leading dims"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            att(Tensors{q, randomTensor({2, 6, 8}, 2), randomTensor({2, 6, 4}, 3), randomTensor({5, 5}, 4)});
        },
        {"mask [..., 5 or 1, 6]", "got [5, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { att(Tensors{q, q}); }, {"expects 3 input tensors"}));
    EXPECT_TRUE(throwsModuleError([] { ScaledDotProductAttention({.scale = -1.0f}); }, {"scale"}));
}

} // namespace
} // namespace tessera
