// The recurrent layers against a plain loop over PyTorch's cell equations (obvious on
// purpose) and against PyTorch itself, central-difference gradients of the input and every
// weight, shapes, bad input.
#include <cmath>

#include "GradCheck.h"
#include "io/Factory.h"
#include "io/Npy.h"
#include "modules/RNN.h"

namespace tessera {
namespace {
using namespace testing;

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// w [rows, cols] row-major times v [cols], rows [r0, r0 + n).
std::vector<float> matVec(const std::vector<float>& w, int64_t cols, int64_t r0, int64_t n, const float* v) {
    std::vector<float> out(static_cast<size_t>(n), 0.0f);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < cols; ++c)
            out[static_cast<size_t>(r)] += w[static_cast<size_t>((r0 + r) * cols + c)] * v[c];
    }
    return out;
}

// The reference: x [T, N, I] time-major -> every step's output [T, N, D H].
std::vector<float> reference(RNN& rnn, RnnMode mode, int64_t layers, bool bi, int64_t H, const Tensor& x) {
    const int64_t T = x.shape()[0], N = x.shape()[1], D = bi ? 2 : 1;
    std::vector<float> in = x.toVector<float>();
    int64_t I = x.shape()[2];
    for (int64_t k = 0; k < layers; ++k) {
        std::vector<float> out(static_cast<size_t>(T * N * D * H));
        for (int64_t dir = 0; dir < D; ++dir) {
            const std::string sfx = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
            const auto wi = rnn.getVar("weight_ih" + sfx)->data.toVector<float>();
            const auto wh = rnn.getVar("weight_hh" + sfx)->data.toVector<float>();
            const auto bi_ = rnn.getVar("bias_ih" + sfx)->data.toVector<float>();
            const auto bh = rnn.getVar("bias_hh" + sfx)->data.toVector<float>();
            for (int64_t n = 0; n < N; ++n) {
                std::vector<float> h(static_cast<size_t>(H), 0.0f), c(static_cast<size_t>(H), 0.0f);
                for (int64_t s = 0; s < T; ++s) {
                    const int64_t t = dir ? T - 1 - s : s;
                    const float* xt = &in[static_cast<size_t>((t * N + n) * I)];
                    auto gate = [&](int64_t g, bool withHidden) { // W_g x + b_ig (+ R_g h + b_hg)
                        std::vector<float> a = matVec(wi, I, g * H, H, xt);
                        const std::vector<float> r = matVec(wh, H, g * H, H, h.data());
                        for (int64_t j = 0; j < H; ++j) {
                            a[static_cast<size_t>(j)] += bi_[static_cast<size_t>(g * H + j)];
                            if (withHidden)
                                a[static_cast<size_t>(j)] +=
                                    r[static_cast<size_t>(j)] + bh[static_cast<size_t>(g * H + j)];
                        }
                        return a;
                    };
                    std::vector<float> next(static_cast<size_t>(H));
                    if (mode == RnnMode::relu || mode == RnnMode::tanh) {
                        const auto a = gate(0, true);
                        for (int64_t j = 0; j < H; ++j)
                            next[j] = mode == RnnMode::relu ? std::max(a[j], 0.0f) : std::tanh(a[j]);
                    } else if (mode == RnnMode::lstm) {
                        const auto i = gate(0, true), f = gate(1, true), g = gate(2, true), o = gate(3, true);
                        for (int64_t j = 0; j < H; ++j) {
                            c[j] = sigmoid(f[j]) * c[j] + sigmoid(i[j]) * std::tanh(g[j]);
                            next[j] = sigmoid(o[j]) * std::tanh(c[j]);
                        }
                    } else { // GRU: n = tanh(W_n x + b_in + r (R_n h + b_hn))
                        const auto r = gate(0, true), z = gate(1, true), nx = gate(2, false);
                        const auto nh = matVec(wh, H, 2 * H, H, h.data());
                        for (int64_t j = 0; j < H; ++j) {
                            const float nn =
                                std::tanh(nx[j] + sigmoid(r[j]) * (nh[j] + bh[static_cast<size_t>(2 * H + j)]));
                            next[j] = (1 - sigmoid(z[j])) * nn + sigmoid(z[j]) * h[j];
                        }
                    }
                    h = next;
                    for (int64_t j = 0; j < H; ++j) out[static_cast<size_t>((t * N + n) * D * H + dir * H + j)] = h[j];
                }
            }
        }
        in = out;
        I = D * H;
    }
    return in;
}

struct Case {
    RnnMode mode;
    bool bi;
    int64_t layers;
};

const Case kCases[] = {{RnnMode::lstm, false, 2}, {RnnMode::lstm, true, 2}, {RnnMode::gru, false, 2},
                       {RnnMode::gru, true, 2},   {RnnMode::tanh, true, 1}, {RnnMode::relu, false, 2}};

std::string nameOf(const Case& c) { return str(c.mode) + (c.bi ? " bi" : " uni") + " x" + std::to_string(c.layers); }

TEST(RNN, ReferenceEveryModeDirectionAndLayers) {
    const int64_t T = 4, N = 3, I = 5, H = 6;
    for (const Case& c : kCases) {
        SCOPED_TRACE(nameOf(c));
        manualSeed(11);
        RNN seq(I, H, {.layers = c.layers, .mode = c.mode, .bidirectional = c.bi, .getSequences = true});
        const Tensor x = randomTensor({T, N, I}, 3);
        const std::vector<float> want = reference(seq, c.mode, c.layers, c.bi, H, x);
        const Tensor y = seq(x);
        ASSERT_EQ(y.shape(), (Shape{T, N, (c.bi ? 2 : 1) * H}));
        EXPECT_TRUE(allClose(y, want, 1e-5f));
        // The last step only, and batch-first data: the same numbers.
        manualSeed(11);
        RNN last(I, H, {.layers = c.layers, .mode = c.mode, .bidirectional = c.bi, .batchFirst = true});
        const Tensor xb = Tensor::empty({N, T, I});
        backendOf(xb).permute(x, {1, 0, 2}, xb);
        const Tensor yl = last(xb);
        const int64_t F = (c.bi ? 2 : 1) * H;
        ASSERT_EQ(yl.shape(), (Shape{N, F}));
        EXPECT_TRUE(allClose(yl, std::vector<float>(want.end() - N * F, want.end()), 1e-5f));
    }
}

TEST(RNN, GradientsOfInputAndEveryWeight) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(nameOf(c));
        // relu's kink lies inside the cell (at a pre-activation), out of GradCheckOptions::kink's
        // reach: its case takes a smaller step and weights and inputs whose pre-activations stay
        // clear of 0 by more than the step (seed 3 of 1 to 6 puts one within it).
        const bool relu = c.mode == RnnMode::relu;
        manualSeed(relu ? 1 : 5);
        RNN rnn(3, 4, {.layers = c.layers, .mode = c.mode, .bidirectional = c.bi, .getSequences = true});
        GradCheckOptions o;
        if (relu) o.eps = 1e-3f;
        EXPECT_TRUE(checkGradients(rnn, {randomTensor({3, 2, 3}, relu ? 11 : 7)}, o));
        RNN last(3, 4, {.layers = c.layers, .mode = c.mode, .bidirectional = c.bi, .batchFirst = true});
        EXPECT_TRUE(checkGradients(last, {randomTensor({2, 3, 3}, 8)}, o));
    }
}

// PyTorch's nn.LSTM / nn.GRU (2 layers, one and two directions) with the same weights:
// the outputs and the gradients of the input and of every weight, from the files
// tests/data/rnn/make_pytorch_cases.py wrote (PyTorch in float64, rounded to float32).
// Each tensor matches to 1e-5 of its largest magnitude.
TEST(RNN, MatchesPyTorch) {
    const std::string root = std::string(TESSERA_SOURCE_DIR) + "/tests/data/rnn/";
    auto near = [](const Tensor& got, const Tensor& want, const std::string& what) {
        const std::vector<float> a = got.toVector<float>(), b = want.toVector<float>();
        if (got.shape() != want.shape())
            return ::testing::AssertionFailure() << what << ": shape " << got.shape().str();
        float scale = 0.0f, worst = 0.0f;
        for (float v : b) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
        if (worst <= 1e-5f * scale) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << what << ": off by " << worst << " of " << scale;
    };
    for (const char* name : {"lstm_uni", "lstm_bi", "gru_uni", "gru_bi"}) {
        SCOPED_TRACE(name);
        const std::string dir = root + name + "/";
        const bool bi = std::string(name).find("_bi") != std::string::npos;
        const Tensor x = readNpy(dir + "x.npy");
        RNN rnn(x.shape()[2], 6,
                {.layers = 2,
                 .mode = std::string(name).rfind("lstm", 0) == 0 ? RnnMode::lstm : RnnMode::gru,
                 .bidirectional = bi,
                 .getSequences = true});
        for (const auto& [pname, v] : rnn.namedParams()) v->data.copyFrom(readNpy(dir + pname + ".npy"));
        EXPECT_TRUE(near(rnn(x), readNpy(dir + "y.npy"), "y"));
        EXPECT_TRUE(near(rnn.backward(readNpy(dir + "dy.npy")), readNpy(dir + "dx.npy"), "dx"));
        for (const auto& [pname, v] : rnn.namedParams()) {
            EXPECT_TRUE(near(v->grad, readNpy(dir + "grad_" + pname + ".npy"), "grad of " + pname));
        }
    }
}

TEST(RNN, ShapesAndBadInput) {
    RNN rnn(5, 7, {.layers = 2, .mode = RnnMode::gru, .bidirectional = true, .getSequences = true, .name = "enc"});
    EXPECT_EQ(rnn.dataShapeFrom(Shapes{{9, 4, 5}}), (Shapes{{9, 4, 14}}));
    EXPECT_TRUE(checkShapes(rnn, {randomTensor({3, 2, 5}, 1)}));
    EXPECT_EQ(rnn.namedParams().size(), 16u); // 2 layers x 2 directions x 4
    EXPECT_EQ(rnn.getVar("weight_ih_l1_reverse")->data.shape(), (Shape{21, 14}));
    EXPECT_TRUE(throwsShapeError([&] { rnn(randomTensor({3, 2, 4}, 1)); }, {"RNN 'enc'", "[T, N, 5]", "[3, 2, 4]"}));
    EXPECT_TRUE(throwsShapeError([&] { rnn(randomTensor({3, 5}, 1)); }, {"RNN 'enc'", "[3, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { rnn(Tensor::zeros({3, 2, 5}, DType::int32)); }, {"int32"}));
    EXPECT_TRUE(throwsShapeError([&] { rnn(Tensor::empty({0, 2, 5})); }, {"empty"}));
    EXPECT_THROW(RNN(0, 4), ModuleError);
    EXPECT_THROW(rnnModeFromString("lstm2"), ModuleError);
    RNN evalOnly(5, 7);
    evalOnly.evalMode();
    evalOnly(randomTensor({3, 2, 5}, 1));
    EXPECT_THROW(evalOnly.backward(randomTensor({2, 7}, 1)), ModuleError);
    // An eval-mode forward after a training one leaves nothing for a backward either.
    RNN both(5, 7);
    both(randomTensor({3, 2, 5}, 1));
    both.evalMode();
    both(randomTensor({4, 2, 5}, 2));
    EXPECT_THROW(both.backward(randomTensor({2, 7}, 1)), ModuleError);
}

TEST(RNN, BlueprintRoundTrip) {
    RNN rnn(5, 7, {.layers = 2, .mode = RnnMode::tanh, .bidirectional = true, .batchFirst = true, .name = "r"});
    ModulePtr back = buildModule(rnn.blueprint());
    EXPECT_EQ(back->blueprint().toJson(), rnn.blueprint().toJson());
    EXPECT_NE(rnn.blueprint().toJson().find("\"mode\": \"tanh\""), std::string::npos);
}

} // namespace
} // namespace tessera
