// The recurrent layers against a plain loop over PyTorch's cell equations (obvious on
// purpose) and against PyTorch itself, central-difference gradients of the input and every
// weight, shapes, bad input.
#include <cmath>

#include "GradCheck.h"
#include "SourceDir.h"
#include "containers/Sequential.h"
#include "data/Npy.h"
#include "io/Factory.h"
#include "modules/Dropout.h"
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

// What the reference computes: every step's output [T, N, D H] (zero past a sequence's
// end) and the final states [layers D, N, H].
struct Ref {
    std::vector<float> y, hN, cN;
};

// The reference: x [T, N, I] time-major from the states h0, c0 [layers D, N, H] (zero when
// empty), sequence n over its first lengths[n] steps (all T when empty).
Ref reference(RNN& rnn, RnnMode mode, int64_t layers, bool bi, int64_t H, const Tensor& x,
              const std::vector<float>& h0 = {}, const std::vector<float>& c0 = {},
              const std::vector<int32_t>& lengths = {}) {
    const int64_t T = x.shape()[0], N = x.shape()[1], D = bi ? 2 : 1;
    std::vector<float> in = x.toVector<float>();
    int64_t I = x.shape()[2];
    Ref ref;
    ref.hN.assign(static_cast<size_t>(layers * D * N * H), 0.0f);
    ref.cN = ref.hN;
    for (int64_t k = 0; k < layers; ++k) {
        std::vector<float> out(static_cast<size_t>(T * N * D * H), 0.0f);
        for (int64_t dir = 0; dir < D; ++dir) {
            const std::string sfx = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
            const auto wi = rnn.getVar("weight_ih" + sfx)->data.toVector<float>();
            const auto wh = rnn.getVar("weight_hh" + sfx)->data.toVector<float>();
            const auto bi_ = rnn.getVar("bias_ih" + sfx)->data.toVector<float>();
            const auto bh = rnn.getVar("bias_hh" + sfx)->data.toVector<float>();
            for (int64_t n = 0; n < N; ++n) {
                const size_t state = static_cast<size_t>(((k * D + dir) * N + n) * H);
                std::vector<float> h(static_cast<size_t>(H), 0.0f), c(static_cast<size_t>(H), 0.0f);
                if (!h0.empty()) h.assign(h0.begin() + state, h0.begin() + state + H);
                if (!c0.empty()) c.assign(c0.begin() + state, c0.begin() + state + H);
                const int64_t len = lengths.empty() ? T : lengths[static_cast<size_t>(n)];
                for (int64_t s = 0; s < len; ++s) {
                    const int64_t t = dir ? len - 1 - s : s;
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
                    } else { // GRU: n = tanh(W_n x + b_in + r (R_n h + b_hn)), or tanh(W_n x + b_in + R_n (r h) + b_hn)
                        const bool lbr = rnn.options().linearBeforeReset;
                        const auto r = gate(0, true), z = gate(1, true), nx = gate(2, false);
                        std::vector<float> rh(static_cast<size_t>(H));
                        for (int64_t j = 0; j < H; ++j) rh[j] = sigmoid(r[j]) * h[j];
                        const auto nh = matVec(wh, H, 2 * H, H, lbr ? h.data() : rh.data());
                        for (int64_t j = 0; j < H; ++j) {
                            const float bhn = bh[static_cast<size_t>(2 * H + j)];
                            const float nn =
                                lbr ? std::tanh(nx[j] + sigmoid(r[j]) * (nh[j] + bhn)) : std::tanh(nx[j] + nh[j] + bhn);
                            next[j] = (1 - sigmoid(z[j])) * nn + sigmoid(z[j]) * h[j];
                        }
                    }
                    h = next;
                    for (int64_t j = 0; j < H; ++j) out[static_cast<size_t>((t * N + n) * D * H + dir * H + j)] = h[j];
                }
                std::copy(h.begin(), h.end(), ref.hN.begin() + state);
                std::copy(c.begin(), c.end(), ref.cN.begin() + state);
            }
        }
        in = out;
        I = D * H;
    }
    ref.y = in;
    return ref;
}

// got equals want to 1e-5 of want's largest magnitude.
::testing::AssertionResult matchesScaled(const Tensor& got, const Tensor& want, const std::string& what) {
    const std::vector<float> a = got.toVector<float>(), b = want.toVector<float>();
    if (got.shape() != want.shape()) return ::testing::AssertionFailure() << what << ": shape " << got.shape().str();
    float scale = 0.0f, worst = 0.0f;
    for (float v : b) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    if (worst <= 1e-5f * scale) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": off by " << worst << " of " << scale;
}

struct Case {
    RnnMode mode;
    bool bi;
    int64_t layers;
    bool lbr = true; // GRU: linearBeforeReset
};

const Case kCases[] = {{RnnMode::lstm, false, 2}, {RnnMode::lstm, true, 2},        {RnnMode::gru, false, 2},
                       {RnnMode::gru, true, 2},   {RnnMode::gru, false, 2, false}, {RnnMode::gru, true, 1, false},
                       {RnnMode::tanh, true, 1},  {RnnMode::relu, false, 2}};

std::string nameOf(const Case& c) {
    return str(c.mode) + (c.lbr ? "" : " reset before") + (c.bi ? " bi" : " uni") + " x" + std::to_string(c.layers);
}

TEST(RNN, ReferenceEveryModeDirectionAndLayers) {
    const int64_t T = 4, N = 3, I = 5, H = 6;
    for (const Case& c : kCases) {
        SCOPED_TRACE(nameOf(c));
        manualSeed(11);
        RNN seq(I, H,
                {.layers = c.layers,
                 .mode = c.mode,
                 .linearBeforeReset = c.lbr,
                 .bidirectional = c.bi,
                 .getSequences = true});
        const Tensor x = randomTensor({T, N, I}, 3);
        const std::vector<float> want = reference(seq, c.mode, c.layers, c.bi, H, x).y;
        const Tensor y = seq(x);
        ASSERT_EQ(y.shape(), (Shape{T, N, (c.bi ? 2 : 1) * H}));
        EXPECT_TRUE(allClose(y, want, 1e-5f));
        // The last step only, and batch-first data: the same numbers.
        manualSeed(11);
        RNN last(I, H,
                 {.layers = c.layers,
                  .mode = c.mode,
                  .linearBeforeReset = c.lbr,
                  .bidirectional = c.bi,
                  .batchFirst = true});
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
        RNN rnn(3, 4,
                {.layers = c.layers,
                 .mode = c.mode,
                 .linearBeforeReset = c.lbr,
                 .bidirectional = c.bi,
                 .getSequences = true});
        GradCheckOptions o;
        if (relu) o.eps = 1e-3f;
        EXPECT_TRUE(checkGradients(rnn, {randomTensor({3, 2, 3}, relu ? 11 : 7)}, o));
        RNN last(3, 4,
                 {.layers = c.layers,
                  .mode = c.mode,
                  .linearBeforeReset = c.lbr,
                  .bidirectional = c.bi,
                  .batchFirst = true});
        EXPECT_TRUE(checkGradients(last, {randomTensor({2, 3, 3}, 8)}, o));
    }
}

// Initial states in, final states out, and a padded batch with lengths: the reference
// gives the same outputs, final states and zeros past each sequence's end.
TEST(RNN, StatesAndLengthsMatchReference) {
    const int64_t T = 5, N = 4, I = 3, H = 4;
    const std::vector<int32_t> lengths{5, 2, 4, 2};
    for (const Case& c : kCases) {
        SCOPED_TRACE(nameOf(c));
        const bool lstm = c.mode == RnnMode::lstm;
        const int64_t D = c.bi ? 2 : 1;
        manualSeed(3);
        RNN rnn(I, H,
                {.layers = c.layers,
                 .mode = c.mode,
                 .linearBeforeReset = c.lbr,
                 .bidirectional = c.bi,
                 .getSequences = true,
                 .initialStates = true,
                 .finalStates = true,
                 .lengths = true});
        const Tensor x = randomTensor({T, N, I}, 4);
        const Tensor h0 = randomTensor({c.layers * D, N, H}, 5), c0 = randomTensor({c.layers * D, N, H}, 6);
        Tensors in{x, h0};
        if (lstm) in.push_back(c0);
        in.push_back(Tensor::fromVector({N}, lengths));
        const Ref want = reference(rnn, c.mode, c.layers, c.bi, H, x, h0.toVector<float>(),
                                   lstm ? c0.toVector<float>() : std::vector<float>{}, lengths);
        const Tensors out = rnn(in);
        ASSERT_EQ(out.size(), lstm ? 3u : 2u);
        EXPECT_TRUE(allClose(out[0], want.y, 1e-5f));
        EXPECT_TRUE(allClose(out[1], want.hN, 1e-5f));
        if (lstm) {
            EXPECT_TRUE(allClose(out[2], want.cN, 1e-5f));
        }
        EXPECT_TRUE(checkShapes(rnn, in));
        // The last-step output is each sequence's own last step.
        manualSeed(3);
        RNN last(I, H,
                 {.layers = c.layers,
                  .mode = c.mode,
                  .linearBeforeReset = c.lbr,
                  .bidirectional = c.bi,
                  .initialStates = true,
                  .lengths = true});
        const Tensor yl = last(in)[0];
        std::vector<float> wantLast;
        for (int64_t n = 0; n < N; ++n) {
            const auto at = want.y.begin() + ((lengths[static_cast<size_t>(n)] - 1) * N + n) * D * H;
            wantLast.insert(wantLast.end(), at, at + D * H);
        }
        EXPECT_TRUE(allClose(yl, wantLast, 1e-5f));
    }
}

// Gradients of the data, the initial states and every weight through the final states
// and a padded batch.
TEST(RNN, GradientsWithStatesAndLengths) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(nameOf(c));
        const bool relu = c.mode == RnnMode::relu, lstm = c.mode == RnnMode::lstm;
        const int64_t D = c.bi ? 2 : 1;
        manualSeed(relu ? 1 : 5);
        RNN rnn(3, 4,
                {.layers = c.layers,
                 .mode = c.mode,
                 .linearBeforeReset = c.lbr,
                 .bidirectional = c.bi,
                 .getSequences = !relu,
                 .batchFirst = relu,
                 .initialStates = true,
                 .finalStates = true,
                 .lengths = true});
        GradCheckOptions o;
        if (relu) o.eps = 1e-3f;
        const Shape state{c.layers * D, 3, 4};
        Tensors in{randomTensor(relu ? Shape{3, 4, 3} : Shape{4, 3, 3}, relu ? 11 : 7),
                   randomTensor(state, 12, relu ? 0.0f : -1.0f)};
        if (lstm) in.push_back(randomTensor(state, 13));
        in.push_back(Tensor::fromVector({3}, std::vector<int32_t>{2, 4, 3}));
        EXPECT_TRUE(checkGradients(rnn, in, o));
    }
}

// A padded batch gives what each sequence gives alone, forwards and backwards: outputs,
// final states, the data's gradient and the weights' gradients summed over the sequences.
TEST(RNN, PaddedBatchEqualsEachSequenceAlone) {
    const int64_t T = 6, N = 3, I = 3, H = 5;
    const std::vector<int32_t> lengths{3, 6, 1};
    for (RnnMode mode : {RnnMode::lstm, RnnMode::gru}) {
        SCOPED_TRACE(str(mode));
        const RNNOptions o{.layers = 2, .mode = mode, .bidirectional = true, .getSequences = true, .finalStates = true};
        RNNOptions withLengths = o;
        withLengths.lengths = true;
        manualSeed(9);
        RNN batch(I, H, withLengths);
        manualSeed(9);
        RNN alone(I, H, o);
        const Tensor x = randomTensor({T, N, I}, 21), dy = randomTensor({T, N, 2 * H}, 22);
        const Tensor lens = Tensor::fromVector({N}, lengths);
        const Tensors out = batch({x, lens});
        const std::vector<float> y = out[0].toVector<float>(), hN = out[1].toVector<float>();
        Tensors grads{dy, randomTensor(out[1].shape(), 23)};
        if (mode == RnnMode::lstm) grads.push_back(randomTensor(out[2].shape(), 24));
        batch.zeroGradParams();
        const std::vector<float> dx = batch.backward(grads)[0].toVector<float>();
        alone.zeroGradParams();
        const std::vector<float> xv = x.toVector<float>(), dyv = dy.toVector<float>();
        for (int64_t n = 0; n < N; ++n) {
            SCOPED_TRACE("sequence " + std::to_string(n));
            const int64_t len = lengths[static_cast<size_t>(n)];
            auto column = [&](const std::vector<float>& v, int64_t steps, int64_t C) { // [steps, 1, C] of sequence n
                std::vector<float> col;
                for (int64_t t = 0; t < steps; ++t) {
                    const auto at = v.begin() + (t * N + n) * C;
                    col.insert(col.end(), at, at + C);
                }
                return col;
            };
            const Tensors one = alone(Tensors{Tensor::fromVector({len, 1, I}, column(xv, len, I))});
            std::vector<float> wantY = column(y, len, 2 * H);
            EXPECT_TRUE(allClose(one[0], wantY, 1e-5f));
            EXPECT_TRUE(allClose(one[1], column(hN, 4, H), 1e-5f)); // [layers D, 1, H]: rows of n
            std::vector<float> zeros = column(y, T, 2 * H);
            EXPECT_TRUE(std::all_of(zeros.begin() + len * 2 * H, zeros.end(), [](float v) { return v == 0.0f; }));
            Tensors g{Tensor::fromVector({len, 1, 2 * H}, column(dyv, len, 2 * H)),
                      Tensor::fromVector({4, 1, H}, column(grads[1].toVector<float>(), 4, H))};
            if (mode == RnnMode::lstm)
                g.push_back(Tensor::fromVector({4, 1, H}, column(grads[2].toVector<float>(), 4, H)));
            // Accumulate the weights' gradients over the sequences: momentum 1.
            const Tensor dxn = alone.backward(g, true, true, 1.0f, 1.0f)[0];
            std::vector<float> wantDx = column(dx, T, I);
            EXPECT_TRUE(std::all_of(wantDx.begin() + len * I, wantDx.end(), [](float v) { return v == 0.0f; }));
            wantDx.resize(static_cast<size_t>(len * I));
            EXPECT_TRUE(allClose(dxn, wantDx, 1e-5f));
        }
        for (const auto& [name, v] : batch.namedParams()) {
            SCOPED_TRACE(name);
            EXPECT_TRUE(allClose(alone.getVar(name)->grad, v->grad.toVector<float>(), 1e-4f));
        }
    }
}

// Final states fed back as initial states carry a sequence across batches: two halves
// give what the whole gives.
TEST(RNN, StatesCarryAcrossBatches) {
    for (RnnMode mode : {RnnMode::lstm, RnnMode::gru, RnnMode::tanh}) {
        SCOPED_TRACE(str(mode));
        manualSeed(2);
        RNN whole(3, 4, {.layers = 2, .mode = mode, .getSequences = true});
        manualSeed(2);
        RNN steps(3, 4, {.layers = 2, .mode = mode, .getSequences = true, .initialStates = true, .finalStates = true});
        steps.evalMode();
        const Tensor x = randomTensor({6, 2, 3}, 30);
        const std::vector<float> want = whole(x).toVector<float>();
        const bool lstm = mode == RnnMode::lstm;
        Tensors state{Tensor::zeros({2, 2, 4})};
        if (lstm) state.push_back(Tensor::zeros({2, 2, 4}));
        std::vector<float> got;
        for (int64_t half = 0; half < 2; ++half) {
            Tensors in{x.slice(half * 3, half * 3 + 3)};
            in.insert(in.end(), state.begin(), state.end());
            const Tensors out = steps(in);
            const std::vector<float> y = out[0].toVector<float>();
            got.insert(got.end(), y.begin(), y.end());
            state = Tensors(out.begin() + 1, out.end());
        }
        EXPECT_TRUE(allClose(Tensor::fromVector({6, 2, 4}, got), want, 1e-5f));
    }
}

// PyTorch's nn.LSTM / nn.GRU (2 layers, one and two directions) with the same weights:
// the outputs and the gradients of the input and of every weight, from the files
// tests/data/rnn/make_pytorch_cases.py wrote (PyTorch in float64, rounded to float32).
// Each tensor matches to 1e-5 of its largest magnitude.
TEST(RNN, MatchesPyTorch) {
    const std::string root = tessera::testing::sourceDir() + "/tests/data/rnn/";
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
        EXPECT_TRUE(matchesScaled(rnn(x), readNpy(dir + "y.npy"), "y"));
        EXPECT_TRUE(matchesScaled(rnn.backward(readNpy(dir + "dy.npy")), readNpy(dir + "dx.npy"), "dx"));
        for (const auto& [pname, v] : rnn.namedParams()) {
            EXPECT_TRUE(matchesScaled(v->grad, readNpy(dir + "grad_" + pname + ".npy"), "grad of " + pname));
        }
    }
}

// The same for a padded batch run as PyTorch's packed sequence from given initial states
// (2 layers, two directions): outputs, final states, and the gradients of the input, the
// initial states and every weight.
TEST(RNN, MatchesPyTorchPackedWithStates) {
    const std::string root = tessera::testing::sourceDir() + "/tests/data/rnn/";
    for (const char* name : {"lstm_packed", "gru_packed"}) {
        SCOPED_TRACE(name);
        const std::string dir = root + name + "/";
        const bool lstm = std::string(name) == "lstm_packed";
        auto npy = [&](const std::string& f) { return readNpy(dir + f + ".npy"); };
        const Tensor x = npy("x");
        RNN rnn(x.shape()[2], 6,
                {.layers = 2,
                 .mode = lstm ? RnnMode::lstm : RnnMode::gru,
                 .bidirectional = true,
                 .getSequences = true,
                 .initialStates = true,
                 .finalStates = true,
                 .lengths = true});
        for (const auto& [pname, v] : rnn.namedParams()) v->data.copyFrom(npy(pname));
        Tensors in{x, npy("h0")};
        if (lstm) in.push_back(npy("c0"));
        in.push_back(npy("lengths"));
        const Tensors out = rnn(in);
        EXPECT_TRUE(matchesScaled(out[0], npy("y"), "y"));
        EXPECT_TRUE(matchesScaled(out[1], npy("hN"), "hN"));
        if (lstm) {
            EXPECT_TRUE(matchesScaled(out[2], npy("cN"), "cN"));
        }
        Tensors grads{npy("dy"), npy("dhN")};
        if (lstm) grads.push_back(npy("dcN"));
        rnn.zeroGradParams();
        const Tensors dIn = rnn.backward(grads);
        EXPECT_TRUE(matchesScaled(dIn[0], npy("dx"), "dx"));
        EXPECT_TRUE(matchesScaled(dIn[1], npy("dh0"), "dh0"));
        if (lstm) {
            EXPECT_TRUE(matchesScaled(dIn[2], npy("dc0"), "dc0"));
        }
        for (const auto& [pname, v] : rnn.namedParams()) {
            EXPECT_TRUE(matchesScaled(v->grad, npy("grad_" + pname), "grad of " + pname));
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
    EXPECT_TRUE(testing::throwsModuleError([] { RNN(3, 4, {.layers = 29999999999999999}); },
                                           {"RNN: layers must be at most 1024, got 29999999999999999"}));
    RNN st(5, 7, {.layers = 2, .initialStates = true, .lengths = true, .name = "st"});
    const Tensor x = randomTensor({3, 2, 5}, 1), h = randomTensor({2, 2, 7}, 2);
    const Tensor lens = Tensor::fromVector({2}, std::vector<int32_t>{3, 1});
    EXPECT_TRUE(throwsShapeError([&] { st({x, h, lens}); }, {"RNN 'st'", "expects 4 input tensors, got 3"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            st({x, randomTensor({1, 2, 7}, 2), h, lens});
        },
        {"initial hidden state (input 1)", "[2, 2, 7]", "[1, 2, 7]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            st({x, h, randomTensor({2, 3, 7}, 2), lens});
        },
        {"initial cell state (input 2)", "[2, 3, 7]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            st({x, h, h, Tensor::fromVector({3}, std::vector<int32_t>{1, 1, 1})});
        },
        {"lengths (input 3)", "[2]", "[3]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            st({x, h, h, Tensor::fromVector({2}, std::vector<int32_t>{3, 4})});
        },
        {"lengths[1] = 4", "[1, 3]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            st({x, h, h, Tensor::fromVector({2}, std::vector<int32_t>{0, 1})});
        },
        {"lengths[0] = 0"}));
    EXPECT_TRUE(throwsShapeError([&] { st({x, h, h, Tensor::ones({2})}); }, {"lengths", "float32", "int32"}));
    EXPECT_EQ(st.dataShapeFrom(Shapes{{9, 4, 5}, {2, 4, 7}, {2, 4, 7}, {4}}), (Shapes{{4, 7}}));
    RNN fin(5, 7, {.layers = 3, .mode = RnnMode::lstm, .bidirectional = true, .finalStates = true});
    EXPECT_EQ(fin.outputCount(), 3u);
    EXPECT_EQ(fin.dataShapeFrom(Shapes{{9, 4, 5}}), (Shapes{{4, 14}, {6, 4, 7}, {6, 4, 7}}));
    EXPECT_THROW(rnnModeFromString("lstm2"), ModuleError);
    EXPECT_TRUE(testing::throwsModuleError([] { RNN(3, 4, {.mode = RnnMode::lstm, .linearBeforeReset = false}); },
                                           {"RNN: linearBeforeReset false is a GRU's option, not lstm's"}));
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

// Dropout between layers: a 2-layer RNN in training is its first layer, a Dropout module
// with the same seed (the same masks) and its second layer, in outputs, input gradients
// and every weight's gradient; masks are fresh at each forward; eval mode drops nothing.
TEST(RNN, DropoutBetweenLayersIsLayersAroundDropout) {
    struct DropoutCase {
        RnnMode mode;
        bool bi;
        bool lbr = true;
    };
    for (const DropoutCase& c :
         {DropoutCase{RnnMode::lstm, true}, DropoutCase{RnnMode::gru, false}, DropoutCase{RnnMode::gru, true, false}}) {
        SCOPED_TRACE(str(c.mode) + (c.lbr ? "" : " reset before"));
        const int64_t I = 3, H = 4, D = c.bi ? 2 : 1, T = 5, N = 3;
        const float p = 0.4f;
        manualSeed(6);
        RNN two(I, H,
                {.layers = 2,
                 .mode = c.mode,
                 .linearBeforeReset = c.lbr,
                 .bidirectional = c.bi,
                 .getSequences = true,
                 .dropout = p,
                 .seed = 77});
        manualSeed(6);
        RNN plain(
            I, H,
            {.layers = 2, .mode = c.mode, .linearBeforeReset = c.lbr, .bidirectional = c.bi, .getSequences = true});
        for (const auto& [name, var] : plain.namedParams()) { // a seeded build's weights do not depend on dropout
            EXPECT_TRUE(allClose(two.getVar(name)->data, var->data.toVector<float>(), 0.0f)) << name;
        }
        auto first = std::make_shared<RNN>(
            I, H, RNNOptions{.mode = c.mode, .linearBeforeReset = c.lbr, .bidirectional = c.bi, .getSequences = true});
        auto second = std::make_shared<RNN>(
            D * H, H,
            RNNOptions{.mode = c.mode, .linearBeforeReset = c.lbr, .bidirectional = c.bi, .getSequences = true});
        for (const auto& [name, var] : first->namedParams()) {
            var->data.copyFrom(two.getVar(name)->data);
            const std::string upper = std::string(name).replace(name.find("_l0"), 3, "_l1");
            second->getVar(name)->data.copyFrom(two.getVar(upper)->data);
        }
        Sequential ref;
        ref.append(first);
        ref.append(std::make_shared<Dropout>(DropoutOptions{.p = p, .seed = 77}));
        ref.append(second);

        const Tensor x = randomTensor({T, N, I}, 12), dy = randomTensor({T, N, D * H}, 13);
        const Tensor y = two(x);
        EXPECT_TRUE(allClose(y, ref(x).toVector<float>(), 1e-5f));
        EXPECT_FALSE(allClose(y, plain(x).toVector<float>(), 1e-3f)); // the masks did something
        two.zeroGradParams();
        ref.zeroGradParams();
        EXPECT_TRUE(allClose(two.backward(dy), ref.backward(dy).toVector<float>(), 1e-5f));
        for (const auto& [name, var] : first->namedParams()) {
            EXPECT_TRUE(allClose(two.getVar(name)->grad, var->grad.toVector<float>(), 1e-5f)) << name;
            const std::string upper = std::string(name).replace(name.find("_l0"), 3, "_l1");
            EXPECT_TRUE(allClose(two.getVar(upper)->grad, second->getVar(name)->grad.toVector<float>(), 1e-5f))
                << upper;
        }
        // The next training forward draws new masks, as the reference's Dropout does.
        const Tensor again = two(x);
        EXPECT_FALSE(allClose(again, y.toVector<float>(), 1e-3f));
        EXPECT_TRUE(allClose(again, ref(x).toVector<float>(), 1e-5f));
        // Eval mode: no dropout at all.
        two.evalMode();
        plain.evalMode();
        EXPECT_TRUE(allClose(two(x), plain(x).toVector<float>(), 0.0f));
    }
}

TEST(RNN, DropoutOptionsAndBlueprint) {
    EXPECT_THROW(RNN(3, 4, {.layers = 2, .dropout = 1.0f}), ModuleError);
    EXPECT_THROW(RNN(3, 4, {.layers = 2, .dropout = -0.1f}), ModuleError);
    EXPECT_THROW(RNN(3, 4, {.layers = 2, .dropout = std::nanf("")}), ModuleError);
    RNN none(3, 4, {.layers = 2, .mode = RnnMode::gru});
    EXPECT_EQ(none.randomStream(), nullptr); // no generator to checkpoint without dropout
    EXPECT_EQ(none.blueprint().toJson().find("dropout"), std::string::npos);
    RNN rnn(3, 4, {.layers = 2, .mode = RnnMode::gru, .dropout = 0.25f, .name = "r"});
    EXPECT_NE(rnn.randomStream(), nullptr);
    ModulePtr back = buildModule(rnn.blueprint());
    EXPECT_EQ(back->blueprint().toJson(), rnn.blueprint().toJson());
    EXPECT_NE(rnn.blueprint().toJson().find("\"dropout\": 0.25"), std::string::npos);
    // Training keeps a mask and the next layer's input per dropped layer: the memory plan counts them.
    const Shapes in{{5, 3, 3}};
    const int64_t extra = rnn.memoryUse(in, {Layout::plain}, true, Device::cpu()).keptBytes -
                          none.memoryUse(in, {Layout::plain}, true, Device::cpu()).keptBytes;
    EXPECT_EQ(extra, 2 * backendFor(Device::cpu()).allocationBytes(5 * 3 * 4 * 4));
}

TEST(RNN, BlueprintRoundTrip) {
    RNN rnn(5, 7,
            {.layers = 2,
             .mode = RnnMode::tanh,
             .bidirectional = true,
             .batchFirst = true,
             .initialStates = true,
             .lengths = true,
             .name = "r"});
    ModulePtr back = buildModule(rnn.blueprint());
    EXPECT_EQ(back->blueprint().toJson(), rnn.blueprint().toJson());
    EXPECT_NE(rnn.blueprint().toJson().find("\"lengths\": true"), std::string::npos);
    EXPECT_NE(rnn.blueprint().toJson().find("\"mode\": \"tanh\""), std::string::npos);
    EXPECT_EQ(rnn.blueprint().toJson().find("linearBeforeReset"), std::string::npos); // the default is not written
    // A GRU with the reset before its product keeps that, and its numbers, through the blueprint.
    manualSeed(4);
    RNN gru(3, 4, {.mode = RnnMode::gru, .linearBeforeReset = false, .getSequences = true});
    manualSeed(4); // the same weights
    ModulePtr built = buildModule(gru.blueprint());
    EXPECT_NE(gru.blueprint().toJson().find("\"linearBeforeReset\": false"), std::string::npos);
    EXPECT_FALSE(std::static_pointer_cast<RNN>(built)->options().linearBeforeReset);
    const Tensor x = randomTensor({5, 2, 3}, 9);
    EXPECT_TRUE(allClose((*built)(x), gru(x).toVector<float>(), 0.0f));
}

} // namespace
} // namespace tessera
