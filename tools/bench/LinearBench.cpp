// Linear(784, 1024) forward + backward at batch 128 against the plain GEMM calls of the
// same shapes, measured in the same run: oneDNN's matmul primitives (what Linear runs on by
// default), OpenBLAS as Tessera loads it (TESSERA_FLOAT32_GEMM=openblas) and oneDNN's
// sgemm; and the forward alone at batch 1. Also ViT-B/16's MLP with B in each layout.
#include <dnnl.h>
#include <dnnl.hpp>

#include <string>
#include <utility>
#include <vector>

#include "BenchUtil.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"
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

// The same three GEMMs as oneDNN matmul primitives (brgemm kernels), on plain operands
// read through their strides as Linear holds them; built once, outside the timing.
void dnnlMatmulLinearShapes(benchmark::State& state, int batch, bool forwardOnly) {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    std::vector<float> x(batch * kIn, 0.5f), w(kIn * kOut, 0.01f), y(batch * kOut), dy(batch * kOut, 0.1f),
        dx(batch * kIn), dw(kIn * kOut);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    // C[m, n] = op(A) op(B), A and B row-major [m, k] / [k, n] or their transposes.
    struct Product {
        dnnl::matmul prim;
        dnnl::memory a, b, c;
    };
    auto product = [&](bool ta, bool tb, int m, int n, int k, float* a, float* b, float* c) {
        const md ad({m, k}, dt::f32, ta ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
        const md bd({k, n}, dt::f32, tb ? dnnl::memory::dims{1, k} : dnnl::memory::dims{n, 1});
        const md cd({m, n}, dt::f32, dnnl::memory::dims{n, 1});
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), eng);
        return Product{dnnl::matmul(pd), dnnl::memory(ad, eng, a), dnnl::memory(bd, eng, b), dnnl::memory(cd, eng, c)};
    };
    std::vector<Product> products = {product(false, false, batch, kOut, kIn, x.data(), w.data(), y.data())};
    if (!forwardOnly) {
        products.push_back(product(false, true, batch, kIn, kOut, dy.data(), w.data(), dx.data()));
        products.push_back(product(true, false, kIn, kOut, batch, x.data(), dy.data(), dw.data()));
    }
    for (auto _ : state) {
        for (Product& p : products) {
            p.prim.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
        }
        stream.wait();
        benchmark::DoNotOptimize(y.data());
    }
    setGflops(state, (forwardOnly ? 1.0 : 3.0) * 2.0 * batch * kIn * kOut * 1e-9);
}
void BM_DnnlMatmulLinearShapes(benchmark::State& state) { dnnlMatmulLinearShapes(state, kBatch, false); }
BENCHMARK(BM_DnnlMatmulLinearShapes)
    ->Name("dnnl_matmul/784x1024/batch128/fwd+bwd")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Forward alone at batch 1 (a served request): OpenBLAS against oneDNN's matmul.
void BM_SgemmForwardBatch1(benchmark::State& state) {
    std::vector<float> x(kIn, 0.5f), w(kIn * kOut, 0.01f), y(kOut);
    const auto cblas_sgemm = tessera::cpu::openBlas().sgemm;
    for (auto _ : state) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, kOut, kIn, 1.0f, x.data(), kIn, w.data(), kOut, 0.0f,
                    y.data(), kOut);
        benchmark::DoNotOptimize(y.data());
    }
    setGflops(state, 2.0 * kIn * kOut * 1e-9);
}
BENCHMARK(BM_SgemmForwardBatch1)->Name("sgemm/784x1024/batch1/fwd")->Unit(benchmark::kMicrosecond)->UseRealTime();
void BM_DnnlMatmulForwardBatch1(benchmark::State& state) { dnnlMatmulLinearShapes(state, 1, true); }
BENCHMARK(BM_DnnlMatmulForwardBatch1)
    ->Name("dnnl_matmul/784x1024/batch1/fwd")
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

// ViT-B/16's MLP (Linear 768 -> 3072 over batch 8 x 197 tokens, then 3072 -> 768), forward
// alone and forward + backward, with B in each layout oneDNN's float32 matmul takes it
// (CpuBackend::setGemmWeightsLayout): plain, converted to blocked on every call, and chosen
// by timing (automatic, the default).
void linearLayouts(benchmark::State& state, int64_t in, int64_t out, bool train, tessera::GemmWeightsLayout layout) {
    using namespace tessera;
    const GemmWeightsLayout before = CpuBackend::gemmWeightsLayout();
    CpuBackend::setGemmWeightsLayout(layout);
    manualSeed(1);
    constexpr int64_t rows = 8 * 197;
    Linear lin(in, out);
    if (!train) lin.evalMode();
    Tensor x = Tensor::full({rows, in}, 0.5f);
    Tensor dy = Tensor::full({rows, out}, 0.1f);
    for (auto _ : state) {
        lin(x);
        if (train) lin.backward(dy);
        benchmark::DoNotOptimize(lin.data().raw());
    }
    CpuBackend::setGemmWeightsLayout(before);
    setGflops(state, (train ? 3.0 : 1.0) * 2.0 * rows * in * out * 1e-9);
}

int registerLayouts() {
    using tessera::GemmWeightsLayout;
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{768, 3072}, {3072, 768}}) {
        for (bool train : {false, true}) {
            for (const auto& [layout, name] : {std::pair{GemmWeightsLayout::plain, "plain"},
                                               {GemmWeightsLayout::blocked, "blocked"},
                                               {GemmWeightsLayout::automatic, "automatic"}}) {
                const std::string label = "Linear/" + std::to_string(in) + "x" + std::to_string(out) + "/rows1576/" +
                                          (train ? "fwd+bwd/" : "fwd/") + name;
                benchmark::RegisterBenchmark(label.c_str(), linearLayouts, in, out, train, layout)
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime();
            }
        }
    }
    return 0;
}
const int layoutsRegistered = registerLayouts();

} // namespace
