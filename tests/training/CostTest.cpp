#include <cmath>
#include <functional>
#include <limits>

#include "GradCheck.h"
#include "modules/SoftMax.h"
#include "training/CrossEntropy.h"
#include "training/L1Hinge.h"
#include "training/Multi.h"
#include "training/PointwiseCosts.h"
#include "training/SVM.h"

namespace tessera {
namespace {
using namespace testing;
using F = std::vector<float>;
using I = std::vector<int32_t>;

// Central differences of the cost's error against its gradient, for every element of
// every prediction.
::testing::AssertionResult costGradient(Cost& cost, const Tensors& pred, const Tensors& target, float eps = 1e-3f) {
    const CostResult r = cost(pred, target);
    for (size_t p = 0; p < pred.size(); ++p) {
        float* v = pred[p].data<float>();
        const std::vector<float> g = r.grad[p].toVector<float>();
        for (int64_t i = 0; i < pred[p].numel(); ++i) {
            const float saved = v[i];
            v[i] = saved + eps;
            const double plus = cost(pred, target).error;
            v[i] = saved - eps;
            const double minus = cost(pred, target).error;
            v[i] = saved;
            const double numeric = (plus - minus) / (2 * eps);
            if (std::fabs(numeric - g[static_cast<size_t>(i)]) > 2e-3 + 2e-2 * std::fabs(numeric)) {
                return ::testing::AssertionFailure() << cost.classname() << " pred " << p << "[" << i << "]: analytic "
                                                     << g[static_cast<size_t>(i)] << ", numeric " << numeric;
            }
        }
    }
    return ::testing::AssertionSuccess();
}

// The textbook mean of -sum_k q_k log softmax(s)_k over samples and positions of dense
// scores [n, c, len] in double, and its gradient (p - q) / (n len); q(i, j, k) the target.
std::pair<double, F> textbookCrossEntropy(const F& s, int64_t n, int64_t c, int64_t len,
                                          const std::function<double(int64_t, int64_t, int64_t)>& q) {
    double want = 0;
    F grad(s.size());
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < len; ++j) {
            double z = 0;
            for (int64_t k = 0; k < c; ++k) z += std::exp(static_cast<double>(s[(i * c + k) * len + j]));
            for (int64_t k = 0; k < c; ++k) {
                const auto at = static_cast<size_t>((i * c + k) * len + j);
                const double p = std::exp(static_cast<double>(s[at])) / z;
                want -= q(i, j, k) * std::log(p);
                grad[at] = static_cast<float>((p - q(i, j, k)) / (n * len));
            }
        }
    }
    return {want / static_cast<double>(n * len), grad};
}

TEST(CrossEntropy, Reference) {
    CrossEntropy ce;
    Tensor scores = Tensor::fromVector({2, 3}, F{1, 2, 3, 0, 0, 0});
    Tensor labels = Tensor::fromVector({2}, I{2, 1});
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    const CostResult r = ce(scores, labels);
    EXPECT_NEAR(r.error, ((lse - 3) + std::log(3.0)) / 2, 1e-6);
    F g;
    for (double s : {1.0, 2.0, 3.0}) g.push_back(static_cast<float>(std::exp(s - lse) / 2));
    g[2] -= 0.5f;
    g.insert(g.end(), {1.0f / 6, 1.0f / 6 - 0.5f, 1.0f / 6});
    EXPECT_TRUE(allClose(r.grad[0], g, 1e-6f));
    // The second row is a three-way tie: argmax takes the first class, so one of two hits.
    ce.resetAccumulator();
    EXPECT_DOUBLE_EQ(ce.validate(scores, labels), 0.5);
    EXPECT_DOUBLE_EQ(ce.lastAccuracy(), 0.5);
}

// A model that ends in LogSoftMax (PyTorch's log_softmax + nll_loss, as ONNX files of
// classifiers often do) trains with CrossEntropy: log-softmax is idempotent, so the error is
// NLL's, and through LogSoftMax's backward the gradient to the logits is softmax - onehot,
// as CrossEntropy's on the logits themselves.
TEST(CrossEntropy, AfterLogSoftMaxIsNegativeLogLikelihood) {
    const Tensor logits = randomTensor({4, 5}, 3, -4.0f, 4.0f);
    const Tensor labels = Tensor::fromVector({4}, I{0, 3, 4, 1});
    LogSoftMax lsm;
    const Tensor logp = lsm(logits);
    const std::vector<float> lp = logp.toVector<float>();
    const double nll = -(lp[0] + lp[5 + 3] + lp[10 + 4] + lp[15 + 1]) / 4;
    CrossEntropy ce;
    const CostResult after = ce(logp, labels);
    EXPECT_NEAR(after.error, nll, 1e-5);
    const CostResult direct = CrossEntropy()(logits, labels);
    EXPECT_NEAR(direct.error, nll, 1e-5);
    EXPECT_TRUE(allClose(lsm.backward(after.grad[0]), direct.grad[0].toVector<float>(), 1e-6f));
}

TEST(CrossEntropy, ClassWeightsAndAccumulation) {
    CrossEntropy weighted({.weights = {1.0f, 3.0f}});
    Tensor scores = Tensor::fromVector({2, 2}, F{0, 0, 0, 0});
    const CostResult r = weighted(scores, Tensor::fromVector({2}, I{1, 0}));
    EXPECT_NEAR(r.error, (3 + 1) * std::log(2.0) / 2, 1e-6);
    CrossEntropy ce;
    ce(Tensor::fromVector({1, 2}, F{0, 0}), Tensor::fromVector({1}, I{0}));                   // ln 2, 1 sample
    ce(Tensor::fromVector({3, 2}, F{0, 0, 0, 0, 0, 0}), Tensor::fromVector({3}, I{0, 1, 0})); // ln 2, 3 samples
    EXPECT_NEAR(ce.getMeanError(), std::log(2.0), 1e-6);
}

TEST(CrossEntropy, Gradient) {
    CrossEntropy ce({.weights = {0.5f, 1.0f, 2.0f, 1.5f}});
    EXPECT_TRUE(costGradient(ce, {randomTensor({3, 4}, 1, -2, 2)}, {Tensor::fromVector({3}, I{3, 0, 2})}));
    // Dense labels: scores [N, C, L], labels [N, L].
    CrossEntropy dense;
    EXPECT_TRUE(costGradient(dense, {randomTensor({2, 3, 2}, 2)}, {Tensor::fromVector({2, 2}, I{0, 2, 1, 1})}));
}

// Label smoothing against PyTorch's nn.CrossEntropyLoss(label_smoothing=0.1) on the
// Reference case (the values printed by torch 1.13 in float64), and against the textbook
// sum -q_k log p_k in double on random dense scores.
TEST(CrossEntropy, LabelSmoothing) {
    CrossEntropy ce({.labelSmoothing = 0.1f});
    const CostResult r = ce(Tensor::fromVector({2, 3}, F{1, 2, 3, 0, 0, 0}), Tensor::fromVector({2}, I{2, 1}));
    EXPECT_NEAR(r.error, 0.8031091265562451, 1e-6);
    EXPECT_TRUE(allClose(r.grad[0], {0.02834862f, 0.10569757f, -0.13404619f, 0.15f, -0.3f, 0.15f}, 1e-6f));

    const int64_t n = 3, c = 5, len = 2;
    const Tensor scores = randomTensor({n, c, len}, 7, -3, 3);
    const Tensor labels = Tensor::fromVector({n, len}, I{4, 0, 2, 2, 1, 3});
    const float e = 0.2f;
    CrossEntropy smooth({.labelSmoothing = e});
    const CostResult rs = smooth(scores, labels);
    const I y = labels.toVector<int32_t>();
    const auto [want, grad] =
        textbookCrossEntropy(scores.toVector<float>(), n, c, len, [&](int64_t i, int64_t j, int64_t k) {
            return (k == y[i * len + j] ? 1.0 - e : 0.0) + e / c;
        });
    EXPECT_NEAR(rs.error, want, 1e-6);
    EXPECT_TRUE(allClose(rs.grad[0], grad, 1e-6f));
    CrossEntropy weighted({.weights = {0.5f, 1.0f, 2.0f, 1.5f}, .labelSmoothing = 0.3f});
    EXPECT_TRUE(costGradient(weighted, {randomTensor({3, 4}, 1, -2, 2)}, {Tensor::fromVector({3}, I{3, 0, 2})}));
    // Accuracy is the argmax's, smoothing or not.
    EXPECT_DOUBLE_EQ(smooth.validate(scores, labels), CrossEntropy().validate(scores, labels));
    // A score of -inf (a masked class) leaves the plain cross-entropy finite.
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_NEAR(CrossEntropy()(Tensor::fromVector({1, 3}, F{0, 0, -inf}), Tensor::fromVector({1}, I{0})).error,
                std::log(2.0), 1e-6);
    for (float bad : {-0.1f, 1.0f, std::nanf("")}) {
        EXPECT_THROW(CrossEntropy({.labelSmoothing = bad}), ModuleError) << bad;
    }
}

// Probabilities as targets (mixup, CutMix): against PyTorch's cross_entropy with
// probability targets (torch 1.13, float64), against integer labels as one-hot rows, and
// against the textbook sum in double on dense scores with smoothing.
TEST(CrossEntropy, ProbabilityTargets) {
    const Tensor scores = Tensor::fromVector({2, 3}, F{1, 2, 3, 0.5f, -1, 2});
    const Tensor probs = Tensor::fromVector({2, 3}, F{0.7f, 0, 0.3f, 0.2f, 0.5f, 0.3f});
    CrossEntropy ce;
    const CostResult r = ce(scores, probs);
    EXPECT_NEAR(r.error, 1.9244586305507687, 1e-6);
    EXPECT_TRUE(
        allClose(r.grad[0], {-0.30498471f, 0.12236424f, 0.18262048f, -0.01235480f, -0.23044371f, 0.24279852f}, 1e-6f));
    CrossEntropy smooth({.labelSmoothing = 0.1f});
    const CostResult rs = smooth(scores, probs);
    EXPECT_NEAR(rs.error, 1.889458630550769, 1e-6);
    EXPECT_TRUE(
        allClose(rs.grad[0], {-0.28665138f, 0.10569757f, 0.18095381f, -0.01902147f, -0.22211038f, 0.24113185f}, 1e-6f));
    // Hits: the largest score against the largest probability (class 2 against 0, and 2 against 1).
    EXPECT_DOUBLE_EQ(ce.validate(scores, probs), 1.0);

    // One-hot rows give what their labels give, smoothed or not, dense or not.
    const int64_t n = 3, c = 5, len = 2;
    const Tensor dense = randomTensor({n, c, len}, 7, -3, 3);
    const I y{4, 0, 2, 2, 1, 3};
    F onehot(static_cast<size_t>(n * c * len), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < len; ++j) onehot[static_cast<size_t>((i * c + y[i * len + j]) * len + j)] = 1.0f;
    }
    for (float e : {0.0f, 0.2f}) {
        CrossEntropy a({.labelSmoothing = e}), b({.labelSmoothing = e});
        const CostResult byLabel = a(dense, Tensor::fromVector({n, len}, y));
        const CostResult byProb = b(dense, Tensor::fromVector({n, c, len}, onehot));
        EXPECT_NEAR(byProb.error, byLabel.error, 1e-6) << e;
        EXPECT_TRUE(allClose(byProb.grad[0], byLabel.grad[0].toVector<float>(), 1e-6f)) << e;
        EXPECT_DOUBLE_EQ(b.validate(dense, Tensor::fromVector({n, c, len}, onehot)),
                         a.validate(dense, Tensor::fromVector({n, len}, y)));
    }

    // Random probabilities, smoothed: the sum -q log p in double.
    Tensor t = randomTensor({n, c, len}, 9, 0, 1);
    F tv = t.toVector<float>();
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < len; ++j) {
            float sum = 0;
            for (int64_t k = 0; k < c; ++k) sum += tv[static_cast<size_t>((i * c + k) * len + j)];
            for (int64_t k = 0; k < c; ++k) tv[static_cast<size_t>((i * c + k) * len + j)] /= sum;
        }
    }
    t = Tensor::fromVector({n, c, len}, tv);
    const float e = 0.15f;
    CrossEntropy soft({.labelSmoothing = e});
    const CostResult rt = soft(dense, t);
    const auto [want, grad] =
        textbookCrossEntropy(dense.toVector<float>(), n, c, len, [&](int64_t i, int64_t j, int64_t k) {
            return (1.0 - e) * tv[static_cast<size_t>((i * c + k) * len + j)] + e / c;
        });
    EXPECT_NEAR(rt.error, want, 1e-6);
    EXPECT_TRUE(allClose(rt.grad[0], grad, 1e-6f));
    CrossEntropy plain;
    EXPECT_TRUE(
        costGradient(plain, {randomTensor({3, 4}, 3, -2, 2)},
                     {Tensor::fromVector({3, 4}, F{0.25f, 0.25f, 0.5f, 0, 0, 1, 0, 0, 0.1f, 0.2f, 0.3f, 0.4f})}));

    // Bad input: another shape, and class weights (they need labels).
    EXPECT_TRUE(throwsShapeError(
        [&] {
            ce(scores, Tensor::zeros({2, 4}));
        },
        {"scores [2, 3] need int32 labels or float32 probabilities [2, 3]", "got float32 [2, 4]"}));
    CrossEntropy weighted({.weights = {1, 2, 3}});
    EXPECT_TRUE(throwsShapeError([&] { weighted(scores, probs); }, {"class weights need int32 labels"}));
}

// classesLast: scores [N, T, C] against labels [N, T] give what the classes-on-dim-1 form
// gives for the same scores laid out [N, C, T] (error, gradient, accuracy), with labels
// and with probabilities, and shape errors name the shapes the option expects.
TEST(CrossEntropy, ClassesLastIsClassesOnDimOneTransposed) {
    const int64_t N = 2, T = 3, C = 5;
    const Tensor last = randomTensor({N, T, C}, 4);
    const std::vector<float> v = last.toVector<float>();
    std::vector<float> firstV(v.size()), probsLast(v.size()), probsFirst(v.size());
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t t = 0; t < T; ++t) {
            float sum = 0;
            for (int64_t c = 0; c < C; ++c) sum += static_cast<float>(c + t + 1);
            for (int64_t c = 0; c < C; ++c) {
                firstV[(n * C + c) * T + t] = v[(n * T + t) * C + c];
                probsLast[(n * T + t) * C + c] = static_cast<float>(c + t + 1) / sum;
                probsFirst[(n * C + c) * T + t] = static_cast<float>(c + t + 1) / sum;
            }
        }
    }
    const Tensor first = Tensor::fromVector({N, C, T}, firstV);
    const Tensor labels = Tensor::fromVector({N, T}, I{0, 4, 2, 3, 3, 1});
    CrossEntropy onLast({.classesLast = true}), onFirst;
    for (const auto& [targetLast, targetFirst] :
         {std::pair{labels, labels},
          std::pair{Tensor::fromVector({N, T, C}, probsLast), Tensor::fromVector({N, C, T}, probsFirst)}}) {
        const CostResult a = onLast(last, targetLast), b = onFirst(first, targetFirst);
        EXPECT_NEAR(a.error, b.error, 1e-6);
        ASSERT_EQ(a.grad[0].shape(), (Shape{N, T, C}));
        const std::vector<float> ga = a.grad[0].toVector<float>(), gb = b.grad[0].toVector<float>();
        for (int64_t n = 0; n < N; ++n)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(ga[(n * T + t) * C + c], gb[(n * C + c) * T + t], 1e-7);
        EXPECT_NEAR(onLast.validate({last}, {targetLast}), onFirst.validate({first}, {targetFirst}), 1e-12);
    }
    EXPECT_TRUE(throwsShapeError(
        [&] {
            onLast(last, Tensor::fromVector({N, C}, std::vector<int32_t>(N * C, 0)));
        },
        {"need labels [2, 3]", "got [2, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { onLast(Tensor::zeros({4}), Tensor::zeros({4})); }, {"[N, ..., C]"}));
    CrossEntropy three({.maxlabels = 3, .classesLast = true});
    EXPECT_TRUE(throwsShapeError([&] { three(last, labels); }, {"expects 3 classes", "[2, 3, 5]"}));
}

TEST(CrossEntropy, BadInput) {
    CrossEntropy ce({.maxlabels = 3});
    Tensor scores = Tensor::zeros({2, 3});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            ce(scores, Tensor::fromVector({2}, I{0, 3}));
        },
        {"CrossEntropy", "label 3 at position 1", "[0, 3)"}));
    EXPECT_TRUE(throwsShapeError([&] { ce(scores, Tensor::fromVector({2}, I{-1, 0})); }, {"label -1"}));
    EXPECT_TRUE(throwsShapeError([&] { ce(scores, Tensor::fromVector({3}, I{0, 0, 0})); }, {"need labels [2]", "[3]"}));
    EXPECT_TRUE(throwsShapeError([&] { ce(scores, Tensor::zeros({2})); }, {"int32 labels", "float32"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            ce(Tensor::zeros({2, 4}), Tensor::fromVector({2}, I{0, 0}));
        },
        {"expects 3 classes"}));
    EXPECT_THROW(CrossEntropy({.maxlabels = 2, .weights = {1, 2, 3}}), ModuleError);
}

TEST(PointwiseCosts, Reference) {
    Tensor p = Tensor::fromVector({2, 2}, F{1, -2, 0.5f, 3});
    Tensor t = Tensor::fromVector({2, 2}, F{0, 1, 0.5f, 1.5f});
    // d = 1, -3, 0, 1.5 over N = 2
    MSE mse;
    EXPECT_NEAR(mse(p, t).error, (1 + 9 + 0 + 2.25) / 4, 1e-6);
    EXPECT_TRUE(allClose(mse(p, t).grad[0], {0.5f, -1.5f, 0, 0.75f}));
    Abs abs;
    EXPECT_NEAR(abs(p, t).error, (1 + 3 + 0 + 1.5) / 2, 1e-6);
    SmoothL1 sl1;
    EXPECT_NEAR(sl1(p, t).error, (0.5 + 2.5 + 0 + 1.0) / 2, 1e-6);
    BCE bce;
    Tensor logits = Tensor::fromVector({1, 2}, F{0, 2});
    Tensor prob = Tensor::fromVector({1, 2}, F{1, 0});
    EXPECT_NEAR(bce(logits, prob).error, std::log(2.0) + std::log1p(std::exp(2.0)), 1e-5);
    Hinge hinge;
    EXPECT_NEAR(hinge(Tensor::fromVector({2, 1}, F{0.5f, -2}), Tensor::fromVector({2, 1}, F{1, 1})).error,
                (0.5 + 3) / 2, 1e-6);
    KLDivergence kl;
    EXPECT_NEAR(kl(Tensor::fromVector({1, 2}, F{0, 0}), Tensor::fromVector({1, 2}, F{1, 0})).error, std::log(2.0),
                1e-6);
    EXPECT_NEAR(kl(Tensor::fromVector({1, 2}, F{5, 5}), Tensor::fromVector({1, 2}, F{0.5f, 0.5f})).error, 0.0, 1e-6);
}

// A NaN prediction makes each cost NaN, not a number that hides it (a hinge's max(0, NaN)).
TEST(PointwiseCosts, NanPredictionGivesNanCost) {
    const Tensor p = Tensor::fromVector({2, 2}, F{0.5f, std::nanf(""), -1, 2});
    const Tensor t = Tensor::fromVector({2, 2}, F{1, 1, -1, 1});
    MSE mse;
    Abs abs;
    SmoothL1 sl1;
    BCE bce;
    Hinge hinge;
    for (Cost* cost : std::initializer_list<Cost*>{&mse, &abs, &sl1, &bce, &hinge}) {
        EXPECT_TRUE(std::isnan((*cost)(p, t).error)) << cost->classname();
    }
}

TEST(PointwiseCosts, Gradient) {
    Tensor p = randomTensor({3, 4}, 3, -2, 2);
    Tensor t = randomTensor({3, 4}, 4, -2, 2);
    // Keep differences away from the kinks of Abs and SmoothL1.
    float* pp = p.data<float>();
    const float* pt = t.data<float>();
    for (int i = 0; i < 12; ++i) {
        const float d = std::fabs(pp[i] - pt[i]);
        if (d < 0.05f || std::fabs(d - 1.0f) < 0.05f) pp[i] += 0.2f;
    }
    MSE mse;
    Abs abs;
    SmoothL1 sl1;
    EXPECT_TRUE(costGradient(mse, {p}, {t}));
    EXPECT_TRUE(costGradient(abs, {p}, {t}));
    EXPECT_TRUE(costGradient(sl1, {p}, {t}));
    BCE bce;
    EXPECT_TRUE(costGradient(bce, {p}, {randomTensor({3, 4}, 5, 0, 1)}));
    Hinge hinge;
    Tensor signs = Tensor::fromVector({2, 3}, F{1, -1, 1, -1, 1, -1});
    EXPECT_TRUE(costGradient(hinge, {Tensor::fromVector({2, 3}, F{0.3f, 0.2f, 2, -0.5f, -1.5f, 0.4f})}, {signs}));
    KLDivergence kl;
    Tensor q = Tensor::fromVector({2, 3}, F{0.2f, 0.3f, 0.5f, 0.6f, 0.4f, 0.0f});
    EXPECT_TRUE(costGradient(kl, {randomTensor({2, 3}, 6)}, {q}));
}

TEST(PointwiseCosts, BadInput) {
    MSE mse;
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mse(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
        },
        {"MSE", "prediction [2, 3] and target [3, 2] differ"}));
    EXPECT_TRUE(
        throwsShapeError([&] { mse(Tensor::zeros({2}), Tensor::zeros({2}, DType::int32)); }, {"float32 targets"}));
    EXPECT_TRUE(throwsShapeError([&] { mse(Tensors{Tensor::zeros({2})}, Tensors{}); }, {"1 prediction"}));
}

// A network whose last layer writes 16-bit values (a convolution in calcMode(bfloat16), or
// any carried layer on CUDA under setCuda16BitActivations) feeds its costs as it is: they
// read the predictions in float32, exactly as the same values given in float32, and return
// a float32 gradient. Integer predictions are still refused by name.
TEST(PointwiseCosts, SixteenBitPredictionsAreReadInFloat32) {
    const Tensor target = Tensor::randn({4, 5});
    const Tensor labels = Tensor::fromVector({4}, I{0, 4, 2, 1});
    for (DType t : {DType::bfloat16, DType::float16}) {
        SCOPED_TRACE(str(t));
        const Tensor low = Tensor::randn({4, 5}).convertedTo(t);
        const Tensor same = low.convertedTo(DType::float32);
        MSE a, b;
        const CostResult ra = a(low, target), rb = b(same, target);
        EXPECT_EQ(ra.error, rb.error);
        ASSERT_EQ(ra.grad.size(), 1u);
        EXPECT_EQ(ra.grad[0].dtype(), DType::float32);
        EXPECT_EQ(ra.grad[0].toVector<float>(), rb.grad[0].toVector<float>());
        CrossEntropy ce1, ce2;
        EXPECT_EQ(ce1(low, labels).error, ce2(same, labels).error);
        EXPECT_EQ(ce1.validate(low, labels), ce2.validate(same, labels));
    }
    MSE mse;
    EXPECT_TRUE(throwsShapeError([&] { mse(Tensor::zeros({2}, DType::int32), Tensor::zeros({2})); },
                                 {"MSE", "predictions must be float32", "int32"}));
}

TEST(SVM, ReferenceGradientBadInput) {
    SVM l1;
    // margins: row 0 (label 0): 1 + 2 - 1 = 2 and 1 + 0 - 1 = 0 -> 2; row 1 (label 2): 1 + 1 - 3 < 0, 1 + 3.5 - 3 = 1.5
    Tensor s = Tensor::fromVector({2, 3}, F{1, 2, 0, 1, 3.5f, 3});
    Tensor y = Tensor::fromVector({2}, I{0, 2});
    EXPECT_NEAR(l1(s, y).error, (2 + 1.5) / 2, 1e-6);
    SVM l2(true);
    EXPECT_NEAR(l2(s, y).error, (4 + 2.25) / 2, 1e-6);
    EXPECT_NEAR(l1.validate(s, y), 1.0, 1e-9); // both rows misclassified
    EXPECT_TRUE(costGradient(l1, {Tensor::fromVector({2, 3}, F{1, 2.3f, 0.2f, 1, 3.5f, 3.1f})}, {y}));
    EXPECT_TRUE(costGradient(l2, {Tensor::fromVector({2, 3}, F{1, 2.3f, 0.2f, 1, 3.5f, 3.1f})}, {y}));
    EXPECT_TRUE(throwsShapeError([&] { l1(s, Tensor::fromVector({2}, I{0, 5})); }, {"SVM", "label 5"}));
    EXPECT_TRUE(throwsShapeError([&] { l1(Tensor::zeros({2, 3, 1}), y); }, {"SVM", "[N, C]"}));
}

TEST(L1Hinge, ReferenceGradientBadInput) {
    L1Hinge cost;
    Tensor a = Tensor::fromVector({2, 2}, F{0, 0, 1, 1});
    Tensor b = Tensor::fromVector({2, 2}, F{0.25f, 0, 1.2f, 1.1f});
    // row 0: similar, d = 0.25; row 1: dissimilar, d = 0.3 -> 1 - 0.3
    EXPECT_NEAR(cost({a, b}, {Tensor::fromVector({2}, I{1, 0})}).error, (0.25 + 0.7) / 2, 1e-6);
    EXPECT_TRUE(costGradient(cost, {a, b}, {Tensor::fromVector({2}, I{1, 0})}));
    EXPECT_TRUE(throwsShapeError([&] { cost({a, b}, {Tensor::fromVector({2}, I{1, 2})}); }, {"L1Hinge", "label 2"}));
    EXPECT_TRUE(throwsShapeError([&] { cost({a}, {Tensor::fromVector({2}, I{1, 0})}); }, {"two embeddings"}));
}

TEST(Multi, SumsErrorsAndListsGradients) {
    auto ce = std::make_shared<CrossEntropy>();
    auto mse = std::make_shared<MSE>();
    Multi multi({ce, mse});
    Tensor scores = Tensor::fromVector({1, 2}, F{0, 0});
    Tensor labels = Tensor::fromVector({1}, I{1});
    Tensor p = Tensor::fromVector({1, 1}, F{2}), t = Tensor::fromVector({1, 1}, F{0});
    const CostResult r = multi({scores, p}, {labels, t});
    EXPECT_NEAR(r.error, std::log(2.0) + 2.0, 1e-6);
    ASSERT_EQ(r.grad.size(), 2u);
    EXPECT_TRUE(allClose(r.grad[1], {2.0f}));
    EXPECT_TRUE(costGradient(multi, {randomTensor({2, 3}, 7), randomTensor({2, 2}, 8)},
                             {Tensor::fromVector({2}, I{2, 0}), randomTensor({2, 2}, 9)}));
    EXPECT_TRUE(throwsShapeError([&] { multi({scores}, {labels}); }, {"Multi", "2 costs"}));
}

} // namespace
} // namespace tessera
