// ScaledDotProductAttention against softmax(q k^T s + mask) v computed in double, with a
// causal mask and an additive key-padding mask; its dropout; MultiheadAttention against
// the projections and heads computed in double; PositionalEncoding against its formula.
// Gradients, shapes, bad input.
#include <array>
#include <cmath>
#include <limits>

#include "GradCheck.h"
#include "backend/AttentionSpec.h"
#include "backend/Backend.h"
#include "backend/cpu/CpuBackend.h"
#include "modules/Attention.h"
#include "modules/MultiheadAttention.h"
#include "modules/PositionalEncoding.h"

namespace tessera {
namespace {
using namespace testing;

// heads [H, T, d] each; mask [H or 1, Tq, Tk] additive (empty: none).
std::vector<float> reference(const Tensor& qt, const Tensor& kt, const Tensor& vt, const std::vector<float>& mask,
                             int64_t maskHeads, bool causal, float scale) {
    const std::vector<float> q = qt.toVector<float>(), k = kt.toVector<float>(), v = vt.toVector<float>();
    const Shape& qs = qt.shape();
    const int64_t d = qs[qs.rank() - 1], Tq = qs[qs.rank() - 2], Tk = kt.shape()[qs.rank() - 2];
    const int64_t dv = vt.shape()[qs.rank() - 1], H = qt.numel() / (Tq * d);
    std::vector<float> y(static_cast<size_t>(H * Tq * dv));
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
            std::vector<double> s(static_cast<size_t>(Tk));
            double top = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < Tk; ++j) {
                double dot = 0;
                for (int64_t c = 0; c < d; ++c) dot += double(q[(h * Tq + i) * d + c]) * k[(h * Tk + j) * d + c];
                s[j] = dot * scale + (mask.empty() ? 0.0 : mask[((h % maskHeads) * Tq + i) * Tk + j]);
                if (causal && j > i) s[j] = -std::numeric_limits<double>::infinity();
                top = std::max(top, s[j]);
            }
            double sum = 0;
            for (double& e : s) sum += (e = std::exp(e - top));
            for (int64_t c = 0; c < dv; ++c) {
                double o = 0;
                for (int64_t j = 0; j < Tk; ++j) o += s[j] / sum * v[(h * Tk + j) * dv + c];
                y[(h * Tq + i) * dv + c] = static_cast<float>(o);
            }
        }
    return y;
}

// What run(fused, into) gathers (outputs, then gradients, flattened) with the CPU's fused
// attention on, then off (and on again after): [0] fused, [1] the blocks of heads.
using Results = std::vector<std::vector<float>>;
template <class Run> std::array<Results, 2> fusedAndBlocks(Run run) {
    std::array<Results, 2> results;
    for (bool fused : {true, false}) {
        CpuBackend::setFusedAttention(fused);
        run(fused, results[fused ? 0 : 1]);
    }
    CpuBackend::setFusedAttention(true);
    return results;
}

// Each fused result within `tolerance` of the blocks' (allClose's).
void expectFusedMatchesBlocks(const std::array<Results, 2>& results, float tolerance) {
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
        const Tensor fused = Tensor::fromVector({static_cast<int64_t>(results[0][i].size())}, results[0][i]);
        EXPECT_TRUE(allClose(fused, results[1][i], tolerance)) << "result " << i;
    }
}

TEST(ScaledDotProductAttention, ReferenceGradientShape) {
    ScaledDotProductAttention att;
    const Tensor q = randomTensor({2, 3, 5, 8}, 1), k = randomTensor({2, 3, 6, 8}, 2),
                 v = randomTensor({2, 3, 6, 4}, 3);
    const Tensor y = att(Tensors{q, k, v})[0];
    EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 4}));
    EXPECT_TRUE(allClose(y, reference(q, k, v, {}, 1, false, 1.0f / std::sqrt(8.0f)), 1e-5f));
    EXPECT_TRUE(checkGradients(att, {q, k, v}));
    EXPECT_TRUE(checkShapes(att, {q, k, v}));
}

TEST(ScaledDotProductAttention, CausalAndScale) {
    ScaledDotProductAttention att({.causal = true, .scale = 0.5f});
    const Tensor q = randomTensor({4, 6, 8}, 4), k = randomTensor({4, 6, 8}, 5), v = randomTensor({4, 6, 3}, 6);
    EXPECT_TRUE(allClose(att(Tensors{q, k, v})[0], reference(q, k, v, {}, 1, true, 0.5f), 1e-5f));
    EXPECT_TRUE(checkGradients(att, {q, k, v}));
    // The first position sees only itself: its output is v's first row.
    const std::vector<float> y = att(Tensors{q, k, v})[0].toVector<float>(), vs = v.toVector<float>();
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(y[c], vs[c], 1e-6f);
}

TEST(ScaledDotProductAttention, AdditiveMaskBroadcastOverHeads) {
    // A key-padding mask [N, 1, 1, Tk] over [N, heads, T, d]: the last two keys of sample 1 dropped.
    ScaledDotProductAttention att;
    const Tensor q = randomTensor({2, 2, 3, 4}, 7), k = randomTensor({2, 2, 5, 4}, 8),
                 v = randomTensor({2, 2, 5, 4}, 9);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> pad = {0, 0, 0, 0, 0, 0, 0, 0, -inf, -inf};
    const Tensor mask = Tensor::fromVector({2, 1, 1, 5}, pad);
    // the reference takes a mask per head [4 heads, 3, 5]
    std::vector<float> full;
    for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 3; ++i) full.insert(full.end(), pad.begin() + n * 5, pad.begin() + n * 5 + 5);
    EXPECT_TRUE(allClose(att(Tensors{q, k, v, mask})[0], reference(q, k, v, full, 4, false, 0.5f), 1e-5f));
    EXPECT_TRUE(checkGradients(att, {q, k, v, Tensor::fromVector({2, 1, 1, 5}, std::vector<float>(10, 0.25f))}));
}

TEST(ScaledDotProductAttention, BadInput) {
    ScaledDotProductAttention att({.name = "att"});
    const Tensor q = randomTensor({2, 5, 8}, 1);
    EXPECT_TRUE(throwsShapeError(
        [&] {
            att(Tensors{q, randomTensor({2, 5, 7}, 2), randomTensor({2, 5, 4}, 3)});
        },
        {"ScaledDotProductAttention 'att'", "one d"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            att(Tensors{q, randomTensor({3, 5, 8}, 2), randomTensor({3, 5, 4}, 3)});
        },
        {"same leading dims"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            att(Tensors{q, randomTensor({2, 6, 8}, 2), randomTensor({2, 6, 4}, 3), randomTensor({5, 5}, 4)});
        },
        {"mask [..., 5 or 1, 6]", "got [5, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { att(Tensors{q, q}); }, {"expects 3 input tensors"}));
    EXPECT_TRUE(throwsModuleError([] { ScaledDotProductAttention({.scale = -1.0f}); }, {"scale"}));
}

// The CPU's fused float32 kernel (CpuBackend::fusesAttention) against the blocks of heads,
// forward and backward, causal or not, on both float32 GEMM engines: rows that are not
// whole vectors, dv apart from d, more queries than keys and fewer, keys long enough that
// query rows go through in several chunks (at least 256 rows a chunk, so 600 queries over
// 1100 keys take three; causally 64 rows, so 600 queries take ten and 1100 eighteen, each
// chunk computing fewer keys), one head (fewer than the threads: backward deals its chunks
// to several tasks, each summing dk and dv apart), and scores large enough that most
// probabilities are 0; those outputs also against the reference in double. Under
// calcMode(bfloat16) it still runs in float32; in float16 or bfloat16 the backend does not
// take it.
TEST(ScaledDotProductAttention, CpuFusedKernelMatchesTheBlocks) {
    Backend& cpu = backendFor(Device::cpu());
    for (bool causal : {false, true}) {
        const AttentionSpec spec{.scale = 0.5f, .causal = causal};
        EXPECT_TRUE(cpu.fusesAttention(spec, {2, 5, 8}, {2, 6, 8}, {2, 6, 3}, DType::float32, true));
        EXPECT_FALSE(cpu.fusesAttention(spec, {2, 5, 8}, {2, 6, 8}, {2, 6, 3}, DType::bfloat16, true));
        EXPECT_FALSE(cpu.fusesAttention(spec, {2, 5, 8}, {3, 6, 8}, {2, 6, 3}, DType::float32, true)); // heads
    }
    const Float32Gemm engineBefore = CpuBackend::float32Gemm();
    struct Case {
        Shape q, k, v;
        float range = 1.0f; // q's values in [-range, range]: 40 makes scores of up to +-113,
                            // whose softmax takes exponents below float's range (0 there)
    };
    const std::vector<Case> cases = {
        Case{{2, 3, 5, 8}, {2, 3, 6, 8}, {2, 3, 6, 4}},       Case{{2, 33, 16}, {2, 40, 16}, {2, 40, 24}},
        Case{{2, 40, 16}, {2, 33, 16}, {2, 33, 24}},          Case{{3, 600, 8}, {3, 1100, 8}, {3, 1100, 5}},
        Case{{2, 1100, 8}, {2, 1100, 8}, {2, 1100, 5}, 4.0f}, Case{{2, 19, 8}, {2, 23, 8}, {2, 23, 8}, 40.0f},
        Case{{1, 600, 8}, {1, 1100, 8}, {1, 1100, 5}},        Case{{1, 1100, 8}, {1, 1100, 8}, {1, 1100, 5}}};
    for (const auto& [c, causal] : [&] {
             std::vector<std::pair<Case, bool>> all;
             for (const Case& c : cases) {
                 if (c.q[1] != 1100) all.push_back({c, false}); // 1100 x 1100 causally only
                 all.push_back({c, true});
             }
             return all;
         }()) {
        for (Float32Gemm engine : {Float32Gemm::onednn, Float32Gemm::openblas}) {
            SCOPED_TRACE(c.q.str() + c.k.str() + (causal ? " causal" : "") +
                         (engine == Float32Gemm::onednn ? " onednn" : " openblas"));
            CpuBackend::setFloat32Gemm(engine);
            const Tensor q = randomTensor(c.q, 1, -c.range, c.range), k = randomTensor(c.k, 2),
                         v = randomTensor(c.v, 3);
            std::vector<int64_t> ys = c.q.dims();
            ys.back() = c.v.dims().back();
            const Tensor dy = randomTensor(Shape(ys), 4);
            const auto results = fusedAndBlocks([&](bool fused, Results& r) {
                for (DType compute : {DType::float32, DType::bfloat16}) {
                    ScaledDotProductAttention att({.causal = causal});
                    att.calcMode(compute);
                    EXPECT_EQ(
                        AttentionKernel({.causal = causal}).fuses({c.q, c.k, c.v}, false, compute, Device::cpu(), true),
                        fused);
                    const Tensor y = att(Tensors{q, k, v})[0];
                    att.backward(Tensors{dy});
                    r.push_back(y.toVector<float>());
                    for (const Tensor& g : att.gradList()) r.push_back(g.toVector<float>());
                }
            });
            // peaked: dP - rowsum(P dP) cancels where one probability is near 1, and q's
            // scale carries that rounding into dk (2e-5 apart seen)
            expectFusedMatchesBlocks(results, c.range > 1.0f ? 1e-4f : 1e-5f);
            if (c.k[1] == 1100 || c.range > 1.0f || causal) {
                const Tensor y = Tensor::fromVector({static_cast<int64_t>(results[0][0].size())}, results[0][0]);
                const float scale = 1.0f / std::sqrt(static_cast<float>(c.q.dims().back()));
                EXPECT_TRUE(allClose(y, reference(q, k, v, {}, 1, causal, scale), 1e-5f));
            }
        }
    }
    CpuBackend::setFloat32Gemm(engineBefore);
}

TEST(ScaledDotProductAttention, Dropout) {
    ScaledDotProductAttention att({.dropout = 0.5f, .seed = 3});
    const Tensor q = randomTensor({2, 4, 8}, 1), k = randomTensor({2, 6, 8}, 2), v = randomTensor({2, 6, 3}, 3);
    const Tensor kept = att(Tensors{q, k, v})[0];
    const Tensor other = att(Tensors{q, k, v})[0]; // the stream moved on: other masks
    EXPECT_FALSE(allClose(kept, other.toVector<float>(), 1e-3f));
    att.randomStream()->manualSeed(3); // replayed
    EXPECT_TRUE(allClose(att(Tensors{q, k, v})[0], kept.toVector<float>(), 0.0f));
    // The expectation over masks is the undropped output: the mean of many draws nears it.
    att.evalMode();
    const std::vector<float> exact = att(Tensors{q, k, v})[0].toVector<float>();
    att.trainMode();
    std::vector<double> mean(exact.size(), 0.0);
    const int draws = 2000;
    for (int i = 0; i < draws; ++i) {
        const std::vector<float> y = att(Tensors{q, k, v})[0].toVector<float>();
        for (size_t j = 0; j < y.size(); ++j) mean[j] += y[j] / draws;
    }
    for (size_t j = 0; j < exact.size(); ++j) EXPECT_NEAR(mean[j], exact[j], 0.05) << j;
    // backward draws the forward's masks again
    GradCheckOptions opts;
    opts.beforeForward = [&] { att.randomStream()->manualSeed(5); };
    EXPECT_TRUE(checkGradients(att, {q, k, v}, opts));
    EXPECT_TRUE(throwsModuleError([] { ScaledDotProductAttention({.dropout = 1.0f}); }, {"dropout"}));
}

// With train-mode dropout the CPU's fused kernel draws each probability's mask from its
// counter, as the blocks of heads draw them: the same outputs and gradients, and the
// stream advanced as far, causal or not, over one chunk of query rows or several (1100
// keys: three chunks of 600 queries; 300 causal queries: four, the first computing fewer
// keys; one head's chunks dealt to several tasks); MultiheadAttention (gpt-mini's causal
// self-attention with dropout) as well.
TEST(ScaledDotProductAttention, CpuFusedDropoutDrawsTheMasksOfTheBlocks) {
    struct Case {
        Shape q, k, v;
        bool causal;
    };
    for (const Case& c :
         {Case{{2, 3, 5, 8}, {2, 3, 6, 8}, {2, 3, 6, 4}, false}, Case{{4, 7, 8}, {4, 7, 8}, {4, 7, 8}, true},
          Case{{2, 600, 8}, {2, 1100, 8}, {2, 1100, 5}, false}, Case{{2, 300, 8}, {2, 300, 8}, {2, 300, 8}, true},
          Case{{1, 300, 8}, {1, 300, 8}, {1, 300, 8}, true}}) {
        SCOPED_TRACE(c.q.str() + c.k.str() + (c.causal ? " causal" : ""));
        const Tensor q = randomTensor(c.q, 1), k = randomTensor(c.k, 2), v = randomTensor(c.v, 3);
        std::vector<int64_t> ys = c.q.dims();
        ys.back() = c.v.dims().back();
        const Tensor dy = randomTensor(Shape(ys), 4);
        uint64_t drawn[2] = {0, 0};
        std::vector<float> undropped;
        const auto results = fusedAndBlocks([&](bool fused, Results& r) {
            ScaledDotProductAttention att({.causal = c.causal, .dropout = 0.3f, .seed = 11});
            EXPECT_EQ(AttentionKernel({.causal = c.causal, .dropout = 0.3f})
                          .fuses({c.q, c.k, c.v}, true, DType::float32, Device::cpu(), true),
                      fused);
            const Tensor y = att(Tensors{q, k, v})[0];
            att.backward(Tensors{dy});
            drawn[fused ? 0 : 1] = att.randomStream()->offset();
            r.push_back(y.toVector<float>());
            for (const Tensor& g : att.gradList()) r.push_back(g.toVector<float>());
            att.evalMode();
            undropped = att(Tensors{q, k, v})[0].toVector<float>();
        });
        EXPECT_EQ(drawn[0], drawn[1]);
        EXPECT_EQ(drawn[0], static_cast<uint64_t>(c.q.numel() / c.q.dims().back() * c.k[c.k.rank() - 2]));
        EXPECT_FALSE(allClose(Tensor::fromVector({static_cast<int64_t>(undropped.size())}, undropped), results[0][0],
                              1e-3f)); // something was dropped
        expectFusedMatchesBlocks(results, 1e-5f);
    }
    const Tensor x = randomTensor({3, 40, 16}, 5), dy = randomTensor({3, 40, 16}, 6);
    MultiheadAttention mha(16, 2, {.dropout = 0.2f, .causal = true, .seed = 3});
    expectFusedMatchesBlocks(fusedAndBlocks([&](bool, Results& r) {
                                 mha.randomStream()->manualSeed(3);
                                 r.push_back(mha(x).toVector<float>());
                                 r.push_back(mha.backward(Tensors{dy})[0].toVector<float>());
                             }),
                             1e-5f);
}

// With an additive mask the CPU's fused kernel adds it to each chunk's scores and sums its
// gradient per thread: the same outputs and gradients (the mask's too) as the blocks of
// heads, for a key-padding mask [N, 1, 1, Tk] with -inf in it, a per-head table broadcast
// over the batch (Swin's learned bias) with causal masking, one [Tq, Tk] matrix for every
// head over three chunks of queries (one head's dealt to several tasks too), and a mask
// with dropout.
TEST(ScaledDotProductAttention, CpuFusedKernelWithAMaskMatchesTheBlocks) {
    const float inf = std::numeric_limits<float>::infinity();
    struct Case {
        Shape q, k, v, mask;
        bool causal = false;
        float dropout = 0.0f;
    };
    for (const Case& c : {Case{{2, 3, 5, 8}, {2, 3, 6, 8}, {2, 3, 6, 4}, {2, 1, 1, 6}},
                          Case{{2, 3, 33, 16}, {2, 3, 40, 16}, {2, 3, 40, 24}, {3, 33, 40}, true},
                          Case{{2, 600, 8}, {2, 1100, 8}, {2, 1100, 5}, {600, 1100}},
                          Case{{1, 600, 8}, {1, 1100, 8}, {1, 1100, 5}, {600, 1100}},
                          Case{{2, 2, 7, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}, {2, 1, 7, 7}, true, 0.3f}}) {
        SCOPED_TRACE(c.q.str() + " mask " + c.mask.str() + (c.causal ? " causal" : "") +
                     (c.dropout > 0.0f ? " dropout" : ""));
        const Tensor q = randomTensor(c.q, 1), k = randomTensor(c.k, 2), v = randomTensor(c.v, 3);
        std::vector<float> m = randomTensor(c.mask, 4).toVector<float>();
        if (c.mask[1] == 1) { // a key-padding mask: sample 1's last two keys dropped
            const int64_t Tk = c.mask.dims().back();
            m.assign(m.size(), 0.0f);
            m[static_cast<size_t>(2 * Tk - 1)] = m[static_cast<size_t>(2 * Tk - 2)] = -inf;
        }
        const Tensor mask = Tensor::fromVector(c.mask, m);
        std::vector<int64_t> ys = c.q.dims();
        ys.back() = c.v.dims().back();
        const Tensor dy = randomTensor(Shape(ys), 5);
        expectFusedMatchesBlocks(fusedAndBlocks([&](bool fused, Results& r) {
                                     const AttentionOptions options{
                                         .causal = c.causal, .dropout = c.dropout, .seed = 5};
                                     ScaledDotProductAttention att(options);
                                     EXPECT_EQ(AttentionKernel(options).fuses({c.q, c.k, c.v, c.mask}, c.dropout > 0.0f,
                                                                              DType::float32, Device::cpu(), true),
                                               fused);
                                     r.push_back(att(Tensors{q, k, v, mask})[0].toVector<float>());
                                     att.backward(Tensors{dy});
                                     EXPECT_EQ(att.gradList().size(), 4u);
                                     for (const Tensor& g : att.gradList()) r.push_back(g.toVector<float>());
                                 }),
                                 1e-5f);
    }
}

// Multi-head attention in double from the module's own parameters (PyTorch's layouts):
// batch-first query [N, L, E], key and value [N, S, E]; mask [N, H, L, S] additive (empty: none).
std::vector<float> mhaReference(MultiheadAttention& m, const Tensor& xq, const Tensor& xk, const Tensor& xv,
                                const std::vector<double>& mask, bool causal) {
    const int64_t N = xq.shape()[0], L = xq.shape()[1], S = xk.shape()[1], E = m.embedDim(), H = m.numHeads();
    const int64_t d = E / H;
    const std::vector<float> W = m.getVar("in_proj_weight")->data.toVector<float>();
    const std::vector<float> Wo = m.getVar("out_proj_weight")->data.toVector<float>();
    const bool bias = m.hasVar("in_proj_bias");
    const std::vector<float> b = bias ? m.getVar("in_proj_bias")->data.toVector<float>() : std::vector<float>(3 * E);
    const std::vector<float> bo = bias ? m.getVar("out_proj_bias")->data.toVector<float>() : std::vector<float>(E);
    auto project = [&](const Tensor& x, int part, int64_t T) { // [N, T, E] -> [N, T, E]
        const std::vector<float> xs = x.toVector<float>();
        std::vector<double> p(static_cast<size_t>(N * T * E));
        for (int64_t r = 0; r < N * T; ++r)
            for (int64_t o = 0; o < E; ++o) {
                double sum = b[part * E + o];
                for (int64_t i = 0; i < E; ++i) sum += double(xs[r * E + i]) * W[(part * E + o) * E + i];
                p[r * E + o] = sum;
            }
        return p;
    };
    const std::vector<double> q = project(xq, 0, L), k = project(xk, 1, S), v = project(xv, 2, S);
    std::vector<double> joined(static_cast<size_t>(N * L * E));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < L; ++i) {
                std::vector<double> s(static_cast<size_t>(S));
                double top = -std::numeric_limits<double>::infinity();
                for (int64_t j = 0; j < S; ++j) {
                    double dot = 0;
                    for (int64_t c = 0; c < d; ++c)
                        dot += q[(n * L + i) * E + h * d + c] * k[(n * S + j) * E + h * d + c];
                    s[j] = dot / std::sqrt(double(d)) + (mask.empty() ? 0.0 : mask[((n * H + h) * L + i) * S + j]);
                    if (causal && j > i) s[j] = -std::numeric_limits<double>::infinity();
                    top = std::max(top, s[j]);
                }
                double sum = 0;
                for (double& e : s) sum += (e = std::exp(e - top));
                for (int64_t c = 0; c < d; ++c) {
                    double o = 0;
                    for (int64_t j = 0; j < S; ++j) o += s[j] / sum * v[(n * S + j) * E + h * d + c];
                    joined[(n * L + i) * E + h * d + c] = o;
                }
            }
    std::vector<float> y(static_cast<size_t>(N * L * E));
    for (int64_t r = 0; r < N * L; ++r)
        for (int64_t o = 0; o < E; ++o) {
            double sum = bo[o];
            for (int64_t i = 0; i < E; ++i) sum += joined[r * E + i] * Wo[o * E + i];
            y[r * E + o] = static_cast<float>(sum);
        }
    return y;
}

// [A, B, C] -> [B, A, C]
Tensor swapped(const Tensor& x) {
    const Shape& s = x.shape();
    const std::vector<float> v = x.toVector<float>();
    std::vector<float> out(v.size());
    for (int64_t a = 0; a < s[0]; ++a)
        for (int64_t b = 0; b < s[1]; ++b)
            for (int64_t c = 0; c < s[2]; ++c) out[(b * s[0] + a) * s[2] + c] = v[(a * s[1] + b) * s[2] + c];
    return Tensor::fromVector({s[1], s[0], s[2]}, out);
}

TEST(MultiheadAttention, SelfAttentionReferenceGradientShape) {
    manualSeed(11);
    MultiheadAttention mha(8, 2);
    // non-zero biases, so that every parameter shows in the output
    mha.getVar("in_proj_bias")->data.copyFrom(randomTensor({24}, 4));
    mha.getVar("out_proj_bias")->data.copyFrom(randomTensor({8}, 5));
    const Tensor x = randomTensor({3, 5, 8}, 1);
    const Tensor y = mha(x);
    EXPECT_EQ(y.shape(), (Shape{3, 5, 8}));
    EXPECT_TRUE(allClose(y, mhaReference(mha, x, x, x, {}, false), 1e-5f));
    EXPECT_EQ(mha.numOfParams(), 3 * 8 * 8 + 3 * 8 + 8 * 8 + 8);
    EXPECT_TRUE(checkGradients(mha, {x}));
    EXPECT_TRUE(checkShapes(mha, {x}));
}

// Under calcMode(bfloat16) it takes bfloat16 sequences as they come and writes its output
// as a Linear does (bfloat16 on a CPU with bfloat16 kernels), close to float32 compute on
// the same operands; the input gradient has the input's dtype; masks stay float32 (a
// bfloat16 mask makes it take float32 copies).
TEST(MultiheadAttention, Bfloat16InAndOut) {
    const DType bf16 = DType::bfloat16, f32 = DType::float32;
    manualSeed(12);
    MultiheadAttention low(16, 4), ref(16, 4);
    for (MultiheadAttention* m : {&low, &ref}) {
        m->getVar("in_proj_bias")->data.copyFrom(randomTensor({48}, 4));
        m->getVar("out_proj_bias")->data.copyFrom(randomTensor({16}, 5));
    }
    ref.getVar("in_proj_weight")->data.copyFrom(low.getVar("in_proj_weight")->data);
    ref.getVar("out_proj_weight")->data.copyFrom(low.getVar("out_proj_weight")->data);
    low.calcMode(bf16);
    ref.calcMode(bf16);
    const Tensor x = randomTensor({3, 7, 16}, 1).convertedTo(bf16), dy = randomTensor({3, 7, 16}, 2);
    EXPECT_TRUE(low.takes16Bit({x}));
    const Tensor y = low(x), yr = ref(x.convertedTo(f32)); // ref: handed float32, as before
    const DType out = backendFor(Device::cpu()).gemmOutputDType(bf16);
    EXPECT_EQ(y.dtype(), out);
    EXPECT_EQ(low.outputDTypes({{3, 7, 16}}, {bf16}, Device::cpu()), std::vector<DType>{out});
    EXPECT_LT(relL2(y, yr), 1e-2);
    low.zeroGradParams();
    ref.zeroGradParams();
    const Tensor dx = low.backward(dy.convertedTo(out)), dxr = ref.backward(dy.convertedTo(out));
    EXPECT_EQ(dx.dtype(), bf16);
    EXPECT_LT(relL2(dx, dxr), 1e-2);
    for (const char* name : {"in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias"}) {
        EXPECT_LT(relL2(low.getVar(name)->grad, ref.getVar(name)->grad), 1e-2) << name;
    }
    MultiheadAttention masked(16, 4, {.keyPaddingMask = true});
    masked.calcMode(bf16);
    EXPECT_TRUE(masked.takes16Bit({x, Tensor::zeros({3, 7})}));
    EXPECT_FALSE(masked.takes16Bit({x, Tensor::zeros({3, 7}, bf16)}));
    EXPECT_FALSE(ref.takes16Bit({x.convertedTo(DType::float16)})); // not the compute type
}

TEST(MultiheadAttention, CrossAttentionTimeMajorWithBothMasks) {
    // query [L=4, N=2, E=8], key/value [S=6, 2, 8]; key-padding drops the last two keys of
    // sample 1; a per-head attn_mask [N * H, L, S] adds its own scores; causal on top.
    manualSeed(12);
    MultiheadAttention mha(8, 2, {.batchFirst = false, .causal = true, .keyPaddingMask = true, .attnMask = true});
    mha.getVar("in_proj_bias")->data.copyFrom(randomTensor({24}, 4));
    const Tensor q = randomTensor({4, 2, 8}, 1), k = randomTensor({6, 2, 8}, 2), v = randomTensor({6, 2, 8}, 3);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> pad(12, 0.0f);
    pad[10] = pad[11] = -inf;
    const Tensor padding = Tensor::fromVector({2, 6}, pad);
    const Tensor attn = randomTensor({4, 4, 6}, 6);
    std::vector<double> full(2 * 2 * 4 * 6);
    const std::vector<float> a = attn.toVector<float>();
    for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 6; ++j)
                    full[((n * 2 + h) * 4 + i) * 6 + j] = double(a[((n * 2 + h) * 4 + i) * 6 + j]) + pad[n * 6 + j];
    const Tensor y = mha(Tensors{q, k, v, padding, attn})[0];
    EXPECT_EQ(y.shape(), (Shape{4, 2, 8}));
    EXPECT_TRUE(allClose(swapped(y), mhaReference(mha, swapped(q), swapped(k), swapped(v), full, true), 1e-5f));
    // gradients with finite masks (a -inf mask has none to check numerically)
    const Tensor softPad = randomTensor({2, 6}, 7);
    EXPECT_TRUE(checkGradients(mha, {q, k, v, softPad, attn}));
    EXPECT_TRUE(checkShapes(mha, {q, k, v, softPad, attn}));
    // a 2-D attn_mask [L, S] and only that
    MultiheadAttention shared(8, 4, {.attnMask = true});
    EXPECT_TRUE(checkGradients(shared, {randomTensor({2, 4, 8}, 8), randomTensor({4, 4}, 9)}));
}

TEST(MultiheadAttention, DropoutEvalAndReplay) {
    MultiheadAttention mha(8, 2, {.dropout = 0.4f, .seed = 2});
    const Tensor x = randomTensor({2, 5, 8}, 1);
    const std::vector<float> first = mha(x).toVector<float>();
    EXPECT_FALSE(allClose(mha(x), first, 1e-3f));
    mha.randomStream()->manualSeed(2);
    EXPECT_TRUE(allClose(mha(x), first, 0.0f));
    GradCheckOptions opts;
    opts.beforeForward = [&] { mha.randomStream()->manualSeed(4); };
    EXPECT_TRUE(checkGradients(mha, {x}, opts));
    mha.evalMode(); // no dropout: the reference holds
    EXPECT_TRUE(allClose(mha(x), mhaReference(mha, x, x, x, {}, false), 1e-5f));
    EXPECT_TRUE(throwsModuleError([&] { mha.backward(Tensor::zeros({2, 5, 8})); }, {"train mode"}));
}

TEST(MultiheadAttention, NoBiasTrains) {
    manualSeed(13);
    MultiheadAttention mha(4, 1, {.bias = false});
    EXPECT_FALSE(mha.hasVar("in_proj_bias"));
    EXPECT_EQ(mha.numOfParams(), 3 * 16 + 16);
    EXPECT_TRUE(checkGradients(mha, {randomTensor({2, 3, 4}, 1)}));
}

TEST(MultiheadAttention, BadInput) {
    MultiheadAttention mha(8, 2, {.keyPaddingMask = true, .name = "mha"});
    const Tensor x = randomTensor({2, 5, 8}, 1);
    EXPECT_TRUE(throwsShapeError([&] { mha(Tensors{x}); }, {"MultiheadAttention 'mha'", "2 or 4 inputs, got 1"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mha(Tensors{randomTensor({2, 5, 6}, 1), Tensor::zeros({2, 5})});
        },
        {"expects x [N, T, 8], got [2, 5, 6]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mha(Tensors{x, Tensor::zeros({2, 4})});
        },
        {"key_padding_mask [N, S] = [2, 5]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mha(Tensors{x, randomTensor({2, 6, 8}, 2), randomTensor({2, 7, 8}, 3), Tensor::zeros({2, 6})});
        },
        {"one length for key and value"}));
    MultiheadAttention masked(8, 2, {.attnMask = true});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            masked(Tensors{x, Tensor::zeros({3, 5, 5})});
        },
        {"attn_mask [L, S] = [5, 5] or [N * numHeads, L, S] = [4, 5, 5]"}));
    EXPECT_TRUE(throwsModuleError([] { MultiheadAttention(8, 3); }, {"numHeads must divide embedDim"}));
    EXPECT_TRUE(throwsModuleError([] { MultiheadAttention(8, 2, {.dropout = -0.5f}); }, {"dropout"}));
}

TEST(PositionalEncoding, ReferenceGradientShape) {
    PositionalEncoding pe;
    const Tensor x = randomTensor({2, 6, 5}, 1);
    const std::vector<float> xs = x.toVector<float>(), y = pe(x).toVector<float>();
    for (int n = 0; n < 2; ++n)
        for (int t = 0; t < 6; ++t)
            for (int c = 0; c < 5; ++c) {
                const double angle = t / std::pow(10000.0, (c - c % 2) / 5.0);
                const double want = xs[(n * 6 + t) * 5 + c] + (c % 2 == 0 ? std::sin(angle) : std::cos(angle));
                EXPECT_NEAR(y[(n * 6 + t) * 5 + c], want, 1e-6) << n << " " << t << " " << c;
            }
    EXPECT_TRUE(checkGradients(pe, {x}));
    EXPECT_TRUE(checkShapes(pe, {x}));
    EXPECT_EQ(pe(randomTensor({3, 4}, 2)).shape(), (Shape{3, 4})); // a table for a new length
}

TEST(PositionalEncoding, BadInput) {
    PositionalEncoding pe({.name = "pe"});
    EXPECT_TRUE(throwsShapeError([&] { pe(Tensor::zeros({5})); }, {"PositionalEncoding 'pe'", "[..., T, D]"}));
    EXPECT_TRUE(throwsModuleError([] { PositionalEncoding({.base = 1.0f}); }, {"base"}));
}

} // namespace
} // namespace tessera
