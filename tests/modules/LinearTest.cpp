#include "modules/Linear.h"
#include "GradCheck.h"
#include "PackedWeights.h"
#include "backend/Backend.h"
#include "backend/cpu/CpuBackend.h"
#include "containers/Sequential.h"
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

} // namespace
} // namespace tessera
