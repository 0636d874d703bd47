// Activations: the backend's op (oneDNN eltwise) against a plain OpenMP loop over the
// same buffers, to justify which one the CPU backend uses.
#include <cmath>

#include "BenchUtil.h"
#include "backend/Backend.h"

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

} // namespace
