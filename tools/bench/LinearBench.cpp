// Linear(784, 1024) forward + backward at batch 128 against the plain sgemm calls of the
// same shapes, measured in the same run: OpenBLAS as Tessera loads it (the library its
// Linear runs on) and oneDNN's sgemm for comparison.
#include <dnnl.h>

#include <vector>

#include "BenchUtil.h"
#include "backend/Random.h"
#include "backend/cpu/OpenBlas.h"
#include "modules/Linear.h"

namespace {

constexpr int kBatch = 128, kIn = 784, kOut = 1024;
// forward, backward-data and backward-weights: three GEMMs of 2 * N * in * out flops.
constexpr double kGflop = 3.0 * 2.0 * kBatch * kIn * kOut * 1e-9;

// The three GEMMs Linear runs, called on OpenBLAS directly.
void BM_SgemmLinearShapes(benchmark::State& state) {
    std::vector<float> x(kBatch * kIn, 0.5f), w(kIn * kOut, 0.01f), y(kBatch * kOut), dy(kBatch * kOut, 0.1f),
        dx(kBatch * kIn), dw(kIn * kOut);
    const auto cblas_sgemm = tessera::cpu::openBlas().sgemm;
    state.SetLabel("OpenBLAS " + tessera::cpu::openBlas().coreName);
    for (auto _ : state) {
        // y[N, out] = x[N, in] W[in, out]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kBatch, kOut, kIn, 1.0f, x.data(), kIn, w.data(), kOut,
                    0.0f, y.data(), kOut);
        // dx[N, in] = dy[N, out] W^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kBatch, kIn, kOut, 1.0f, dy.data(), kOut, w.data(), kOut,
                    0.0f, dx.data(), kIn);
        // dW[in, out] = x^T dy
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kIn, kOut, kBatch, 1.0f, x.data(), kIn, dy.data(), kOut,
                    0.0f, dw.data(), kOut);
        benchmark::DoNotOptimize(dw.data());
    }
    setGflops(state, kGflop);
}
BENCHMARK(BM_SgemmLinearShapes)->Name("sgemm/784x1024/batch128/fwd+bwd")->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same three GEMMs through oneDNN's sgemm.
void BM_DnnlSgemmLinearShapes(benchmark::State& state) {
    std::vector<float> x(kBatch * kIn, 0.5f), w(kIn * kOut, 0.01f), y(kBatch * kOut), dy(kBatch * kOut, 0.1f),
        dx(kBatch * kIn), dw(kIn * kOut);
    for (auto _ : state) {
        dnnl_sgemm('N', 'N', kBatch, kOut, kIn, 1.0f, x.data(), kIn, w.data(), kOut, 0.0f, y.data(), kOut);
        dnnl_sgemm('N', 'T', kBatch, kIn, kOut, 1.0f, dy.data(), kOut, w.data(), kOut, 0.0f, dx.data(), kIn);
        dnnl_sgemm('T', 'N', kIn, kOut, kBatch, 1.0f, x.data(), kIn, dy.data(), kOut, 0.0f, dw.data(), kOut);
        benchmark::DoNotOptimize(dw.data());
    }
    setGflops(state, kGflop);
}
BENCHMARK(BM_DnnlSgemmLinearShapes)
    ->Name("dnnl_sgemm/784x1024/batch128/fwd+bwd")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_LinearForwardBackward(benchmark::State& state) {
    using namespace tessera;
    manualSeed(1);
    Linear lin(kIn, kOut);
    Tensor x = Tensor::full({kBatch, kIn}, 0.5f);
    Tensor dy = Tensor::full({kBatch, kOut}, 0.1f);
    for (auto _ : state) {
        lin(x);
        lin.backward(dy);
        benchmark::DoNotOptimize(lin.grad().raw());
    }
    setGflops(state, kGflop);
}
BENCHMARK(BM_LinearForwardBackward)
    ->Name("Linear/784x1024/batch128/fwd+bwd")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

} // namespace
