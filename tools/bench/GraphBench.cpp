// Whole-graph shape checking of a 10 000-node graph, and the peak memory of a 50-layer
// chain's inference in eval mode (values released after their last consumer) against
// train mode (every value kept for backward).
#include "BenchUtil.h"
#include "backend/Backend.h"
#include "containers/Graph.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Identity.h"
#include "modules/Linear.h"

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

} // namespace
