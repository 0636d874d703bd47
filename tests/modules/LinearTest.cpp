#include "modules/Linear.h"
#include "GradCheck.h"
#include "PackedWeights.h"
#include "backend/Backend.h"
#include "backend/cpu/CpuBackend.h"
#include "containers/Sequential.h"
#include "io/Factory.h"
#include "modules/Embedder.h"
#include <cmath>
#include <span>

namespace tessera {
namespace {
using namespace testing;

void setKnownParams(Linear& lin) {
    lin.getVar("W")->data.copyFrom(Tensor::fromVector({3, 2}, std::vector<float>{1, 0, 0, 1, 1, 1}));
    lin.getVar("b")->data.copyFrom(Tensor::fromVector({2}, std::vector<float>{0.5f, -1.0f}));
}

TEST(Linear, Reference) {
    Linear lin(3, 2, {.name = "fc"});
    setKnownParams(lin);
    Tensor x = Tensor::fromVector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
    EXPECT_TRUE(allClose(lin(x), {4.5f, 4.0f, 10.5f, 10.0f}));

    Tensor dy = Tensor::fromVector({2, 2}, std::vector<float>{1, 0, 0, 1});
    EXPECT_TRUE(allClose(lin.backward(dy), {1, 0, 1, 0, 1, 1}));      // dy W^T
    EXPECT_TRUE(allClose(lin.getVar("W")->grad, {1, 4, 2, 5, 3, 6})); // x^T dy
    EXPECT_TRUE(allClose(lin.getVar("b")->grad, {1, 1}));

    // param grad = scale * new + momentum * old
    lin.backward(dy, true, true, 2.0f, 1.0f);
    EXPECT_TRUE(allClose(lin.getVar("W")->grad, {3, 12, 6, 15, 9, 18}));
    EXPECT_TRUE(allClose(lin.getVar("b")->grad, {3, 3}));

    // No parameter gradients in eval mode or when not asked for.
    lin.evalMode();
    lin.backward(dy);
    lin.trainMode();
    lin.backward(dy, false);
    EXPECT_TRUE(allClose(lin.getVar("W")->grad, {3, 12, 6, 15, 9, 18}));
}

TEST(Linear, NoBias) {
    Linear lin(3, 2, {.useBias = false});
    EXPECT_FALSE(lin.hasVar("b"));
    lin.getVar("W")->data.copyFrom(Tensor::fromVector({3, 2}, std::vector<float>{1, 0, 0, 1, 1, 1}));
    EXPECT_TRUE(allClose(lin(Tensor::fromVector({1, 3}, std::vector<float>{1, 2, 3})), {4, 5}));
    EXPECT_EQ(lin.numOfParams(), 6);
}

TEST(Linear, Gradient) {
    manualSeed(3);
    Linear lin(5, 3);
    lin.getVar("b")->data.copyFrom(randomTensor({3}, 11));
    EXPECT_TRUE(checkGradients(lin, {randomTensor({4, 5}, 1)}));
}

// Over the last axis of any rank (PyTorch's nn.Linear): [B, T, in] computes what [B T, in]
// computes, row by row; gradients and shapes follow.
TEST(Linear, OverTheLastAxisOfAnyRank) {
    Linear lin(5, 3);
    lin.getVar("b")->data.copyFrom(randomTensor({3}, 9));
    const Tensor x = randomTensor({2, 4, 5}, 3);
    const std::vector<float> flat = lin(x.reshape({8, 5})).toVector<float>();
    const Tensor y = lin(x);
    EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
    EXPECT_TRUE(allClose(y, flat, 1e-6f));
    EXPECT_TRUE(checkGradients(lin, {x}));
    EXPECT_TRUE(checkGradients(lin, {randomTensor({2, 2, 3, 5}, 4)}));
    EXPECT_TRUE(checkShapes(lin, {randomTensor({3, 2, 5}, 5)}));
    EXPECT_TRUE(checkShapes(lin, {randomTensor({5}, 6)}));
    EXPECT_EQ(lin.dataShapeFrom(Shape{7, 6, 5}), (Shape{7, 6, 3}));
}

TEST(Linear, Shape) {
    Linear lin(7, 4);
    EXPECT_TRUE(checkShapes(lin, {randomTensor({6, 7}, 2)}));
    EXPECT_EQ(lin.dataShapeFrom(Shape{32, 7}), (Shape{32, 4}));
    EXPECT_EQ(lin.gradShapeFrom(Shape{32, 4}), (Shape{32, 7}));
}

TEST(Linear, BadInput) {
    Linear lin(5, 3, {.name = "fc1"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            lin(randomTensor({4, 5, 1}, 1));
        },
        {"Linear 'fc1'", "expects input [..., 5]", "got [4, 5, 1]", "Flatten"}));
    EXPECT_TRUE(throwsShapeError([&] { lin(randomTensor({4, 6}, 1)); }, {"Linear 'fc1'", "[..., 5]", "got [4, 6]"}));
    EXPECT_TRUE(throwsShapeError([&] { lin(Tensor::zeros({4, 5}, DType::int32)); }, {"fc1", "int32", "float32"}));
    EXPECT_TRUE(throwsShapeError([&] { lin(Tensor::empty({0, 5})); }, {"fc1", "empty", "[0, 5]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            lin(Tensors{randomTensor({4, 5}, 1), randomTensor({4, 5}, 2)});
        },
        {"expects 1 input tensor, got 2"}));
    // A gradient that does not match the output.
    lin(randomTensor({4, 5}, 1));
    EXPECT_TRUE(throwsShapeError([&] { lin.backward(randomTensor({4, 2}, 1)); }, {"gradient", "[4, 2]", "[4, 3]"}));
    EXPECT_THROW(Linear(0, 3), ShapeError);
}

TEST(Linear, Blueprint) {
    Linear lin(5, 3, {.useBias = false, .initscheme = InitScheme::he, .name = "fc1"});
    const Blueprint bp = lin.blueprint();
    EXPECT_EQ(bp.classname, "Linear");
    EXPECT_EQ(std::get<int64_t>(bp.at("insize")), 5);
    EXPECT_EQ(std::get<int64_t>(bp.at("outsize")), 3);
    EXPECT_EQ(std::get<bool>(bp.at("useBias")), false);
    EXPECT_EQ(std::get<std::string>(bp.at("initscheme")), "he");
    EXPECT_EQ(bp.toJson(), "{\"classname\": \"Linear\", \"scheme\": {\"name\": \"fc1\", \"insize\": 5, \"outsize\": 3, "
                           "\"wscale\": 1, \"useBias\": false, \"initscheme\": \"he\"}}");
}

// W stored [out, in] (PyTorch's layout): the same layer as W^T stored [in, out], forward,
// backward, parameter gradients (transposed), packed weights and blueprint.
TEST(Linear, TransposedWeightsComputeWhatTheirTransposeComputes) {
    Linear t(5, 3, {.name = "head", .transposed = true}), plain(5, 3);
    ASSERT_EQ(t.getVar("W")->data.shape(), (Shape{3, 5}));
    EXPECT_TRUE(t.transposed());
    const std::vector<float> w = randomTensor({3, 5}, 21).toVector<float>();
    std::vector<float> wT(15);
    for (int o = 0; o < 3; ++o) {
        for (int i = 0; i < 5; ++i) wT[static_cast<size_t>(i * 3 + o)] = w[static_cast<size_t>(o * 5 + i)];
    }
    t.getVar("W")->data.copyFrom(Tensor::fromVector({3, 5}, w));
    plain.getVar("W")->data.copyFrom(Tensor::fromVector({5, 3}, wT));
    const Tensor b = randomTensor({3}, 22);
    t.getVar("b")->data.copyFrom(b);
    plain.getVar("b")->data.copyFrom(b);
    const Tensor x = randomTensor({2, 4, 5}, 23), dy = randomTensor({2, 4, 3}, 24);
    EXPECT_TRUE(allClose(t(x), plain(x).toVector<float>(), 1e-6f));
    EXPECT_TRUE(allClose(t.backward(dy), plain.backward(dy).toVector<float>(), 1e-6f));
    const std::vector<float> g = t.getVar("W")->grad.toVector<float>(),
                             gPlain = plain.getVar("W")->grad.toVector<float>();
    for (int o = 0; o < 3; ++o) {
        for (int i = 0; i < 5; ++i) {
            EXPECT_NEAR(g[static_cast<size_t>(o * 5 + i)], gPlain[static_cast<size_t>(i * 3 + o)], 1e-5f);
        }
    }
    EXPECT_TRUE(allClose(t.getVar("b")->grad, plain.getVar("b")->grad.toVector<float>(), 1e-6f));
    EXPECT_TRUE(checkGradients(t, {randomTensor({4, 5}, 25)}));
    EXPECT_TRUE(checkGradients(t, {randomTensor({2, 3, 5}, 26)}));
    EXPECT_TRUE(checkShapes(t, {randomTensor({3, 2, 5}, 27)}));
    // Packed weights in eval mode give the same outputs.
    t.evalMode();
    t.packWeights();
    EXPECT_TRUE(allClose(t(x), plain(x).toVector<float>(), 1e-6f));
    // Bad input names the layout the layer expects, as the plain one.
    EXPECT_TRUE(throwsShapeError([&] { t(randomTensor({4, 3}, 1)); }, {"Linear 'head'", "[..., 5]", "got [4, 3]"}));
    // The blueprint says so and rebuilds it.
    EXPECT_EQ(std::get<bool>(t.blueprint().at("transposed")), true);
    const ModulePtr rebuilt = buildModule(t.blueprint());
    EXPECT_EQ(rebuilt->getVar("W")->data.shape(), (Shape{3, 5}));
    EXPECT_EQ(rebuilt->blueprint().toJson(), t.blueprint().toJson());
    EXPECT_EQ(plain.blueprint().find("transposed"), nullptr); // blueprints of plain layers are as before
}

// A language model's head tied to its token table: one parameter, whose gradient sums the
// table's rows read and the head's product.
TEST(Linear, HeadTiedToAnEmbeddersTable) {
    manualSeed(4);
    auto emb = std::make_shared<Embedder>(7, 3, 5, EmbedderOptions{.name = "wte"});
    auto head = std::make_shared<Linear>(5, 7, LinearOptions{.useBias = false, .name = "head", .transposed = true});
    head->setVar("W", emb->getVar("W"));
    Sequential lm("lm");
    lm.append(emb).append(head);
    EXPECT_EQ(lm.numOfParams(), 7 * 5);
    const Tensor ids = Tensor::fromVector({2, 3}, std::vector<int32_t>{4, 0, 4, 1, 6, 2});
    GradCheckOptions opts;
    opts.checkInputs = false; // ids are discrete
    EXPECT_TRUE(checkGradients(lm, {ids}, opts));
    // Each logit is the dot product of the token's row with every row.
    const std::vector<float> table = emb->getVar("W")->data.toVector<float>(), y = lm(ids).toVector<float>();
    for (int v = 0; v < 7; ++v) {
        float dot = 0.0f;
        for (int e = 0; e < 5; ++e)
            dot += table[static_cast<size_t>(4 * 5 + e)] * table[static_cast<size_t>(v * 5 + e)];
        EXPECT_NEAR(y[static_cast<size_t>(v)], dot, 1e-5f);
    }
}

TEST(Linear, InitSchemesAreSeededAndScaled) {
    manualSeed(42);
    Linear a(100, 50);
    manualSeed(42);
    Linear b(100, 50);
    EXPECT_EQ(a.getVar("W")->data.toVector<float>(), b.getVar("W")->data.toVector<float>());
    // xavier uniform bound: sqrt(6 / (100 + 50)) = 0.2
    for (float w : a.getVar("W")->data.toVector<float>()) ASSERT_LE(std::fabs(w), 0.2f + 1e-6f);
    Linear c(100, 50, {.wscale = 2.0f, .initscheme = InitScheme::gaussian});
    double sq = 0;
    for (float w : c.getVar("W")->data.toVector<float>()) sq += w * w;
    EXPECT_NEAR(std::sqrt(sq / 5000.0), 2.0, 0.1); // standard deviation wscale
}

// Module::packWeights: Linear keeps its weights converted (into the layout oneDNN's matmul
// picks; bfloat16 under calcMode(bfloat16)) between eval-mode forwards, with and without a
// bias, at a batch of one and of several. Where the float32 kernels read plain weights (AVX2
// CPUs: CpuBackend::gemmPacksWeights), there is nothing to keep and nothing is kept.
TEST(Linear, PackedWeightsGiveTheSameOutputsAndFollowTheLibrarysChanges) {
    for (DType compute : {DType::float32, DType::bfloat16}) {
        for (bool useBias : {true, false}) {
            for (int64_t batch : {1, 5}) {
                SCOPED_TRACE(str(compute) + (useBias ? ", bias" : ", no bias") + ", batch " + std::to_string(batch));
                Sequential net;
                net.append(std::make_shared<Linear>(48, 64, LinearOptions{.useBias = useBias}));
                net.append(std::make_shared<Linear>(64, 32, LinearOptions{.useBias = useBias}));
                net.calcMode(compute);
                const bool packs = CpuBackend::gemmPacksWeights(false, false, batch, 64, 48, compute);
                ASSERT_EQ(CpuBackend::gemmPacksWeights(false, false, batch, 32, 64, compute), packs);
                if (compute == DType::bfloat16) {
                    EXPECT_TRUE(packs) << "bfloat16 weights are always converted";
                }
                if (!packs) {
                    expectUnpackedWeightsAreReadAsTheyAre(net, randomTensor({batch, 48}, 31));
                    continue;
                }
                expectPackedWeightsFollowTheLibrary(
                    net, randomTensor({batch, 48}, 31), (48 * 64 + 64 * 32) * (compute == DType::bfloat16 ? 2 : 4),
                    "linear" + str(compute) + std::to_string(useBias) + std::to_string(batch));
            }
        }
    }
}

// Float32 GEMMs on OpenBLAS (CpuBackend::setFloat32Gemm) agree with oneDNN's to rounding,
// forward and backward; OpenBLAS reads the weights as they are, so a packed Linear keeps
// nothing there.
TEST(Linear, Float32GemmEnginesAgree) {
    Backend& be = backendFor(Device::cpu());
    const Float32Gemm before = CpuBackend::float32Gemm();
    const Tensor x = randomTensor({7, 48}, 32), dy = randomTensor({7, 64}, 33);
    auto run = [&](Float32Gemm engine) {
        CpuBackend::setFloat32Gemm(engine);
        manualSeed(5);
        Linear lin(48, 64);
        std::vector<float> out = lin(x).toVector<float>();
        const std::vector<float> dx = lin.backward(dy).toVector<float>();
        const std::vector<float> dw = lin.getVar("W")->grad.toVector<float>();
        out.insert(out.end(), dx.begin(), dx.end());
        out.insert(out.end(), dw.begin(), dw.end());
        return out;
    };
    const std::vector<float> onednn = run(Float32Gemm::onednn), openblas = run(Float32Gemm::openblas);
    EXPECT_TRUE(allClose(Tensor::fromVector({static_cast<int64_t>(onednn.size())}, onednn), openblas, 1e-5f));

    Sequential net;
    net.append(std::make_shared<Linear>(48, 64));
    net.evalMode();
    net.packWeights();
    const std::vector<float> y = net(x).toVector<float>();
    const size_t allocated = be.memoryStats().current;
    EXPECT_EQ(net(x).toVector<float>(), y);
    EXPECT_EQ(be.memoryStats().current, allocated);
    net[0].getVar("W")->data.data<float>()[0] += 1.0f;
    EXPECT_NE(net(x).toVector<float>(), y) << "OpenBLAS reads the weights as they are";
    CpuBackend::setFloat32Gemm(before);
}

// Under calcMode(bfloat16) a Linear reads bfloat16 inputs as they are and, on a CPU with
// bfloat16 kernels (bfloat16 activations on, the default), writes its output in bfloat16:
// the products of the bfloat16 operands summed in float32, the bias added, rounded once.
// Its input gradient has its input's dtype, its parameter gradients are float32; each is
// checked against a sum in double over the rounded operands.
TEST(Linear, Bfloat16InAndOut) {
    constexpr int64_t rows = 15, in = 40, out = 24;
    manualSeed(4);
    Linear lin(in, out);
    lin.getVar("b")->data.copyFrom(randomTensor({out}, 9));
    lin.calcMode(DType::bfloat16);
    const bool low = CpuBackend::bfloat16Kernels() && CpuBackend::bfloat16Activations();
    auto rounded = [](const Tensor& t) { return t.convertedTo(DType::bfloat16).toVector<float>(); };
    const std::vector<float> w = rounded(lin.getVar("W")->data), b = lin.getVar("b")->data.toVector<float>();
    // |got - want| within half a bfloat16 unit of want (when rounded) plus float32's
    // summation error; `absSum` is the sum of the magnitudes of the terms.
    auto near = [](float got, double want, double absSum, bool roundedOut) {
        const double bound = (roundedOut ? std::ldexp(std::abs(want), -8) : 0.0) + 1e-6 * absSum + 1e-7;
        return std::abs(got - want) <= bound;
    };
    for (DType inType : {DType::bfloat16, DType::float32}) {
        SCOPED_TRACE("input " + str(inType));
        const Tensor x = randomTensor({3, 5, in}, 1).convertedTo(inType), dy = randomTensor({3, 5, out}, 2);
        lin.zeroGradParams();
        const Tensor y = lin(x);
        EXPECT_EQ(y.dtype(), low ? DType::bfloat16 : DType::float32);
        EXPECT_EQ(y.shape(), (Shape{3, 5, out}));
        const Tensor dyIn = dy.convertedTo(y.dtype()); // the gradient comes in the output's dtype
        const Tensor dx = lin.backward(dyIn);
        EXPECT_EQ(dx.dtype(), inType);
        const std::vector<float> xs = rounded(x), ds = rounded(dyIn), dv = dyIn.toVector<float>(),
                                 ys = y.toVector<float>(), dxs = dx.toVector<float>(),
                                 dw = lin.getVar("W")->grad.toVector<float>(),
                                 db = lin.getVar("b")->grad.toVector<float>();
        int bad = 0;
        for (int64_t m = 0; m < rows; ++m) {
            for (int64_t n = 0; n < out; ++n) {
                double want = b[n], abs = std::abs(b[n]);
                for (int64_t k = 0; k < in; ++k) {
                    want += double(xs[m * in + k]) * w[k * out + n];
                    abs += std::abs(double(xs[m * in + k]) * w[k * out + n]);
                }
                bad += !near(ys[m * out + n], want, abs, low);
            }
            for (int64_t k = 0; k < in; ++k) {
                double want = 0, abs = 0;
                for (int64_t n = 0; n < out; ++n) {
                    want += double(ds[m * out + n]) * w[k * out + n];
                    abs += std::abs(double(ds[m * out + n]) * w[k * out + n]);
                }
                bad += !near(dxs[m * in + k], want, abs, inType == DType::bfloat16);
            }
        }
        for (int64_t k = 0; k < in; ++k) {
            for (int64_t n = 0; n < out; ++n) {
                double want = 0, abs = 0;
                for (int64_t m = 0; m < rows; ++m) {
                    want += double(xs[m * in + k]) * ds[m * out + n];
                    abs += std::abs(double(xs[m * in + k]) * ds[m * out + n]);
                }
                bad += !near(dw[k * out + n], want, abs, false);
            }
        }
        for (int64_t n = 0; n < out; ++n) {
            double want = 0, abs = 0; // the bias gradient sums the gradient as it came, unrounded
            for (int64_t m = 0; m < rows; ++m) {
                want += dv[m * out + n];
                abs += std::abs(dv[m * out + n]);
            }
            bad += !near(db[n], want, abs, false);
        }
        EXPECT_EQ(bad, 0) << "values off the reference";
        EXPECT_EQ(lin.getVar("W")->grad.dtype(), DType::float32);
    }
    // In float32 compute a bfloat16 input is handed to it as a float32 copy, and the
    // output is float32.
    lin.calcMode(DType::float32);
    const Tensor x = randomTensor({4, in}, 3).convertedTo(DType::bfloat16);
    EXPECT_EQ(lin(x).dtype(), DType::float32);
    EXPECT_EQ(lin.backward(Tensor::ones({4, out})).dtype(), DType::bfloat16);
}

// A train-mode step under calcMode(bfloat16), on a CPU whose GEMMs run on bfloat16
// kernels, converts W to bfloat16 once in its forward and multiplies by that copy in its
// backward too; the copy is gone after the backward. The results are bit for bit the
// products the backend computes from the float32 W (which convert it in each call),
// also when a step's backward skips the input gradient.
TEST(Linear, Bfloat16TrainingStepConvertsTheWeightsOnce) {
    constexpr int64_t rows = 33, in = 72, out = 40;
    manualSeed(6);
    Linear lin(in, out);
    lin.getVar("b")->data.copyFrom(randomTensor({out}, 5));
    lin.calcMode(DType::bfloat16);
    Backend& be = backendFor(Device::cpu());
    const DType outType = be.gemmOutputDType(DType::bfloat16);
    Tensor W = lin.getVar("W")->data; // a handle on the parameter's storage
    const Tensor x = randomTensor({rows, in}, 7).convertedTo(DType::bfloat16);
    const Tensor dy = randomTensor({rows, out}, 8).convertedTo(outType);

    Tensor wantY = Tensor::empty({rows, out}, outType), wantDx = Tensor::empty({rows, in}, DType::bfloat16),
           wantDw = Tensor::empty({in, out});
    be.gemmWeights(false, false, 1.0f, x, W, lin.getVar("b")->data, 0.0f, wantY, DType::bfloat16, nullptr);
    be.gemm(false, true, 1.0f, dy, W, 0.0f, wantDx, DType::bfloat16);
    be.gemm(true, false, 1.0f, x, dy, 0.0f, wantDw, DType::bfloat16);
    auto same = [](const Tensor& a, const Tensor& b) { return a.toVector<float>() == b.toVector<float>(); };

    const size_t before = be.memoryStats().current;
    {
        const Tensor y = lin(x);
        EXPECT_TRUE(same(y, wantY));
        const int64_t copy = be.allocationBytes(in * out * 2);
        const bool converts = outType == DType::bfloat16; // else the products convert W as before
        EXPECT_EQ(be.memoryStats().current - before,
                  static_cast<size_t>(be.allocationBytes(static_cast<int64_t>(y.nbytes())) + (converts ? copy : 0)))
            << "the output" << (converts ? " and W in bfloat16" : "") << " are live after the forward";
        lin.zeroGradParams();
        const Tensor dx = lin.backward(dy);
        EXPECT_TRUE(same(dx, wantDx));
        EXPECT_TRUE(same(lin.getVar("W")->grad, wantDw));
        // Live now: the output and the input gradient (the module's and these handles).
        EXPECT_EQ(be.memoryStats().current - before,
                  static_cast<size_t>(be.allocationBytes(static_cast<int64_t>(y.nbytes())) +
                                      be.allocationBytes(static_cast<int64_t>(dx.nbytes()))))
            << "the bfloat16 copy of W outlived the step";
    }
    lin.reset();
    EXPECT_EQ(be.memoryStats().current, before);

    // A backward without the input gradient (a network's first layer) frees the copy too.
    lin.zeroGradParams();
    lin(x);
    lin.backward(dy, /*updParamGrads=*/true, /*updGrad=*/false);
    EXPECT_TRUE(same(lin.getVar("W")->grad, wantDw));
    lin.reset();
    EXPECT_EQ(be.memoryStats().current, before);

    // The weights a step uses are the ones of its forward: an update between forwards
    // is seen by the next step.
    W.copyFrom(randomTensor({in, out}, 9));
    be.gemmWeights(false, false, 1.0f, x, W, lin.getVar("b")->data, 0.0f, wantY, DType::bfloat16, nullptr);
    be.gemm(false, true, 1.0f, dy, W, 0.0f, wantDx, DType::bfloat16);
    EXPECT_TRUE(same(lin(x), wantY));
    EXPECT_TRUE(same(lin.backward(dy), wantDx));
}

// The backend's GEMM on bfloat16 operands and results, against float32 GEMMs of the
// rounded operands: every combination of operand types and transposes, accumulating into
// C (beta), and the bias; operands of another 16-bit type, or a 16-bit one in float32
// compute, are refused by name. Without bfloat16 kernels the same values come from the
// float32 kernels (a bfloat16 C through a float32 buffer).
TEST(Linear, BackendGemmOnBfloat16OperandsAndResults) {
    Backend& be = backendFor(Device::cpu());
    constexpr int64_t M = 9, N = 13, K = 21;
    const DType f32 = DType::float32, bf16 = DType::bfloat16;
    auto round = [&](const Tensor& t) { return t.convertedTo(bf16).convertedTo(f32); };
    const Tensor bias = randomTensor({N}, 7);
    for (bool transA : {false, true})
        for (bool transB : {false, true})
            for (DType ta : {f32, bf16})
                for (DType tb : {f32, bf16})
                    for (DType tc : {f32, bf16})
                        for (int mode = 0; mode < 3; ++mode) { // plain, beta 0.5, bias
                            SCOPED_TRACE(std::to_string(transA) + std::to_string(transB) + " " + str(ta) + " " +
                                         str(tb) + " -> " + str(tc) + ", mode " + std::to_string(mode));
                            const Tensor a = randomTensor(transA ? Shape{K, M} : Shape{M, K}, 1);
                            const Tensor b = randomTensor(transB ? Shape{N, K} : Shape{K, N}, 2);
                            const Tensor c0 = round(randomTensor({M, N}, 3));
                            Tensor want = c0.clone();
                            const float beta = mode == 1 ? 0.5f : 0.0f;
                            if (mode == 2) {
                                be.broadcastRows(bias, want);
                                be.gemm(transA, transB, 1.0f, round(a), round(b), 1.0f, want, f32);
                            } else {
                                be.gemm(transA, transB, 1.0f, round(a), round(b), beta, want, f32);
                            }
                            const Tensor c = c0.convertedTo(tc);
                            be.gemmWeights(transA, transB, 1.0f, a.convertedTo(ta), b.convertedTo(tb),
                                           mode == 2 ? bias : Tensor(), beta, c, bf16, nullptr);
                            EXPECT_EQ(c.dtype(), tc);
                            if (tc == bf16) want = round(want);
                            EXPECT_TRUE(allClose(c, want.toVector<float>(), tc == bf16 ? 1e-2f : 1e-5f));
                        }
    const Tensor a = randomTensor({M, K}, 1), b = randomTensor({K, N}, 2);
    EXPECT_THROW(be.gemm(false, false, 1.0f, a.convertedTo(bf16), b, 0.0f, Tensor::empty({M, N}), f32), BackendError);
    EXPECT_THROW(be.gemm(false, false, 1.0f, a, b, 0.0f, Tensor::empty({M, N}, bf16), f32), BackendError);
    EXPECT_THROW(be.gemmWeights(false, false, 2.0f, a, b, bias, 0.0f, Tensor::empty({M, N}), bf16, nullptr),
                 BackendError);
    EXPECT_THROW(
        be.gemmWeights(false, false, 1.0f, a, b, randomTensor({N + 1}, 4), 0.0f, Tensor::empty({M, N}), bf16, nullptr),
        ShapeError);
    // Column sums of bfloat16 rows, in float32.
    const Tensor rows = randomTensor({300, 5}, 5).convertedTo(bf16);
    Tensor sums = Tensor::ones({5}), want = Tensor::ones({5});
    be.sumRows(rows, 2.0f, 0.5f, sums);
    be.sumRows(rows.convertedTo(f32), 2.0f, 0.5f, want);
    EXPECT_TRUE(allClose(sums, want.toVector<float>(), 1e-5f));
}

} // namespace
} // namespace tessera
