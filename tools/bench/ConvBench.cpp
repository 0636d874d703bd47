// Convolution over the layer shapes of ResNet-18 on 32x32 inputs (CIFAR stem) at batch 64:
// forward, backward-data and backward-weights per shape, and all of them together as one
// training step runs them, next to the sgemm rate of the same run.
//
// Inputs and output gradients are in the layout the previous layer would hand over (the
// one oneDNN picks for activations), so the figures include no reorder a network would
// not do.
#include <string>
#include <vector>

#include "BenchUtil.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "backend/cpu/OpenBlas.h"
#include "modules/Conv.h"

namespace {

using namespace tessera;

constexpr int64_t kBatch = 64;

struct ConvShape {
    const char* name;
    int64_t in, out, size, stride, pad, hw; // hw: input height = width
    int count;                              // how often ResNet-18 runs it
};

const ConvShape kShapes[] = {
    {"stem 3->64 3x3 32", 3, 64, 3, 1, 1, 32, 1},    {"64->64 3x3 32", 64, 64, 3, 1, 1, 32, 4},
    {"64->128 3x3/2 32", 64, 128, 3, 2, 1, 32, 1},   {"64->128 1x1/2 32", 64, 128, 1, 2, 0, 32, 1},
    {"128->128 3x3 16", 128, 128, 3, 1, 1, 16, 3},   {"128->256 3x3/2 16", 128, 256, 3, 2, 1, 16, 1},
    {"128->256 1x1/2 16", 128, 256, 1, 2, 0, 16, 1}, {"256->256 3x3 8", 256, 256, 3, 1, 1, 8, 3},
    {"256->512 3x3/2 8", 256, 512, 3, 2, 1, 8, 1},   {"256->512 1x1/2 8", 256, 512, 1, 2, 0, 8, 1},
    {"512->512 3x3 4", 512, 512, 3, 1, 1, 4, 3},
};

// One layer ready to run: the module, an input and an output gradient in the layouts
// its neighbours would produce.
struct Layer {
    std::unique_ptr<Conv2D> conv;
    Tensor x, dy;
    double gflop; // one pass (forward, backward-data or backward-weights)
    bool first;   // the stem: a network needs no input gradient there
};

Layer makeLayer(const ConvShape& s, DType compute = DType::float32) {
    manualSeed(1);
    Layer l;
    l.conv = std::make_unique<Conv2D>(s.in, s.out, s.size, ConvOptions{.stride = {s.stride}, .pad = {s.pad}});
    l.conv->calcMode(compute);
    Generator gen(2);
    Tensor plain = Tensor::empty({kBatch, s.in, s.hw, s.hw});
    backendOf(plain).fillUniform(plain, -1.0f, 1.0f, gen);
    l.first = s.in == 3;
    // A non-stem input comes out of a convolution: let one produce its layout.
    Conv2D producer(s.in, s.in, 1);
    producer.calcMode(compute);
    l.x = l.first ? plain : producer(plain);
    Tensor y = (*l.conv)(l.x);
    Tensor g = Tensor::empty(y.shape());
    backendOf(g).fillUniform(g, -1.0f, 1.0f, gen);
    l.dy = g.toLayout(y.layout());
    const double out = static_cast<double>(y.shape()[2] * y.shape()[3]);
    l.gflop = 2.0 * kBatch * s.out * s.in * s.size * s.size * out * 1e-9;
    return l;
}

enum Pass { forward, backwardData, backwardWeights };

void BM_ConvPass(benchmark::State& state, ConvShape s, Pass pass, DType compute) {
    Layer l = makeLayer(s, compute);
    for (auto _ : state) {
        if (pass == forward) {
            benchmark::DoNotOptimize((*l.conv)(l.x).raw());
        } else {
            // backward-data only, or parameter gradients only
            l.conv->backward(l.dy, pass == backwardWeights, pass == backwardData);
        }
    }
    setGflops(state, l.gflop);
    state.SetLabel(str(l.x.layout()) + " in, " + str(l.conv->data().layout()) + " out");
}

// Every convolution of a ResNet-18 training step at batch 64: forward, backward-data
// (not for the stem) and backward-weights, each shape as often as the network runs it.
void BM_ResNet18Convs(benchmark::State& state, DType compute) {
    std::vector<Layer> layers;
    std::vector<int> counts;
    double gflop = 0;
    for (const ConvShape& s : kShapes) {
        layers.push_back(makeLayer(s, compute));
        counts.push_back(s.count);
        gflop += s.count * layers.back().gflop * (layers.back().first ? 2 : 3);
    }
    for (auto _ : state) {
        for (size_t i = 0; i < layers.size(); ++i) {
            for (int c = 0; c < counts[i]; ++c) {
                (*layers[i].conv)(layers[i].x);
                layers[i].conv->backward(layers[i].dy, true, !layers[i].first);
            }
        }
    }
    setGflops(state, gflop);
}

// A large square sgemm through OpenBLAS as Tessera loads it: the machine's GEMM rate.
void BM_Sgemm1024(benchmark::State& state) {
    constexpr int n = 1024;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.01f), c(n * n);
    const auto sgemm = tessera::cpu::openBlas().sgemm;
    for (auto _ : state) {
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        benchmark::DoNotOptimize(c.data());
    }
    setGflops(state, 2.0 * n * n * n * 1e-9);
    state.SetLabel("OpenBLAS " + tessera::cpu::openBlas().coreName);
}

int registerAll() {
    benchmark::RegisterBenchmark("sgemm/1024x1024x1024", BM_Sgemm1024)->Unit(benchmark::kMillisecond)->UseRealTime();
    for (DType compute : {DType::float32, DType::bfloat16}) {
        const std::string suffix = compute == DType::float32 ? "" : "/bf16";
        benchmark::RegisterBenchmark(("Conv/ResNet18-32x32/batch64/all-convs/fwd+bwd" + suffix).c_str(),
                                     BM_ResNet18Convs, compute)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
    const char* passes[] = {"fwd", "bwd-data", "bwd-weights"};
    for (DType compute : {DType::float32, DType::bfloat16}) {
        const std::string suffix = compute == DType::float32 ? "" : "/bf16";
        for (const ConvShape& s : kShapes) {
            for (Pass p : {forward, backwardData, backwardWeights}) {
                if (s.in == 3 && p == backwardData) continue;
                benchmark::RegisterBenchmark(("Conv/" + std::string(s.name) + "/batch64/" + passes[p] + suffix).c_str(),
                                             BM_ConvPass, s, p, compute)
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime()
                    ->MinTime(0.2);
            }
        }
    }
    return 0;
}

const int registered = registerAll();

} // namespace
