// The execution plan and what it settles: shapes checked once per set of input shapes,
// modules that differentiate their last forward (the train, train, eval, backward
// sequence), one module per graph node, and one error family with context added by
// containers.
#include <atomic>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "GradCheck.h"
#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/DropPath.h"
#include "modules/Dropout.h"
#include "modules/Dropout2D.h"
#include "modules/Flatten.h"
#include "modules/Identity.h"
#include "modules/InstanceNorm2D.h"
#include "modules/Linear.h"
#include "modules/MultiheadAttention.h"
#include "modules/NoiseInjector.h"
#include "modules/PRelu.h"
#include "modules/Pool.h"

namespace tessera {
namespace {
using namespace testing;

// An identity that counts how often its shapes are checked.
class CountingIdentity : public Module {
public:
    explicit CountingIdentity(std::string name = {}) : Module(std::move(name)) {}
    std::string classname() const override { return "CountingIdentity"; }
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    void checkDataShape(const Shapes&) const override { ++checks; }
    mutable int checks = 0;

protected:
    Tensors updateData(const Tensors& data) override { return data; }
    Tensors updateGrad(const Tensors& grad) override { return grad; }
};

TEST(Plan, SequentialChecksOncePerInputShapes) {
    auto count = std::make_shared<CountingIdentity>("count");
    Sequential net("net");
    net.append(count).append(std::make_shared<Linear>(4, 3, LinearOptions{.name = "fc"}));
    for (int i = 0; i < 3; ++i) net(randomTensor({2, 4}, 1));
    EXPECT_EQ(count->checks, 1);
    EXPECT_EQ(net.dataShapeFrom(Shape{2, 4}), (Shape{2, 3})); // the same plan
    EXPECT_EQ(count->checks, 1);
    net(randomTensor({5, 4}, 1)); // new shapes: a new plan
    EXPECT_EQ(count->checks, 2);
    net.evalMode(); // checks may depend on the mode (batch norm's batch statistics)
    net(randomTensor({5, 4}, 1));
    EXPECT_EQ(count->checks, 3);
    net.append(std::make_shared<Activation>(ActivationKind::relu)); // new structure
    net(randomTensor({5, 4}, 1));
    EXPECT_EQ(count->checks, 4);
    // A bad shape is still caught, with the path, after plans were cached.
    EXPECT_TRUE(throwsShapeError([&] { net(randomTensor({5, 6}, 1)); }, {"Sequential 'net'", "input -> count -> fc"}));
}

TEST(Plan, GraphChecksOncePerInputShapes) {
    auto count = std::make_shared<CountingIdentity>("count");
    auto in = node(count, {}, "in");
    auto fc = node(std::make_shared<Linear>(4, 3), in, "fc");
    Graph g({in}, {fc}, "g");
    for (int i = 0; i < 3; ++i) g(randomTensor({2, 4}, 1));
    EXPECT_EQ(count->checks, 1);
    g(randomTensor({3, 4}, 1));
    EXPECT_EQ(count->checks, 2);
    g.backward(randomTensor({3, 3}, 2));
    EXPECT_EQ(g.gradShapeFrom(Shapes{{3, 3}}), (Shapes{{3, 4}}));
    EXPECT_TRUE(throwsShapeError([&] { g(randomTensor({3, 5}, 1)); }, {"in -> fc", "Linear 'fc'"}));
}

// Shape queries may come from several threads at once (a server checking requests of
// different batch sizes against one model): each gets the shapes of its own input.
TEST(Plan, ShapeQueriesFromSeveralThreadsGetTheirOwnShapes) {
    Sequential seq("seq");
    seq.append(std::make_shared<Linear>(8, 16))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Linear>(16, 4));
    auto in = node(std::make_shared<Identity>("in"));
    auto a = node(std::make_shared<Linear>(8, 6), in, "a");
    auto b = node(std::make_shared<Linear>(8, 6), in, "b");
    auto sum = node(std::make_shared<Add>(std::vector<float>{}, "sum"), {a, b});
    auto out = node(std::make_shared<Linear>(6, 4), sum, "out");
    Graph g({in}, {out}, "g");
    std::atomic<int> wrong{0}, queries{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int k = 0; k < 500; ++k) {
                const int64_t batch = 1 + (t * 7 + k) % 13;
                if (seq.dataShapeFrom(Shapes{{batch, 8}}) != Shapes{{batch, 4}}) ++wrong;
                if (g.dataShapeFrom(Shapes{{batch, 8}}) != Shapes{{batch, 4}}) ++wrong;
                queries += 2;
            }
        });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(queries.load(), 4000);
    EXPECT_EQ(wrong.load(), 0);
}

TEST(Plan, SequentialGradShapesComeFromThePlan) {
    // Flatten cannot tell its input shape from the gradient's; the plan can.
    Sequential net("net");
    net.append(std::make_shared<Flatten>("flat")).append(std::make_shared<Linear>(12, 2, LinearOptions{.name = "fc"}));
    EXPECT_EQ(net.dataShapeFrom(Shape{4, 3, 2, 2}), (Shape{4, 2}));
    EXPECT_EQ(net.gradShapeFrom(Shape{4, 2}), (Shape{4, 3, 2, 2})); // no forward has run
    EXPECT_EQ(net.dataShapeFrom(Shape{4, 12}), (Shape{4, 2}));
    EXPECT_EQ(net.gradShapeFrom(Shape{4, 2}), (Shape{4, 12}));
    EXPECT_TRUE(throwsShapeError([&] { net.gradShapeFrom(Shape{4, 3}); }, {"do not match the outputs [4, 2]"}));
    Sequential fresh("fresh");
    fresh.append(std::make_shared<Flatten>());
    EXPECT_TRUE(throwsModuleError([&] { fresh.gradShapeFrom(Shape{4, 2}); }, {"dataShapeFrom or forward first"}));
}

// One module in several nodes: shared weights (a siamese tower, a layer applied twice).
// Each node keeps its own run, so the module may see different shapes in each, and the
// parameter gradients sum over the nodes.
TEST(Plan, OneModuleInTwoNodesSharesItsWeights) {
    manualSeed(3);
    auto tower = std::make_shared<Linear>(4, 3, LinearOptions{.name = "tower"});
    auto x1 = node(std::make_shared<Identity>("left"));
    auto x2 = node(std::make_shared<Identity>("right"));
    auto a = node(tower, x1, "a");
    auto b = node(tower, x2, "b");
    auto ta = node(std::make_shared<Activation>(ActivationKind::tanh), a, "ta");
    auto sum = node(std::make_shared<Add>(), {ta, b}, "sum");
    Graph g({x1, x2}, {sum});
    EXPECT_TRUE(a->sharesModule() && b->sharesModule() && !ta->sharesModule());
    EXPECT_EQ(g.numOfParams(), 4 * 3 + 3); // counted once

    const Tensor in1 = randomTensor({5, 4}, 1), in2 = randomTensor({5, 4}, 2);
    EXPECT_TRUE(checkShapes(g, {in1, in2}));
    EXPECT_TRUE(checkGradients(g, {in1, in2})); // dW = x1' (dy * tanh') + x2' dy: both nodes count

    // The reference: tanh(x1 W + b) + x2 W + b by hand.
    const std::vector<float> y = g({in1, in2})[0].toVector<float>();
    const std::vector<float> w = tower->getVar("W")->data.toVector<float>(),
                             bias = tower->getVar("b")->data.toVector<float>();
    const std::vector<float> v1 = in1.toVector<float>(), v2 = in2.toVector<float>();
    for (int n = 0; n < 5; ++n) {
        for (int j = 0; j < 3; ++j) {
            float l = bias[j], r = bias[j];
            for (int i = 0; i < 4; ++i) {
                l += v1[n * 4 + i] * w[i * 3 + j];
                r += v2[n * 4 + i] * w[i * 3 + j];
            }
            EXPECT_NEAR(y[n * 3 + j], std::tanh(l) + r, 1e-5f);
        }
    }

    // momentum 1 (what the trainer uses after zeroing) adds one step's sum to the old.
    const Tensor dy = randomTensor({5, 3}, 3);
    g.backward(Tensors{dy});
    const std::vector<float> once = tower->getVar("W")->grad.toVector<float>();
    g({in1, in2});
    g.backward(Tensors{dy}, true, true, 1.0f, 1.0f);
    std::vector<float> twice(once.size());
    for (size_t i = 0; i < once.size(); ++i) twice[i] = 2 * once[i];
    EXPECT_TRUE(allClose(tower->getVar("W")->grad, twice, 1e-4f));
}

TEST(Plan, OneModuleInTwoNodesAtDifferentShapesKeepsEachRun) {
    // Max pooling keeps its argmax workspace and dropout its mask: per node, not per module.
    manualSeed(4);
    auto pool = std::make_shared<MaxPool2D>(2);
    auto drop = std::make_shared<Dropout>(DropoutOptions{.p = 0.3f});
    auto x = node(std::make_shared<Identity>("data"));
    auto p1 = node(pool, x, "p1");
    auto d1 = node(drop, p1, "d1");
    auto p2 = node(pool, d1, "p2"); // the same pool on the smaller map
    auto d2 = node(drop, p2, "d2");
    auto flat = node(std::make_shared<Flatten>(), d2, "flat");
    Graph g({x}, {flat});
    const Tensor in = randomTensor({2, 3, 8, 8}, 5);
    EXPECT_EQ(g.dataShapeFrom(Shape{2, 3, 8, 8}), (Shape{2, 3 * 2 * 2}));
    GradCheckOptions opts;
    opts.beforeForward = [&] { drop->generator().manualSeed(11); }; // the same masks in every forward
    EXPECT_TRUE(checkGradients(g, {in}, opts));

    g.evalMode(); // eval: values go after their last consumer, per node
    const Tensor y = g(in);
    EXPECT_EQ(y.shape(), (Shape{2, 12}));
    EXPECT_TRUE(p1->outputs().empty() && d1->outputs().empty() && p2->outputs().empty());
}

TEST(Plan, ParametersSharedWithSetVarSumTheirGradients) {
    // Two modules given one Variable: a plain backward (momentum 0) sums both contributions
    // instead of keeping the last one.
    manualSeed(5);
    auto l1 = std::make_shared<Linear>(3, 3, LinearOptions{.name = "l1"});
    auto l2 = std::make_shared<Linear>(3, 3, LinearOptions{.name = "l2"});
    l2->setVar("W", l1->getVar("W"));
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(l1, x);
    auto b = node(l2, node(std::make_shared<Activation>(ActivationKind::tanh), a, "t"));
    Graph g({x}, {b});
    EXPECT_TRUE(checkGradients(g, {randomTensor({4, 3}, 6)}));

    Sequential seq("seq"); // the same in a Sequential
    auto s1 = std::make_shared<Linear>(3, 3), s2 = std::make_shared<Linear>(3, 3);
    s2->setVar("W", s1->getVar("W"));
    seq.append(s1).append(std::make_shared<Activation>(ActivationKind::tanh)).append(s2);
    EXPECT_TRUE(checkGradients(seq, {randomTensor({4, 3}, 7)}));

    Parallel par("par"); // and in a Parallel
    auto p1 = std::make_shared<Linear>(3, 3), p2 = std::make_shared<Linear>(3, 3);
    p2->setVar("W", p1->getVar("W"));
    par.append(p1).append(p2);
    EXPECT_TRUE(checkGradients(par, {randomTensor({4, 3}, 8), randomTensor({4, 3}, 9)}));
}

TEST(Plan, AContainerInTwoNodesIsAGraphErrorNamingBoth) {
    auto seq = std::make_shared<Sequential>("block");
    seq->append(std::make_shared<Linear>(4, 4));
    auto in = node(std::make_shared<Activation>(ActivationKind::relu), {}, "in");
    auto a = node(seq, in, "a");
    auto b = node(seq, a, "b");
    try {
        Graph g({in}, {b});
        FAIL() << "a container in two nodes was accepted";
    } catch (const GraphError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("a (Sequential)"), std::string::npos) << msg;
        EXPECT_NE(msg.find("b (Sequential)"), std::string::npos) << msg;
        EXPECT_NE(msg.find("container"), std::string::npos) << msg;
    }
}

TEST(Plan, NodeForwardReleasesLikeTheGraphInEvalMode) {
    // A chain with a skip: x -> a -> b -> sum(a, b). The same values are left after
    // Node::forward as after the Graph's forward.
    auto build = [] {
        auto x = node(std::make_shared<Activation>(ActivationKind::tanh), {}, "x");
        auto a = node(std::make_shared<Activation>(ActivationKind::tanh), x, "a");
        auto b = node(std::make_shared<Activation>(ActivationKind::tanh), a, "b");
        auto sum = node(std::make_shared<Add>(), {a, b}, "sum");
        return std::vector<NodePtr>{x, a, b, sum};
    };
    for (bool eval : {true, false}) {
        auto viaNodes = build();
        auto viaGraph = build();
        Graph g({viaGraph[0]}, {viaGraph[3]});
        for (auto& n : viaNodes) eval ? n->module().evalMode() : n->module().trainMode();
        eval ? g.evalMode() : g.trainMode();
        Tensor in = randomTensor({2, 3}, 1);
        viaNodes[0]->forward({in});
        g(in);
        for (size_t i = 0; i < 4; ++i) {
            EXPECT_EQ(viaNodes[i]->module().dataList().empty(), viaGraph[i]->module().dataList().empty())
                << viaNodes[i]->str() << (eval ? " in eval mode" : " in train mode");
        }
        // Eval mode keeps only the output; train mode keeps everything for backward.
        EXPECT_EQ(viaNodes[1]->module().dataList().empty(), eval);
        EXPECT_FALSE(viaNodes[3]->module().dataList().empty());
    }
}

// ---- the train, train, eval, backward sequence -------------------------------------------

// After two train-mode forwards and an eval-mode one at x, backward(dy) must be the
// gradient of the eval-mode function at x (checked against central differences of
// <f(x), dy>), or a clear ModuleError.
::testing::AssertionResult differentiatesLastForward(Module& m, const Shape& shape) {
    m.trainMode();
    m(randomTensor(shape, 11));
    m(randomTensor(shape, 12, -2.0f, 3.0f));
    m.evalMode();
    Tensor x = randomTensor(shape, 13);
    Tensor dy = randomTensor(shape, 14);
    m(x);
    Tensor dx;
    try {
        dx = m.backward(dy).clone();
    } catch (const ModuleError& e) {
        return ::testing::AssertionSuccess() << "refused: " << e.what();
    }
    const std::vector<float> analytic = dx.toVector<float>();
    std::vector<float> xs = x.toVector<float>();
    const std::vector<float> dys = dy.toVector<float>();
    auto loss = [&](const std::vector<float>& v) {
        const std::vector<float> y = m(Tensor::fromVector(shape, v)).toVector<float>();
        double l = 0;
        for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * dys[i];
        return l;
    };
    const float eps = 1e-2f;
    for (size_t i = 0; i < xs.size(); i += std::max<size_t>(1, xs.size() / 24)) {
        const float keep = xs[i];
        xs[i] = keep + eps;
        const double up = loss(xs);
        xs[i] = keep - eps;
        const double down = loss(xs);
        xs[i] = keep;
        const double numeric = (up - down) / (2.0 * eps);
        if (std::abs(numeric - analytic[i]) > 2e-3 + 2e-2 * std::abs(numeric)) {
            return ::testing::AssertionFailure()
                   << m.str() << ": dx[" << i << "] = " << analytic[i] << ", the eval-mode derivative is " << numeric;
        }
    }
    return ::testing::AssertionSuccess();
}

TEST(Plan, StatefulModulesDifferentiateTheirLastForward) {
    struct Case {
        std::function<ModulePtr()> make;
        Shape shape;
    };
    const std::vector<Case> cases = {
        {[] { return std::make_shared<BatchNorm1D>(3); }, {4, 3}},
        {[] { return std::make_shared<BatchNorm2D>(3); }, {2, 3, 3, 3}},
        {[] { return std::make_shared<BatchNorm3D>(2); }, {2, 2, 2, 2, 2}},
        {[] { return std::make_shared<InstanceNorm2D>(3); }, {2, 3, 3, 3}},
        {[] { return std::make_shared<Dropout>(DropoutOptions{.p = 0.5f}); }, {4, 6}},
        {[] { return std::make_shared<Dropout2D>(Dropout2DOptions{.p = 0.5f}); }, {2, 3, 2, 2}},
        {[] { return std::make_shared<NoiseInjector>(NoiseInjectorOptions{.mode = NoiseMode::mul}); }, {4, 6}},
        {[] { return std::make_shared<PRelu>(3); }, {2, 3, 2, 2}},
        {[] { return std::make_shared<MultiheadAttention>(4, 2, MultiheadAttentionOptions{.dropout = 0.5f}); },
         {2, 3, 4}},
        {[] { return std::make_shared<DropPath>(DropPathOptions{.p = 0.5f}); }, {4, 6}},
        {[] {
             auto s = std::make_shared<Sequential>("seq");
             s->append(std::make_shared<BatchNorm2D>(3)).append(std::make_shared<Activation>(ActivationKind::tanh));
             return s;
         },
         {2, 3, 2, 2}},
    };
    for (const Case& c : cases) {
        ModulePtr m = c.make();
        EXPECT_TRUE(differentiatesLastForward(*m, c.shape)) << m->str();
    }
}

TEST(Plan, BatchNormEvalBackwardIsTheEvalDerivative) {
    // Before, this returned the train-mode gradient with the earlier batch's statistics.
    BatchNorm1D bn(2);
    bn(randomTensor({4, 2}, 1));
    bn(randomTensor({4, 2}, 2, -3.0f, 1.0f));
    bn.evalMode();
    bn(randomTensor({4, 2}, 3));
    Tensor dy = randomTensor({4, 2}, 4);
    const std::vector<float> dx = bn.backward(dy).toVector<float>();
    const std::vector<float> var = bn.getAttr("var").toVector<float>();
    const std::vector<float> g = dy.toVector<float>();
    for (size_t i = 0; i < dx.size(); ++i) {
        EXPECT_NEAR(dx[i], g[i] / std::sqrt(var[i % 2] + 1e-5f), 1e-5f) << i; // scale is 1
    }
    // Parameter gradients of an eval-mode forward are refused, not made up.
    bn.trainMode();
    EXPECT_TRUE(throwsModuleError([&] { bn.backward(dy); }, {"train-mode forward", "eval mode"}));
}

// ---- errors ------------------------------------------------------------------------------

TEST(Errors, OneFamilyWithContextAdded) {
    EXPECT_TRUE((std::is_base_of_v<ModuleError, ShapeError>));
    EXPECT_TRUE((std::is_base_of_v<Error, ModuleError>));
    EXPECT_TRUE((std::is_base_of_v<Error, IoError>));
    EXPECT_TRUE((std::is_base_of_v<Error, GraphError>));
    // A state error inside a container stays a ModuleError and gains the path.
    Sequential net("net");
    auto bn = std::make_shared<BatchNorm1D>(2, BatchNormOptions{.name = "bn"});
    net.append(std::make_shared<Linear>(3, 2, LinearOptions{.name = "fc"})).append(bn);
    net.evalMode();
    net(randomTensor({4, 3}, 1));
    net.trainMode();
    try {
        net.backward(randomTensor({4, 2}, 2));
        FAIL() << "no error";
    } catch (const ShapeError& e) {
        FAIL() << "a state error became a ShapeError: " << e.what();
    } catch (const ModuleError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("Sequential 'net': backward at bn: BatchNorm1D 'bn'"), std::string::npos) << msg;
    }
    try {
        throw IoError("file x: bad");
    } catch (const Error&) {
        try {
            rethrowWithContext("model: ");
        } catch (const IoError& e) {
            EXPECT_STREQ(e.what(), "model: file x: bad");
        }
    }
}

} // namespace
} // namespace tessera

namespace tessera {
namespace {

// A training step keeps the frontier of gradients, not all of them: a graph lets a node's
// input gradient go once every parent has used it, a Sequential once the child before has.
// Measured with the CPU allocator's peak: 12 residual blocks of Linear(64, 64) + Tanh at
// batch 256 (64 KiB per value). Keeping every gradient would add about 36 values to the
// forward's peak; the frontier is a handful.
TEST(Plan, TrainingStepHoldsOnlyTheFrontierOfGradients) {
    constexpr int64_t kBatch = 256, kWidth = 64, kBlocks = 12;
    const size_t value = kBatch * kWidth * sizeof(float);
    manualSeed(2);
    auto data = node(std::make_shared<Identity>(), {}, "data");
    NodePtr x = data;
    for (int b = 0; b < kBlocks; ++b) {
        auto lin = node(std::make_shared<Linear>(kWidth, kWidth), x, "lin" + std::to_string(b));
        auto act = node(std::make_shared<Activation>(ActivationKind::tanh), lin, "act" + std::to_string(b));
        x = node(std::make_shared<Add>(), {act, x}, "add" + std::to_string(b));
    }
    Graph graph({data}, {x}, "residual");
    auto seq = std::make_shared<Sequential>("chain");
    for (int b = 0; b < 3 * kBlocks; ++b) {
        seq->append(std::make_shared<Linear>(kWidth, kWidth));
        seq->append(std::make_shared<Activation>(ActivationKind::tanh));
    }
    const Tensor in = randomTensor({kBatch, kWidth}, 3);
    const Tensor dy = randomTensor({kBatch, kWidth}, 4);
    for (Module* m : {static_cast<Module*>(&graph), static_cast<Module*>(seq.get())}) {
        SCOPED_TRACE(m->str());
        Backend& be = backendOf(in);
        m->reset();
        const size_t before = be.memoryStats().current;
        be.resetPeak();
        (*m)(in);
        const size_t forward = be.memoryStats().peak - before;
        const Tensor dx = m->backward(dy, true, true);
        const size_t step = be.memoryStats().peak - before;
        EXPECT_GT(forward, 30 * value); // the values are all kept for backward
        EXPECT_LE(step - forward, 6 * value) << "forward " << forward << " bytes, step " << step << " bytes";
        ASSERT_TRUE(dx.defined());
        EXPECT_EQ(dx.shape(), in.shape());
    }
    // Inputs keep their gradient (it is the result); the nodes inside let theirs go.
    EXPECT_FALSE(data->module().gradList().empty());
    EXPECT_TRUE(x->module().gradList().empty());
    EXPECT_TRUE((*seq)[1].gradList().empty());
    EXPECT_FALSE((*seq)[0].gradList().empty());
}

// Releasing gradients changes no number: with a value used by three consumers (its
// gradient summed from three) and a node whose gradient is released early, the graph's
// gradients still match central differences.
TEST(Plan, ReleasingGradientsChangesNoResult) {
    manualSeed(5);
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto a = node(std::make_shared<Linear>(6, 6), data, "a");
    auto t = node(std::make_shared<Activation>(ActivationKind::tanh), a, "t");
    auto sum = node(std::make_shared<Add>(), {t, data, a}, "sum");
    auto out = node(std::make_shared<Linear>(6, 3), sum, "out");
    Graph graph({data}, {out}, "g");
    EXPECT_TRUE(checkGradients(graph, {randomTensor({4, 6}, 6)}));
}

} // namespace
} // namespace tessera
