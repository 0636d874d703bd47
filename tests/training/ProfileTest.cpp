// The profiler: each row's time is the time its layer spent (layers that sleep a known
// time show it in their own row, in the right phase, also for a module run at two nodes),
// the invariants every profile keeps, inference, the table and CSV, and bad options.
#include "training/Profile.h"

#include <chrono>
#include <thread>

#include "GradCheck.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "models/Zoo.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Glue.h"
#include "modules/Identity.h"
#include "modules/Linear.h"

namespace tessera {
namespace {
using namespace testing;

// A layer that passes its input through and sleeps `forwardMs` (`backwardMs`) milliseconds
// per unit of its input's second dim in forward (backward).
std::shared_ptr<Glue> sleeper(double forwardMs, double backwardMs, const std::string& name) {
    GlueSpec s;
    s.shapes = [](const Shapes& in) { return in; };
    s.forward = [forwardMs](Glue&, const Tensors& in) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(forwardMs * in[0].shape()[1]));
        return Tensors{in[0].clone()};
    };
    s.backward = [backwardMs](Glue&, const Tensors& grads) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(backwardMs * grads[0].shape()[1]));
        return Tensors{grads[0].clone()};
    };
    return std::make_shared<Glue>("sleeper", s, name);
}

const ProfileRow& rowNamed(const Profile& p, const std::string& name) {
    for (const ProfileRow& r : p.rows) {
        if (r.name == name) return r;
    }
    throw std::runtime_error("no row " + name);
}

void expectInvariants(const Profile& p) {
    ASSERT_EQ(p.stepSamples.size(), static_cast<size_t>(p.steps));
    ASSERT_EQ(p.layerSamples.size(), static_cast<size_t>(p.steps));
    for (int s = 0; s < p.steps; ++s) EXPECT_LE(p.layerSamples[s], p.stepSamples[s]) << "step " << s;
    for (const ProfileRow& r : p.rows) {
        EXPECT_GE(r.forward, 0) << r.name;
        EXPECT_GE(r.backward, 0) << r.name;
    }
    EXPECT_GE(p.step, p.forward);
    EXPECT_GT(p.plainStep, 0);
}

TEST(Profile, EachRowHoldsTheTimeItsLayerSpent) {
    manualSeed(3);
    auto in = node(std::make_shared<Identity>(), {}, "in");
    auto fc1 = node(std::make_shared<Linear>(8, 8), in, "fc1");
    auto slowForward = node(sleeper(5, 0, "slowForward"), fc1, "slowForward");    // 40 ms forward
    auto fc2 = node(std::make_shared<Linear>(8, 8), slowForward, "fc2");          //
    auto slowBackward = node(sleeper(0, 5, "slowBackward"), fc2, "slowBackward"); // 40 ms backward
    Graph g({in}, {slowBackward}, "net");
    auto sgd = makeOptimizer("sgd", 0.01f);
    sgd->setupOn(g, true);
    const std::vector<float> w = g.namedParams().at(0).second->data.toVector<float>();

    int calls = 0, last = 0, totalSeen = 0;
    ProfileOptions options;
    options.warmup = 1;
    options.steps = 2;
    options.optimizer = sgd.get();
    options.progress = [&](int done, int total) {
        ++calls;
        EXPECT_EQ(done, last + 1);
        last = done;
        totalSeen = total;
    };
    const Profile p = profile(g, {randomTensor({2, 8}, 1)}, options);
    EXPECT_EQ(calls, 5); // 1 warm-up, 2 plain and 2 timed steps
    EXPECT_EQ(totalSeen, 5);
    ASSERT_EQ(p.rows.size(), 5u);
    EXPECT_EQ(p.rows[0].name, "in");
    EXPECT_EQ(p.rows[2].name, "slowForward");
    EXPECT_EQ(p.rows[2].layer, &slowForward->module());
    expectInvariants(p);

    const ProfileRow &sf = rowNamed(p, "slowForward"), &sb = rowNamed(p, "slowBackward");
    EXPECT_GE(sf.forward, 0.040);
    EXPECT_GE(sb.backward, 0.040);
    // Each sleep shows in its own row and phase, not in its neighbours'.
    EXPECT_LT(sf.backward, sf.forward);
    EXPECT_LT(sb.forward, sb.backward);
    for (const char* other : {"in", "fc1", "fc2"}) {
        EXPECT_LT(rowNamed(p, other).forward, sf.forward) << other;
        EXPECT_LT(rowNamed(p, other).backward, sb.backward) << other;
    }
    EXPECT_GE(p.forward, 0.040);
    EXPECT_GE(p.backward, 0.040);
    EXPECT_GE(p.step, 0.080);
    EXPECT_GE(p.plainStep, 0.080); // the plain steps sleep as long
    // Memory: each layer's forward keeps its output ([2, 8] floats); the input is a view.
    EXPECT_EQ(rowNamed(p, "in").kept, 0);
    for (const char* name : {"fc1", "slowForward", "fc2", "slowBackward"}) {
        EXPECT_EQ(rowNamed(p, name).kept, 2 * 8 * 4) << name;
    }
    EXPECT_EQ(p.kept, 4 * 2 * 8 * 4);
    // The updates ran: 1 + 2 + 2 of them moved the first weight.
    EXPECT_NE(g.namedParams().at(0).second->data.toVector<float>(), w);
}

// A module at two nodes: its k-th forward call of a step is the k-th node's, its k-th
// backward call the k-th node's from the end. Here the first node's input is 10 wide and
// the second's 2 wide, so the first node sleeps five times as long each way.
TEST(Profile, AModuleAtTwoNodesGivesEachNodeItsOwnTime) {
    manualSeed(4);
    auto shared = sleeper(4, 4, "shared");
    auto in = node(std::make_shared<Identity>(), {}, "in");
    auto pre = node(std::make_shared<Linear>(10, 10), in, "pre"); // weights before: both nodes run backward
    auto first = node(shared, pre, "first");
    auto narrow = node(std::make_shared<Linear>(10, 2), first, "narrow");
    auto second = node(shared, narrow, "second");
    Graph g({in}, {second}, "net");
    ProfileOptions options;
    options.warmup = 0;
    options.steps = 1;
    const Profile p = profile(g, {randomTensor({3, 10}, 2)}, options);
    expectInvariants(p);
    const ProfileRow &a = rowNamed(p, "first"), &b = rowNamed(p, "second");
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_GE(a.forward, 0.040);
    EXPECT_GE(a.backward, 0.040);
    EXPECT_GE(b.forward, 0.008);
    EXPECT_GE(b.backward, 0.008);
    EXPECT_GT(a.forward, b.forward);
    EXPECT_GT(a.backward, b.backward);
}

TEST(Profile, InferenceRunsForwardOnlyInEvalMode) {
    manualSeed(5);
    ModulePtr net = loadZooModel("lenet");
    ProfileOptions options;
    options.train = false;
    options.warmup = 1;
    options.steps = 3;
    const Profile p = profile(*net, {randomTensor({4, 1, 28, 28}, 3)}, options);
    EXPECT_FALSE(net->isTrain());
    EXPECT_FALSE(p.train);
    expectInvariants(p);
    const std::vector<SummaryRow> rows = summarize(*net, {Shape{4, 1, 28, 28}});
    ASSERT_EQ(p.rows.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(p.rows[i].name, rows[i].name);
        EXPECT_EQ(p.rows[i].flops, rows[i].flops);
        EXPECT_EQ(p.rows[i].backward, 0) << rows[i].name;
    }
    EXPECT_GT(rowNamed(p, "conv2").forward, 0);
    EXPECT_EQ(p.backward, 0);
    EXPECT_EQ(p.update, 0);

    // Training: every layer with weights has a backward time.
    options.train = true;
    const Profile t = profile(*net, {randomTensor({4, 1, 28, 28}, 3)}, options);
    EXPECT_TRUE(net->isTrain());
    expectInvariants(t);
    for (const char* name : {"conv1", "conv2", "fc1", "fc2"}) EXPECT_GT(rowNamed(t, name).backward, 0) << name;
    EXPECT_EQ(t.update, 0); // no optimizer given
}

TEST(Profile, TableGroupsAndCsvQuotes) {
    manualSeed(6);
    auto in = node(std::make_shared<Identity>(), {}, "in");
    auto a = node(std::make_shared<Linear>(4, 4), in, "block_a");
    auto b = node(std::make_shared<Linear>(4, 4), a, "block_b");
    Graph g({in}, {b}, "net");
    ProfileOptions options;
    options.warmup = 0;
    options.steps = 2;
    const Profile p = profile(g, {randomTensor({2, 4}, 4)}, options);
    const std::string all = profileTable(p);
    for (const char* name : {"in ", "block_a ", "block_b "}) EXPECT_NE(all.find(name), std::string::npos) << name;
    EXPECT_NE(all.find("training step, median of 2: "), std::string::npos);
    EXPECT_NE(all.find("the same step without layer timers: "), std::string::npos);
    const std::string grouped = profileTable(p, 1);
    EXPECT_NE(grouped.find("block  2 layers"), std::string::npos) << grouped;
    EXPECT_EQ(grouped.find("block_a"), std::string::npos);

    const std::string csv = profileCsv(p);
    EXPECT_EQ(csv.substr(0, csv.find('\n')), "name,module,output,flops,kept_bytes,forward_ms,backward_ms");
    EXPECT_NE(csv.find("\nblock_b,Linear,\"[2, 4]\",64,32,"), std::string::npos) << csv;
}

// A batch norm that runs its ReLU says so, and the ReLU's row that it is fused; with
// fusion off, each has its own name and time.
TEST(Profile, FusedBatchNormAndReluRowsSaySo) {
    manualSeed(9);
    auto seq = std::make_shared<Sequential>("net");
    seq->append(std::make_shared<Linear>(6, 6, LinearOptions{.name = "fc"}))
        .append(std::make_shared<BatchNorm1D>(6, BatchNormOptions{.name = "bn"}))
        .append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu"}));
    ProfileOptions options;
    options.warmup = 0;
    options.steps = 1;
    const Profile fused = profile(*seq, {randomTensor({4, 6}, 9)}, options);
    EXPECT_EQ(rowNamed(fused, "bn").module, "BatchNorm1D+ReLU");
    EXPECT_EQ(rowNamed(fused, "relu").module, "Activation (fused)");
    EXPECT_TRUE(rowNamed(fused, "relu").fused);
    EXPECT_FALSE(rowNamed(fused, "bn").fused);
    struct FusionOff { // for this scope
        FusionOff() { setFusion(false); }
        ~FusionOff() { setFusion(true); }
    };
    const Profile apart = [&] {
        const FusionOff off;
        return profile(*seq, {randomTensor({4, 6}, 9)}, options);
    }();
    EXPECT_EQ(rowNamed(apart, "bn").module, "BatchNorm1D");
    EXPECT_EQ(rowNamed(apart, "relu").module, "Activation");
    EXPECT_FALSE(rowNamed(apart, "relu").fused);
    EXPECT_GT(rowNamed(apart, "relu").forward, 0);
}

// A residual block's last batch norm runs inside the sum: its row says it is fused, and the
// sum's row names all three layers.
TEST(Profile, ABatchNormInsideTheSumSaysSo) {
    manualSeed(9);
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto bn = node(std::make_shared<BatchNorm2D>(3), data, "bn");
    auto sum = node(std::make_shared<Add>(), {bn, data}, "sum");
    auto relu = node(std::make_shared<Activation>(ActivationKind::relu), sum, "relu");
    Graph g({data}, {relu});
    ProfileOptions options;
    options.warmup = 0;
    options.steps = 1;
    const Profile p = profile(g, {randomTensor({4, 3, 5, 5}, 9)}, options);
    EXPECT_EQ(rowNamed(p, "bn").module, "BatchNorm2D (fused)");
    EXPECT_TRUE(rowNamed(p, "bn").fused);
    EXPECT_EQ(rowNamed(p, "sum").module, "BatchNorm+Add+ReLU");
    EXPECT_FALSE(rowNamed(p, "sum").fused);
    EXPECT_EQ(rowNamed(p, "relu").module, "Activation (fused)");
}

struct CountingObserver : Module::CallObserver {
    int calls = 0;
    void begin(const Module&, bool) override { ++calls; }
    void end(const Module&, bool) override { ++calls; }
};

TEST(Profile, BadOptionsAndFailingLayers) {
    manualSeed(7);
    ModulePtr net = loadZooModel("lenet");
    const Tensor x = randomTensor({2, 1, 28, 28}, 5);
    ProfileOptions options;
    options.steps = 0;
    EXPECT_THROW(profile(*net, {x}, options), ModuleError);
    options.steps = 1;
    options.warmup = -1;
    EXPECT_THROW(profile(*net, {x}, options), ModuleError);
    options.warmup = 0;
    EXPECT_THROW(profile(*net, {}, options), ModuleError);
    EXPECT_TRUE(throwsShapeError([&] { profile(*net, {randomTensor({2, 1, 20, 28}, 5)}, options); }, {"conv"}));

    // A layer that throws: the profile throws it, and the caller's observer is back.
    GlueSpec s;
    s.shapes = [](const Shapes& in) { return in; };
    s.forward = [](Glue&, const Tensors&) -> Tensors { throw ModuleError("the layer failed"); };
    auto in = node(std::make_shared<Identity>(), {}, "in");
    auto bad = node(std::make_shared<Glue>("failing", s, "bad"), in, "bad");
    Graph g({in}, {bad}, "net");
    CountingObserver mine;
    Module::setCallObserver(&mine);
    EXPECT_THROW(profile(g, {randomTensor({2, 3}, 6)}, options), ModuleError);
    EXPECT_EQ(Module::setCallObserver(nullptr), &mine);
    // An observer sees every module's forward and backward begin and end.
    Module::setCallObserver(&mine);
    Linear lin(3, 2);
    lin(randomTensor({2, 3}, 7));
    lin.backward(randomTensor({2, 2}, 8));
    Module::setCallObserver(nullptr);
    EXPECT_EQ(mine.calls, 4);
}

} // namespace
} // namespace tessera
