#include "containers/Graph.h"

#include "GradCheck.h"
#include "backend/Backend.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/GatherElements.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/Split.h"
#include "training/CrossEntropy.h"
#include "training/Optimizer.h"
#include <functional>

namespace tessera {
namespace {
using namespace testing;

ModulePtr linear(int64_t in, int64_t out, const std::string& name) {
    return std::make_shared<Linear>(in, out, LinearOptions{.name = name});
}
ModulePtr relu(const std::string& name = {}) {
    return std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = name});
}
ModulePtr tanhAct() { return std::make_shared<Activation>(ActivationKind::tanh); }

// Randomise the biases too, so that the gradient checks see them.
void randomiseBiases(Module& m) {
    uint64_t seed = 100;
    for (const auto& [name, var] : m.namedParams()) {
        if (name.ends_with(".b")) var->data.copyFrom(randomTensor(var->data.shape(), seed++, -0.5f, 0.5f));
    }
}

// A chain of 200,000 nodes runs forward and backward, and its release (the last node
// owning all the others through its parents) does not recurse once per node: it used to
// overflow the stack at about a million.
TEST(Graph, DeepChainRunsAndReleasesWithoutRecursion) {
    auto in = node(std::make_shared<Identity>(), {}, "in");
    NodePtr last = in;
    for (int i = 0; i < 200000; ++i) last = node(std::make_shared<MulAddConst>(1.0f, 1e-6f), last);
    {
        Graph g({in}, {last}, "chain");
        const Tensor y = g(Tensor::zeros({1, 2}));
        EXPECT_NEAR(y.toVector<float>()[0], 0.2f, 1e-3f);
        EXPECT_TRUE(allClose(g.backward(Tensor::full({1, 2}, 1.0f)), {1.0f, 1.0f}));
    }
    std::weak_ptr<Node> first = in;
    in.reset();
    last.reset(); // releases all 200,001
    EXPECT_TRUE(first.expired());
}

// A node that goes takes its edges with it: a second graph made from the same input and
// dropped leaves the input's fwds as they were, and the first graph still runs (it used
// to walk to the destroyed child in backward). Its parents that go with it detach too.
TEST(Graph, DestroyedChildrenLeaveTheirParentsFwds) {
    manualSeed(2);
    auto x = node(std::make_shared<Identity>("x"));
    auto h = node(linear(4, 3, "h"), x);
    Graph net({x}, {node(linear(3, 2, "out"), h)}, "net");
    ASSERT_EQ(x->fwds().size(), 1u);
    {
        auto side = node(linear(4, 5, "side"), x);
        auto top = node(relu("top"), {side, h});
        Graph other({x}, {top}, "other");
        EXPECT_EQ(x->fwds().size(), 2u);
        EXPECT_EQ(h->fwds().size(), 2u);
    }
    EXPECT_EQ(x->fwds().size(), 1u);
    EXPECT_EQ(h->fwds().size(), 1u);
    EXPECT_EQ(x->fwds()[0].node, h.get());
    const Tensor in = randomTensor({6, 4}, 3);
    for (int pass = 0; pass < 3; ++pass) {
        const Tensor y = net(in);
        EXPECT_EQ(y.shape(), (Shape{6, 2}));
        EXPECT_EQ(net.backward(randomTensor({6, 2}, 4)).shape(), (Shape{6, 4}));
    }
}

TEST(Graph, DiamondMatchesHandWiring) {
    manualSeed(1);
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(linear(4, 3, "a"), x);
    auto b = node(linear(4, 3, "b"), x);
    auto sum = node(std::make_shared<Add>(), {a, b}, "sum");
    Graph g({x}, {sum}, "diamond");

    Tensor in = randomTensor({2, 4}, 1);
    Tensor y = g(in);
    auto& la = g.getNodeByName("a").module();
    auto& lb = g.getNodeByName("b").module();
    Tensor ya = la(in), yb = lb(in);
    std::vector<float> expected = ya.toVector<float>();
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += yb.toVector<float>()[i];
    EXPECT_TRUE(allClose(y, expected));
    // The unnamed Add node got a generated name; the order starts at the input.
    EXPECT_EQ(g.order().front()->name(), "data");
    EXPECT_EQ(g.order().back()->name(), "sum");
    EXPECT_EQ(g.numOfParams(), 2 * (4 * 3 + 3));
}

TEST(Graph, GradientThroughDiamondWithFanOut) {
    manualSeed(2);
    auto x = node(std::make_shared<Identity>("data"));
    auto h = node(linear(5, 4, "h"), x);
    auto t = node(tanhAct(), h, "t"); // h fans out to t and to the Add
    auto u = node(linear(4, 4, "u"), t);
    auto sum = node(std::make_shared<Add>(std::vector<float>{1.0f, 0.5f}), {u, h}, "sum");
    Graph g({x}, {sum});
    randomiseBiases(g);
    EXPECT_TRUE(checkGradients(g, {randomTensor({3, 5}, 1)}));
}

TEST(Graph, ResidualBlock) {
    manualSeed(3);
    auto x = node(std::make_shared<Identity>("data"));
    auto fc1 = node(linear(6, 6, "fc1"), x);
    auto act = node(tanhAct(), fc1, "act");
    auto fc2 = node(linear(6, 6, "fc2"), act);
    auto res = node(std::make_shared<Add>(), {x, fc2}, "res");
    Graph g({x}, {res}, "block");
    randomiseBiases(g);
    EXPECT_TRUE(checkGradients(g, {randomTensor({2, 6}, 1)}));
    EXPECT_TRUE(checkShapes(g, {randomTensor({2, 6}, 1)}));
    std::vector<std::string> names;
    for (const auto& [n, v] : g.namedParams()) names.push_back(n);
    EXPECT_EQ(names, (std::vector<std::string>{"fc1.W", "fc1.b", "fc2.W", "fc2.b"}));
}

TEST(Graph, InceptionStyleConcat) {
    manualSeed(4);
    auto x = node(std::make_shared<Identity>("data"));
    auto b1 = node(linear(4, 2, "b1"), x);
    auto b2a = node(linear(4, 3, "b2a"), x);
    auto b2b = node(tanhAct(), b2a, "b2b");
    auto b3 = node(linear(4, 1, "b3"), x);
    auto cat = node(std::make_shared<Concat>(1), {b1, b2b, b3}, "cat");
    Graph g({x}, {cat});
    randomiseBiases(g);
    EXPECT_EQ(g.dataShapeFrom(Shape{7, 4}), (Shape{7, 6}));
    EXPECT_TRUE(checkShapes(g, {randomTensor({2, 4}, 1)}));
    EXPECT_TRUE(checkGradients(g, {randomTensor({2, 4}, 1)}));
}

TEST(Graph, SplitSlotsGoToDifferentConsumers) {
    manualSeed(5);
    auto x = node(std::make_shared<Identity>("data"));
    auto split = node(std::make_shared<Split>(1, std::vector<int64_t>{2, 3}), x, "split");
    auto left = node(linear(2, 2, "left"), Parent{split, 0});
    auto right = node(linear(3, 2, "right"), Parent{split, 1});
    auto both = node(std::make_shared<Concat>(1), {Parent{split, std::vector<int>{1, 0}}}, "swap");
    auto out = node(std::make_shared<Concat>(1), {left, right, both}, "out");
    Graph g({x}, {out});
    randomiseBiases(g);
    EXPECT_EQ(split->fwds().size(), 3u);
    EXPECT_EQ(left->bwds()[0].slots, std::vector<int>{0});
    EXPECT_EQ(both->bwds()[0].slots, (std::vector<int>{1, 0}));
    Tensor in = Tensor::fromVector({1, 5}, std::vector<float>{1, 2, 3, 4, 5});
    Tensor y = g(in);
    EXPECT_EQ(y.shape(), (Shape{1, 9}));
    const std::vector<float> v = y.toVector<float>();
    EXPECT_EQ(std::vector<float>(v.begin() + 4, v.end()), (std::vector<float>{3, 4, 5, 1, 2})); // swapped halves
    EXPECT_TRUE(checkGradients(g, {randomTensor({2, 5}, 1)}));
}

TEST(Graph, UnconsumedSplitOutputGetsZeroGradient) {
    auto x = node(std::make_shared<Identity>("data"));
    auto split = node(std::make_shared<Split>(1, std::vector<int64_t>{1, 1}), x, "split");
    auto first = node(std::make_shared<Identity>("first"), Parent{split, 0});
    Graph g({x}, {first});
    g(Tensor::fromVector({1, 2}, std::vector<float>{3, 4}));
    EXPECT_TRUE(allClose(g.backward(Tensor::fromVector({1, 1}, std::vector<float>{7})), {7, 0}));
    EXPECT_EQ(g.gradShapeFrom(Shape{1, 1}), (Shape{1, 2}));
}

TEST(Graph, TwoInputsTwoOutputs) {
    manualSeed(6);
    auto a = node(std::make_shared<Identity>("a"));
    auto b = node(std::make_shared<Identity>("b"));
    auto fa = node(linear(3, 2, "fa"), a);
    auto fb = node(linear(4, 2, "fb"), b);
    auto sum = node(std::make_shared<Add>(), {fa, fb}, "sum");
    auto prod = node(std::make_shared<Mul>(), {fa, fb}, "prod");
    Graph g({a, b}, {sum, prod});
    randomiseBiases(g);
    EXPECT_EQ(g.outputCount(), 2u);
    EXPECT_EQ(g.dataShapeFrom(Shapes{Shape{5, 3}, Shape{5, 4}}), (Shapes{Shape{5, 2}, Shape{5, 2}}));
    EXPECT_TRUE(checkShapes(g, {randomTensor({2, 3}, 1), randomTensor({2, 4}, 2)}));
    EXPECT_TRUE(checkGradients(g, {randomTensor({2, 3}, 1), randomTensor({2, 4}, 2)}));
    EXPECT_TRUE(throwsShapeError([&] { g(Tensors{randomTensor({2, 3}, 1)}); }, {"expects 2 input tensors, got 1"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            g(Tensors{randomTensor({2, 3}, 1), Tensor::zeros({2, 4}, DType::int32)});
        },
        {"b -> fb: Linear 'fb'", "int32"}));
}

// A module of several inputs that all come from the graph's inputs (through Identity or
// Reshape nodes) checks their dtypes together before anything runs: GatherElements refuses
// float positions, naming its node; and an integer value's undefined gradient (an ArgMax's,
// the positions') adds nothing where a float gradient meets it, whichever comes first.
TEST(Graph, SeveralInputsCheckTheirDTypesTogetherAndIntegerGradientsAddNothing) {
    auto x = node(std::make_shared<Identity>("x"));
    auto at = node(std::make_shared<Identity>("at"));
    auto flat = node(std::make_shared<Reshape>(Shape{0, 3, 4}), at, "flat");
    auto take = node(std::make_shared<GatherElements>(1), {x, flat}, "take");
    Graph g({x, at}, {take});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            g.checkDataType({DType::float32, DType::float32});
        },
        {"take: GatherElements 'take'", "positions", "expected int32"}));
    EXPECT_NO_THROW(g.checkDataType({DType::float32, DType::int32}));
    EXPECT_NO_THROW(g.checkDataType({DType::float32})); // the positions' dtype not given: not checked
    // Integers as the second input of a graph inside, its first computed (an imported loss:
    // log-probabilities and targets), cast to float there: checked through it.
    auto ix = node(std::make_shared<Identity>("ix"));
    auto it = node(std::make_shared<Identity>("it"));
    auto cast = node(std::make_shared<Cast>(DType::int32, DType::float32), it, "cast");
    auto inner =
        std::make_shared<Graph>(std::vector<NodePtr>{ix, it},
                                std::vector<NodePtr>{node(std::make_shared<Mul>(), {ix, cast}, "times")}, "inner");
    auto y = node(std::make_shared<Identity>("y"));
    auto positions = node(std::make_shared<Identity>("positions"));
    auto scaled = node(std::make_shared<MulAddConst>(2.0f, 0.0f), y, "scaled");
    Graph outer({y, positions}, {node(inner, {scaled, positions}, "inner")});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            outer.checkDataType({DType::float32, DType::float32});
        },
        {"positions -> inner (input it) -> cast: Cast 'cast'", "int32"}));
    EXPECT_NO_THROW(outer.checkDataType({DType::float32, DType::int32}));
    // y = [x.gather(1, argmax(x, 1)), x] (the maximum over dim 1 beside x): dx is dy's second
    // part plus the first's at the maxima.
    for (const bool gatherFirst : {true, false}) {
        auto in = node(std::make_shared<Identity>("in"));
        auto best = node(std::make_shared<ArgMax>(1, true), in, "best");
        auto picked = node(std::make_shared<GatherElements>(1), {in, best}, "picked");
        auto copy = node(std::make_shared<Identity>(), in, "copy");
        auto both =
            node(std::make_shared<Concat>(1), gatherFirst ? Parents{picked, copy} : Parents{copy, picked}, "both");
        Graph h({in}, {both});
        const Tensor v = Tensor::fromVector({1, 3, 2}, std::vector<float>{1, 6, 5, 2, 3, 4});
        ASSERT_EQ(h(v).shape(), (Shape{1, 4, 2}));
        const std::vector<float> dy = {1, 2, 10, 20, 30, 40, 50, 60};
        const std::vector<float> want =
            gatherFirst ? std::vector<float>{10, 22, 31, 40, 50, 60} : std::vector<float>{1, 62, 60, 20, 30, 40};
        EXPECT_TRUE(allClose(h.backward(Tensor::fromVector({1, 4, 2}, dy)), want)) << gatherFirst;
    }
}

TEST(Graph, NestedGraphInSequentialInGraph) {
    manualSeed(7);
    // inner: a residual block as a Graph
    auto ix = node(std::make_shared<Identity>("in"));
    auto ifc = node(linear(4, 4, "fc"), ix);
    auto iadd = node(std::make_shared<Add>(), {ix, ifc}, "add");
    auto inner = std::make_shared<Graph>(std::vector<NodePtr>{ix}, std::vector<NodePtr>{iadd}, "res");
    // middle: Sequential(res, tanh)
    auto seq = std::make_shared<Sequential>("stage");
    seq->append(inner).append(tanhAct());
    // outer: data -> stage -> head, plus a skip into a Concat
    auto x = node(std::make_shared<Identity>("data"));
    auto stage = node(seq, x);
    auto head = node(linear(4, 3, "head"), stage);
    auto out = node(std::make_shared<Concat>(1), {head, x}, "out");
    Graph g({x}, {out}, "net");
    randomiseBiases(g);

    EXPECT_EQ(g.dataShapeFrom(Shape{2, 4}), (Shape{2, 7}));
    EXPECT_TRUE(checkShapes(g, {randomTensor({2, 4}, 1)}));
    EXPECT_TRUE(checkGradients(g, {randomTensor({2, 4}, 1)}));
    EXPECT_EQ(&g.getByName("stage.res.fc"), &inner->getNodeByName("fc").module());
    std::vector<std::string> names;
    for (const auto& [n, v] : g.namedParams()) names.push_back(n);
    EXPECT_EQ(names, (std::vector<std::string>{"stage.res.fc.W", "stage.res.fc.b", "head.W", "head.b"}));
}

TEST(Graph, NodeApiForwardAndBackwardTraversal) {
    manualSeed(8);
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(linear(3, 3, "a"), x);
    auto b = node(linear(3, 3, "b"), x);
    auto sum = node(std::make_shared<Add>(), {a, b}, "sum");
    Graph g({x}, {sum});
    Tensor in = randomTensor({2, 3}, 1);
    Tensor expected = g(in);
    Tensor dy = randomTensor({2, 3}, 2);
    Tensor expectedGrad = g.backward(dy).clone();

    for (Node* n : g.order()) n->reset();
    x->forward({in}); // PuzzleLib style: run from the input, children once their parents ran
    EXPECT_TRUE(allClose(sum->module().data(), expected.toVector<float>()));
    sum->backward({dy});
    EXPECT_TRUE(allClose(x->module().grad(), expectedGrad.toVector<float>()));
    EXPECT_TRUE(sum->bwdVisited && x->bwdVisited);
    x->clearTraverse();
    EXPECT_FALSE(x->fwdVisited || x->bwdVisited);
    EXPECT_EQ(a->str(), "a (Linear)");
}

// The PuzzleLib doors run through the graph engine: the same values, the same release in
// eval mode, the same skipping of nodes nothing needs and release of spent gradients.
TEST(Graph, NodeDoorsRunLikeTheGraph) {
    manualSeed(9);
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(linear(3, 3, "a"), x);
    auto t = node(tanhAct(), x, "t");
    auto sum = node(std::make_shared<Add>(), {a, t}, "sum");
    Graph g({x}, {sum});
    Tensor in = randomTensor({2, 3}, 1), dy = randomTensor({2, 3}, 2);

    g.evalMode();
    const std::vector<float> expected = g(in).toVector<float>();
    for (Node* n : g.order()) n->reset();
    x->forward({in});
    EXPECT_TRUE(allClose(sum->module().data(), expected));
    for (const NodePtr& n : {x, a, t}) EXPECT_TRUE(n->module().dataList().empty()) << n->str() << " kept its value";

    g.trainMode();
    g(in);
    g.backward(dy, /*updParamGrads=*/true, /*updGrad=*/false);
    const std::vector<float> graphW = g.getByName("a").getVar("W")->grad.toVector<float>();
    EXPECT_TRUE(t->module().gradList().empty()); // tanh: no parameters, nothing upstream needs it
    g.reset();
    x->forward({in});
    sum->backward({dy}, /*updParamGrads=*/true, /*updGrad=*/false);
    EXPECT_TRUE(allClose(a->module().getVar("W")->grad, graphW));
    EXPECT_TRUE(t->module().gradList().empty()); // skipped through the door too
    EXPECT_TRUE(x->module().gradList().empty()); // no input gradient was asked for
    EXPECT_TRUE(sum->module().gradList().empty()) << "the sum's input gradients outlived their use";
    EXPECT_TRUE(sum->bwdVisited && a->bwdVisited && t->bwdVisited && x->bwdVisited);
}

// ---- every GraphError ------------------------------------------------------------------

::testing::AssertionResult throwsGraphError(const std::function<void()>& f, const std::vector<std::string>& parts) {
    return throwsError<GraphError>(f, parts);
}

TEST(Graph, ErrorInputWithParents) {
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(std::make_shared<Identity>("a"), x);
    auto b = node(std::make_shared<Identity>("b"), a);
    EXPECT_TRUE(throwsGraphError([&] { Graph({a}, {b}); }, {"input a (Identity) has parents (data (Identity))"}));
}

TEST(Graph, ErrorOutputWithChildren) {
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(std::make_shared<Identity>("a"), x);
    auto b = node(std::make_shared<Identity>("b"), a);
    EXPECT_TRUE(throwsGraphError([&] { Graph({x}, {a, b}); }, {"output a (Identity) has children (b (Identity))"}));
}

TEST(Graph, ErrorOutputNotReachableFromInputs) {
    auto x = node(std::make_shared<Identity>("data"));
    auto stray = node(std::make_shared<Identity>("stray"));
    auto sum = node(std::make_shared<Add>(), {x, stray}, "sum");
    EXPECT_TRUE(throwsGraphError([&] { Graph({x}, {sum}); }, {"stray (Identity)", "not graph inputs"}));
}

TEST(Graph, ErrorInputLeadsNowhere) {
    auto x = node(std::make_shared<Identity>("data"));
    auto unused = node(std::make_shared<Identity>("unused"));
    auto a = node(std::make_shared<Identity>("a"), x);
    EXPECT_TRUE(throwsGraphError(
        [&] {
            Graph({x, unused}, {a});
        },
        {"input unused (Identity) does not lead to any output"}));
}

TEST(Graph, ErrorDuplicateNames) {
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(std::make_shared<Identity>(), x, "twin");
    auto b = node(std::make_shared<Identity>(), a, "twin");
    EXPECT_TRUE(throwsGraphError([&] { Graph({x}, {b}); }, {"two nodes are named 'twin'"}));
    auto c = node(std::make_shared<Identity>(), x, "a.b");
    EXPECT_TRUE(throwsGraphError([&] { Graph({x}, {c}); }, {"'a.b' contains '.'"}));
}

TEST(Graph, ErrorSlotOutOfRange) {
    auto x = node(std::make_shared<Identity>("data"));
    auto split = node(std::make_shared<Split>(1, std::vector<int64_t>{1, 1}), x, "split");
    EXPECT_TRUE(throwsGraphError(
        [&] {
            node(std::make_shared<Identity>("c"), Parent{split, 2});
        },
        {"c (Identity)", "split (Split) has 2 output(s); slot 2 is out of range"}));
    EXPECT_TRUE(throwsGraphError([&] { node(std::make_shared<Identity>("c"), Parent{x, -1}); }, {"slot -1"}));
}

TEST(Graph, ErrorCycle) {
    auto x = node(std::make_shared<Identity>("data"));
    auto a = node(std::make_shared<Add>(), x, "a");
    auto b = node(std::make_shared<Identity>("b"), a);
    auto c = node(std::make_shared<Identity>("c"), b);
    // After construction addBackwards could close a cycle: it is refused on the spot, so
    // no graph (and no ownership cycle between nodes) ever holds one.
    EXPECT_TRUE(throwsGraphError([&] { a->addBackwards(c); },
                                 {"node a (Add): adding parent c (Identity) would make a cycle (a -> b -> c -> a)"}));
    EXPECT_TRUE(throwsGraphError([&] { a->addBackwards(a); }, {"would make a cycle (a -> a)"}));
    EXPECT_EQ(a->bwds().size(), 1u); // unchanged
    auto out = node(std::make_shared<Identity>("out"), c);
    EXPECT_NO_THROW(Graph({x}, {out}));
    // A second edge between the same nodes is no cycle.
    EXPECT_NO_THROW(c->addBackwards(a));
}

TEST(Graph, ErrorEmptyOrNull) {
    auto x = node(std::make_shared<Identity>("data"));
    EXPECT_TRUE(throwsGraphError([&] { Graph({}, {x}); }, {"at least one input and one output"}));
    EXPECT_TRUE(throwsGraphError([&] { Graph({x}, {nullptr}); }, {"output node is null"}));
    EXPECT_TRUE(throwsGraphError([&] { node(nullptr); }, {"module is null"}));
    EXPECT_THROW(Graph({x}, {x}).getNodeByName("nope"), GraphError);
}

// ---- whole-graph shape checking ------------------------------------------------------------

TEST(Graph, BadShapesInTheMiddleNameEveryPath) {
    auto x = node(std::make_shared<Identity>("data"));
    auto fc1 = node(linear(8, 16, "fc1"), x);
    auto act = node(relu("act1"), fc1);
    auto fc2 = node(linear(12, 4, "fc2"), act); // wrong: gets 16 features
    auto after = node(relu("act2"), fc2);       // below the failure: skipped
    auto side = node(linear(9, 4, "side"), x);  // wrong too, on another branch
    auto sum = node(std::make_shared<Add>(), {after, side}, "sum");
    Graph g({x}, {sum}, "net");
    try {
        g.dataShapeFrom(Shape{32, 8});
        FAIL() << "expected a ShapeError";
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("2 node(s) fail shape checking"), std::string::npos) << msg;
        EXPECT_NE(msg.find("data -> fc1 -> act1 -> fc2: Linear 'fc2': expects input [..., 12], got [32, 16]"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("data -> side: Linear 'side': expects input [..., 9], got [32, 8]"), std::string::npos)
            << msg;
        EXPECT_EQ(msg.find("act2"), std::string::npos) << msg;
        EXPECT_NE(msg.find("(2 node(s) below these depend on them and were not checked)"), std::string::npos) << msg;
    }
    // A forward fails the same way before any module runs.
    EXPECT_TRUE(throwsShapeError([&] { g(randomTensor({2, 8}, 1)); }, {"data -> fc1 -> act1 -> fc2"}));
    EXPECT_FALSE(fc1->module().dataList().size());
}

TEST(Graph, ShapeInferenceAllocatesNothing) {
    auto x = node(std::make_shared<Identity>("data"));
    auto fc = node(linear(64, 64, "fc"), x);
    Graph g({x}, {fc});
    Backend& be = backendFor(Device::cpu());
    const size_t before = be.memoryStats().current;
    be.resetPeak();
    EXPECT_EQ(g.dataShapeFrom(Shape{4096, 64}), (Shape{4096, 64}));
    EXPECT_EQ(g.gradShapeFrom(Shape{4096, 64}), (Shape{4096, 64}));
    EXPECT_EQ(be.memoryStats().peak, before);
}

TEST(Graph, GradShapeMismatchNamesTheNode) {
    auto x = node(std::make_shared<Identity>("data"));
    auto fc = node(linear(4, 3, "fc"), x);
    Graph g({x}, {fc});
    g.dataShapeFrom(Shape{2, 4});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            g.gradShapeFrom(Shape{2, 5});
        },
        {"data -> fc", "output gradient [2, 5]", "[2, 3]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            g.gradShapeFrom(Shapes{Shape{2, 3}, Shape{2, 3}});
        },
        {"expects 1 output-gradient"}));
}

// ---- deep graphs ------------------------------------------------------------------------

TEST(Graph, HundredThousandNodeChain) {
    constexpr int kDepth = 100000;
    auto x = node(std::make_shared<Identity>("data"));
    NodePtr last = x;
    for (int i = 0; i < kDepth; ++i) last = node(std::make_shared<Add>(std::vector<float>{1.0f}), last);
    Graph g({x}, {last});
    ASSERT_EQ(g.order().size(), static_cast<size_t>(kDepth + 1));
    EXPECT_EQ(g.dataShapeFrom(Shape{1, 3}), (Shape{1, 3}));
    EXPECT_EQ(g.gradShapeFrom(Shape{1, 3}), (Shape{1, 3}));
    Tensor y = g(Tensor::fromVector({1, 3}, std::vector<float>{1, 2, 3}));
    EXPECT_TRUE(allClose(y, {1, 2, 3}));
    EXPECT_TRUE(allClose(g.backward(Tensor::fromVector({1, 3}, std::vector<float>{4, 5, 6})), {4, 5, 6}));
    g.reset(); // releasing a long chain must not recurse either
}

TEST(Graph, EvalModeReleasesValuesAfterTheirLastConsumer) {
    auto chain = [](int depth) {
        auto x = node(std::make_shared<Identity>("data"));
        NodePtr last = x;
        for (int i = 0; i < depth; ++i) last = node(std::make_shared<Activation>(ActivationKind::tanh), last);
        return std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{last});
    };
    Backend& be = backendFor(Device::cpu());
    Tensor in = randomTensor({64, 1024}, 1); // 256 KiB per value
    const size_t value = in.nbytes();
    auto peakOf = [&](Graph& g) {
        const size_t before = be.memoryStats().current;
        be.resetPeak();
        g(in);
        return be.memoryStats().peak - before;
    };
    auto g10 = chain(10), g50 = chain(50);
    g10->evalMode();
    g50->evalMode();
    const size_t peak10 = peakOf(*g10), peak50 = peakOf(*g50);
    EXPECT_LE(peak50, 3 * value) << "peak " << peak50 << " bytes for values of " << value;
    EXPECT_EQ(peak50, peak10); // does not grow with depth
    EXPECT_TRUE(throwsModuleError([&] { g50->backward(randomTensor({64, 1024}, 2)); }, {"eval-mode forward"}));

    g50->trainMode(); // train mode keeps every value for backward
    EXPECT_GE(peakOf(*g50), 50 * value);
}

// ---- Parallel ------------------------------------------------------------------------------

TEST(Parallel, Reference) {
    manualSeed(9);
    Parallel par("par");
    par.append(linear(3, 2, "l")).append(relu("r"));
    Tensor a = randomTensor({2, 3}, 1), b = Tensor::fromVector({1, 2}, std::vector<float>{-1, 2});
    const Tensors ys = par(Tensors{a, b});
    EXPECT_TRUE(allClose(ys[0], par[0](a).toVector<float>()));
    EXPECT_TRUE(allClose(ys[1], {0, 2}));
}

TEST(Parallel, Gradient) {
    manualSeed(10);
    Parallel par;
    par.append(linear(3, 2, "l")).append(tanhAct());
    randomiseBiases(par);
    EXPECT_TRUE(checkGradients(par, {randomTensor({2, 3}, 1), randomTensor({2, 5}, 2)}));
}

TEST(Parallel, Shape) {
    Parallel par;
    par.append(linear(3, 2, "l")).append(tanhAct());
    EXPECT_TRUE(checkShapes(par, {randomTensor({2, 3}, 1), randomTensor({2, 5}, 2)}));
}

TEST(Parallel, BadInput) {
    Parallel par("par");
    par.append(linear(3, 2, "l")).append(tanhAct());
    EXPECT_TRUE(throwsShapeError(
        [&] {
            par(Tensors{randomTensor({2, 3}, 1)});
        },
        {"Parallel 'par'", "expects 2 input"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            par(Tensors{randomTensor({2, 4}, 1), randomTensor({2, 4}, 1)});
        },
        {"branch 0 'l'", "[..., 3]"}));
    EXPECT_TRUE(throwsModuleError([&] { Parallel()(Tensors{randomTensor({2, 4}, 1)}); }, {"is empty"}));
}

// A head swap: replace puts a new last layer in a Sequential (LeNet's fc2) and a Graph
// (ResNet-18's fc) under the same name; the model then scores 3 classes and trains; the next
// forward checks the new layer's shapes; bad calls are errors naming the container.
TEST(Containers, ReplaceSwapsAHead) {
    manualSeed(1);
    auto lenet = loadLeNet();
    const ModulePtr fc2 = std::make_shared<Linear>(1024, 3);
    const ModulePtr old = lenet->replace("fc2", fc2);
    EXPECT_EQ(old->classname(), "Linear");
    EXPECT_EQ(&lenet->getByName("fc2"), fc2.get());
    const Tensor x = randomTensor({8, 1, 28, 28}, 2);
    EXPECT_EQ((*lenet)(x).shape(), (Shape{8, 3}));
    EXPECT_EQ(lenet->numOfParams(), 838858 - 10250 + 3075);
    EXPECT_TRUE(throwsError<ContainerError>([&] { lenet->replace("fc9", std::make_shared<Linear>(1, 1)); },
                                            {"no child named 'fc9'", "fc2"}));
    EXPECT_TRUE(throwsError<ContainerError>([&] { lenet->replace("fc2", nullptr); }, {"null"}));
    EXPECT_TRUE(throwsError<ContainerError>([&] { lenet->replace("fc1", fc2); }, {"already a child (as 'fc2')"}));

    auto resnet = loadResNet(18, ResNetStem::cifar, 10);
    resnet->replace("fc", std::make_shared<Linear>(512, 3));
    EXPECT_EQ(resnet->dataShapeFrom(Shape{2, 3, 32, 32}), (Shape{2, 3}));
    // it trains: the loss of one batch drops over a few steps
    const Tensor images = randomTensor({6, 3, 32, 32}, 3);
    const Tensor labels = Tensor::fromVector({6}, std::vector<int32_t>{0, 1, 2, 0, 1, 2});
    CrossEntropy cost;
    Adam adam(1e-3f);
    adam.setupOn(*resnet, true);
    double first = 0, last = 0;
    for (int step = 0; step < 6; ++step) {
        const CostResult r = cost((*resnet)(images), labels);
        resnet->zeroGradParams();
        resnet->backward(r.grad[0]);
        adam.update();
        if (step == 0) first = r.error;
        last = r.error;
    }
    EXPECT_LT(last, first);
    resnet->replace("fc", std::make_shared<Linear>(100, 3)); // takes 100 features; the pool gives 512
    EXPECT_TRUE(throwsShapeError([&] { resnet->dataShapeFrom(Shape{2, 3, 32, 32}); }, {"fc"}));
    EXPECT_TRUE(throwsError<GraphError>([&] { resnet->replace("nowhere", std::make_shared<Linear>(1, 1)); },
                                        {"no node named 'nowhere'"}));
}

} // namespace
} // namespace tessera
