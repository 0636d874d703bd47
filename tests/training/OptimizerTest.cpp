#include <cmath>
#include <functional>
#include <limits>

#include "GradCheck.h"
#include "models/LeNet.h"
#include "modules/Linear.h"
#include "training/Optimizer.h"
#include "training/Schedule.h"

namespace tessera {
namespace {
using namespace testing;
using F = std::vector<float>;

// A module with one parameter W = [1, -2]; its gradient is set by hand.
struct OneParam {
    Linear lin{1, 2, {.useBias = false}};
    OneParam() { lin.getVar("W")->data.copyFrom(Tensor::fromVector({1, 2}, F{1, -2})); }
    void setGrad(F g) { lin.getVar("W")->grad.copyFrom(Tensor::fromVector({1, 2}, g)); }
    F w() const { return lin.getVar("W")->data.toVector<float>(); }
};

// Runs two steps with gradients g1 then g2, for both the per-parameter and the global
// state, and compares with `expected`.
void expectSteps(const std::function<std::unique_ptr<Optimizer>()>& make, const F& expected1, const F& expected2,
                 float tol = 1e-5f) {
    for (bool global : {false, true}) {
        SCOPED_TRACE(global ? "global state" : "per-parameter state");
        OneParam m;
        auto opt = make();
        opt->setupOn(m.lin, global);
        m.setGrad({0.5f, 0.25f});
        opt->update();
        EXPECT_TRUE(allClose(m.lin.getVar("W")->data, expected1, tol));
        m.setGrad({-0.3f, 0.5f});
        opt->update();
        EXPECT_TRUE(allClose(m.lin.getVar("W")->data, expected2, tol));
        EXPECT_EQ(opt->steps(), 2);
    }
}

// The textbook equations, in double precision, one element at a time.
using Rule = std::function<double(double w, double g, double* s, int64_t t)>;
std::pair<F, F> reference(const Rule& rule, double firstState) {
    const double g1[] = {0.5, 0.25}, g2[] = {-0.3, 0.5};
    F out1, out2;
    for (int i = 0; i < 2; ++i) {
        double s[3] = {firstState, 0, 0};
        double w = i == 0 ? 1.0 : -2.0;
        w = rule(w, g1[i], s, 1);
        out1.push_back(static_cast<float>(w));
        w = rule(w, g2[i], s, 2);
        out2.push_back(static_cast<float>(w));
    }
    return {out1, out2};
}

// `firstState`: the rule's first state's start (zero but for SMORMS3's memory).
void expectRule(const std::function<std::unique_ptr<Optimizer>()>& make, const Rule& rule, double firstState = 0) {
    auto [e1, e2] = reference(rule, firstState);
    expectSteps(make, e1, e2);
}

TEST(Optimizer, SGD) {
    expectSteps([] { return std::make_unique<SGD>(0.1f); }, {0.95f, -2.025f}, {0.98f, -2.075f});
}

TEST(Optimizer, MomentumSGD) {
    // v1 = 0.1 g1; v2 = 0.9 v1 + 0.1 g2; w -= v
    expectSteps([] { return std::make_unique<MomentumSGD>(0.1f, 0.9f); }, {0.95f, -2.025f}, {0.935f, -2.0975f});
}

TEST(Optimizer, NesterovSGD) {
    expectRule([] { return std::make_unique<NesterovSGD>(0.1f, 0.9f); },
               [](double w, double g, double* s, int64_t) {
                   const double v = s[0];
                   s[0] = 0.9 * v - 0.1 * g;
                   return w - 0.9 * v + 1.9 * s[0];
               });
}

TEST(Optimizer, Adam) {
    // The first Adam step moves every weight by the learning rate against its gradient's sign.
    OneParam m;
    Adam adam(0.1f);
    adam.setupOn(m.lin);
    m.setGrad({0.5f, 0.25f});
    adam.update();
    EXPECT_TRUE(allClose(m.lin.getVar("W")->data, {0.9f, -2.1f}, 1e-5f));
    expectRule([] { return std::make_unique<Adam>(0.1f, 0.9f, 0.999f, 1e-8f); },
               [](double w, double g, double* s, int64_t t) {
                   s[0] = 0.9 * s[0] + 0.1 * g;
                   s[1] = 0.999 * s[1] + 0.001 * g * g;
                   const double mhat = s[0] / (1 - std::pow(0.9, t)), vhat = s[1] / (1 - std::pow(0.999, t));
                   return w - 0.1 * mhat / (std::sqrt(vhat) + 1e-8 / std::sqrt(1 - std::pow(0.999, t)));
               });
}

// AdamW: Adam's moments see the gradient alone; the weight shrinks by lr * decay * w apart
// from them (PyTorch's torch.optim.AdamW, up to Adam's epsilon placement above).
TEST(Optimizer, AdamW) {
    expectRule([] { return std::make_unique<AdamW>(0.1f, 0.9f, 0.999f, 1e-8f, 0.2f); },
               [](double w, double g, double* s, int64_t t) {
                   s[0] = 0.9 * s[0] + 0.1 * g;
                   s[1] = 0.999 * s[1] + 0.001 * g * g;
                   const double mhat = s[0] / (1 - std::pow(0.9, t)), vhat = s[1] / (1 - std::pow(0.999, t));
                   return w - 0.1 * 0.2 * w - 0.1 * mhat / (std::sqrt(vhat) + 1e-8 / std::sqrt(1 - std::pow(0.999, t)));
               });
    // Decay 0: Adam's steps exactly; the default decay is 0.01, and setWeightDecay changes it.
    expectRule([] { return std::make_unique<AdamW>(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f); },
               [](double w, double g, double* s, int64_t t) {
                   s[0] = 0.9 * s[0] + 0.1 * g;
                   s[1] = 0.999 * s[1] + 0.001 * g * g;
                   const double mhat = s[0] / (1 - std::pow(0.9, t)), vhat = s[1] / (1 - std::pow(0.999, t));
                   return w - 0.1 * mhat / (std::sqrt(vhat) + 1e-8 / std::sqrt(1 - std::pow(0.999, t)));
               });
    EXPECT_EQ(makeOptimizer("adamw")->classname(), "AdamW");
    // A zero gradient still decays: w (1 - lr decay).
    OneParam m;
    AdamW adamw(0.1f);
    adamw.setupOn(m.lin);
    adamw.setWeightDecay(0.5f);
    m.setGrad({0.0f, 0.0f});
    adamw.update();
    EXPECT_TRUE(allClose(m.lin.getVar("W")->data, {0.95f, -1.9f}, 1e-6f));
}

TEST(Optimizer, AdaGrad) {
    expectRule([] { return std::make_unique<AdaGrad>(0.1f, 1e-8f); },
               [](double w, double g, double* s, int64_t) {
                   s[0] += g * g;
                   return w - 0.1 * g / (std::sqrt(s[0]) + 1e-8);
               });
}

TEST(Optimizer, AdaDelta) {
    expectRule([] { return std::make_unique<AdaDelta>(0.9f, 1e-6f, 1.0f); },
               [](double w, double g, double* s, int64_t) {
                   s[0] = 0.9 * s[0] + 0.1 * g * g;
                   const double dx = std::sqrt(s[1] + 1e-6) / std::sqrt(s[0] + 1e-6) * g;
                   s[1] = 0.9 * s[1] + 0.1 * dx * dx;
                   return w - dx;
               });
}

TEST(Optimizer, RMSProp) {
    expectRule([] { return std::make_unique<RMSProp>(0.01f, 0.9f, 1e-8f); },
               [](double w, double g, double* s, int64_t) {
                   s[0] = 0.9 * s[0] + 0.1 * g * g;
                   return w - 0.01 * g / (std::sqrt(s[0]) + 1e-8);
               });
}

TEST(Optimizer, RMSPropGraves) {
    expectRule([] { return std::make_unique<RMSPropGraves>(0.01f, 0.95f, 0.9f, 1e-4f); },
               [](double w, double g, double* s, int64_t) {
                   s[0] = 0.95 * s[0] + 0.05 * g * g;
                   s[1] = 0.95 * s[1] + 0.05 * g;
                   s[2] = 0.9 * s[2] - 0.01 * g / std::sqrt(s[0] - s[1] * s[1] + 1e-4);
                   return w + s[2];
               });
}

TEST(Optimizer, SMORMS3) {
    expectRule([] { return std::make_unique<SMORMS3>(0.01f, 1e-16f); },
               [](double w, double g, double* s, int64_t) {
                   const double r = 1 / (s[0] + 1);
                   s[1] = (1 - r) * s[1] + r * g;
                   s[2] = (1 - r) * s[2] + r * g * g;
                   const double x = s[1] * s[1] / (s[2] + 1e-16);
                   const double next = w - g * std::min(0.01, x) / (std::sqrt(s[2]) + 1e-16);
                   s[0] = 1 + s[0] * (1 - x);
                   return next;
               },
               /*firstState=*/1.0); // the memory starts at one
}

TEST(Optimizer, WeightDecayAndLearnRateFactors) {
    auto net = loadMLP({3, 4, 2});
    SGD sgd(0.1f);
    sgd.setupOn(*net);
    for (auto& [name, v] : net->namedParams()) backendOf(v->grad).fill(v->grad, 1.0f);
    const F w1 = net->getByName("fc1").getVar("W")->data.toVector<float>();
    const F b2 = net->getByName("fc2").getVar("b")->data.toVector<float>();
    sgd.setWeightDecay(0.5f, [](const std::string& name) { return name.ends_with(".W"); });
    sgd.setLearnRateFactor("fc2.b", 2.0f);
    sgd.update();
    const F w1n = net->getByName("fc1").getVar("W")->data.toVector<float>();
    for (size_t i = 0; i < w1.size(); ++i) EXPECT_NEAR(w1n[i], w1[i] - 0.1f * (1.0f + 0.5f * w1[i]), 1e-6);
    const F b2n = net->getByName("fc2").getVar("b")->data.toVector<float>();
    for (size_t i = 0; i < b2.size(); ++i) EXPECT_NEAR(b2n[i], b2[i] - 0.2f, 1e-6);
    EXPECT_THROW(sgd.setLearnRateFactor("fc9.W", 2.0f), ModuleError);
}

TEST(Optimizer, GlobalStateIsOneBufferAndMatchesPerParameterState) {
    manualSeed(3);
    auto a = loadMLP({5, 6, 3});
    manualSeed(3);
    auto b = loadMLP({5, 6, 3});
    Adam oa(0.01f), ob(0.01f);
    oa.setupOn(*a, false);
    ob.setupOn(*b, true);
    EXPECT_EQ(ob.globalParams().numel(), b->numOfParams());
    EXPECT_TRUE(b->getByName("fc1").getVar("W")->data.sharesStorage(ob.globalParams()));
    Tensor x = randomTensor({4, 5}, 1);
    for (int step = 0; step < 3; ++step) {
        for (auto* net : {a.get(), b.get()}) {
            Tensor y = (*net)(x);
            net->backward(Tensor::full(y.shape(), 0.1f));
        }
        oa.update();
        ob.update();
    }
    const auto pa = a->namedParams(), pb = b->namedParams();
    for (size_t i = 0; i < pa.size(); ++i) {
        SCOPED_TRACE(pa[i].first);
        EXPECT_TRUE(allClose(pb[i].second->data, pa[i].second->data.toVector<float>(), 1e-6f));
    }
}

TEST(Optimizer, Errors) {
    OneParam m;
    SGD sgd;
    EXPECT_THROW(sgd.update(), ModuleError);
    sgd.setupOn(m.lin);
    EXPECT_THROW(sgd.setupOn(m.lin), ModuleError);
    EXPECT_THROW(makeOptimizer("lbfgs"), ModuleError);
    EXPECT_EQ(makeOptimizer("adam", 0.5f)->learnRate(), 0.5f);
    EXPECT_EQ(makeOptimizer("rmspropgraves")->classname(), "RMSPropGraves");
}

// Constants out of their ranges are ModuleErrors naming the optimizer, the constant, the
// range and the value, at construction or when set; the ends of the ranges are taken.
TEST(Optimizer, ConstantsOutOfRangeAreNamed) {
    const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(
        throwsModuleError([&] { SGD{-0.1f}; }, {"SGD: the learning rate must be finite and at least 0, got -0.1"}));
    EXPECT_TRUE(throwsModuleError([&] { SGD{nan}; }, {"SGD: the learning rate", "got nan"}));
    EXPECT_TRUE(throwsModuleError([&] { Adam{inf}; }, {"Adam: the learning rate", "got inf"}));
    EXPECT_TRUE(throwsModuleError([&] { MomentumSGD(0.1f, -0.5f); }, {"MomentumSGD: momentum must be finite", "-0.5"}));
    EXPECT_TRUE(throwsModuleError([&] { NesterovSGD(0.1f, nan); }, {"NesterovSGD: momentum", "got nan"}));
    EXPECT_TRUE(throwsModuleError([&] { Adam(1e-3f, 2.0f); }, {"Adam: beta1 must be in [0, 1), got 2"}));
    EXPECT_TRUE(throwsModuleError([&] { AdamW(1e-3f, 0.9f, 1.0f); }, {"AdamW: beta2 must be in [0, 1), got 1"}));
    EXPECT_TRUE(throwsModuleError([&] { Adam(1e-3f, 0.9f, 0.999f, -1e-8f); }, {"Adam: epsilon must be finite"}));
    EXPECT_TRUE(throwsModuleError([&] { AdamW(1e-3f, 0.9f, 0.999f, 1e-8f, -0.01f); }, {"AdamW: weight decay"}));
    EXPECT_TRUE(throwsModuleError([&] { AdaDelta(1.5f); }, {"AdaDelta: rho must be in [0, 1], got 1.5"}));
    EXPECT_TRUE(throwsModuleError([&] { RMSProp(1e-3f, -0.1f); }, {"RMSProp: rho must be in [0, 1]"}));
    EXPECT_TRUE(throwsModuleError([&] { RMSPropGraves(1e-4f, 0.95f, -1.0f); }, {"RMSPropGraves: momentum"}));
    EXPECT_TRUE(throwsModuleError([&] { AdaGrad(0.01f, nan); }, {"AdaGrad: epsilon", "got nan"}));
    EXPECT_TRUE(throwsModuleError([&] { SMORMS3(-1.0f); }, {"SMORMS3: the learning rate"}));
    // The ends of the ranges.
    EXPECT_NO_THROW(SGD{0.0f});
    EXPECT_NO_THROW(MomentumSGD(0.1f, 0.0f));
    EXPECT_NO_THROW(Adam(1e-3f, 0.0f, 0.0f, 0.0f));
    EXPECT_NO_THROW(AdaDelta(1.0f));
    EXPECT_NO_THROW(RMSProp(1e-3f, 0.0f));
    // Set later: the old value stays.
    OneParam m;
    Adam adam;
    adam.setupOn(m.lin);
    EXPECT_TRUE(throwsModuleError([&] { adam.setLearnRate(nan); }, {"Adam: the learning rate", "got nan"}));
    EXPECT_EQ(adam.learnRate(), 1e-3f);
    EXPECT_TRUE(throwsModuleError([&] { adam.setWeightDecay(nan); }, {"Adam: weight decay", "got nan"}));
    EXPECT_TRUE(throwsModuleError([&] { adam.setLearnRateFactor("W", -2.0f); },
                                  {"Adam: the learning rate factor of 'W' must be finite and at least 0, got -2"}));
    EXPECT_TRUE(throwsModuleError([&] { makeOptimizer("sgd", nan); }, {"SGD: the learning rate", "got nan"}));
}

// Gradient clipping by global norm, against the rule applied to gradients scaled by hand:
// the gradients (3, 4) and (12) of two parameters times s have the norm 13 s, so a limit
// of 6.5 scales them by 6.5 / (13 s); a limit above the norm leaves them as they are.
TEST(GradientClipping, ScalesEveryGradientByTheGlobalNorm) {
    auto make = [](float w, float b) {
        auto lin = std::make_unique<Linear>(2, 1);
        lin->getVar("W")->data.copyFrom(Tensor::fromVector({1, 2}, F{w, -w}));
        lin->getVar("b")->data.copyFrom(Tensor::fromVector({1}, F{b}));
        return lin;
    };
    auto setGrads = [](Linear& lin, F gw, F gb) {
        lin.getVar("W")->grad.copyFrom(Tensor::fromVector({1, 2}, gw));
        lin.getVar("b")->grad.copyFrom(Tensor::fromVector({1}, gb));
    };
    for (bool global : {false, true}) {
        for (float limit : {6.5f, 20.0f}) {
            SCOPED_TRACE(std::string(global ? "global state" : "per-parameter state") + ", limit " +
                         std::to_string(limit));
            auto clipped = make(0.5f, 0.25f), byHand = make(0.5f, 0.25f);
            Adam a(0.1f), b(0.1f);
            a.setupOn(*clipped, global);
            b.setupOn(*byHand, global);
            a.setGradientClipping(limit);
            EXPECT_EQ(a.gradientClipping(), limit);
            EXPECT_TRUE(std::isnan(a.lastGradientNorm()));
            for (int step = 0; step < 3; ++step) {
                const float s = 1.0f + static_cast<float>(step); // the norm is 13 s
                const float k = 13 * s > limit ? limit / (13 * s) : 1.0f;
                setGrads(*clipped, {3 * s, 4 * s}, {12 * s});
                setGrads(*byHand, {3 * s * k, 4 * s * k}, {12 * s * k});
                EXPECT_TRUE(a.update());
                b.update();
                EXPECT_NEAR(a.lastGradientNorm(), 13.0 * s, 1e-5);
                EXPECT_EQ(clipped->getVar("W")->data.toVector<float>(), byHand->getVar("W")->data.toVector<float>());
                EXPECT_EQ(clipped->getVar("b")->data.toVector<float>(), byHand->getVar("b")->data.toVector<float>());
                // The gradients themselves are not changed.
                EXPECT_EQ(clipped->getVar("b")->grad.toVector<float>(), F{12 * s});
            }
        }
    }
}

// With loss scaling the norm is measured on the unscaled gradients; an overflowing step is
// skipped by the loss scaling before clipping looks at it.
TEST(GradientClipping, MeasuresTheUnscaledGradients) {
    OneParam m;
    SGD sgd(1.0f);
    sgd.setupOn(m.lin, true);
    sgd.enableLossScaling({.initialScale = 1024.0f});
    sgd.setGradientClipping(1.0f);
    m.setGrad({3.0f * 1024.0f, 4.0f * 1024.0f}); // unscaled norm 5
    EXPECT_TRUE(sgd.update());
    EXPECT_NEAR(sgd.lastGradientNorm(), 5.0, 1e-6);
    EXPECT_TRUE(allClose(m.lin.getVar("W")->data, {1.0f - 0.6f, -2.0f - 0.8f}, 1e-6f));
    m.setGrad({std::numeric_limits<float>::infinity(), 1.0f});
    EXPECT_FALSE(sgd.update());
    EXPECT_EQ(sgd.skippedSteps(), 1);
}

// Without loss scaling a non-finite gradient is an error that changes nothing.
TEST(GradientClipping, NonFiniteGradientsAndBadLimits) {
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
        for (bool global : {false, true}) {
            OneParam m;
            MomentumSGD sgd(0.1f);
            sgd.setupOn(m.lin, global);
            sgd.setGradientClipping(1.0f);
            m.setGrad({bad, 1.0f});
            try {
                sgd.update();
                ADD_FAILURE() << "no error for a gradient holding " << bad;
            } catch (const NumericsError& e) {
                EXPECT_NE(std::string(e.what()).find("global norm is"), std::string::npos) << e.what();
            }
            EXPECT_EQ(m.w(), (F{1, -2}));
            EXPECT_EQ(sgd.steps(), 0);
        }
    }
    SGD sgd;
    EXPECT_THROW(sgd.setGradientClipping(-1.0f), ModuleError);
    EXPECT_THROW(sgd.setGradientClipping(std::nanf("")), ModuleError);
    EXPECT_THROW(sgd.setGradientClipping(std::numeric_limits<float>::infinity()), ModuleError);
    sgd.setGradientClipping(0.0f); // off
    EXPECT_EQ(sgd.gradientClipping(), 0.0f);
}

// The backend's sum of squares against a double loop, on a length that is not a multiple
// of any vector width or block, and NaN in, NaN out.
TEST(GradientClipping, SumOfSquaresMatchesADoubleLoop) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{300001}}) {
        const Tensor t = randomTensor({n}, static_cast<uint64_t>(n));
        double want = 0;
        for (float v : t.toVector<float>()) want += static_cast<double>(v) * v;
        EXPECT_NEAR(backendOf(t).sumSquares(t), want, 1e-10 * want) << n;
    }
    Tensor t = Tensor::fromVector({3}, F{1.0f, std::nanf(""), 2.0f});
    EXPECT_TRUE(std::isnan(backendOf(t).sumSquares(t)));
}

TEST(Schedule, StepExponentialCosine) {
    StepSchedule step(0.1f, 3, 0.5f);
    EXPECT_FLOAT_EQ(step.at(0), 0.1f);
    EXPECT_FLOAT_EQ(step.at(2), 0.1f);
    EXPECT_FLOAT_EQ(step.at(3), 0.05f);
    EXPECT_FLOAT_EQ(step.at(7), 0.025f);
    ExponentialSchedule exp(1.0f, 0.9f);
    EXPECT_NEAR(exp.at(2), 0.81f, 1e-6);
    CosineSchedule cos(1.0f, 4, 0.2f);
    EXPECT_FLOAT_EQ(cos.at(0), 1.0f);
    EXPECT_NEAR(cos.at(2), 0.6f, 1e-6);
    EXPECT_FLOAT_EQ(cos.at(4), 0.2f);
    EXPECT_FLOAT_EQ(cos.at(9), 0.2f);
    EXPECT_THROW(StepSchedule(0.1f, 0, 0.5f), ModuleError);
}

// Loss scaling: an overflowing step is skipped (weights, state and the step count
// untouched) and shrinks the scale; the scale grows after `growthInterval` clean steps; a
// clean step's gradients are divided by the scale, so the update is the unscaled one.
TEST(LossScaling, OverflowSkipsTheStepAndShrinksTheScale) {
    for (bool global : {false, true}) {
        SCOPED_TRACE(global ? "global state" : "per-parameter state");
        OneParam m;
        Adam adam(0.1f);
        adam.setupOn(m.lin, global);
        adam.enableLossScaling({.initialScale = 1024.0f, .growthInterval = 3});
        EXPECT_EQ(adam.lossScale(), 1024.0f);
        m.setGrad({std::numeric_limits<float>::infinity(), 1.0f});
        EXPECT_FALSE(adam.update());
        EXPECT_EQ(m.w(), (F{1, -2}));
        EXPECT_EQ(adam.lossScale(), 512.0f);
        EXPECT_EQ(adam.skippedSteps(), 1);
        EXPECT_EQ(adam.steps(), 0);
        m.setGrad({std::nanf(""), 1.0f});
        EXPECT_FALSE(adam.update());
        EXPECT_EQ(adam.lossScale(), 256.0f);
        // Clean steps: the gradient 256 * (0.5, -1) is divided back to (0.5, -1); Adam's
        // first step moves each weight by lr against the gradient's sign.
        for (int k = 0; k < 3; ++k) {
            m.setGrad({0.5f * 256.0f, -256.0f});
            EXPECT_TRUE(adam.update());
            if (k == 0) {
                EXPECT_TRUE(allClose(m.lin.getVar("W")->data, {0.9f, -1.9f}, 1e-6f));
            }
        }
        EXPECT_EQ(adam.lossScale(), 512.0f); // three clean steps in a row
        EXPECT_EQ(adam.cleanSteps(), 0);
        EXPECT_EQ(adam.steps(), 3);
    }
}

// The same training with a loss scale of 2^10 (gradients scaled in backward, unscaled in
// the update) and without: equal weights, since scaling by a power of two is exact.
TEST(LossScaling, ScaledTrainingEqualsUnscaled) {
    auto run = [](bool scaled) {
        manualSeed(4);
        Linear lin(6, 3);
        MomentumSGD sgd(0.05f);
        sgd.setupOn(lin, true);
        if (scaled) sgd.enableLossScaling({.initialScale = 1024.0f});
        for (int step = 0; step < 5; ++step) {
            sgd.zeroGradParams();
            const Tensor x = randomTensor({4, 6}, 10 + step);
            lin(x);
            Tensor dy = randomTensor({4, 3}, 20 + step);
            sgd.scaleLossGradients({dy}); // a no-op without loss scaling
            lin.backward(dy, true, false, 1.0f, 1.0f);
            EXPECT_TRUE(sgd.update());
        }
        return lin.getVar("W")->data.toVector<float>();
    };
    EXPECT_EQ(run(true), run(false));
}

TEST(LossScaling, BadOptionsAndState) {
    SGD sgd;
    EXPECT_THROW(sgd.enableLossScaling({.initialScale = 0.0f}), ModuleError);
    EXPECT_THROW(sgd.enableLossScaling({.backoffFactor = 1.5f}), ModuleError);
    EXPECT_THROW(sgd.enableLossScaling({.growthInterval = 0}), ModuleError);
    EXPECT_THROW(sgd.setLossScaleState(8.0f, 0), ModuleError); // not enabled
    EXPECT_EQ(sgd.lossScale(), 1.0f);
    sgd.enableLossScaling();
    EXPECT_EQ(sgd.lossScale(), 65536.0f);
    sgd.setLossScaleState(8.0f, 5);
    EXPECT_EQ(sgd.lossScale(), 8.0f);
    EXPECT_EQ(sgd.cleanSteps(), 5);
    EXPECT_THROW(sgd.setLossScaleState(-1.0f, 0), ModuleError);
}

} // namespace
} // namespace tessera
