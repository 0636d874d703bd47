// The static memory plan against the allocator: planned peaks of inference, a train-mode
// forward and a training step must be within 10% of what memoryStats measures, for
// LeNet (a Sequential with a layout boundary at Flatten), ResNet-18 (a graph with
// residual sums, also in bfloat16), U-Net (skips, concatenations, deconvolutions) and an
// MLP in bfloat16 and vit-tiny (attention: its scratch counted) in float32 and bfloat16
// (Linear layers, row norms and attention writing bfloat16).
#include <cmath>
#include <cstdio>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "models/Zoo.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Attention.h"
#include "modules/Flatten.h"
#include "modules/Identity.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MultiheadAttention.h"
#include "modules/Replicate.h"

namespace tessera {
namespace {

using testing::MeasuredPeaks;
using testing::measurePeaks;
using testing::throwsModuleError;
using testing::throwsShapeError;
using testing::within10Percent;

TEST(MemoryPlan, PlannedPeaksMatchTheAllocatorWithinTenPercent) {
    struct Case {
        const char* name;
        ModulePtr net;
        Shape input;
    };
    manualSeed(1);
    ModulePtr resnetBf16 = loadResNet(18, ResNetStem::cifar, 10);
    resnetBf16->calcMode(DType::bfloat16);         // its convolutions keep their bfloat16 inputs for backward
    auto mlpBf16 = std::make_shared<Sequential>(); // bfloat16 from the first Linear on
    mlpBf16->append(std::make_shared<Linear>(64, 256))
        .append(std::make_shared<Activation>(ActivationKind::gelu))
        .append(std::make_shared<Linear>(256, 256))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Linear>(256, 10));
    mlpBf16->calcMode(DType::bfloat16);
    ModulePtr vitBf16 = loadZooModel("vit-tiny"); // row norms, attention and Linear layers on bfloat16
    vitBf16->calcMode(DType::bfloat16);
    const Case cases[] = {
        {"LeNet", loadLeNet(), {64, 1, 28, 28}},
        {"ResNet-18", loadResNet(18, ResNetStem::cifar, 10), {8, 3, 32, 32}},
        {"ResNet-18 in bfloat16", resnetBf16, {8, 3, 32, 32}},
        {"U-Net", loadZooModel("unet"), {1, 1, 64, 64}},
        {"an MLP in bfloat16", mlpBf16, {64, 64}},
        {"vit-tiny in bfloat16", vitBf16, {16, 1, 28, 28}},
        {"vit-tiny", loadZooModel("vit-tiny"), {16, 1, 28, 28}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const MemoryPlan plan = planMemory(*c.net, {c.input});
        const MeasuredPeaks m = measurePeaks(*c.net, c.input);
        EXPECT_TRUE(within10Percent("inference", plan.inference, m.inference));
        EXPECT_TRUE(within10Percent("train forward", plan.trainForward, m.trainForward));
        EXPECT_TRUE(within10Percent("training step", plan.training, m.training));
        // The plan is of shapes only: planning allocated nothing and ran nothing.
        EXPECT_TRUE(c.net->dataList().empty());
    }
}

// Backward releases what each layer kept once the layer's backward has run: a training
// step of ResNet-18 then peaks lower than with every value kept (setReleaseInBackward
// false), the plan follows the switch, and the layers' values are gone after backward but
// for the graph's output.
TEST(MemoryPlan, BackwardReleasesTheValuesItHasUsed) {
    manualSeed(3);
    const std::shared_ptr<Graph> net = loadResNet(18, ResNetStem::cifar, 10);
    const Shape in{8, 3, 32, 32};
    const MemoryPlan released = planMemory(*net, {in});
    const MeasuredPeaks mReleased = measurePeaks(*net, in);
    net->setReleaseInBackward(false);
    const MemoryPlan kept = planMemory(*net, {in});
    const MeasuredPeaks mKept = measurePeaks(*net, in);
    EXPECT_EQ(released.training, mReleased.training);
    EXPECT_EQ(kept.training, mKept.training);
    EXPECT_EQ(released.trainForward, kept.trainForward); // the forward is the same
    // Without release the step holds every value and the gradients; with it, barely more
    // than the forward's values.
    EXPECT_LT(mReleased.training, mKept.training);
    EXPECT_LT(mReleased.training - mReleased.trainForward, (mKept.training - mKept.trainForward) / 4);
    std::printf("ResNet-18 [8, 3, 32, 32] training step: %.2f MiB with release, %.2f MiB keeping every value\n",
                static_cast<double>(mReleased.training) / (1 << 20), static_cast<double>(mKept.training) / (1 << 20));
    // After a releasing backward only the output's values stay; a second backward is an error.
    net->setReleaseInBackward(true);
    net->trainMode();
    net->reset();
    (*net)(Tensor::full(in, 0.5f));
    net->backward(Tensor::full({8, 10}, 0.01f));
    EXPECT_TRUE(net->getByName("stem_conv").dataList().empty());
    EXPECT_FALSE(net->outputs().at(0)->outputs().empty());
    EXPECT_TRUE(throwsModuleError(
        [&] {
            net->backward(Tensor::full({8, 10}, 0.01f));
        },
        {"a second backward after one forward", "setReleaseInBackward(false) keeps them"}));
    // Kept: every layer's values stay readable after backward, and a second backward works.
    net->setReleaseInBackward(false);
    (*net)(Tensor::full(in, 0.5f));
    net->backward(Tensor::full({8, 10}, 0.01f));
    EXPECT_FALSE(net->getByName("stem_conv").dataList().empty());
    EXPECT_NO_THROW(net->backward(Tensor::full({8, 10}, 0.01f)));
}

// Views cost nothing and eval mode releases values: a plan of a small Sequential by hand.
TEST(MemoryPlan, CountsViewsAndKeptValues) {
    Sequential net("net");
    net.append(std::make_shared<Flatten>())
        .append(std::make_shared<Linear>(12, 5))
        .append(std::make_shared<Activation>(ActivationKind::relu));
    const MemoryPlan plan = planMemory(net, {{4, 3, 2, 2}});
    // Linear's output; Flatten is a view, and so is the ReLU's output (the Linear applies
    // it: containers/Fusion.h)
    const int64_t value = 4 * 5 * sizeof(float);
    EXPECT_EQ(plan.inference, value); // a Sequential keeps its values in eval mode too
    EXPECT_EQ(plan.trainForward, value);
    // Backward: ReLU's input gradient (a value), then Linear's input gradient ([4, 12]:
    // a Sequential differentiates into every child but the first), while both are live.
    EXPECT_EQ(plan.training, 2 * value + 4 * 12 * static_cast<int64_t>(sizeof(float)));
    const MeasuredPeaks m = measurePeaks(net, {4, 3, 2, 2});
    EXPECT_EQ(plan.inference, m.inference);
    EXPECT_EQ(plan.trainForward, m.trainForward);
    EXPECT_EQ(plan.training, m.training);
}

// A Parallel's branches are counted like any other children, not as one leaf.
TEST(MemoryPlan, CountsTheBranchesOfAParallel) {
    manualSeed(2);
    auto wide = std::make_shared<Sequential>("wide");
    wide->append(std::make_shared<Linear>(64, 512))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Linear>(512, 64));
    auto narrow = std::make_shared<Sequential>("narrow");
    narrow->append(std::make_shared<Linear>(64, 128))
        .append(std::make_shared<Activation>(ActivationKind::tanh))
        .append(std::make_shared<Linear>(128, 64));
    auto branches = std::make_shared<Parallel>("branches");
    branches->append(wide).append(narrow);
    Sequential net("net");
    net.append(std::make_shared<Replicate>(2)).append(branches).append(std::make_shared<Add>());
    const MemoryPlan plan = planMemory(net, {{32, 64}});
    const MeasuredPeaks m = measurePeaks(net, {32, 64});
    EXPECT_EQ(plan.inference, m.inference); // Replicate's outputs are views of its input
    EXPECT_EQ(plan.trainForward, m.trainForward);
    EXPECT_EQ(plan.training, m.training);
    // At least the wide branch's hidden value is in the plan: [32, 512], once (its ReLU runs
    // in the Linear before it, whose output the ReLU's is).
    const int64_t hidden = 32 * 512 * static_cast<int64_t>(sizeof(float));
    EXPECT_GE(plan.trainForward, hidden);
    // Unfused, the ReLU's output is a value of its own, and in eval mode the tanh's too.
    setFusion(false);
    const MemoryPlan unfused = planMemory(net, {{32, 64}});
    const MeasuredPeaks u = measurePeaks(net, {32, 64});
    setFusion(true);
    EXPECT_EQ(unfused.trainForward, plan.trainForward + hidden);
    EXPECT_EQ(unfused.inference, plan.inference + hidden + 32 * 128 * static_cast<int64_t>(sizeof(float)));
    EXPECT_EQ(unfused.inference, u.inference);
    EXPECT_EQ(unfused.trainForward, u.trainForward);
}

// Attention's scratch as the allocator sees it, self-attention and query, key and value
// apart: backward releases the joined heads' gradient before the kernel's backward and
// each head's gradient once used. Exact in float32; in bfloat16 the backward's GEMMs
// convert float32 operands, which no plan counts.
TEST(MemoryPlan, CountsTheScratchOfAttention) {
    manualSeed(4);
    // unmasked: fused on the CPU, and causal with dropout (gpt-mini's) fused too
    for (const MultiheadAttentionOptions& options :
         {MultiheadAttentionOptions{}, MultiheadAttentionOptions{.dropout = 0.2f, .causal = true, .seed = 1}}) {
        for (DType compute : {DType::float32, DType::bfloat16}) {
            for (bool self : {true, false}) {
                SCOPED_TRACE(str(compute) + (self ? " self-attention" : " query, key and value apart") +
                             (options.causal ? " causal with dropout" : ""));
                Sequential net("net"); // after a Linear, so that its backward makes the input gradient
                net.append(std::make_shared<Linear>(64, 64));
                if (!self) net.append(std::make_shared<Replicate>(3));
                net.append(std::make_shared<MultiheadAttention>(64, 4, options));
                net.calcMode(compute);
                const MemoryPlan plan = planMemory(net, {{8, 20, 64}});
                const MeasuredPeaks m = measurePeaks(net, {8, 20, 64});
                EXPECT_EQ(plan.inference, m.inference);
                EXPECT_EQ(plan.trainForward, m.trainForward);
                if (compute == DType::float32) {
                    EXPECT_EQ(plan.training, m.training);
                } else {
                    EXPECT_TRUE(within10Percent("training step", plan.training, m.training));
                }
            }
        }
    }
}

// Attention with a learned bias over the batch (an imported Swin's kind): the fused
// kernel's mask and the per-thread sums of its gradient counted exactly.
TEST(MemoryPlan, CountsTheScratchOfMaskedAttention) {
    manualSeed(5);
    auto x = node(std::make_shared<Linear>(16, 16), {}, "x");
    auto bias =
        node(std::make_shared<Parameter>(std::vector<int64_t>{4, 20, 20}, ParameterOptions{.std = 1.0f}), x, "bias");
    auto att =
        node(std::make_shared<ScaledDotProductAttention>(AttentionOptions{.causal = true}), {x, x, x, bias}, "att");
    Graph g({x}, {att}, "masked");
    const MemoryPlan plan = planMemory(g, {{8, 4, 20, 16}});
    const MeasuredPeaks m = measurePeaks(g, {8, 4, 20, 16});
    EXPECT_TRUE(AttentionKernel({.causal = true})
                    .fuses({{8, 4, 20, 16}, {8, 4, 20, 16}, {8, 4, 20, 16}, {8, 4, 20, 20}}, false, DType::float32,
                           Device::cpu(), true));
    EXPECT_EQ(plan.inference, m.inference);
    EXPECT_EQ(plan.trainForward, m.trainForward);
    EXPECT_EQ(plan.training, m.training);
}

// MultiheadAttention with a key-padding mask, and with both masks (one combined mask the
// kernel adds), fused on the CPU: counted exactly.
TEST(MemoryPlan, CountsTheScratchOfMaskedMultiheadAttention) {
    manualSeed(6);
    for (bool both : {false, true}) {
        SCOPED_TRACE(both ? "key-padding and attention masks" : "key-padding mask");
        auto x = node(std::make_shared<Linear>(64, 64), {}, "x");
        auto pad = node(std::make_shared<Identity>(), {}, "pad");
        std::vector<NodePtr> in{x, pad};
        Parents parents{x, pad};
        if (both) {
            in.push_back(node(std::make_shared<Identity>(), {}, "attn"));
            parents.push_back(in.back());
        }
        auto mha = node(std::make_shared<MultiheadAttention>(
                            64, 4, MultiheadAttentionOptions{.causal = true, .keyPaddingMask = true, .attnMask = both}),
                        parents, "mha");
        Graph g(in, {mha}, "masked");
        Shapes shapes{{8, 20, 64}, {8, 20}};
        if (both) shapes.push_back({20, 20});
        const MemoryPlan plan = planMemory(g, shapes);
        const MeasuredPeaks m = measurePeaks(g, shapes);
        EXPECT_EQ(plan.inference, m.inference);
        EXPECT_EQ(plan.trainForward, m.trainForward);
        EXPECT_EQ(plan.training, m.training);
    }
}

TEST(MemoryPlan, BadShapesAreTheModelsShapeError) {
    Sequential net("net");
    net.append(std::make_shared<Linear>(12, 5, LinearOptions{.name = "fc"}));
    EXPECT_TRUE(throwsShapeError([&] { planMemory(net, {{4, 13}}); }, {"fc", "12"}));
}

} // namespace
} // namespace tessera
