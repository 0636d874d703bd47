// Batch norm + ReLU fusion (containers/Fusion.h): a Graph or Sequential runs the pair as one
// backend call where it can, and what it computes does not change: outputs, input
// gradients and parameter gradients equal the unfused run's; the pairs are found only
// where the ReLU alone consumes the batch norm; the memory plan counts what fusion saves.
#include <cmath>

#include "FusionSwitch.h"
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

using testing::FusionSwitch;
using testing::randomTensor;
using testing::relu;

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

// BatchNorm1D over a sequence [N, C, L] (plain 3-D data, which the CPU backend normalises
// viewed as [N, C, L, 1]) fuses with its ReLU too, and gives the unfused pair's results
// against the reference normalisation.
TEST(Fusion, SequenceBatchNormReluGivesTheUnfusedResults) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto bn = node(std::make_shared<BatchNorm1D>(6), data, "bn");
    auto r = node(relu(), bn, "relu");
    auto net = std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{r});
    setNormParams(*net);
    net->setReleaseInBackward(false);
    const Tensor x = randomTensor({4, 6, 9}, 5), dy = randomTensor({4, 6, 9}, 6);
    StepResult fused, plain;
    {
        FusionSwitch on(true);
        fused = trainStep(*net, x, dy);
        EXPECT_TRUE(dynamic_cast<Activation&>(r->module()).passedThrough());
    }
    {
        FusionSwitch off(false);
        plain = trainStep(*net, x, dy);
        EXPECT_FALSE(dynamic_cast<Activation&>(r->module()).passedThrough());
    }
    // y = relu(scale (x - mean) / sqrt(var + eps) + bias) per channel over N and L
    std::vector<float> scale, bias;
    for (const auto& [name, var] : net->namedParams()) {
        (name.find("scale") != std::string::npos ? scale : bias) = var->data.toVector<float>();
    }
    const std::vector<float> xs = x.toVector<float>();
    std::vector<float> want(xs.size());
    for (int64_t c = 0; c < 6; ++c) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < 4; ++n)
            for (int64_t l = 0; l < 9; ++l) sum += xs[static_cast<size_t>((n * 6 + c) * 9 + l)];
        const double mean = sum / 36;
        for (int64_t n = 0; n < 4; ++n)
            for (int64_t l = 0; l < 9; ++l) sq += std::pow(xs[static_cast<size_t>((n * 6 + c) * 9 + l)] - mean, 2);
        const double inv = 1 / std::sqrt(sq / 36 + 1e-5);
        for (int64_t n = 0; n < 4; ++n)
            for (int64_t l = 0; l < 9; ++l) {
                const size_t at = static_cast<size_t>((n * 6 + c) * 9 + l);
                want[at] = static_cast<float>(std::max(0.0, scale[c] * (xs[at] - mean) * inv + bias[c]));
            }
    }
    expectClose(plain.y.toVector<float>(), want, "unfused output");
    expectClose(fused.y.toVector<float>(), plain.y.toVector<float>(), "output");
    expectClose(fused.dx.toVector<float>(), plain.dx.toVector<float>(), "input gradient");
    ASSERT_EQ(fused.paramGrads.size(), plain.paramGrads.size());
    for (size_t i = 0; i < plain.paramGrads.size(); ++i) {
        expectClose(fused.paramGrads[i], plain.paramGrads[i], "parameter gradient " + std::to_string(i));
    }
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
    EXPECT_EQ(pairs[1].activation, &r4->module());
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

// The attributes (running statistics) of every batch norm, in order.
std::vector<std::vector<float>> runningStats(Module& net) {
    std::vector<std::vector<float>> r;
    for (const auto& [name, child] : net.namedChildren()) {
        if (!dynamic_cast<BatchNormND*>(child)) continue;
        r.push_back(child->getAttr("mean").toVector<float>());
        r.push_back(child->getAttr("var").toVector<float>());
    }
    return r;
}

// The block's second batch norm feeds only the sum: the sum runs the normalisation, its
// ReLU and the addition in one call, and everything equals the unfused run's bit for bit
// (the same arithmetic in the same order): outputs in train and eval mode, gradients,
// parameter gradients and running statistics; in float32 and in calcMode(bfloat16).
TEST(Fusion, BatchNormIntoTheSumGivesTheUnfusedResults) {
    for (DType t : {DType::float32, DType::bfloat16}) {
        SCOPED_TRACE(str(t));
        NodePtr add;
        StepResult fused, plain;
        std::vector<float> fusedEval, plainEval;
        std::vector<std::vector<float>> fusedStats, plainStats;
        // In bfloat16 the shortcut (the input) comes in it too, as a block's input would.
        const Tensor x = randomTensor({6, 4, 5, 5}, 1).convertedTo(t);
        const Tensor dy = randomTensor({6, 4, 5, 5}, 2);
        for (bool on : {true, false}) {
            manualSeed(3);
            auto net = block(nullptr, nullptr, &add);
            setNormParams(*net);
            if (t != DType::float32) net->calcMode(t);
            net->setReleaseInBackward(false); // the nodes' values are looked at after the step
            FusionSwitch fusion(on);
            StepResult& r = on ? fused : plain;
            r = trainStep(*net, x, dy);
            Node& bn2 = net->getNodeByName("bn2");
            auto& sum = dynamic_cast<Add&>(add->module());
            EXPECT_EQ(sum.normalisedInSum(), on);
            EXPECT_EQ(dynamic_cast<BatchNormND&>(bn2.module()).deferredToSum(), on);
            // Fused, the batch norm's output is its input: no memory of its own.
            EXPECT_EQ(bn2.outputs()[0].sharesStorage(net->getNodeByName("c2").outputs()[0]), on);
            // ... and backward runs in the sum: the batch norm passes on the input gradient the
            // sum computed, and the ReLU its output gradient, which the sum masks for z (z's
            // gradient is a copy in its dtype where the sum's differs: a CPU without bfloat16
            // kernels writes float32 from convolutions).
            EXPECT_EQ(bn2.inputGrads()[0].sharesStorage(add->inputGrads()[0]), on);
            const Tensor& dz = add->inputGrads()[1];
            const Tensor& reluGrad = net->getNodeByName("out").inputGrads()[0];
            EXPECT_EQ(dz.sharesStorage(reluGrad), !on && dz.dtype() == reluGrad.dtype());
            (on ? fusedStats : plainStats) = runningStats(*net);
            net->evalMode();
            (on ? fusedEval : plainEval) = (*net)(x).convertedTo(DType::float32).toVector<float>();
            EXPECT_EQ(sum.normalisedInSum(), on) << "eval mode";
            // Outside the graph's forward the modules are themselves again.
            EXPECT_FALSE(dynamic_cast<BatchNormND&>(bn2.module()).fuseIntoSum());
            EXPECT_EQ(sum.fusedNorm(), nullptr);
        }
        auto floats = [](const Tensor& v) { return v.convertedTo(DType::float32).toVector<float>(); };
        EXPECT_EQ(floats(fused.y), floats(plain.y));
        EXPECT_EQ(floats(fused.dx), floats(plain.dx));
        EXPECT_EQ(fused.paramGrads, plain.paramGrads);
        EXPECT_EQ(fusedStats, plainStats);
        EXPECT_EQ(fusedEval, plainEval);
        // The ReLU cut something, and the sum mattered.
        const std::vector<float> y = floats(fused.y);
        EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 20);
    }
}

// Where the sum cannot take the batch norm in its call (the operands broadcast, or a
// 16-bit normalisation meets a float32 operand), the normalisation runs alone inside the
// sum, and the results still equal the unfused run's.
TEST(Fusion, ABatchNormTheSumCannotTakeInOneCallRunsAloneInIt) {
    struct Variant {
        std::string name;
        Shape other;
        bool sixteenBit;
    };
    for (const Variant& v :
         {Variant{"broadcast", {1, 4, 1, 1}, false}, Variant{"float32 operand", {3, 4, 5, 5}, true}}) {
        SCOPED_TRACE(v.name);
        std::vector<float> y[2], dx[2];
        for (bool on : {true, false}) {
            manualSeed(6);
            auto data = node(std::make_shared<Identity>(), {}, "data");
            auto other = node(std::make_shared<Identity>(), {}, "other");
            auto bn = node(std::make_shared<BatchNorm2D>(4), data, "bn");
            auto add = node(std::make_shared<Add>(), {bn, other}, "add");
            Graph g({data, other}, {node(relu(), add, "relu")});
            setNormParams(g);
            if (v.sixteenBit) bn->module().calcMode(DType::bfloat16);
            FusionSwitch fusion(on);
            const Tensor x = randomTensor({3, 4, 5, 5}, 7);
            const Tensor o = randomTensor(v.other, 8);
            y[on] = g(Tensors{v.sixteenBit ? x.convertedTo(DType::bfloat16) : x, o})[0]
                        .convertedTo(DType::float32)
                        .toVector<float>();
            EXPECT_FALSE(dynamic_cast<Add&>(add->module()).normalisedInSum());
            EXPECT_EQ(dynamic_cast<BatchNormND&>(bn->module()).deferredToSum(), on);
            dx[on] =
                g.backward(Tensors{randomTensor({3, 4, 5, 5}, 9)})[0].convertedTo(DType::float32).toVector<float>();
        }
        EXPECT_EQ(y[1], y[0]);
        EXPECT_EQ(dx[1], dx[0]);
    }
}

// Which batch norms fuse into their sums: one alone feeding a sum of two with coefficients
// 1, taken once; one per sum.
TEST(Fusion, OnlyABatchNormThatAloneFeedsASumOfTwoFuses) {
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto bn = [](const NodePtr& x, const std::string& name) { return node(std::make_shared<BatchNorm2D>(2), x, name); };
    // Two consumers.
    auto twice = bn(data, "twice");
    auto s1 = node(std::make_shared<Add>(), {twice, data}, "s1");
    auto r1 = node(relu(), twice, "r1");
    // Weighted sum.
    auto weighted = bn(s1, "weighted");
    auto s2 = node(std::make_shared<Add>(std::vector<float>{1.0f, 2.0f}), {weighted, r1}, "s2");
    // A sum of three.
    auto three = bn(s2, "three");
    auto s3 = node(std::make_shared<Add>(), {three, s2, data}, "s3");
    // The sum takes it twice.
    auto doubled = bn(s3, "doubled");
    auto s4 = node(std::make_shared<Add>(), {doubled, doubled}, "s4");
    // Both inputs batch norms: the first in the graph's order fuses (into input 1).
    auto late = bn(s4, "late");
    auto early = bn(s4, "early");
    auto s5 = node(std::make_shared<Add>(std::vector<float>{1.0f, 1.0f}), {late, early}, "s5");
    Graph g({data}, {s5});
    const std::vector<fusion::NormSum> sums = fusion::normSumsOf(g);
    ASSERT_EQ(sums.size(), 1u);
    const bool earlyFirst = g.order()[0] != nullptr && [&] {
        for (Node* n : g.order()) {
            if (n == early.get()) return true;
            if (n == late.get()) return false;
        }
        return false;
    }();
    EXPECT_EQ(sums[0].norm, dynamic_cast<SumFusedNorm*>(&(earlyFirst ? early : late)->module()));
    EXPECT_EQ(sums[0].sum, &s5->module());
    EXPECT_EQ(sums[0].slot, earlyFirst ? 1 : 0);
    const Tensors y = g(Tensors{randomTensor({3, 2, 2, 2}, 8)});
    EXPECT_TRUE(dynamic_cast<Add&>(s5->module()).normalisedInSum());
    for (const NodePtr& n : {s1, s2, s3, s4}) EXPECT_FALSE(dynamic_cast<Add&>(n->module()).normalisedInSum());
    FusionSwitch off(false);
    EXPECT_TRUE(fusion::normSumsOf(g).empty());
}

// normaliseAdd is the sum's call after a forward that deferred to it: refused otherwise,
// and refused for an addend of another shape.
TEST(Fusion, NormaliseAddNeedsADeferredForwardAndAnAddendOfItsShape) {
    BatchNorm2D bn(3);
    const Tensor x = randomTensor({2, 3, 4, 4}, 1);
    bn(x);
    EXPECT_THROW(bn.normaliseAdd(x, &x, true), ModuleError);
    bn.setFuseIntoSum(true, true);
    EXPECT_EQ(bn(x).raw(), x.raw()); // passed through
    const Tensor other = randomTensor({2, 3, 4, 5}, 2);
    EXPECT_THROW(bn.normaliseAdd(x, &other, false), ShapeError);
    // y = relu(bn(x) + x), with the batch's own statistics (scale 1, bias 0).
    const std::vector<float> y = bn.normaliseAdd(x, &x, true).toVector<float>();
    bn.setFuseIntoSum(false, false);
    const std::vector<float> n = bn(x).toVector<float>(), xs = x.toVector<float>();
    for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], std::max(0.0f, n[i] + xs[i])) << i;
}

// sumBackward differentiates relu(bn(x) + z): z's gradient is dy where the result is
// positive and 0 elsewhere, and x's is the batch norm's own backward of that, with its
// parameter gradients, which the module's backward adds while passing x's gradient on.
TEST(Fusion, SumBackwardIsTheBatchNormsBackwardOfTheMaskedGradient) {
    const Tensor x = randomTensor({2, 3, 4, 4}, 1), z = randomTensor({2, 3, 4, 4}, 2);
    const Tensor dy = randomTensor({2, 3, 4, 4}, 3);
    BatchNorm2D bn(3), ref(3);
    for (BatchNorm2D* m : {&bn, &ref}) {
        m->getVar("scale")->data.copyFrom(randomTensor({3}, 4, 0.5f, 1.5f));
        m->getVar("bias")->data.copyFrom(randomTensor({3}, 5, -0.5f, 0.5f));
        m->zeroGradParams();
    }
    Tensor dz;
    EXPECT_THROW(bn.sumBackward(dy, nullptr, &dz), ModuleError); // no forward deferred to a sum
    bn.setFuseIntoSum(true, true);
    bn(x);
    EXPECT_THROW(bn.backward(dy), ModuleError); // the sum's backward comes first
    const Tensor y = bn.normaliseAdd(x, &z, true);
    const Tensor dx = bn.sumBackward(dy, &y, &dz);
    EXPECT_EQ(bn.backward(dx).raw(), dx.raw()); // passed on

    const std::vector<float> ys = y.toVector<float>(), dys = dy.toVector<float>();
    std::vector<float> masked(dys.size());
    for (size_t i = 0; i < dys.size(); ++i) masked[i] = ys[i] > 0 ? dys[i] : 0.0f;
    EXPECT_GT(std::count(masked.begin(), masked.end(), 0.0f), 10);
    EXPECT_LT(std::count(masked.begin(), masked.end(), 0.0f), 86);
    EXPECT_EQ(dz.toVector<float>(), masked);
    ref(x);
    EXPECT_EQ(dx.toVector<float>(), ref.backward(Tensor::fromVector(x.shape(), masked)).toVector<float>());
    EXPECT_EQ(bn.getVar("scale")->grad.toVector<float>(), ref.getVar("scale")->grad.toVector<float>());
    EXPECT_EQ(bn.getVar("bias")->grad.toVector<float>(), ref.getVar("bias")->grad.toVector<float>());
    // Without the ReLU, z's gradient is dy itself.
    bn(x);
    bn.normaliseAdd(x, &z, false);
    bn.sumBackward(dy, nullptr, &dz);
    EXPECT_EQ(dz.raw(), dy.raw());
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
    EXPECT_TRUE(testing::within10Percent("fused inference", fused.inference, m.inference));
    // The batch norms before the sums pass their inputs through: a block's last batch norm
    // keeps no output of its own, in training and in inference.
    EXPECT_LT(fused.inference, plain.inference);
}

} // namespace
} // namespace tessera
