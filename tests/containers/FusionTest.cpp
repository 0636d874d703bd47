// Batch norm + ReLU fusion (containers/Fusion.h): a Graph or Sequential runs the pair as one
// backend call where it can, and what it computes does not change: outputs, input
// gradients and parameter gradients equal the unfused run's; the pairs are found only
// where the ReLU alone consumes the batch norm; the memory plan counts what fusion saves.
#include <cmath>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "containers/Sequential.h"
#include "models/ResNet.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Conv.h"
#include "modules/FusedRelu.h"
#include "modules/Identity.h"

namespace tessera {
namespace {

using testing::randomTensor;

// Restores the process-wide switch however a test ends.
struct FusionSwitch {
    explicit FusionSwitch(bool on) { setFusion(on); }
    ~FusionSwitch() { setFusion(true); }
};

std::shared_ptr<Activation> relu() { return std::make_shared<Activation>(ActivationKind::relu); }

// data -> conv -> bn -> relu -> conv -> bn2 -> (+ data) -> relu: a residual block, whose
// first pair fuses, and the sum with the last ReLU; the second batch norm feeds the Add.
std::shared_ptr<Graph> block(NodePtr* bnNode = nullptr, NodePtr* reluNode = nullptr, NodePtr* addNode = nullptr,
                             NodePtr* outNode = nullptr) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto c1 = node(std::make_shared<Conv2D>(4, 4, 3, ConvOptions{.pad = {1}}), data, "c1");
    auto bn = node(std::make_shared<BatchNorm2D>(4), c1, "bn");
    auto r = node(relu(), bn, "relu");
    auto c2 = node(std::make_shared<Conv2D>(4, 4, 3, ConvOptions{.pad = {1}}), r, "c2");
    auto bn2 = node(std::make_shared<BatchNorm2D>(4), c2, "bn2");
    auto sum = node(std::make_shared<Add>(), {bn2, data}, "add");
    auto out = node(relu(), sum, "out");
    if (bnNode) *bnNode = bn;
    if (reluNode) *reluNode = r;
    if (addNode) *addNode = sum;
    if (outNode) *outNode = out;
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{out});
}

// Non-trivial batch-norm parameters, so the ReLU cuts at a shifted place.
void setNormParams(Module& net) {
    uint64_t seed = 40;
    for (const auto& [name, var] : net.namedParams()) {
        if (name.find("bn") == std::string::npos) continue;
        const bool scale = name.find("scale") != std::string::npos;
        var->data.copyFrom(randomTensor(var->data.shape(), ++seed, scale ? 0.5f : -0.5f, scale ? 1.5f : 0.5f));
    }
}

struct StepResult {
    Tensor y, dx;
    std::vector<std::vector<float>> paramGrads;
};

StepResult trainStep(Module& net, const Tensor& x, const Tensor& dy) {
    net.zeroGradParams();
    StepResult r;
    r.y = net(x).clone();
    r.dx = net.backward(dy).clone();
    for (const auto& [name, var] : net.namedParams()) r.paramGrads.push_back(var->grad.toVector<float>());
    return r;
}

void expectClose(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::abs(double(a[i]) - b[i]));
        norm = std::max(norm, std::abs(double(b[i])));
    }
    EXPECT_LE(diff, 1e-5 * std::max(norm, 1e-3)) << what << ": max difference " << diff << " of " << norm;
}

TEST(Fusion, BatchNormReluInAGraphGivesTheUnfusedResults) {
    manualSeed(3);
    NodePtr bn, r, add, out;
    auto net = block(&bn, &r, &add, &out);
    setNormParams(*net);
    net->setReleaseInBackward(false); // the nodes' values are looked at after the step
    const Tensor x = randomTensor({6, 4, 5, 5}, 1);
    const Tensor dy = randomTensor({6, 4, 5, 5}, 2);
    StepResult fused, plain;
    {
        FusionSwitch on(true);
        fused = trainStep(*net, x, dy);
        // It did fuse: the ReLU passed the batch norm's output through, one buffer for both.
        EXPECT_TRUE(dynamic_cast<Activation&>(r->module()).passedThrough());
        EXPECT_EQ(bn->outputs()[0].raw(), r->outputs()[0].raw());
        // ... and the sum ran the last ReLU in its pass.
        EXPECT_TRUE(dynamic_cast<Activation&>(out->module()).passedThrough());
        EXPECT_EQ(add->outputs()[0].raw(), out->outputs()[0].raw());
        EXPECT_TRUE(dynamic_cast<Add&>(add->module()).appliedRelu());
    }
    {
        FusionSwitch off(false);
        plain = trainStep(*net, x, dy);
        EXPECT_FALSE(dynamic_cast<Activation&>(r->module()).passedThrough());
        EXPECT_NE(bn->outputs()[0].raw(), r->outputs()[0].raw());
        EXPECT_FALSE(dynamic_cast<Activation&>(out->module()).passedThrough());
        EXPECT_FALSE(dynamic_cast<Add&>(add->module()).appliedRelu());
    }
    // The ReLU cut something: some outputs of the batch norm were negative.
    const std::vector<float> pre = bn->outputs()[0].toVector<float>();
    EXPECT_GT(std::count_if(pre.begin(), pre.end(), [](float v) { return v < 0; }), 10);
    expectClose(fused.y.toVector<float>(), plain.y.toVector<float>(), "output");
    expectClose(fused.dx.toVector<float>(), plain.dx.toVector<float>(), "input gradient");
    ASSERT_EQ(fused.paramGrads.size(), plain.paramGrads.size());
    for (size_t i = 0; i < plain.paramGrads.size(); ++i) {
        expectClose(fused.paramGrads[i], plain.paramGrads[i], "parameter gradient " + std::to_string(i));
    }
    // Outside the graph's forward the modules are themselves again.
    EXPECT_FALSE(dynamic_cast<BatchNormND&>(bn->module()).fuseRelu());
    EXPECT_EQ(dynamic_cast<Activation&>(r->module()).fusedInto(), nullptr);
}

TEST(Fusion, FusedGraphPassesTheNumericalGradientCheck) {
    manualSeed(4);
    auto net = block();
    setNormParams(*net);
    testing::GradCheckOptions opts;
    opts.eps = 1e-3f; // small steps: fewer of the ReLUs inputs cross the kink
    opts.atol = 5e-3f;
    EXPECT_TRUE(testing::checkGradients(*net, {randomTensor({4, 4, 3, 3}, 5)}, opts));
}

TEST(Fusion, SequentialInTrainAndEvalModeGivesTheUnfusedResults) {
    manualSeed(5);
    Sequential seq;
    seq.append(std::make_shared<Conv2D>(3, 8, 3, ConvOptions{.pad = {1}}));
    seq.append(std::make_shared<BatchNorm2D>(8, BatchNormOptions{.name = "bn"}));
    auto r = relu();
    seq.append(r);
    setNormParams(seq);
    const Tensor x = randomTensor({4, 3, 6, 6}, 6);
    const Tensor dy = randomTensor({4, 8, 6, 6}, 7);
    for (bool train : {true, false}) {
        if (train)
            seq.trainMode();
        else
            seq.evalMode();
        StepResult fused, plain;
        {
            FusionSwitch on(true);
            fused.y = seq(x).clone();
            EXPECT_TRUE(r->passedThrough());
            fused.dx = seq.backward(dy, train, true).clone();
        }
        {
            FusionSwitch off(false);
            plain.y = seq(x).clone();
            EXPECT_FALSE(r->passedThrough());
            plain.dx = seq.backward(dy, train, true).clone();
        }
        const std::string mode = train ? "train" : "eval";
        expectClose(fused.y.toVector<float>(), plain.y.toVector<float>(), mode + " output");
        expectClose(fused.dx.toVector<float>(), plain.dx.toVector<float>(), mode + " input gradient");
    }
}

TEST(Fusion, OnlyAReluThatAloneConsumesTheBatchNormFuses) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    // Two consumers: the ReLU and the Add.
    auto bn1 = node(std::make_shared<BatchNorm2D>(2), data, "bn1");
    auto r1 = node(relu(), bn1, "r1");
    auto add = node(std::make_shared<Add>(), {r1, bn1}, "add");
    // Not a ReLU.
    auto bn2 = node(std::make_shared<BatchNorm2D>(2), add, "bn2");
    auto leaky = node(std::make_shared<Activation>(ActivationKind::leakyRelu), bn2, "leaky");
    // Two in a row fuse.
    auto bn3 = node(std::make_shared<BatchNorm2D>(2), leaky, "bn3");
    auto r3 = node(relu(), bn3, "r3");
    // The one that fuses.
    auto bn4 = node(std::make_shared<BatchNorm2D>(2), r3, "bn4");
    auto r4 = node(relu(), bn4, "r4");
    Graph g({data}, {r4});
    const std::vector<fusion::Pair> pairs = fusion::pairsOf(g);
    ASSERT_EQ(pairs.size(), 2u);
    EXPECT_EQ(pairs[0].source, dynamic_cast<FusedRelu*>(&bn3->module()));
    EXPECT_EQ(pairs[1].source, dynamic_cast<FusedRelu*>(&bn4->module()));
    EXPECT_EQ(pairs[1].relu, &r4->module());
    g(Tensors{randomTensor({3, 2, 2, 2}, 8)});
    EXPECT_FALSE(dynamic_cast<Activation&>(r1->module()).passedThrough());
    EXPECT_TRUE(dynamic_cast<Activation&>(r3->module()).passedThrough());
    EXPECT_TRUE(dynamic_cast<Activation&>(r4->module()).passedThrough());

    // In a Sequential: a batch norm directly followed by a ReLU.
    Sequential seq;
    seq.append(std::make_shared<BatchNorm2D>(2)).append(relu()).append(relu()).append(std::make_shared<BatchNorm2D>(2));
    ASSERT_EQ(fusion::pairsOf(seq).size(), 1u);
    EXPECT_EQ(fusion::pairsOf(seq)[0].source, dynamic_cast<FusedRelu*>(seq.namedChildren()[0].second));
    FusionSwitch off(false);
    EXPECT_TRUE(fusion::pairsOf(g).empty());
    EXPECT_TRUE(fusion::pairsOf(seq).empty());
}

// Backend::axpbyzRelu, the sum's pass with its ReLU, equals the sum followed by the ReLU,
// bit for bit: float32 and bfloat16, plain and blocked, the CPU's loop and oneDNN's binary
// add with the ReLU as a post-op.
TEST(Fusion, AddWithItsReluIsTheSumThenTheRelu) {
    Backend& be = backendFor(Device::cpu());
    for (DType t : {DType::float32, DType::bfloat16}) {
        for (Layout layout : {Layout::plain, Layout::blocked16}) {
            SCOPED_TRACE(str(t) + " " + str(layout));
            const Tensor x = randomTensor({2, 20, 3, 3}, 1).toLayout(layout).convertedTo(t);
            const Tensor y = randomTensor({2, 20, 3, 3}, 2).toLayout(layout).convertedTo(t);
            const Tensor fused = Tensor::empty(x.shape(), t, x.device(), layout);
            const Tensor plain = Tensor::empty(x.shape(), t, x.device(), layout);
            be.axpbyzRelu(0.5f, x, -1.5f, y, fused);
            be.axpbyz(0.5f, x, -1.5f, y, plain);
            be.activationForward(ActivationParams{ActivationKind::relu}, plain, plain);
            const std::vector<float> a = fused.toVector<float>(), b = plain.toVector<float>();
            EXPECT_EQ(a, b);
            EXPECT_GT(std::count(a.begin(), a.end(), 0.0f), 20); // the ReLU cut
        }
    }
}

// A residual sum and its ReLU in a Sequential too (a one-input Add scales), and a sum that
// feeds two layers does not fuse.
TEST(Fusion, OnlyAReluThatAloneConsumesTheSumFuses) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto sum1 = node(std::make_shared<Add>(), {data, data}, "sum1");
    auto r1 = node(relu(), sum1, "r1");
    auto other = node(std::make_shared<Add>(), {r1, sum1}, "other"); // sum1 has two consumers
    auto r2 = node(relu(), other, "r2");
    Graph g({data}, {r2});
    const std::vector<fusion::Pair> pairs = fusion::pairsOf(g);
    ASSERT_EQ(pairs.size(), 1u);
    EXPECT_EQ(pairs[0].source, dynamic_cast<FusedRelu*>(&other->module()));
    const Tensor x = randomTensor({3, 2, 2, 2}, 8);
    const Tensor y = g(Tensors{x})[0];
    EXPECT_FALSE(dynamic_cast<Activation&>(r1->module()).passedThrough());
    EXPECT_TRUE(dynamic_cast<Activation&>(r2->module()).passedThrough());
    // relu(relu(2x) + 2x) = relu(2x) + relu(2x) where 2x > 0, else 0
    const std::vector<float> xs = x.toVector<float>(), ys = y.toVector<float>();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_FLOAT_EQ(ys[i], xs[i] > 0 ? 4 * xs[i] : 0.0f) << i;

    Sequential seq;
    seq.append(std::make_shared<Add>(std::vector<float>{-2.0f})).append(relu());
    ASSERT_EQ(fusion::pairsOf(seq).size(), 1u);
    const std::vector<float> s = seq(x).toVector<float>();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_FLOAT_EQ(s[i], xs[i] < 0 ? -2 * xs[i] : 0.0f) << i;
    const std::vector<float> ds = seq.backward(Tensor::ones(x.shape())).toVector<float>();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_FLOAT_EQ(ds[i], xs[i] < 0 ? -2.0f : 0.0f) << i;
}

TEST(Fusion, TheMemoryPlanCountsWhatFusionSaves) {
    manualSeed(1);
    auto net = loadResNet(18, ResNetStem::cifar, 10);
    MemoryPlan fused, plain;
    {
        FusionSwitch on(true);
        fused = planMemory(*net, {{8, 3, 32, 32}});
    }
    {
        FusionSwitch off(false);
        plain = planMemory(*net, {{8, 3, 32, 32}});
    }
    // The fused ReLUs' outputs and input gradients are their inputs' and output gradients'.
    EXPECT_LT(fused.training, plain.training);
    EXPECT_LT(fused.trainForward, plain.trainForward);
    // ... and the plan still matches the allocator (with fusion, the default).
    const testing::MeasuredPeaks m = testing::measurePeaks(*net, {8, 3, 32, 32});
    EXPECT_TRUE(testing::within10Percent("fused training step", fused.training, m.training));
    EXPECT_TRUE(testing::within10Percent("fused train forward", fused.trainForward, m.trainForward));
}

} // namespace
} // namespace tessera
