// CTC: against a sum over every path of a tiny case (obvious on purpose), against PyTorch's
// ctc_loss, central-difference gradients, decoding, bad targets, and a recurrent network
// that learns to read unsegmented label sequences.
#include <cmath>
#include <functional>
#include <random>

#include "GradCheck.h"
#include "SourceDir.h"
#include "containers/Sequential.h"
#include "data/Npy.h"
#include "modules/Linear.h"
#include "modules/RNN.h"
#include "modules/Reshape.h"
#include "training/CTC.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {
using namespace testing;

Tensor ints(const Shape& shape, const std::vector<int32_t>& v) { return Tensor::fromVector(shape, v); }

// -log of the summed probability of every path over the first Tn steps of sample n whose
// collapse (repeats merged, blanks dropped) is `labels`: V^Tn paths, enumerated.
double bruteForce(const Tensor& scores, int64_t n, int64_t Tn, const std::vector<int32_t>& labels, int32_t blank) {
    const int64_t N = scores.shape()[1], V = scores.shape()[2];
    const std::vector<float> s = scores.toVector<float>();
    auto prob = [&](int64_t t, int64_t v) {
        double sum = 0;
        for (int64_t k = 0; k < V; ++k) sum += std::exp(static_cast<double>(s[(t * N + n) * V + k]));
        return std::exp(static_cast<double>(s[(t * N + n) * V + v])) / sum;
    };
    double total = 0;
    std::vector<int32_t> path(static_cast<size_t>(Tn), 0);
    std::function<void(int64_t, double)> walk = [&](int64_t t, double p) {
        if (t == Tn) {
            std::vector<int32_t> collapsed;
            for (int64_t k = 0; k < Tn; ++k) {
                const int32_t v = path[static_cast<size_t>(k)];
                if (v != blank && (k == 0 || v != path[static_cast<size_t>(k - 1)])) collapsed.push_back(v);
            }
            if (collapsed == labels) total += p;
            return;
        }
        for (int64_t v = 0; v < V; ++v) {
            path[static_cast<size_t>(t)] = static_cast<int32_t>(v);
            walk(t + 1, p * prob(t, v));
        }
    };
    walk(0, 1.0);
    return -std::log(total);
}

TEST(CTC, EqualsTheSumOverEveryPath) {
    const int64_t T = 5, N = 4, V = 3;
    const Tensor scores = randomTensor({T, N, V}, 1, -2.0f, 2.0f);
    // a plain pair, a repeat (needs a blank between), an empty target, a short input
    const std::vector<std::vector<int32_t>> labels = {{1, 2}, {1, 1}, {}, {2}};
    const std::vector<int32_t> inputLengths{5, 4, 5, 2};
    for (int32_t blank : {0, 2}) {
        SCOPED_TRACE("blank " + std::to_string(blank));
        std::vector<int32_t> padded(N * 2, 0), lengths;
        std::vector<std::vector<int32_t>> used = labels;
        for (size_t n = 0; n < used.size(); ++n) {
            for (int32_t& l : used[n]) l = blank == 0 ? l : l - 1; // labels other than the blank
            for (size_t k = 0; k < used[n].size(); ++k) padded[n * 2 + k] = used[n][k];
            lengths.push_back(static_cast<int32_t>(used[n].size()));
        }
        CTC ctc({.blank = blank});
        const CostResult r = ctc({scores}, {ints({N, 2}, padded), ints({N}, lengths), ints({N}, inputLengths)});
        double want = 0;
        for (int64_t n = 0; n < N; ++n) want += bruteForce(scores, n, inputLengths[n], used[n], blank);
        EXPECT_NEAR(r.error, want / N, 1e-6 * want);
        // The gradient past a sample's input is zero.
        const std::vector<float> g = r.grad[0].toVector<float>();
        for (int64_t t = 2; t < T; ++t) {
            for (int64_t v = 0; v < V; ++v) EXPECT_EQ(g[(t * N + 3) * V + v], 0.0f);
        }
    }
}

// Central differences of the error with respect to every score.
TEST(CTC, GradientIsTheErrorsDerivative) {
    const int64_t T = 6, N = 3, V = 4;
    const Tensor scores = randomTensor({T, N, V}, 2, -1.5f, 1.5f);
    const Tensors target{ints({N, 3}, {1, 3, 3, 2, 0, 0, 3, 1, 2}), ints({N}, {3, 1, 3}), ints({N}, {6, 3, 5})};
    for (bool normalized : {false, true}) {
        SCOPED_TRACE(normalized ? "normalized" : "plain");
        CTC ctc({.normalized = normalized});
        const std::vector<float> g = ctc({scores}, target).grad[0].toVector<float>();
        std::vector<float> v = scores.toVector<float>();
        const double eps = 1e-2;
        int checked = 0;
        for (size_t i = 0; i < v.size(); ++i) {
            const float saved = v[i];
            v[i] = saved + static_cast<float>(eps);
            const double plus = ctc({Tensor::fromVector({T, N, V}, v)}, target).error;
            v[i] = saved - static_cast<float>(eps);
            const double minus = ctc({Tensor::fromVector({T, N, V}, v)}, target).error;
            v[i] = saved;
            const double numeric = (plus - minus) / (2 * eps);
            EXPECT_NEAR(g[i], numeric, 2e-4 + 1e-2 * std::fabs(numeric)) << "score " << i;
            ++checked;
        }
        EXPECT_EQ(checked, T * N * V);
    }
}

// PyTorch's F.ctc_loss on the case tests/data/ctc/make_pytorch_case.py wrote: each loss and
// the gradient of their mean.
TEST(CTC, MatchesPyTorch) {
    const std::string dir = tessera::testing::sourceDir() + "/tests/data/ctc/";
    auto npy = [&](const char* f) { return readNpy(dir + f + ".npy"); };
    const Tensor scores = npy("scores");
    const Tensors target{npy("labels"), npy("label_lengths"), npy("input_lengths")};
    const std::vector<float> losses = npy("losses").toVector<float>();
    double mean = 0;
    for (float l : losses) mean += l / static_cast<double>(losses.size());
    CTC ctc;
    const CostResult r = ctc({scores}, target);
    EXPECT_NEAR(r.error, mean, 1e-5 * mean);
    const std::vector<float> want = npy("grad").toVector<float>(), got = r.grad[0].toVector<float>();
    float scale = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        worst = std::max(worst, std::fabs(got[i] - want[i]));
    }
    EXPECT_LE(worst, 1e-5f * scale);
    // Batch-first scores: the same error, the gradient batch-first too.
    const Tensor bf = Tensor::empty({scores.shape()[1], scores.shape()[0], scores.shape()[2]});
    backendOf(bf).permute(scores, {1, 0, 2}, bf);
    CTC first({.batchFirst = true});
    const CostResult rb = first({bf}, target);
    EXPECT_NEAR(rb.error, r.error, 1e-9);
    const Tensor back = Tensor::empty(scores.shape());
    backendOf(back).permute(rb.grad[0], {1, 0, 2}, back);
    EXPECT_TRUE(allClose(back, got, 0.0f));
    // Normalized: each sample's loss over its label count (an empty target counts as 1).
    const std::vector<int32_t> lengths = target[1].toVector<int32_t>();
    double norm = 0;
    for (size_t n = 0; n < losses.size(); ++n) norm += losses[n] / std::max(lengths[n], 1) / 5.0;
    CTC normalized({.normalized = true});
    EXPECT_NEAR(normalized({scores}, target).error, norm, 1e-5 * norm);
}

TEST(CTC, GreedyDecodingAndLabelErrorRate) {
    // argmax paths: sample 0 reads 1 1 0 2 2 -> [1, 2]; sample 1 reads 3 0 3 3 0 -> [3, 3]
    const std::vector<std::vector<int32_t>> best = {{1, 1, 0, 2, 2}, {3, 0, 3, 3, 0}};
    const int64_t T = 5, N = 2, V = 4;
    std::vector<float> s(T * N * V, 0.0f);
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t t = 0; t < T; ++t) s[(t * N + n) * V + best[n][t]] = 5.0f;
    }
    const Tensor scores = Tensor::fromVector({T, N, V}, s);
    CTC ctc;
    EXPECT_EQ(ctc.decodeGreedy(scores), (std::vector<std::vector<int32_t>>{{1, 2}, {3, 3}}));
    EXPECT_EQ(ctc.decodeGreedy(scores, ints({N}, {3, 5})), (std::vector<std::vector<int32_t>>{{1}, {3, 3}}));
    // Scores of a bfloat16 network (its last Linear writes bfloat16) decode alike.
    EXPECT_EQ(ctc.decodeGreedy(scores.convertedTo(DType::bfloat16)),
              (std::vector<std::vector<int32_t>>{{1, 2}, {3, 3}}));
    // Targets [1, 2] (read right) and [3, 1, 3] (read [3, 3]: one label missing): 1 error in 5 labels.
    const Tensors target{ints({N, 3}, {1, 2, 0, 3, 1, 3}), ints({N}, {2, 3})};
    EXPECT_NEAR(ctc.validate({scores}, target), 1.0 / 5.0, 1e-12);
}

TEST(CTC, BadTargets) {
    const Tensor scores = randomTensor({4, 2, 5}, 3);
    CTC ctc;
    auto run = [&](const Tensors& target) { return [&, target] { ctc({scores}, target); }; };
    EXPECT_TRUE(throwsShapeError(
        run({ints({2, 4}, {1, 2, 3, 4, 1, 2, 2, 0}), ints({2}, {4, 3}), ints({2}, {4, 3})}),
        {"CTC", "sample 1", "3 labels (1 repeated)", "at least 4 steps", "has 3", "longer than the input"}));
    EXPECT_TRUE(throwsShapeError(run({ints({2, 2}, {1, 0, 1, 1}), ints({2}, {2, 1})}),
                                 {"sample 0", "label 0 at position 1", "blank"}));
    EXPECT_TRUE(throwsShapeError(run({ints({2, 2}, {1, 9, 1, 1}), ints({2}, {2, 1})}), {"label 9", "[0, 5)"}));
    EXPECT_TRUE(throwsShapeError(run({ints({2, 2}, {1, 2, 1, 1}), ints({2}, {3, 1})}),
                                 {"sample 0", "label length 3", "[0, 2]"}));
    EXPECT_TRUE(throwsShapeError(run({ints({2, 2}, {1, 2, 1, 1}), ints({2}, {2, 1}), ints({2}, {5, 1})}),
                                 {"input length 5", "[1, 4]"}));
    EXPECT_TRUE(throwsShapeError(run({ints({3, 2}, {1, 2, 1, 1, 1, 1}), ints({3}, {2, 1, 1})}),
                                 {"labels must be [N, S] with N = 2", "[3, 2]"}));
    EXPECT_TRUE(throwsShapeError(run({ints({2, 2}, {1, 2, 1, 1})}), {"labelLengths[, inputLengths]"}));
    EXPECT_TRUE(throwsShapeError(run({Tensor::ones({2, 2}), ints({2}, {2, 1})}), {"int32 labels", "float32"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            ctc({randomTensor({4, 5}, 1)}, {ints({2, 1}, {1, 1}), ints({2}, {1, 1})});
        },
        {"[T, N, V]", "[4, 5]"}));
    CTC small({.blank = 7});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            small({scores}, {ints({2, 1}, {1, 1}), ints({2}, {1, 1})});
        },
        {"blank 7", "5 classes"}));
    CTC sized({.vocabsize = 6});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            sized({scores}, {ints({2, 1}, {1, 1}), ints({2}, {1, 1})});
        },
        {"6 classes", "[4, 2, 5]"}));
    EXPECT_THROW(CTC({.blank = -1}), ModuleError);
    EXPECT_THROW(CTC({.blank = 4, .vocabsize = 4}), ModuleError);
}

// A bidirectional LSTM learns to read label sequences from unsegmented, noisy frames:
// each label holds for 1 to 3 frames, with silent frames between some.
TEST(CTC, RecurrentNetworkLearnsToReadSequences) {
    const int64_t T = 16, N = 32, V = 5, S = 4; // labels 1..4, blank 0
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    auto batch = [&](Tensors& target) {
        std::vector<float> x(T * N * V, 0.0f);
        std::vector<int32_t> labels(N * S, 0), lengths(N);
        for (int64_t n = 0; n < N; ++n) {
            const int64_t L = 2 + static_cast<int64_t>(uniform(rng) * 3); // 2..4 labels
            int64_t t = 0;
            int32_t prev = 0;
            for (int64_t k = 0; k < L; ++k) {
                int32_t l;
                do l = 1 + static_cast<int32_t>(uniform(rng) * 4);
                while (l == prev);
                prev = l;
                labels[n * S + k] = l;
                const int64_t hold = 1 + static_cast<int64_t>(uniform(rng) * 3);
                for (int64_t h = 0; h < hold; ++h, ++t) x[(t * N + n) * V + l] = 1.0f;
                if (uniform(rng) < 0.5) ++t; // a silent frame
            }
            lengths[n] = static_cast<int32_t>(L);
            for (int64_t i = 0; i < T * V; ++i) x[((i / V) * N + n) * V + i % V] += 0.3f * (uniform(rng) - 0.5f);
        }
        target = {ints({N, S}, labels), ints({N}, lengths)};
        return Tensor::fromVector({T, N, V}, x);
    };
    manualSeed(5);
    Sequential net;
    net.append(
           std::make_shared<RNN>(V, 24, RNNOptions{.mode = RnnMode::lstm, .bidirectional = true, .getSequences = true}))
        .append(std::make_shared<Reshape>(Shape{T * N, 48}))
        .append(std::make_shared<Linear>(48, V))
        .append(std::make_shared<Reshape>(Shape{T, N, V}));
    Adam adam(1e-2f);
    adam.setupOn(net);
    CTC ctc;
    Tensors target;
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
        const Tensor x = batch(target);
        adam.zeroGradParams();
        const CostResult r = ctc(Tensors{net(x)}, target);
        net.backward(r.grad[0]);
        adam.update();
        if (step < 10) first += r.error / 10;
        if (step >= 290) last += r.error / 10;
    }
    net.evalMode();
    double rate = 0;
    for (int k = 0; k < 5; ++k) {
        const Tensor x = batch(target);
        rate += ctc.validate(Tensors{net(x)}, target) / 5;
    }
    std::printf("CTC: loss %.3f -> %.3f, label error rate %.4f\n", first, last, rate);
    EXPECT_LT(last, first / 5);
    EXPECT_LT(rate, 0.05);
}

} // namespace
} // namespace tessera
