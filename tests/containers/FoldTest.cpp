// Folding an eval-mode batch norm into the convolution before it (containers/Fusion.h,
// ConvFoldedNorm): with packed weights a Graph or Sequential runs conv -> batch norm
// [-> ReLU] as one convolution with W' = a W, b' = a b + c; what it computes does not
// change (outputs, eval-mode input and parameter gradients equal the unfolded run's within
// rounding); the folded weights follow the parameters and the running statistics; pairs
// fold only where nothing else reads the convolution's output; the memory plan counts
// what folding saves.
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
#include "modules/Deconv.h"
#include "modules/Identity.h"
#include "training/Optimizer.h"
#include "training/Profile.h"

namespace tessera {
namespace {

using testing::FusionSwitch;
using testing::randomTensor;
using testing::relu;

struct Block {
    std::shared_ptr<Graph> net;
    NodePtr c1, bn1, r1, c2, bn2, add, out;
};

// data -> c1 -> bn1 -> relu -> c2 (no bias) -> bn2 -> (+ data) -> relu: both convolutions
// fold their batch norms, the first with its ReLU; bn2, which would otherwise leave its
// normalisation to the sum, is folded instead.
Block block() {
    Block b;
    auto data = node(std::make_shared<Identity>(), {}, "data");
    b.c1 = node(std::make_shared<Conv2D>(4, 4, 3, ConvOptions{.pad = {1}}), data, "c1");
    b.bn1 = node(std::make_shared<BatchNorm2D>(4), b.c1, "bn1");
    b.r1 = node(relu(), b.bn1, "relu");
    b.c2 = node(std::make_shared<Conv2D>(4, 4, 3, ConvOptions{.pad = {1}, .useBias = false}), b.r1, "c2");
    b.bn2 = node(std::make_shared<BatchNorm2D>(4), b.c2, "bn2");
    b.add = node(std::make_shared<Add>(), {b.bn2, data}, "add");
    b.out = node(relu(), b.add, "out");
    b.net = std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{b.out});
    return b;
}

// Batch norms with parameters and running statistics far from their defaults: a few
// train-mode forwards on shifted data, then random scales and biases (through setVar).
void trainStatistics(Module& net, const Shape& in, uint64_t seed) {
    net.trainMode();
    for (int i = 0; i < 3; ++i) net(randomTensor(in, seed + i, -1.0f, 2.0f));
    for (const auto& [name, var] : net.namedParams()) {
        const bool scale = name.ends_with("scale"), bias = name.ends_with("bias");
        if (scale || bias) {
            var->data.copyFrom(randomTensor(var->data.shape(), ++seed, scale ? 0.5f : -0.5f, scale ? 1.5f : 0.5f));
        }
        if (name.ends_with(".b")) var->data.copyFrom(randomTensor(var->data.shape(), ++seed, -0.3f, 0.3f));
    }
    noteParameterChange(); // the writes above went through memory
    net.evalMode();
}

std::vector<float> values(const Tensor& t) { return t.plain().astype(DType::float32).toVector<float>(); }

// max |a - b| <= tol * max |b|
::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& b, double tol) {
    if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " values against " << b.size();
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::abs(double(a[i]) - b[i]));
        norm = std::max(norm, std::abs(double(b[i])));
    }
    if (diff <= tol * std::max(norm, 1e-3)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "max difference " << diff << " of " << norm;
}

// The unfolded result of the same eval-mode forward (fusion off).
std::vector<float> unfolded(Module& net, const Tensor& x) {
    FusionSwitch off(false);
    return values(net(x));
}

TEST(ConvBatchNormFold, EvalGraphGivesTheUnfoldedResults) {
    manualSeed(11);
    Block b = block();
    const Tensor x = randomTensor({5, 4, 6, 6}, 1);
    trainStatistics(*b.net, x.shape(), 20);
    b.net->packWeights();
    auto& c1 = dynamic_cast<ConvND&>(b.c1->module());
    auto& c2 = dynamic_cast<ConvND&>(b.c2->module());
    auto& bn1 = dynamic_cast<BatchNormND&>(b.bn1->module());
    auto& bn2 = dynamic_cast<BatchNormND&>(b.bn2->module());

    const std::vector<float> folded = values((*b.net)(x));
    // It folded: each batch norm passed its input through, the first ReLU passed the
    // convolution's output through, and the sum added bn2's input as it came.
    EXPECT_TRUE(c1.folded() && c2.folded());
    EXPECT_TRUE(bn1.foldedIntoConv() && bn2.foldedIntoConv());
    EXPECT_FALSE(bn2.deferredToSum());
    EXPECT_TRUE(dynamic_cast<Activation&>(b.r1->module()).passedThrough());
    EXPECT_FALSE(dynamic_cast<Add&>(b.add->module()).normalisedInSum());

    std::vector<float> plain;
    {
        FusionSwitch off(false);
        plain = values((*b.net)(x));
        EXPECT_FALSE(c1.folded() || c2.folded() || bn1.foldedIntoConv() || bn2.foldedIntoConv());
    }
    EXPECT_TRUE(near(folded, plain, 1e-5));
    // Without fold, the same switch setting gives back the batch norm + sum fusion.
    b.net->packWeights(false);
    EXPECT_TRUE(near(values((*b.net)(x)), plain, 1e-5));
    EXPECT_TRUE(bn2.deferredToSum());
    // Outside the graph's forward the modules are themselves again.
    EXPECT_EQ(c1.foldedNorm(), nullptr);
    EXPECT_FALSE(bn1.foldsIntoConv());
}

TEST(ConvBatchNormFold, FoldedWeightsFollowTheParametersAndStatistics) {
    manualSeed(12);
    Block b = block();
    const Tensor x = randomTensor({3, 4, 5, 5}, 3);
    trainStatistics(*b.net, x.shape(), 30);
    b.net->packWeights();
    auto check = [&](const char* what) {
        const std::vector<float> y = values((*b.net)(x));
        EXPECT_TRUE(dynamic_cast<ConvND&>(b.c1->module()).folded()) << what;
        EXPECT_TRUE(near(y, unfolded(*b.net, x), 1e-5)) << what;
        return y;
    };
    const std::vector<float> first = check("first forward");
    EXPECT_EQ(values((*b.net)(x)), first) << "the second forward folds nothing new";

    // A train-mode forward moves the running statistics.
    b.net->trainMode();
    (*b.net)(randomTensor(x.shape(), 4, 0.0f, 3.0f));
    b.net->evalMode();
    const std::vector<float> afterStats = check("new running statistics");
    EXPECT_FALSE(near(afterStats, first, 1e-3));

    // setAttr replaces the statistics; setVar the batch norm's scale.
    auto& bn1 = b.bn1->module();
    bn1.setAttr("mean", randomTensor({4}, 5));
    const std::vector<float> afterAttr = check("setAttr");
    EXPECT_FALSE(near(afterAttr, afterStats, 1e-3));
    bn1.setVar("scale", Variable::of(randomTensor({4}, 6, 0.2f, 2.0f)));
    const std::vector<float> afterVar = check("setVar");
    EXPECT_FALSE(near(afterVar, afterAttr, 1e-3));

    // An optimizer step on the convolution's weights.
    SGD sgd(0.05f);
    sgd.setupOn(*b.net, false);
    for (const auto& [name, var] : b.net->namedParams()) backendOf(var->grad).fill(var->grad, 0.5f);
    sgd.update();
    EXPECT_FALSE(near(check("optimizer step"), afterVar, 1e-3));

    // A write through memory is seen after packWeights() again, as for packed weights.
    b.c1->module().getVar("W")->data.data<float>()[0] += 1.0f;
    b.net->packWeights();
    check("packWeights after a write through memory");

    // Train mode and packWeights(false) drop the folded copies.
    Backend& be = backendFor(Device::cpu());
    const size_t withFolds = be.memoryStats().current;
    b.net->trainMode();
    EXPECT_LT(be.memoryStats().current, withFolds);
    b.net->evalMode();
    check("after train mode");
    b.net->packWeights(false);
    (*b.net)(x);
    EXPECT_FALSE(dynamic_cast<ConvND&>(b.c1->module()).folded()) << "packWeights(false): no folding";
}

TEST(ConvBatchNormFold, OnlyWhereNothingElseReadsTheConvolution) {
    manualSeed(13);
    const Tensor x = randomTensor({2, 3, 6, 6}, 7);
    // data -> conv -> bn -> out, with the convolution's output also read by a second branch.
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto conv = node(std::make_shared<Conv2D>(3, 4, 3, ConvOptions{.pad = {1}}), data, "conv");
    auto bn = node(std::make_shared<BatchNorm2D>(4), conv, "bn");
    auto side = node(relu(), conv, "side");
    auto sum = node(std::make_shared<Add>(), {bn, side}, "sum");
    Graph shared({data}, {sum});
    trainStatistics(shared, x.shape(), 40);
    shared.packWeights();
    const std::vector<float> y = values(shared(x));
    EXPECT_FALSE(dynamic_cast<ConvND&>(conv->module()).folded()) << "the second reader needs the raw convolution";
    EXPECT_TRUE(near(y, unfolded(shared, x), 1e-6));

    // Deconvolutions, PuzzleLib's flat BatchNorm, unpacked weights and train mode do not fold.
    Sequential deconv;
    deconv.append(std::make_shared<Deconv2D>(3, 4, 2, ConvOptions{.stride = 2}));
    deconv.append(std::make_shared<BatchNorm2D>(4));
    trainStatistics(deconv, x.shape(), 60);
    deconv.packWeights();
    EXPECT_TRUE(near(values(deconv(x)), unfolded(deconv, x), 1e-6));
    EXPECT_FALSE(dynamic_cast<ConvND&>(deconv[0]).folded());

    Sequential flat;
    flat.append(std::make_shared<Conv2D>(3, 2, 3));
    flat.append(std::make_shared<BatchNorm>(2 * 4 * 4));
    trainStatistics(flat, x.shape(), 70);
    flat.packWeights();
    EXPECT_TRUE(near(values(flat(x)), unfolded(flat, x), 1e-6));
    EXPECT_FALSE(dynamic_cast<ConvND&>(flat[0]).folded());

    Sequential seq;
    seq.append(std::make_shared<Conv2D>(3, 4, 3));
    seq.append(std::make_shared<BatchNorm2D>(4));
    trainStatistics(seq, x.shape(), 80);
    seq(x);
    EXPECT_FALSE(dynamic_cast<ConvND&>(seq[0]).folded()) << "without packWeights";
    seq.packWeights();
    seq(x);
    EXPECT_TRUE(dynamic_cast<ConvND&>(seq[0]).folded());
    // A batch norm left in train mode in an eval-mode model normalises itself.
    seq[1].trainMode();
    seq(x);
    EXPECT_FALSE(dynamic_cast<ConvND&>(seq[0]).folded());
    EXPECT_FALSE(dynamic_cast<BatchNormND&>(seq[1]).foldedIntoConv());
}

TEST(ConvBatchNormFold, SequentialOfEverySpatialRankAndBfloat16) {
    manualSeed(14);
    struct Case {
        ModulePtr conv, norm;
        Shape in;
    };
    std::vector<Case> cases;
    cases.push_back(
        {std::make_shared<Conv1D>(3, 5, 3, ConvOptions{.pad = {1}}), std::make_shared<BatchNorm1D>(5), Shape{4, 3, 9}});
    cases.push_back({std::make_shared<Conv2D>(3, 5, 3, ConvOptions{.stride = 2, .groups = 1}),
                     std::make_shared<BatchNorm2D>(5), Shape{4, 3, 9, 9}});
    cases.push_back({std::make_shared<Conv2D>(4, 4, 3, ConvOptions{.pad = {1}, .groups = 4}),
                     std::make_shared<BatchNorm2D>(4), Shape{4, 4, 7, 7}});
    cases.push_back({std::make_shared<Conv3D>(2, 3, 2), std::make_shared<BatchNorm3D>(3), Shape{2, 2, 4, 4, 4}});
    uint64_t seed = 90;
    for (const Case& c : cases) {
        Sequential seq;
        seq.append(c.conv);
        seq.append(c.norm);
        seq.append(relu());
        trainStatistics(seq, c.in, seed += 10);
        seq.packWeights();
        const Tensor x = randomTensor(c.in, seed);
        const std::vector<float> y = values(seq(x));
        EXPECT_TRUE(dynamic_cast<ConvND&>(seq[0]).folded()) << c.conv->str();
        EXPECT_TRUE(dynamic_cast<Activation&>(seq[2]).passedThrough()) << c.conv->str();
        // The convolution applied the ReLU; the batch norm's own output had negatives.
        const std::vector<float> convOut = values(seq[0].data());
        EXPECT_GE(*std::min_element(convOut.begin(), convOut.end()), 0.0f);
        EXPECT_TRUE(near(y, unfolded(seq, x), 1e-5)) << c.conv->str();
        {
            FusionSwitch off(false);
            seq(x);
            const std::vector<float> normOut = values(seq[1].data());
            EXPECT_GT(std::count_if(normOut.begin(), normOut.end(), [](float v) { return v < 0; }), 3);
        }
        // Eval-mode backward after a folded forward: the input gradient is the unfolded one.
        const Tensor dy = randomTensor(seq.dataShapeFrom(Shapes{c.in})[0], seed + 1);
        auto gradients = [&](bool fold) {
            FusionSwitch sw(fold);
            seq(x);
            EXPECT_EQ(dynamic_cast<ConvND&>(seq[0]).folded(), fold);
            seq.zeroGradParams();
            return values(seq.backward(dy, false, true));
        };
        EXPECT_TRUE(near(gradients(true), gradients(false), 1e-5)) << c.conv->str() << " input gradient";
        // In bfloat16 the folded weights are rounded instead of the convolution's output:
        // within bfloat16's rounding of the unfolded run.
        seq.calcMode(DType::bfloat16);
        const std::vector<float> low = values(seq(x));
        EXPECT_TRUE(dynamic_cast<ConvND&>(seq[0]).folded()) << c.conv->str();
        EXPECT_TRUE(near(low, unfolded(seq, x), 3e-2)) << c.conv->str();
        EXPECT_TRUE(near(low, y, 3e-2)) << c.conv->str();
    }
}

TEST(ConvBatchNormFold, TheMemoryPlanCountsWhatFoldingSaves) {
    manualSeed(15);
    // A chain peaks where a batch norm reads a convolution's output: folded, one buffer.
    Sequential chain;
    for (int64_t inmaps : {3, 8}) {
        chain.append(std::make_shared<Conv2D>(inmaps, 8, 3, ConvOptions{.pad = {1}}));
        chain.append(std::make_shared<BatchNorm2D>(8));
        chain.append(relu());
    }
    const Shape small{4, 3, 16, 16};
    const MemoryPlan chainPlain = planMemory(chain, {small});
    chain.packWeights();
    const MemoryPlan chainFolded = planMemory(chain, {small});
    EXPECT_LT(chainFolded.inference, chainPlain.inference);
    EXPECT_EQ(chainFolded.training, chainPlain.training); // training does not fold

    // ResNet-18: no larger, and the plan matches the allocator: a forward after the one
    // that folded (the folded and packed weights, like the parameters, exist before it).
    auto net = loadResNet(18, ResNetStem::cifar, 10);
    const Shape in{8, 3, 32, 32};
    const MemoryPlan plain = planMemory(*net, {in});
    net->packWeights();
    const MemoryPlan folded = planMemory(*net, {in});
    EXPECT_LE(folded.inference, plain.inference);
    EXPECT_EQ(folded.training, plain.training);
    Backend& be = backendFor(Device::cpu());
    const Tensor x = Tensor::full(in, 0.5f);
    net->evalMode();
    (*net)(x);
    net->reset();
    const size_t before = be.memoryStats().current;
    be.resetPeak();
    (*net)(x);
    const auto measured = static_cast<int64_t>(be.memoryStats().peak - before);
    EXPECT_TRUE(testing::within10Percent("folded inference", folded.inference, measured));
    net->packWeights(false);
}

TEST(ConvBatchNormFold, AnEvalProfileShowsTheFoldedLayers) {
    manualSeed(16);
    Sequential seq;
    seq.append(std::make_shared<Conv2D>(3, 4, 3));
    seq.append(std::make_shared<BatchNorm2D>(4));
    seq.append(relu());
    seq.packWeights();
    ProfileOptions opts;
    opts.train = false;
    opts.warmup = 1;
    opts.steps = 1;
    const Profile p = profile(seq, {randomTensor({2, 3, 6, 6}, 9)}, opts);
    ASSERT_EQ(p.rows.size(), 3u);
    EXPECT_EQ(p.rows[0].module, "Conv2D+BatchNorm+ReLU");
    EXPECT_TRUE(p.rows[1].fused);
    EXPECT_TRUE(p.rows[2].fused);
}

} // namespace
} // namespace tessera
