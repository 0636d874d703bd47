// Importing an ONNX model: ResNet-50 (25.6 M parameters, 180 nodes), exported by Tessera
// once, read back into a Graph per iteration.
#include <cstdio>
#include <filesystem>

#include "BenchUtil.h"
#include "containers/Graph.h"
#include "io/Onnx.h"
#include "models/Zoo.h"

namespace {

using namespace tessera;

void BM_OnnxImport(benchmark::State& state) {
    const std::string path = (std::filesystem::temp_directory_path() / "tessera_bench_resnet50.onnx").string();
    {
        ModulePtr net = loadZooModel("resnet50");
        exportOnnx(*net, {Shape{1, 3, 224, 224}}, path);
    }
    size_t nodes = 0;
    for (auto _ : state) {
        std::shared_ptr<Graph> g = importOnnx(path);
        nodes = g->order().size();
        benchmark::DoNotOptimize(g);
    }
    state.counters["nodes"] = static_cast<double>(nodes);
    state.counters["MB"] = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    std::filesystem::remove(path);
}
BENCHMARK(BM_OnnxImport)->Name("Onnx/import/resnet50")->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace
