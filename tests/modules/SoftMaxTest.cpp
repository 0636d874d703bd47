#include <cmath>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "modules/SoftMax.h"

namespace tessera {
namespace {
using namespace testing;

// The softmax (or its log) of x along `axis` (negative from the end), in double by a loop
// over each line.
std::vector<float> softmaxAlong(const Tensor& x, int axis, bool log) {
    const std::vector<float> xs = x.toVector<float>();
    const auto rank = static_cast<int>(x.shape().rank());
    const int a = axis < 0 ? axis + rank : axis;
    int64_t stride = 1;
    for (int d = a + 1; d < rank; ++d) stride *= x.shape()[d];
    const int64_t along = x.shape()[a];
    std::vector<float> out(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
        const int64_t pos = static_cast<int64_t>(i) / stride % along, base = static_cast<int64_t>(i) - pos * stride;
        double sum = 0;
        for (int64_t k = 0; k < along; ++k) sum += std::exp(static_cast<double>(xs[base + k * stride]));
        const double v = static_cast<double>(xs[i]);
        out[i] = static_cast<float>(log ? v - std::log(sum) : std::exp(v) / sum);
    }
    return out;
}

// The gradient of the softmax (or its log) along dim 1 of [N, C, ...] for the output
// gradient dy, in double from x: softmax dx = p (dy - sum_c dy p), log-softmax
// dx = dy - p sum_c dy.
std::vector<float> softmaxGradOverDim1(const Tensor& x, const Tensor& dy, bool log) {
    const std::vector<float> xs = x.toVector<float>(), ds = dy.toVector<float>();
    const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / (N * C);
    std::vector<float> out(xs.size());
    std::vector<double> p(static_cast<size_t>(C));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t i = 0; i < S; ++i) {
            const auto at = [&](int64_t c) { return static_cast<size_t>((n * C + c) * S + i); };
            double most = xs[at(0)], sum = 0, weighed = 0, plain = 0;
            for (int64_t c = 1; c < C; ++c) most = std::max(most, static_cast<double>(xs[at(c)]));
            for (int64_t c = 0; c < C; ++c) sum += p[c] = std::exp(xs[at(c)] - most);
            for (int64_t c = 0; c < C; ++c) {
                p[c] /= sum;
                weighed += ds[at(c)] * p[c];
                plain += ds[at(c)];
            }
            for (int64_t c = 0; c < C; ++c) {
                out[at(c)] = static_cast<float>(log ? ds[at(c)] - p[c] * plain : p[c] * (ds[at(c)] - weighed));
            }
        }
    }
    return out;
}

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

// A class map [N, C, H, W] over its classes, with more positions than one block of the
// CPU's loops (512) and a tail past whole vectors, large and tiny scores (probabilities
// that underflow; log-softmax stays finite), for softmax and log-softmax alike, forward and
// backward; the backend's backward also into dy's own storage.
TEST(SoftMax, ClassMapsOfManyPositions) {
    Tensor x = randomTensor({2, 5, 23, 37}, 12, -40.0f, 40.0f);
    const Tensor dy = randomTensor(x.shape(), 13, -2.0f, 2.0f);
    for (bool log : {false, true}) {
        SCOPED_TRACE(log ? "log-softmax" : "softmax");
        const std::vector<float> want = softmaxAlong(x, 1, log);
        SoftMax sm(1);
        LogSoftMax lsm(1);
        Module& m = log ? static_cast<Module&>(lsm) : sm;
        const Tensor y = m(x);
        EXPECT_TRUE(allClose(y, want, 2e-6f));
        for (float v : y.toVector<float>()) ASSERT_TRUE(std::isfinite(v));
        const std::vector<float> grad = softmaxGradOverDim1(x, dy, log);
        EXPECT_TRUE(allClose(m.backward(dy), grad, 1e-5f));
        Tensor inPlace = dy.clone();
        Backend& be = backendOf(y);
        if (log) {
            be.logSoftmaxBackward(y, inPlace, inPlace);
        } else {
            be.softmaxBackward(y, inPlace, inPlace);
        }
        EXPECT_TRUE(allClose(inPlace, grad, 1e-5f));
    }
}

// Rows of every length about the vector widths (4, 8, 16 lanes: whole vectors, a partial
// last one, rows shorter than one), with large and tiny scores, forward and backward,
// also in place through the backend (y into x; dx into dy and into y). Rows shorter than
// a vector run oneDNN's log-softmax, within 1e-5 (its log of the sum).
TEST(SoftMax, RowsOfEveryLength) {
    for (int64_t C : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 23, 37, 64, 100, 1000}) {
        SCOPED_TRACE("C = " + std::to_string(C));
        const Tensor x = randomTensor({9, C}, 20 + static_cast<uint64_t>(C), -40.0f, 40.0f);
        const Tensor dy = randomTensor({9, C}, 40 + static_cast<uint64_t>(C), -2.0f, 2.0f);
        for (bool log : {false, true}) {
            SCOPED_TRACE(log ? "log-softmax" : "softmax");
            const std::vector<float> want = softmaxAlong(x, -1, log), grad = softmaxGradOverDim1(x, dy, log);
            SoftMax sm(-1);
            LogSoftMax lsm(-1);
            Module& m = log ? static_cast<Module&>(lsm) : sm;
            const Tensor y = m(x);
            const float tol = log ? 1e-5f : 2e-6f;
            EXPECT_TRUE(allClose(y, want, tol));
            EXPECT_TRUE(allClose(m.backward(dy), grad, 1e-5f));
            Backend& be = backendOf(x);
            const Tensor inPlace = x.clone(), dxInDy = dy.clone(), dxInY = y.clone();
            if (log) {
                be.logSoftmaxForward(inPlace, inPlace);
                be.logSoftmaxBackward(y, dxInDy, dxInDy);
                be.logSoftmaxBackward(dxInY, dy, dxInY);
            } else {
                be.softmaxForward(inPlace, inPlace);
                be.softmaxBackward(y, dxInDy, dxInDy);
                be.softmaxBackward(dxInY, dy, dxInY);
            }
            EXPECT_TRUE(allClose(inPlace, want, tol));
            EXPECT_TRUE(allClose(dxInDy, grad, 1e-5f));
            EXPECT_TRUE(allClose(dxInY, grad, 1e-5f));
        }
    }
}

// Any axis, negative from the end: each slice along it sums to 1, as a loop over it computes.
TEST(SoftMax, ReferenceOverAnyAxis) {
    const Tensor x = randomTensor({2, 3, 4, 5}, 4, -3.0f, 3.0f);
    for (int axis : {0, 2, -1, -3}) {
        SCOPED_TRACE(axis);
        const std::vector<float> want = softmaxAlong(x, axis, false);
        SoftMax sm(axis);
        EXPECT_TRUE(allClose(sm(x), want, 1e-6f));
        EXPECT_TRUE(checkGradients(sm, {x}));
        EXPECT_TRUE(checkShapes(sm, {x}));
    }
    // Attention's scores [N, heads, T, T] over their last axis; a rank-1 input over its only one.
    EXPECT_TRUE(allClose(SoftMax(-1)(Tensor::fromVector({2}, std::vector<float>{0.0f, 0.0f})), {0.5f, 0.5f}));
    EXPECT_EQ(SoftMax(-1).blueprint().toJson(), "{\"classname\": \"SoftMax\", \"scheme\": {\"axis\": -1}}");
    EXPECT_EQ(SoftMax().blueprint().toJson(), "{\"classname\": \"SoftMax\", \"scheme\": {}}");
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
    EXPECT_TRUE(
        throwsShapeError([&] { sm(randomTensor({10}, 1)); }, {"SoftMax 'probs'", "axis 1", "rank-1 input [10]"}));
    SoftMax last(-3);
    EXPECT_TRUE(throwsShapeError([&] { last(randomTensor({2, 5}, 1)); }, {"axis -3", "rank-2 input [2, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { sm(Tensor::zeros({2, 3}, DType::int32)); }, {"probs", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { sm(Tensor::empty({0, 3})); }, {"probs", "empty"}));
}

// LogSoftMax: the log of each slice's probabilities along the axis, computed in double.
TEST(LogSoftMax, ReferenceGradientShapeOverAnyAxis) {
    const Tensor x = randomTensor({2, 3, 4, 5}, 5, -3.0f, 3.0f);
    for (int axis : {1, 0, 2, -1}) {
        SCOPED_TRACE(axis);
        const std::vector<float> want = softmaxAlong(x, axis, true);
        LogSoftMax lsm(axis);
        EXPECT_TRUE(allClose(lsm(x), want, 1e-5f));
        EXPECT_TRUE(checkGradients(lsm, {x}));
        EXPECT_TRUE(checkShapes(lsm, {x}));
    }
    // dx = dy - exp(y) sum(dy): rows [0, 1, 2] with dy = one-hot(2).
    LogSoftMax lsm;
    const Tensor y = lsm(Tensor::fromVector({1, 3}, std::vector<float>{0, 1, 2}));
    const std::vector<float> ys = y.toVector<float>();
    const Tensor dx = lsm.backward(Tensor::fromVector({1, 3}, std::vector<float>{0, 0, 1}));
    EXPECT_TRUE(allClose(dx, {-std::exp(ys[0]), -std::exp(ys[1]), 1.0f - std::exp(ys[2])}, 1e-6f));
    EXPECT_TRUE(checkGradients(lsm, {randomTensor({2, 4, 3, 3}, 6, -2, 2)}));
}

// Where exp underflows, the log of the probabilities would be -inf; the log-softmax is not.
TEST(LogSoftMax, StaysFiniteWhereProbabilitiesUnderflow) {
    LogSoftMax lsm(-1);
    const Tensor y = lsm(Tensor::fromVector({2, 2}, std::vector<float>{0.0f, 1000.0f, -500.0f, 500.0f}));
    EXPECT_TRUE(allClose(y, {-1000.0f, 0.0f, -1000.0f, 0.0f}));
    const Tensor dx = lsm.backward(Tensor::fromVector({2, 2}, std::vector<float>{1.0f, 0.0f, 0.0f, 1.0f}));
    EXPECT_TRUE(allClose(dx, {1.0f, -1.0f, 0.0f, 0.0f}));
}

TEST(LogSoftMax, BlueprintAndBadInput) {
    EXPECT_EQ(LogSoftMax(-1).blueprint().toJson(), "{\"classname\": \"LogSoftMax\", \"scheme\": {\"axis\": -1}}");
    EXPECT_EQ(LogSoftMax().blueprint().toJson(), "{\"classname\": \"LogSoftMax\", \"scheme\": {}}");
    LogSoftMax lsm("logp");
    EXPECT_TRUE(
        throwsShapeError([&] { lsm(randomTensor({10}, 1)); }, {"LogSoftMax 'logp'", "axis 1", "rank-1 input [10]"}));
    EXPECT_TRUE(throwsShapeError([&] { LogSoftMax(2)(randomTensor({2, 5}, 1)); }, {"axis 2", "rank-2 input [2, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { lsm(Tensor::zeros({2, 3}, DType::int32)); }, {"logp", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { lsm(Tensor::empty({0, 3})); }, {"logp", "empty"}));
}

} // namespace
} // namespace tessera
