// MatMul of two data inputs: a reference product per batch with NumPy's broadcasting,
// gradients to both inputs by central differences, shapes and bad input.
#include "modules/MatMul.h"
#include "GradCheck.h"

namespace tessera {
namespace {
using namespace testing;

// y [B, M, N] = alpha * a [Ba, M, K] b [Bb, K, N] (b^T [Bb, N, K] with transB), batch n of y
// reading batch n % Ba of a and n % Bb of b (one of them 1 or equal: broadcast over one dim).
std::vector<float> reference(const Tensor& at, const Tensor& bt, int64_t B, int64_t M, int64_t K, int64_t N,
                             bool transB, float alpha) {
    const std::vector<float> a = at.toVector<float>(), b = bt.toVector<float>();
    const int64_t Ba = static_cast<int64_t>(a.size()) / (M * K), Bb = static_cast<int64_t>(b.size()) / (K * N);
    std::vector<float> y(static_cast<size_t>(B * M * N));
    for (int64_t n = 0; n < B; ++n)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const float bv = transB ? b[((n % Bb) * N + j) * K + k] : b[((n % Bb) * K + k) * N + j];
                    s += static_cast<double>(a[((n % Ba) * M + i) * K + k]) * bv;
                }
                y[(n * M + i) * N + j] = static_cast<float>(alpha * s);
            }
    return y;
}

TEST(MatMul, ReferenceGradientShape) {
    MatMul mm;
    const Tensor a = randomTensor({3, 4, 5}, 1), b = randomTensor({3, 5, 2}, 2);
    EXPECT_TRUE(allClose(mm(Tensors{a, b})[0], reference(a, b, 3, 4, 5, 2, false, 1.0f), 1e-5f));
    EXPECT_TRUE(checkGradients(mm, {a, b}));
    EXPECT_TRUE(checkShapes(mm, {a, b}));
}

TEST(MatMul, AttentionScoresWithTransposeAndScale) {
    // q [N, heads, T, d] k^T / sqrt(d): [2, 3, 4, 8] by [2, 3, 6, 8] -> [2, 3, 4, 6]
    MatMul mm({.transB = true, .alpha = 0.35355339f});
    const Tensor q = randomTensor({2, 3, 4, 8}, 3), k = randomTensor({2, 3, 6, 8}, 4);
    const Tensor y = mm(Tensors{q, k})[0];
    EXPECT_EQ(y.shape(), (Shape{2, 3, 4, 6}));
    EXPECT_TRUE(allClose(y, reference(q, k, 6, 4, 8, 6, true, 0.35355339f), 1e-5f));
    EXPECT_TRUE(checkGradients(mm, {q, k}));
}

TEST(MatMul, BatchDimsBroadcast) {
    // [2, 3, 4, 5] by a shared [5, 6]: b's one matrix serves all six batches, and its
    // gradient sums their contributions.
    MatMul mm;
    const Tensor a = randomTensor({2, 3, 4, 5}, 5), b = randomTensor({5, 6}, 6);
    EXPECT_TRUE(allClose(mm(Tensors{a, b})[0], reference(a, b, 6, 4, 5, 6, false, 1.0f), 1e-5f));
    EXPECT_TRUE(checkGradients(mm, {a, b}));
    EXPECT_TRUE(checkShapes(mm, {a, b}));
    // [3, 1, 4, 5] by [2, 5, 6] -> [3, 2, 4, 6]: each side broadcast along a different dim.
    const Tensor c = randomTensor({3, 1, 4, 5}, 7), d = randomTensor({2, 5, 6}, 8);
    EXPECT_EQ(mm.dataShapeFrom(Shapes{c.shape(), d.shape()})[0], (Shape{3, 2, 4, 6}));
    const std::vector<float> y = mm(Tensors{c, d})[0].toVector<float>();
    const std::vector<float> cv = c.toVector<float>(), dv = d.toVector<float>();
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j) { // batch (i, j) reads c[i] and d[j]
            const Tensor ci =
                Tensor::fromVector({4, 5}, std::vector<float>(cv.begin() + i * 20, cv.begin() + i * 20 + 20));
            const Tensor dj =
                Tensor::fromVector({5, 6}, std::vector<float>(dv.begin() + j * 30, dv.begin() + j * 30 + 30));
            const std::vector<float> want = reference(ci, dj, 1, 4, 5, 6, false, 1.0f);
            for (size_t e = 0; e < want.size(); ++e) {
                EXPECT_NEAR(y[static_cast<size_t>((i * 2 + j) * 24) + e], want[e], 1e-5f);
            }
        }
    EXPECT_TRUE(checkGradients(mm, {c, d}));
}

TEST(MatMul, BadInput) {
    MatMul mm({.name = "scores"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mm(Tensors{randomTensor({2, 4, 5}, 1), randomTensor({2, 6, 3}, 2)});
        },
        {"MatMul 'scores'", "inner dims differ", "(5 and 6)"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mm(Tensors{randomTensor({2, 4, 5}, 1), randomTensor({3, 5, 3}, 2)});
        },
        {"batch dims", "do not broadcast"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mm(Tensors{randomTensor({5}, 1), randomTensor({5, 3}, 2)});
        },
        {"rank 2 or more", "[5]"}));
    EXPECT_TRUE(throwsShapeError([&] { mm(randomTensor({2, 2}, 1)); }, {"expects 2 input tensors, got 1"}));
}

} // namespace
} // namespace tessera
