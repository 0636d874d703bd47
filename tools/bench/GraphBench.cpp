// Whole-graph shape checking of a 10 000-node graph, and the peak memory of a 50-layer
// chain's inference in eval mode (values released after their last consumer) against
// train mode (every value kept for backward), and graphs of up to a million nodes.
#include <chrono>

#include "BenchUtil.h"
#include "backend/Backend.h"
#include "containers/Graph.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"

namespace {

using namespace tessera;

// Residual blocks: x -> Linear -> relu -> Add(x, .), four nodes a block.
std::shared_ptr<Graph> residualGraph(int nodes) {
    auto x = node(std::make_shared<Identity>("data"));
    NodePtr last = x;
    for (int i = 1; i + 3 <= nodes; i += 3) {
        auto fc = node(std::make_shared<Linear>(64, 64, LinearOptions{.initscheme = InitScheme::none}), last);
        auto act = node(std::make_shared<Activation>(ActivationKind::relu), fc);
        last = node(std::make_shared<Add>(), {last, act});
    }
    return std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{last});
}

void BM_GraphShapeCheck(benchmark::State& state) {
    auto g = residualGraph(static_cast<int>(state.range(0)));
    int64_t batch = 128;
    for (auto _ : state) {
        // Alternating batch sizes: every iteration checks the whole graph, as a new input
        // shape does, rather than finding the plan of the last one.
        batch = batch == 128 ? 127 : 128;
        benchmark::DoNotOptimize(g->dataShapeFrom(Shape{batch, 64}));
        benchmark::DoNotOptimize(g->gradShapeFrom(Shape{batch, 64}));
    }
    state.counters["nodes"] = static_cast<double>(g->order().size());
}
BENCHMARK(BM_GraphShapeCheck)
    ->Name("Graph/shapeCheck+gradShapeCheck")
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same query at the same input shapes: what every forward after the first pays.
void BM_GraphPlannedShapes(benchmark::State& state) {
    auto g = residualGraph(static_cast<int>(state.range(0)));
    g->dataShapeFrom(Shape{128, 64});
    for (auto _ : state) benchmark::DoNotOptimize(g->dataShapeFrom(Shape{128, 64}));
    state.counters["nodes"] = static_cast<double>(g->order().size());
}
BENCHMARK(BM_GraphPlannedShapes)
    ->Name("Graph/plannedShapeQuery")
    ->Arg(10000)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_ChainInferencePeak(benchmark::State& state) {
    const bool eval = state.range(0) != 0;
    auto x = node(std::make_shared<Identity>("data"));
    NodePtr last = x;
    for (int i = 0; i < 50; ++i) last = node(std::make_shared<Activation>(ActivationKind::tanh), last);
    Graph g({x}, {last});
    if (eval) g.evalMode();
    Tensor in = Tensor::full({64, 4096}, 0.5f); // 1 MiB a value
    Backend& be = backendOf(in);
    size_t peak = 0;
    for (auto _ : state) {
        g.reset();
        const size_t before = be.memoryStats().current;
        be.resetPeak();
        g(in);
        peak = be.memoryStats().peak - before;
    }
    state.counters["peakMiB"] = static_cast<double>(peak) / (1 << 20);
    state.counters["valueMiB"] = static_cast<double>(in.nbytes()) / (1 << 20);
    state.SetLabel(eval ? "eval mode" : "train mode");
}
BENCHMARK(BM_ChainInferencePeak)
    ->Name("Graph/chain50/inferencePeak")
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Load: a chain of N scalar-affine nodes built, wrapped as a Graph, shape-checked, run
// forward and backward, and destroyed, each phase timed (seconds, one iteration per N):
// time grows about linearly with N and nothing recurses once per node.
void BM_GraphLoad(benchmark::State& state) {
    const int64_t n = state.range(0);
    double phase[6] = {};
    for (auto _ : state) {
        auto t0 = std::chrono::steady_clock::now();
        auto lap = [&](int k) {
            const auto t1 = std::chrono::steady_clock::now();
            phase[k] = std::chrono::duration<double>(t1 - t0).count();
            t0 = t1;
        };
        {
            auto in = node(std::make_shared<Identity>("in"));
            NodePtr last = in;
            for (int64_t i = 0; i < n; ++i) last = node(std::make_shared<MulAddConst>(1.0f, 0.0f), last);
            lap(0);
            Graph g({in}, {last});
            lap(1);
            g.dataShapeFrom(Shape{2, 3});
            lap(2);
            benchmark::DoNotOptimize(g(Tensor::full({2, 3}, 1.0f)).raw());
            lap(3);
            g.backward(Tensor::full({2, 3}, 1.0f));
            lap(4);
            last.reset();
            in.reset();
        }
        lap(5);
    }
    const char* names[6] = {"build_s", "graph_s", "check_s", "forward_s", "backward_s", "destroy_s"};
    for (int k = 0; k < 6; ++k) state.counters[names[k]] = phase[k];
}
BENCHMARK(BM_GraphLoad)
    ->Name("Graph/load")
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

} // namespace
