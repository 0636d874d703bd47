// ScaledDotProductAttention on the CPU, forward and backward (train mode) and the forward
// alone (eval mode), through the fused float32 kernel (backend/cpu/Attention.cpp: a chunk
// of query rows' scores in cache from q k^T to P v) against the blocks of heads it replaces
// (CpuBackend::setFusedAttention(false): batched products and oneDNN's softmax over 2 MiB of
// scores at a time). Shapes [heads, T, d]: vit-tiny's (batch 128, 4 heads of 16, 50
// tokens), ViT-B/16's (batch 8, 12 heads of 64, 197 tokens), a long sequence (8 heads of
// 64, 1024 tokens), and causal ones: gpt-mini's (batch 64, 4 heads of 32, 64 tokens;
// train mode with its attention dropout 0.1, as it trains), ViT-B/16's and the long one
// causal; and ViT-B/16's with a learned bias [12, 197, 197] added to every sample's
// scores (Swin's kind of relative position bias, whose gradient backward sums over the
// batch); and Swin-T's first stage (batch 8: 64 windows of 49 tokens each, 3 heads of 32)
// with its bias [3, 49, 49]; and attention over the 64x64 positions of a diffusion model's
// maps (batch 2, one head of 128 channels: latent diffusion's AttnBlock), and of one map
// (fewer heads than threads).
// GFLOP/s counts the forward's two products once (fwd) or three times (fwd+bwd: the
// backward's four products, the scores' recompute not counted), whole even where causal.
//
//   tessera_bench --benchmark_filter=Attention/ --benchmark_repetitions=7
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <string>

#include "BenchUtil.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"
#include "modules/Attention.h"

namespace {

using namespace tessera;

struct Problem {
    const char* name;
    int64_t heads, T, d;
    bool causal = false;
    float dropout = 0.0f;  // in train mode
    int64_t biasHeads = 0; // > 0: q [heads / biasHeads, biasHeads, T, d] and a bias [biasHeads, T, T]
};

constexpr Problem kProblems[] = {{"vit-tiny/512x50x16", 512, 50, 16},
                                 {"vit-b16/96x197x64", 96, 197, 64},
                                 {"long/8x1024x64", 8, 1024, 64},
                                 {"gpt-mini-causal-dropout/256x64x32", 256, 64, 32, true, 0.1f},
                                 {"long-causal/8x1024x64", 8, 1024, 64, true},
                                 {"vit-b16-causal/96x197x64", 96, 197, 64, true},
                                 {"vit-b16-bias/96x197x64", 96, 197, 64, false, 0.0f, 12},
                                 {"swin-t-bias/1536x49x32", 1536, 49, 32, false, 0.0f, 3},
                                 {"positions/2x4096x128", 2, 4096, 128},
                                 {"positions-one/1x4096x128", 1, 4096, 128}};

void BM_Attention(benchmark::State& state, Problem p, bool fused, bool train) {
    const bool before = CpuBackend::fusedAttention();
    CpuBackend::setFusedAttention(fused);
    Generator gen(1);
    Tensors in;
    const Shape shape =
        p.biasHeads > 0 ? Shape{p.heads / p.biasHeads, p.biasHeads, p.T, p.d} : Shape{p.heads, p.T, p.d};
    for (int i = 0; i < 3; ++i) {
        Tensor t = Tensor::empty(shape);
        backendOf(t).fillNormal(t, 0.0f, 1.0f, gen);
        in.push_back(t);
    }
    if (p.biasHeads > 0) {
        Tensor bias = Tensor::empty({p.biasHeads, p.T, p.T});
        backendOf(bias).fillNormal(bias, 0.0f, 1.0f, gen);
        in.push_back(bias);
    }
    Tensor dy = Tensor::full(shape, 0.01f);
    ScaledDotProductAttention att({.causal = p.causal, .dropout = p.dropout, .seed = 1});
    if (!train) att.evalMode();
    for (auto _ : state) {
        att(in);
        if (train) att.backward(Tensors{dy});
    }
    CpuBackend::setFusedAttention(before);
    const double forward = 4.0 * static_cast<double>(p.heads * p.T * p.T * p.d) * 1e-9;
    setGflops(state, train ? 3.0 * forward : forward);
}

int registerAll() {
    for (const Problem& p : kProblems) {
        for (bool train : {true, false}) {
            for (bool fused : {true, false}) {
                const std::string name =
                    std::string("Attention/") + p.name + (train ? "/fwd+bwd" : "/fwd") + (fused ? "/fused" : "/blocks");
                benchmark::RegisterBenchmark(name.c_str(), BM_Attention, p, fused, train)
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime();
            }
        }
    }
    return 0;
}

const int registered = registerAll();

} // namespace
