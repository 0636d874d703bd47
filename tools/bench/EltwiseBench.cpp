// Activations: the backend's op (oneDNN eltwise) against a plain OpenMP loop over the
// same buffers, to justify which one the CPU backend uses. Dropout: its layer's forward and
// backward, which draw the mask twice from the same counters, against a mask kept in
// forward and multiplied in backward.
#include <cmath>

#include "BenchUtil.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "modules/Dropout.h"

namespace {

using namespace tessera;

constexpr int64_t kSmall = 128 * 1024;        // Linear(*, 1024) output at batch 128
constexpr int64_t kLarge = 64 * 64 * 32 * 32; // a [64, 64, 32, 32] activation

void BM_BackendActivation(benchmark::State& state, ActivationKind kind) {
    const int64_t n = state.range(0);
    Tensor x = Tensor::full({n}, 0.3f), y = Tensor::empty({n});
    Backend& be = backendOf(x);
    for (auto _ : state) be.activationForward({kind}, x, y);
    setGbytes(state, 8.0 * static_cast<double>(n) * 1e-9);
}

void BM_LoopActivation(benchmark::State& state, ActivationKind kind) {
    const int64_t n = state.range(0);
    Tensor x = Tensor::full({n}, 0.3f), y = Tensor::empty({n});
    const float* px = x.data<float>();
    float* py = y.data<float>();
    for (auto _ : state) {
        if (kind == ActivationKind::relu) {
#pragma omp parallel for simd if (n > (1 << 15))
            for (int64_t i = 0; i < n; ++i) py[i] = px[i] > 0.0f ? px[i] : 0.0f;
        } else {
#pragma omp parallel for simd if (n > (1 << 15))
            for (int64_t i = 0; i < n; ++i) py[i] = 1.0f / (1.0f + std::exp(-px[i]));
        }
        benchmark::DoNotOptimize(py);
    }
    setGbytes(state, 8.0 * static_cast<double>(n) * 1e-9);
}

BENCHMARK_CAPTURE(BM_BackendActivation, relu / onednn, ActivationKind::relu)->Arg(kSmall)->Arg(kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_LoopActivation, relu / loop, ActivationKind::relu)->Arg(kSmall)->Arg(kLarge)->UseRealTime();
BENCHMARK_CAPTURE(BM_BackendActivation, sigmoid / onednn, ActivationKind::sigmoid)
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_LoopActivation, sigmoid / loop, ActivationKind::sigmoid)->Arg(kSmall)->Arg(kLarge)->UseRealTime();

// The CPU backend's own element loops over a [64, 64, 32, 32] activation: the fused sum +
// ReLU (a residual block's end), hardSigmoid (MobileNetV3's), and power at the exponents
// of a square, a square root and a reciprocal, and at one std::pow computes.
void BM_SumRelu(benchmark::State& state) {
    Tensor x = Tensor::full({kLarge}, 0.3f), y = Tensor::full({kLarge}, -0.1f), z = Tensor::empty({kLarge});
    Backend& be = backendOf(x);
    for (auto _ : state) be.axpbyzRelu(1.0f, x, 1.0f, y, z);
    setGbytes(state, 12.0 * static_cast<double>(kLarge) * 1e-9);
}
BENCHMARK(BM_SumRelu)->UseRealTime();

void BM_HardSigmoid(benchmark::State& state) {
    Tensor x = Tensor::full({kLarge}, 0.3f), y = Tensor::empty({kLarge});
    Backend& be = backendOf(x);
    for (auto _ : state) be.activationForward({ActivationKind::hardSigmoid, 1.0f / 6, 0.5f}, x, y);
    setGbytes(state, 8.0 * static_cast<double>(kLarge) * 1e-9);
}
BENCHMARK(BM_HardSigmoid)->UseRealTime();

void BM_HardSigmoidBackward(benchmark::State& state) {
    Tensor x = Tensor::full({kLarge}, 0.3f), dy = Tensor::full({kLarge}, 0.2f), dx = Tensor::empty({kLarge});
    Backend& be = backendOf(x);
    for (auto _ : state) be.activationBackward({ActivationKind::hardSigmoid, 1.0f / 6, 0.5f}, x, x, dy, dx);
    setGbytes(state, 12.0 * static_cast<double>(kLarge) * 1e-9);
}
BENCHMARK(BM_HardSigmoidBackward)->UseRealTime();

void BM_Power(benchmark::State& state, float p) {
    Tensor x = Tensor::full({kLarge}, 0.3f), y = Tensor::empty({kLarge});
    Backend& be = backendOf(x);
    for (auto _ : state) be.power(x, p, y);
    setGbytes(state, 8.0 * static_cast<double>(kLarge) * 1e-9);
}
BENCHMARK_CAPTURE(BM_Power, square, 2.0f)->UseRealTime();
BENCHMARK_CAPTURE(BM_Power, sqrt, 0.5f)->UseRealTime();
BENCHMARK_CAPTURE(BM_Power, rsqrt, -0.5f)->UseRealTime();
BENCHMARK_CAPTURE(BM_Power, reciprocal, -1.0f)->UseRealTime();
BENCHMARK_CAPTURE(BM_Power, other, 1.7f)->UseRealTime();

// p = 0.1 (gpt-mini's) over a [2048, 512] activation, in float32 or bfloat16.
constexpr int64_t kDropout = 2048 * 512;

void BM_DropoutLayer(benchmark::State& state, DType dtype) {
    Dropout drop({.p = 0.1f, .seed = 3});
    const Tensor x = Tensor::full({kDropout / 512, 512}, 0.3f).convertedTo(dtype);
    const Tensor dy = Tensor::full({kDropout / 512, 512}, 0.2f).convertedTo(dtype);
    for (auto _ : state) {
        drop(x);
        benchmark::DoNotOptimize(drop.backward(dy).raw());
    }
    setGbytes(state, 4.0 * static_cast<double>(kDropout * static_cast<int64_t>(sizeOf(dtype))) * 1e-9);
}

// The same work with a float32 mask kept between them (Backend::dropoutForward, then mul).
void BM_DropoutKeptMask(benchmark::State& state) {
    Generator gen(3);
    const Tensor x = Tensor::full({kDropout}, 0.3f), dy = Tensor::full({kDropout}, 0.2f);
    Tensor mask = Tensor::empty({kDropout}), y = Tensor::empty({kDropout}), dx = Tensor::empty({kDropout});
    Backend& be = backendOf(x);
    for (auto _ : state) {
        be.dropoutForward(x, 0.1f, gen, mask, y);
        be.mul(dy, mask, dx);
        benchmark::DoNotOptimize(dx.raw());
    }
    setGbytes(state, 4.0 * static_cast<double>(kDropout * 4) * 1e-9);
}

BENCHMARK_CAPTURE(BM_DropoutLayer, float32, DType::float32)->UseRealTime();
BENCHMARK_CAPTURE(BM_DropoutLayer, bfloat16, DType::bfloat16)->UseRealTime();
BENCHMARK(BM_DropoutKeptMask)->UseRealTime();

} // namespace
