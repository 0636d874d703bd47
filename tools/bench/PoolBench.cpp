// Pooling over the shapes LeNet and the ImageNet ResNet stem run, forward (train mode) and
// backward, with the input in the layout a convolution hands over. Max pooling whose
// windows do not overlap runs the CPU backend's own loop; the rest runs oneDNN's.
#include <memory>
#include <string>

#include "BenchUtil.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "modules/Conv.h"
#include "modules/Pool.h"

namespace {

using namespace tessera;

struct PoolShape {
    const char* name;
    int64_t batch, maps, hw, size, stride, pad;
    bool max;
};

const PoolShape kShapes[] = {
    {"LeNet-pool1 16x26x26 max 2x2", 128, 16, 26, 2, 2, 0, true},
    {"LeNet-pool2 32x10x10 max 2x2", 128, 32, 10, 2, 2, 0, true},
    {"ResNet-stem 64x112x112 max 3x3/2", 16, 64, 112, 3, 2, 1, true},
    {"64x56x56 avg 2x2", 32, 64, 56, 2, 2, 0, false},
};

void BM_Pool(benchmark::State& state, PoolShape s, bool backward) {
    manualSeed(1);
    const PoolOptions options{.stride = {s.stride}, .pad = {s.pad}};
    std::unique_ptr<PoolND> pool = s.max ? std::unique_ptr<PoolND>(new MaxPool2D(s.size, options))
                                         : std::unique_ptr<PoolND>(new AvgPool2D(s.size, options));
    Generator gen(2);
    Tensor plain = Tensor::empty({s.batch, s.maps, s.hw, s.hw});
    backendOf(plain).fillUniform(plain, -1.0f, 1.0f, gen);
    const Tensor x = Conv2D(s.maps, s.maps, 1)(plain); // the layout a convolution hands over
    Tensor y = (*pool)(x);
    Tensor g = Tensor::empty(y.shape());
    backendOf(g).fillUniform(g, -1.0f, 1.0f, gen);
    const Tensor dy = g.toLayout(y.layout());
    for (auto _ : state) {
        if (backward) {
            benchmark::DoNotOptimize(pool->backward(dy).raw());
        } else {
            benchmark::DoNotOptimize((*pool)(x).raw());
        }
    }
    // the data read and written once: the input (or its gradient) and the output (or its gradient)
    setGbytes(state, static_cast<double>(x.nbytes() + y.nbytes()) * 1e-9);
    state.SetLabel(str(x.layout()));
}

int registerAll() {
    for (const PoolShape& s : kShapes) {
        for (bool backward : {false, true}) {
            const std::string name =
                "Pool/" + std::string(s.name) + "/batch" + std::to_string(s.batch) + (backward ? "/bwd" : "/fwd");
            benchmark::RegisterBenchmark(name.c_str(), BM_Pool, s, backward)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime()
                ->MinTime(0.2);
        }
    }
    return 0;
}

const int registered = registerAll();

} // namespace
