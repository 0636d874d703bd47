// Linear + activation fusion (containers/Fusion.h): a ReLU after a Linear runs in the
// Linear's GEMM in train and eval mode, any other kind the backend's GEMM takes in eval mode
// (GELU after a transformer's first MLP layer). Outputs, input gradients and parameter
// gradients equal the unfused run's; the pairs form only where the activation alone
// consumes the Linear; the backend's fused product equals the product then the activation.
#include <cmath>

#include "FusionSwitch.h"
#include "GradCheck.h"
#include "backend/Backend.h"
#include "backend/cpu/CpuBackend.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Linear.h"

namespace tessera {
namespace {

using testing::FusionSwitch;
using testing::randomTensor;

// x -> Linear(12, 16) -> act -> Linear(16, 5), biases non-zero.
struct Mlp {
    std::shared_ptr<Sequential> seq = std::make_shared<Sequential>();
    std::shared_ptr<Linear> first;
    std::shared_ptr<Activation> act;
};

Mlp mlp(const ActivationParams& p, const ActivationOptions& options = {}) {
    Mlp m;
    m.first = std::make_shared<Linear>(12, 16);
    m.act = p.kind == ActivationKind::gelu ? std::make_shared<Gelu>() : std::make_shared<Activation>(p.kind, options);
    m.seq->append(m.first).append(m.act).append(std::make_shared<Linear>(16, 5));
    uint64_t seed = 60;
    for (const auto& [name, var] : m.seq->namedParams()) var->data.copyFrom(randomTensor(var->data.shape(), ++seed));
    return m;
}

struct Outcome {
    std::vector<float> y, dx;
    std::vector<std::vector<float>> paramGrads;
};

Outcome run(Module& net, const Tensor& x, const Tensor& dy, bool train) {
    net.zeroGradParams();
    Outcome r;
    r.y = net(x).toVector<float>();
    r.dx = net.backward(dy, train, true).toVector<float>();
    if (train) {
        for (const auto& [name, var] : net.namedParams()) r.paramGrads.push_back(var->grad.toVector<float>());
    }
    return r;
}

double maxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, norm = 1e-3;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::abs(double(a[i]) - b[i]));
        norm = std::max(norm, std::abs(double(b[i])));
    }
    return diff / norm;
}

TEST(LinearFusion, ReluRunsInTheGemmInTrainAndEvalModeWithTheUnfusedResults) {
    manualSeed(1);
    Mlp m = mlp({ActivationKind::relu});
    const Tensor x = randomTensor({8, 12}, 2, -2.0f, 2.0f);
    const Tensor dy = randomTensor({8, 5}, 3);
    for (bool train : {true, false}) {
        SCOPED_TRACE(train ? "train" : "eval");
        train ? m.seq->trainMode() : m.seq->evalMode();
        Outcome fused, plain;
        {
            FusionSwitch on(true);
            fused = run(*m.seq, x, dy, train);
            EXPECT_TRUE(m.first->appliedRelu());
            EXPECT_TRUE(m.act->passedThrough());
        }
        {
            FusionSwitch off(false);
            plain = run(*m.seq, x, dy, train);
            EXPECT_FALSE(m.first->appliedRelu());
            EXPECT_FALSE(m.act->passedThrough());
        }
        // The same arithmetic: relu of the same float32 sums (summed in the kernel's order).
        EXPECT_LE(maxRelDiff(fused.y, plain.y), 1e-6);
        EXPECT_LE(maxRelDiff(fused.dx, plain.dx), 1e-6);
        ASSERT_EQ(fused.paramGrads.size(), plain.paramGrads.size());
        for (size_t i = 0; i < fused.paramGrads.size(); ++i) {
            EXPECT_LE(maxRelDiff(fused.paramGrads[i], plain.paramGrads[i]), 1e-6);
        }
    }
    // Outside a container's forward nothing is left set.
    EXPECT_FALSE(m.first->fuseRelu());
    EXPECT_EQ(m.act->fusedInto(), nullptr);
}

TEST(LinearFusion, FusedReluPassesTheNumericalGradientCheck) {
    manualSeed(2);
    Mlp m = mlp({ActivationKind::relu});
    testing::GradCheckOptions opts;
    opts.eps = 1e-3f;
    opts.atol = 5e-3f;
    EXPECT_TRUE(testing::checkGradients(*m.seq, {randomTensor({4, 12}, 4)}, opts));
    EXPECT_TRUE(m.act->passedThrough());
}

// Every kind the CPU's GEMM takes, in eval mode: the outputs and input gradients (the
// Linear differentiating the activation on its input computed again) of the unfused run.
TEST(LinearFusion, EvalModeActivationsRunInTheGemmWithTheUnfusedResults) {
    if (!backendFor(Device::cpu()).gemmFusesActivation({ActivationKind::gelu}, DType::float32)) {
        GTEST_SKIP() << "the float32 GEMM engine takes no activations (TESSERA_FLOAT32_GEMM=openblas)";
    }
    const std::pair<ActivationKind, ActivationOptions> kinds[] = {
        {ActivationKind::gelu, {}},
        {ActivationKind::sigmoid, {}},
        {ActivationKind::tanh, {}},
        {ActivationKind::leakyRelu, {.slope = 0.2f}},
        {ActivationKind::elu, {.alpha = 0.7f}},
        {ActivationKind::softPlus, {}},
        {ActivationKind::clip, {.min = -0.5f, .max = 0.75f}},
        {ActivationKind::hardSwish, {}},
        {ActivationKind::silu, {}},
        {ActivationKind::mish, {}},
        {ActivationKind::abs, {}},
    };
    const Tensor x = randomTensor({8, 12}, 5, -2.0f, 2.0f);
    const Tensor dy = randomTensor({8, 5}, 6);
    for (const auto& [kind, options] : kinds) {
        SCOPED_TRACE(str(kind));
        Mlp m = mlp({kind}, options);
        m.seq->evalMode();
        Outcome fused, plain;
        {
            FusionSwitch on(true);
            fused = run(*m.seq, x, dy, false);
            EXPECT_TRUE(m.first->appliedActivation(m.act->params()));
            EXPECT_TRUE(m.act->passedThrough());
        }
        {
            FusionSwitch off(false);
            plain = run(*m.seq, x, dy, false);
            EXPECT_FALSE(m.act->passedThrough());
        }
        EXPECT_LE(maxRelDiff(fused.y, plain.y), 1e-5);
        EXPECT_LE(maxRelDiff(fused.dx, plain.dx), 1e-5);
        // Train mode: only ReLU fuses (another kind's backward needs its input).
        m.seq->trainMode();
        (*m.seq)(x);
        EXPECT_FALSE(m.act->passedThrough());
        EXPECT_FALSE(m.first->appliedActivation(m.act->params()));
    }
}

TEST(LinearFusion, EvalModeGeluPassesTheNumericalGradientCheck) {
    manualSeed(3);
    Mlp m = mlp({ActivationKind::gelu});
    m.seq->evalMode();
    testing::GradCheckOptions opts;
    opts.checkParams = false; // eval mode: input gradients only
    EXPECT_TRUE(testing::checkGradients(*m.seq, {randomTensor({4, 12}, 7)}, opts));
    EXPECT_EQ(m.act->passedThrough(),
              backendFor(Device::cpu()).gemmFusesActivation({ActivationKind::gelu}, DType::float32));
}

// bfloat16: the fused GELU rounds once, the layers apart round the product first.
TEST(LinearFusion, Bfloat16GeluIsTheUnfusedWithinRounding) {
    manualSeed(4);
    Mlp m = mlp({ActivationKind::gelu});
    m.seq->calcMode(DType::bfloat16);
    m.seq->evalMode();
    const Tensor x = randomTensor({8, 12}, 8, -2.0f, 2.0f);
    const Tensor dy = randomTensor({8, 5}, 9);
    Outcome fused, plain;
    {
        FusionSwitch on(true);
        fused = run(*m.seq, x, dy, false);
        EXPECT_TRUE(m.act->passedThrough());
    }
    {
        FusionSwitch off(false);
        plain = run(*m.seq, x, dy, false);
    }
    EXPECT_LE(maxRelDiff(fused.y, plain.y), 2e-2);
    EXPECT_LE(maxRelDiff(fused.dx, plain.dx), 2e-2);
}

// The activation fuses only where it alone consumes the Linear, in a Graph too; a kind the
// GEMM does not take (hardSigmoid) runs on its own.
TEST(LinearFusion, OnlyAnActivationThatAloneConsumesTheLinearFuses) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto fc = node(std::make_shared<Linear>(6, 6), data, "fc");
    auto gelu = node(std::make_shared<Gelu>(), fc, "gelu");
    auto fc2 = node(std::make_shared<Linear>(6, 6), data, "fc2");
    auto hard = node(std::make_shared<Activation>(ActivationKind::hardSigmoid), fc2, "hard");
    auto fc3 = node(std::make_shared<Linear>(6, 6), data, "fc3");
    auto twice = node(std::make_shared<Activation>(ActivationKind::tanh), fc3, "tanh");
    auto sum = node(std::make_shared<Add>(), {gelu, hard, twice, fc3}, "sum");
    Graph g({data}, {sum});
    g.evalMode();
    const std::vector<fusion::Pair> pairs = fusion::pairsOf(g);
    ASSERT_EQ(pairs.size(), 2u); // fc + gelu; fc2 + hardSigmoid (the Linear then runs it apart)
    EXPECT_EQ(pairs[0].activation, &gelu->module());
    EXPECT_EQ(pairs[1].activation, &hard->module());
    EXPECT_TRUE(fusion::pairsOf(g, true).empty()); // a train-mode plan fuses no GELU
    g.trainMode();
    EXPECT_TRUE(fusion::pairsOf(g).empty());
    g.evalMode();
    const Tensor x = randomTensor({3, 6}, 10);
    const Tensor fused = g(x).clone();
    EXPECT_TRUE(dynamic_cast<Activation&>(gelu->module()).passedThrough());
    EXPECT_FALSE(dynamic_cast<Activation&>(hard->module()).passedThrough());
    EXPECT_FALSE(dynamic_cast<Activation&>(twice->module()).passedThrough());
    FusionSwitch off(false);
    EXPECT_LE(testing::relL2(fused, g(x)), 1e-6);
}

// Checking numerics checks each layer's own output: the ReLU, which makes a NaN 0 on the
// CPU, runs apart, and the NaN is found at the Linear that made it.
TEST(LinearFusion, CheckingNumericsRunsTheActivationApart) {
    Mlp m = mlp({ActivationKind::relu});
    std::vector<float> v = randomTensor({2, 12}, 15).toVector<float>();
    v[3] = std::nanf("");
    const Tensor x = Tensor::fromVector({2, 12}, v);
    EXPECT_FALSE(fusion::pairsOf(*m.seq).empty());
    struct Checking {
        Checking() { Module::setCheckNumerics(true); }
        ~Checking() { Module::setCheckNumerics(false); }
    } checking;
    EXPECT_TRUE(fusion::pairsOf(*m.seq).empty());
    const std::string error = testing::errorOf([&] { (*m.seq)(x); });
    EXPECT_NE(error.find("Linear"), std::string::npos) << error;
    EXPECT_NE(error.find("has NaN"), std::string::npos) << error;
    EXPECT_FALSE(m.act->passedThrough());
}

// The backend: C <- act(op(A) op(B) + bias) in one call equals the product, then the
// activation, for the kinds it takes, transposed and packed weights, float32 and bfloat16.
TEST(LinearFusion, GemmWeightsActivationIsTheProductThenTheActivation) {
    Backend& be = backendFor(Device::cpu());
    const int64_t M = 33, K = 20, N = 17;
    const Tensor a = randomTensor({M, K}, 11), bias = randomTensor({N}, 12);
    for (DType compute : {DType::float32, DType::bfloat16}) {
        for (bool transB : {false, true}) {
            for (ActivationKind kind : {ActivationKind::relu, ActivationKind::gelu, ActivationKind::tanh}) {
                SCOPED_TRACE(str(compute) + (transB ? " transB " : " ") + str(kind));
                const ActivationParams act{kind};
                ASSERT_TRUE(be.gemmFusesActivation(act, compute) || CpuBackend::float32Gemm() == Float32Gemm::openblas);
                const Tensor b = randomTensor(transB ? Shape{N, K} : Shape{K, N}, 13);
                const Tensor want = Tensor::empty({M, N}), got = Tensor::empty({M, N});
                be.gemmWeights(false, transB, 1.0f, a, b, bias, 0.0f, want, compute, nullptr);
                be.activationForward(act, want, want);
                be.gemmWeightsActivation(false, transB, a, b, bias, got, compute, act, nullptr);
                EXPECT_LE(testing::relL2(got, want), 1e-6);
                auto slot = std::make_shared<LayerState>();
                const Tensor packed = Tensor::empty({M, N});
                for (int rep = 0; rep < 2; ++rep) { // the second reads the kept weights
                    be.gemmWeightsActivation(false, transB, a, b, bias, packed, compute, act, slot);
                    EXPECT_LE(testing::relL2(packed, want), 1e-6);
                }
            }
        }
    }
    // The kinds that run as loops are not taken (their forward still works, apart).
    EXPECT_FALSE(be.gemmFusesActivation({ActivationKind::hardSigmoid, 0.2f, 0.5f}, DType::float32));
    EXPECT_FALSE(be.gemmFusesActivation({ActivationKind::log}, DType::float32));
    const Tensor b = randomTensor({K, N}, 14);
    const Tensor want = Tensor::empty({M, N}), got = Tensor::empty({M, N});
    const ActivationParams hard{ActivationKind::hardSigmoid, 0.2f, 0.5f};
    be.gemmWeights(false, false, 1.0f, a, b, bias, 0.0f, want, DType::float32, nullptr);
    be.activationForward(hard, want, want);
    be.gemmWeightsActivation(false, false, a, b, bias, got, DType::float32, hard, nullptr);
    EXPECT_LE(testing::relL2(got, want), 1e-6);
}

// What the fused activation saves: its output (and in eval mode its input gradient) are the
// Linear's, in the plan as in the allocator.
TEST(LinearFusion, TheMemoryPlanCountsWhatFusionSaves) {
    manualSeed(5);
    Mlp m = mlp({ActivationKind::gelu});
    const int64_t hidden = 64 * 16 * static_cast<int64_t>(sizeof(float));
    MemoryPlan fused, plain;
    {
        FusionSwitch on(true);
        fused = planMemory(*m.seq, {{64, 12}});
    }
    {
        FusionSwitch off(false);
        plain = planMemory(*m.seq, {{64, 12}});
    }
    EXPECT_EQ(fused.inference + hidden, plain.inference);
    EXPECT_EQ(fused.trainForward, plain.trainForward); // GELU fuses in eval mode only
    const testing::MeasuredPeaks measured = testing::measurePeaks(*m.seq, {64, 12});
    EXPECT_EQ(fused.inference, measured.inference);
    EXPECT_EQ(fused.trainForward, measured.trainForward);
    EXPECT_EQ(fused.training, measured.training);
}

} // namespace
} // namespace tessera
