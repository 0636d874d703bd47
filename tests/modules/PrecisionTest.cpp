// Reduced precision: the 16-bit float types and their conversions, and calcMode(bfloat16):
// every compute-heavy layer against its float32 result, the others unchanged, master
// weights that take updates below bfloat16's resolution, and a network that learns.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "GradCheck.h"
#include "backend/cpu/CpuBackend.h"
#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Flatten.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/Pool.h"
#include "training/CrossEntropy.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Precision, Bfloat16Conversions) {
    EXPECT_EQ(toBfloat16(1.0f).bits, 0x3f80);
    EXPECT_EQ(toFloat(toBfloat16(1.0f)), 1.0f);
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
    EXPECT_EQ(toFloat(toBfloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
    EXPECT_EQ(toFloat(toBfloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
    EXPECT_EQ(toFloat(toBfloat16(-2.5f)), -2.5f);
    EXPECT_TRUE(std::isnan(toFloat(toBfloat16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_EQ(toFloat(toBfloat16(std::numeric_limits<float>::infinity())), std::numeric_limits<float>::infinity());
    // The largest float rounds up to infinity; 3e38 stays finite.
    EXPECT_TRUE(std::isinf(toFloat(toBfloat16(std::numeric_limits<float>::max()))));
    EXPECT_NEAR(toFloat(toBfloat16(3e38f)), 3e38f, 3e38f * std::ldexp(1.0f, -8));
}

TEST(Precision, Float16Conversions) {
    EXPECT_EQ(toFloat16(1.0f).bits, 0x3c00);
    EXPECT_EQ(toFloat16(-2.0f).bits, 0xc000);
    EXPECT_EQ(toFloat(toFloat16(65504.0f)), 65504.0f);                           // the largest half
    EXPECT_TRUE(std::isinf(toFloat(toFloat16(65520.0f))));                       // rounds past it
    EXPECT_EQ(toFloat(toFloat16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24)); // the smallest subnormal
    EXPECT_EQ(toFloat(toFloat16(std::ldexp(1.0f, -26))), 0.0f);                  // below half of it
    EXPECT_EQ(toFloat(toFloat16(std::ldexp(1.0f, -14))), std::ldexp(1.0f, -14)); // the smallest normal
    EXPECT_EQ(toFloat(toFloat16(1.0f + std::ldexp(1.0f, -11))), 1.0f);           // a tie, to even
    EXPECT_EQ(toFloat(toFloat16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
    EXPECT_TRUE(std::isnan(toFloat(toFloat16(std::numeric_limits<float>::quiet_NaN()))));
    // Every half converts to float and back unchanged.
    for (uint32_t b = 0; b < 0x10000; ++b) {
        const float16 h{static_cast<uint16_t>(b)};
        const float f = toFloat(h);
        if (std::isnan(f)) continue;
        ASSERT_EQ(toFloat16(f).bits, h.bits) << b;
    }
}

TEST(Precision, TensorsOfEveryTypeConvert) {
    const Tensor x = Tensor::fromVector({2, 3}, std::vector<float>{1.0f, -2.5f, 0.1f, 300.7f, 1e-3f, -7.0f});
    for (DType t : {DType::bfloat16, DType::float16}) {
        SCOPED_TRACE(str(t));
        const Tensor low = x.astype(t);
        EXPECT_EQ(low.dtype(), t);
        EXPECT_EQ(low.nbytes(), 12u);
        const std::vector<float> back = low.toVector<float>(); // reads convert to float
        const std::vector<float> v = x.toVector<float>();
        const float eps = t == DType::bfloat16 ? std::ldexp(1.0f, -8) : std::ldexp(1.0f, -11);
        for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(back[i], v[i], std::fabs(v[i]) * eps) << i;
        EXPECT_EQ(low.astype(DType::float32).toVector<float>(), back);
        EXPECT_EQ(low.astype(DType::int32).toVector<int32_t>(), (std::vector<int32_t>{1, -2, 0, 300, 0, -7}));
        EXPECT_EQ(str(t), t == DType::bfloat16 ? "bfloat16" : "float16");
        EXPECT_EQ(dtypeFromString(str(t)), t);
        // A layer that computes in float32 takes either 16-bit type converted to float32
        // (the same output as from the converted input) and names any other dtype it got.
        Linear lin(3, 2, {.name = "fc"});
        const Tensor y = lin(low);
        EXPECT_EQ(y.dtype(), DType::float32);
        const Tensor dx = lin.backward(Tensor::ones(y.shape()));
        EXPECT_EQ(dx.dtype(), t); // an input's gradient has the input's dtype
        EXPECT_EQ(y.toVector<float>(), lin(low.astype(DType::float32)).toVector<float>());
        // What the input's dtype was is part of a run's state (a module in several graph
        // nodes differentiates each of its runs).
        Module::RunState f32Run = lin.takeRunState();
        lin(low);
        Module::RunState lowRun = lin.takeRunState();
        lin.putRunState(std::move(f32Run));
        EXPECT_EQ(lin.backward(Tensor::ones(y.shape())).dtype(), DType::float32);
        lin.putRunState(std::move(lowRun));
        EXPECT_EQ(lin.backward(Tensor::ones(y.shape())).dtype(), t);
    }
    Linear lin(3, 2, {.name = "fc"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            lin(Tensor::zeros({2, 3}, DType::int32));
        },
        {"fc", "int32", "float32, bfloat16 or float16"}));
    EXPECT_THROW(dtypeFromString("float64"), ShapeError);
}

// calcMode(bfloat16): what each compute-heavy layer gives against float32, forward and
// backward (input and parameter gradients), within bfloat16's rounding of the inputs.
TEST(Precision, Bfloat16LayersMatchFloat32) {
    struct LayerCase {
        const char* name;
        std::function<ModulePtr()> make;
        Shape in;
    };
    const LayerCase cases[] = {
        {"Linear", [] { return std::make_shared<Linear>(48, 40); }, {16, 48}},
        {"Linear no bias", [] { return std::make_shared<Linear>(33, 17, LinearOptions{.useBias = false}); }, {5, 33}},
        {"GroupLinear", [] { return std::make_shared<GroupLinear>(3, 16, 8); }, {10, 3, 16}},
        {"Conv1D", [] { return std::make_shared<Conv1D>(8, 16, 3, ConvOptions{.pad = {1}}); }, {4, 8, 20}},
        {"Conv2D", [] { return std::make_shared<Conv2D>(16, 32, 3, ConvOptions{.pad = {1}}); }, {4, 16, 12, 12}},
        {"Conv2D stride groups",
         [] { return std::make_shared<Conv2D>(16, 32, 3, ConvOptions{.stride = {2}, .groups = 4}); },
         {2, 16, 11, 11}},
        {"Conv2D small plane",
         [] { return std::make_shared<Conv2D>(24, 40, 3, ConvOptions{.pad = {1}}); },
         {3, 24, 4, 4}},
        {"Conv2D 1x1 stride 2",
         [] { return std::make_shared<Conv2D>(24, 40, 1, ConvOptions{.stride = {2}}); },
         {3, 24, 9, 9}},
        {"Conv2D after Conv2D", // the second one reads the first one's layout (channels-last in bfloat16)
         [] {
             auto s = std::make_shared<Sequential>();
             s->append(std::make_shared<Conv2D>(8, 24, 3, ConvOptions{.pad = {1}}));
             s->append(std::make_shared<Conv2D>(24, 32, 3, ConvOptions{.stride = {2}, .pad = {1, 0}}));
             return s;
         },
         {2, 8, 9, 7}},
        {"Conv3D", [] { return std::make_shared<Conv3D>(4, 8, 3, ConvOptions{.pad = {1}}); }, {2, 4, 6, 6, 6}},
        {"Deconv2D", [] { return std::make_shared<Deconv2D>(16, 8, 3, ConvOptions{.stride = {2}}); }, {2, 16, 7, 7}},
    };
    // ||low - fp32|| / ||fp32||: bfloat16 keeps 8 significant bits (a relative rounding of
    // 2^-9 per input); sums of products of such inputs land well inside 1e-2.
    const auto rel = relL2;
    // Gradients of bfloat16 2-D convolutions through oneDNN's kernels and through the
    // GEMMs, and whichever the CPU picks.
    struct AlgoGuard {
        ConvBackwardAlgo before = CpuBackend::convBackwardAlgo();
        ~AlgoGuard() { CpuBackend::setConvBackwardAlgo(before); }
    } guard;
    for (ConvBackwardAlgo algo : {ConvBackwardAlgo::automatic, ConvBackwardAlgo::direct, ConvBackwardAlgo::gemm})
        for (const LayerCase& c : cases) {
            CpuBackend::setConvBackwardAlgo(algo);
            SCOPED_TRACE(std::string(c.name) + ", backward algorithm " + std::to_string(static_cast<int>(algo)));
            manualSeed(3);
            ModulePtr f32 = c.make();
            manualSeed(3);
            ModulePtr low = c.make();
            low->calcMode(DType::bfloat16);
            EXPECT_EQ(low->computeDType(), DType::bfloat16);
            const Tensor x = randomTensor(c.in, 1);
            const Tensor yf = (*f32)(x), yl = (*low)(x);
            // Outputs stay float32, but for convolutions and Linear with bfloat16 activations.
            const std::string name = c.name;
            const bool writesLow = name.find("onv") != std::string::npos || name.starts_with("Linear");
            const bool lowOut = writesLow && CpuBackend::bfloat16Kernels() && CpuBackend::bfloat16Activations();
            EXPECT_EQ(yl.dtype(), lowOut ? DType::bfloat16 : DType::float32);
            const double fwd = rel(yl, yf);
            EXPECT_LT(fwd, 1e-2);
            EXPECT_GT(fwd, 1e-6); // it did compute in bfloat16
            const Tensor dy = randomTensor(yf.shape(), 2);
            f32->zeroGradParams();
            low->zeroGradParams();
            std::map<std::string, VariablePtr> lowParams;
            for (const auto& [name, v] : low->namedParams()) lowParams[name] = v;
            const Tensor dxl = low->backward(dy);
            EXPECT_EQ(dxl.dtype(), DType::float32); // the input's dtype
            EXPECT_LT(rel(dxl, f32->backward(dy)), 1e-2);
            for (const auto& [name, v] : f32->namedParams()) {
                EXPECT_LT(rel(lowParams.at(name)->grad, v->grad), 1e-2) << "gradient of " << name;
                EXPECT_EQ(lowParams.at(name)->data.dtype(), DType::float32); // the master weights
            }
            // A second backward (of a second forward: the first backward released the values
            // it used) adds to the gradients.
            (*f32)(x);
            (*low)(x);
            f32->backward(dy);
            low->backward(dy);
            for (const auto& [name, v] : f32->namedParams()) {
                EXPECT_LT(rel(lowParams.at(name)->grad, v->grad), 1e-2) << "accumulated gradient of " << name;
            }
        }
}

// bfloat16 compute means operands rounded to bfloat16, products summed in float32: a
// bfloat16 Linear and Conv2D give what float32 gives on the rounded input and weights, up
// to summation order. This holds for oneDNN's bfloat16 kernels and for the emulation on
// CPUs without them (CpuBackend::bfloat16Kernels; ctest runs this suite both ways).
TEST(Precision, Bfloat16RoundsOperandsOnly) {
    struct ActivationsGuard { // float32 outputs: what is compared is the arithmetic before them
        bool before = CpuBackend::bfloat16Activations();
        ActivationsGuard() { CpuBackend::setBfloat16Activations(false); }
        ~ActivationsGuard() { CpuBackend::setBfloat16Activations(before); }
    } guard;
    auto rounded = [](const Tensor& t) { return t.astype(DType::bfloat16).astype(DType::float32); };
    const std::pair<std::function<ModulePtr()>, Shape> cases[] = {
        {[] { return std::make_shared<Linear>(64, 24); }, {8, 64}},
        {[] { return std::make_shared<Conv2D>(16, 8, 3, ConvOptions{.pad = {1}}); }, {2, 16, 6, 6}},
    };
    for (const auto& [make, in] : cases) {
        manualSeed(5);
        ModulePtr exact = make();
        manualSeed(5);
        ModulePtr low = make();
        low->calcMode(DType::bfloat16);
        SCOPED_TRACE(low->str());
        const Tensor x = randomTensor(in, 4);
        const std::vector<float> plain = (*exact)(x).toVector<float>(); // float32 throughout
        exact->getVar("W")->data.copyFrom(rounded(exact->getVar("W")->data));
        const std::vector<float> want = (*exact)(rounded(x)).toVector<float>(), got = (*low)(x).toVector<float>();
        double maxDiff = 0, maxPlainDiff = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            maxDiff = std::max(maxDiff, std::abs(static_cast<double>(got[i]) - want[i]));
            maxPlainDiff = std::max(maxPlainDiff, std::abs(static_cast<double>(plain[i]) - want[i]));
        }
        EXPECT_LT(maxDiff, 1e-5) << (CpuBackend::bfloat16Kernels() ? "oneDNN's bfloat16 kernels" : "emulated");
        EXPECT_GT(maxPlainDiff, 1e-4); // unrounded float32 differs: the check can tell
    }
}

// The operands of a GEMM test at each (M, K, N) and transpose of A and B: A [M, K] (or its
// transpose), B [K, N] (or its transpose) and a starting C0 [M, N], passed to `body` with
// the shape and transposes traced.
struct GemmCase {
    int64_t M, K, N;
    bool transA, transB;
    Tensor A, B, C0;
};
void forEachGemmCase(const std::vector<std::tuple<int64_t, int64_t, int64_t>>& shapes,
                     const std::function<void(const GemmCase&)>& body) {
    for (const auto& [M, K, N] : shapes) {
        for (const bool transA : {false, true}) {
            for (const bool transB : {false, true}) {
                SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) +
                             (transA ? " A^T" : "") + (transB ? " B^T" : ""));
                body({M, K, N, transA, transB, randomTensor(transA ? Shape{K, M} : Shape{M, K}, 1),
                      randomTensor(transB ? Shape{N, K} : Shape{K, N}, 2), randomTensor({M, N}, 3)});
            }
        }
    }
}

// A bfloat16 GEMM gives the same bits with B blocked, plain or chosen by timing, in every
// transpose, and the float32 GEMM of its bfloat16-rounded operands up to accumulation order
// (at a power-of-two shape, where the two layouts' conversions differ most in speed, and
// an odd one).
TEST(Precision, Bfloat16GemmWeightsLayoutsGiveTheSameResult) {
    struct Restore {
        ~Restore() { CpuBackend::setGemmWeightsLayout(GemmWeightsLayout::automatic); }
    } restore;
    auto rounded = [](const Tensor& t) { return t.astype(DType::bfloat16).astype(DType::float32); };
    forEachGemmCase({{16, 256, 256}, {7, 37, 21}}, [&](const GemmCase& g) {
        Tensor want = g.C0.clone();
        backendOf(g.A).gemm(g.transA, g.transB, 0.5f, rounded(g.A), rounded(g.B), 0.25f, want);
        std::vector<std::vector<float>> got;
        for (GemmWeightsLayout layout :
             {GemmWeightsLayout::blocked, GemmWeightsLayout::plain, GemmWeightsLayout::automatic}) {
            CpuBackend::setGemmWeightsLayout(layout);
            Tensor C = g.C0.clone();
            backendOf(g.A).gemm(g.transA, g.transB, 0.5f, g.A, g.B, 0.25f, C, DType::bfloat16);
            got.push_back(C.toVector<float>());
        }
        EXPECT_EQ(got[0], got[1]);
        EXPECT_EQ(got[0], got[2]);
        const std::vector<float> w = want.toVector<float>();
        for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[0][i], w[i], 1e-4 * std::sqrt(g.K)) << i;
    });
}

// A float32 GEMM on oneDNN gives the same bits with B converted to the blocked layout, read
// plain, or chosen by timing, in every transpose, with and without a bias and beta, at the
// shape of ViT-B's MLP (rows 3072 floats apart, where the blocked layout runs twice as
// fast) and a power-of-two one; below 16 rows or columns the choice is plain (a single
// row of a transposed B runs another kernel plain on AVX2, whose sums round otherwise); all
// within rounding of OpenBLAS's.
TEST(Precision, Float32GemmWeightsLayoutsGiveTheSameBits) {
    struct Restore {
        Float32Gemm engine = CpuBackend::float32Gemm();
        ~Restore() {
            CpuBackend::setGemmWeightsLayout(GemmWeightsLayout::automatic);
            CpuBackend::setFloat32Gemm(engine);
        }
    } restore;
    CpuBackend::setFloat32Gemm(Float32Gemm::onednn);
    forEachGemmCase(
        {{200, 768, 3072}, {16, 256, 256}, {16, 37, 21}, {7, 37, 21}, {1, 100, 33}}, [&](const GemmCase& g) {
            const Tensor bias = randomTensor({g.N}, 4);
            std::vector<std::vector<float>> got;
            for (GemmWeightsLayout layout :
                 {GemmWeightsLayout::blocked, GemmWeightsLayout::plain, GemmWeightsLayout::automatic}) {
                CpuBackend::setGemmWeightsLayout(layout);
                Tensor C = g.C0.clone();
                backendOf(g.A).gemm(g.transA, g.transB, 0.5f, g.A, g.B, 0.25f, C);
                got.push_back(C.toVector<float>());
                Tensor D = Tensor::empty({g.M, g.N});
                backendOf(g.A).gemmWeights(g.transA, g.transB, 1.0f, g.A, g.B, bias, 0.0f, D, DType::float32, nullptr);
                got.push_back(D.toVector<float>());
            }
            const bool small = g.M < 16 || g.N < 16;
            if (!small) { // blocked and plain alike
                EXPECT_EQ(got[0], got[2]);
                EXPECT_EQ(got[1], got[3]);
            }
            EXPECT_EQ(got[4], got[small ? 2 : 0]); // automatic: plain where small
            EXPECT_EQ(got[5], got[small ? 3 : 1]);
            CpuBackend::setFloat32Gemm(Float32Gemm::openblas);
            Tensor C = g.C0.clone();
            backendOf(g.A).gemm(g.transA, g.transB, 0.5f, g.A, g.B, 0.25f, C);
            CpuBackend::setFloat32Gemm(Float32Gemm::onednn);
            const std::vector<float> w = C.toVector<float>();
            for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[0][i], w[i], 1e-5 * std::sqrt(g.K)) << i;
        });
}

// A training bfloat16 convolution keeps its input's bfloat16 reorder from forward for
// backward-weights (ConvParams::state): the weight gradient equals the one computed from a
// fresh reorder, bit for bit; an input other than forward's is reordered anew (the kept
// one is not trusted); backward-weights releases it; eval mode keeps nothing.
TEST(Precision, ConvKeepsItsBfloat16InputForBackwardWeights) {
    struct AlgoGuard {
        ConvBackwardAlgo before = CpuBackend::convBackwardAlgo();
        ~AlgoGuard() { CpuBackend::setConvBackwardAlgo(before); }
    } guard;
    CpuBackend::setConvBackwardAlgo(ConvBackwardAlgo::direct); // the GEMM copies x itself and keeps nothing
    manualSeed(6);
    auto conv = std::make_shared<Conv2D>(16, 32, 3, ConvOptions{.pad = {1}, .useBias = false});
    conv->calcMode(DType::bfloat16);
    conv->trainMode();
    Backend& be = backendFor(Device::cpu());
    const Tensor x1 = randomTensor({4, 16, 8, 8}, 7), x2 = randomTensor({4, 16, 8, 8}, 8);
    const Tensor dy = randomTensor({4, 32, 8, 8}, 9);
    const Shape wShape = conv->getVar("W")->data.shape();
    // The weight gradient from x through a fresh reorder (no state), and through `p`.
    auto gradW = [&](const ConvParams& p, const Tensor& x) {
        Tensor dw = Tensor::zeros(wShape);
        be.convBackwardWeights(p, x, dy, 1.0f, 0.0f, dw, Tensor());
        return dw.toVector<float>();
    };
    ConvParams fresh = conv->computeParams();
    ASSERT_NE(fresh.state, nullptr); // train mode hands the backend the layer's state
    const std::shared_ptr<LayerState> state = fresh.state;
    fresh.state = nullptr;
    const bool keeps = CpuBackend::bfloat16Kernels(); // emulated bfloat16 rounds in a float32 stage instead

    (*conv)(x1);
    EXPECT_EQ(state->data != nullptr, keeps);
    EXPECT_EQ(be.convKeptBytes(conv->computeParams(), x1.shape(), wShape, dy.shape(), false) > 0, keeps);
    EXPECT_EQ(gradW(conv->computeParams(), x1), gradW(fresh, x1));
    EXPECT_EQ(state->data, nullptr); // released by backward-weights

    (*conv)(x1);
    EXPECT_EQ(gradW(conv->computeParams(), x2), gradW(fresh, x2)); // not forward's input: reordered anew
    EXPECT_NE(gradW(fresh, x1), gradW(fresh, x2));                 // and the two differ, so the check can tell

    // The module's own backward takes the same path.
    (*conv)(x1);
    conv->zeroGradParams();
    conv->backward(dy);
    EXPECT_EQ(conv->getVar("W")->grad.toVector<float>(), gradW(fresh, x1));

    conv->evalMode();
    EXPECT_EQ(conv->computeParams().state, nullptr);
    (*conv)(x1);
    EXPECT_EQ(state->data, nullptr);
    conv->trainMode();
    (*conv)(x1);
    conv->evalMode(); // leaving train mode drops what was kept
    EXPECT_EQ(state->data, nullptr);
    conv->trainMode();
    (*conv)(x1);
    conv->reset(); // and so does reset
    EXPECT_EQ(state->data, nullptr);
}

// The layers calcMode leaves in float32 give exactly what they give without it.
TEST(Precision, OtherLayersStayFloat32) {
    auto make = [] {
        auto s = std::make_shared<Sequential>();
        s->append(std::make_shared<BatchNorm2D>(3))
            .append(std::make_shared<Activation>(ActivationKind::relu))
            .append(std::make_shared<MaxPool2D>(2));
        return s;
    };
    auto a = make(), b = make();
    b->calcMode(DType::bfloat16);
    for (const auto& [name, child] : b->namedChildren()) EXPECT_EQ(child->computeDType(), DType::bfloat16) << name;
    const Tensor x = randomTensor({2, 3, 6, 6}, 4);
    EXPECT_EQ((*a)(x).toVector<float>(), (*b)(x).toVector<float>());
    const Tensor dy = randomTensor({2, 3, 3, 3}, 5);
    EXPECT_EQ(a->backward(dy).toVector<float>(), b->backward(dy).toVector<float>());
    Linear lin(2, 2);
    EXPECT_TRUE(throwsModuleError([&] { lin.calcMode(DType::int32); }, {"calcMode(int32)", "float16"}));
    lin.calcMode(DType::bfloat16);
    lin.calcMode(DType::float32);
    EXPECT_EQ(lin.computeDType(), DType::float32);
}

// calcMode(float16) is a CUDA mode: on the CPU, the layers it changes refuse to run, saying so.
TEST(Precision, Float16IsRefusedOnTheCpu) {
    auto expectRefused = [](Module& m, const Tensor& x, const char* op) {
        m.calcMode(DType::float16);
        try {
            m(x);
            ADD_FAILURE() << m.classname() << " ran in float16 on the CPU";
        } catch (const BackendError& e) {
            const std::string what = e.what();
            for (const char* part : {op, "float16", "CUDA"}) EXPECT_NE(what.find(part), std::string::npos) << what;
        }
        m.calcMode(DType::float32);
        EXPECT_NO_THROW(m(x));
    };
    Linear lin(3, 2);
    expectRefused(lin, randomTensor({2, 3}, 6), "gemm");
    Conv2D conv(2, 4, 3);
    expectRefused(conv, randomTensor({1, 2, 5, 5}, 7), "convolution");
}

// Updates far below bfloat16's resolution at the weights' magnitude still move the float32
// master weights: a weight of 1 has bfloat16 neighbours 2^-7 apart, and 100 steps of 1e-4
// each move it by 1e-2 in float32, where a bfloat16 weight would never change.
TEST(Precision, MasterWeightsTakeUpdatesBelowBfloat16Resolution) {
    Linear lin(4, 1, {.useBias = false});
    lin.getVar("W")->data.copyFrom(Tensor::ones({4, 1}));
    lin.calcMode(DType::bfloat16);
    SGD sgd(1e-4f);
    sgd.setupOn(lin);
    const Tensor x = Tensor::full({1, 4}, 1.0f); // dL/dW = x^T dy = 1 for every weight
    for (int step = 0; step < 100; ++step) {
        sgd.zeroGradParams();
        lin(x);
        lin.backward(Tensor::ones({1, 1}));
        sgd.update();
        // a bfloat16 weight: 1 - 1e-4 rounds back to 1
        ASSERT_EQ(toFloat(toBfloat16(1.0f - 1e-4f)), 1.0f);
    }
    for (float w : lin.getVar("W")->data.toVector<float>()) EXPECT_NEAR(w, 1.0f - 100 * 1e-4f, 1e-5f);
}

// A small convolutional network learns in bfloat16: the loss drops and the accuracy on
// its training set passes 95% (the class is which quadrant holds the brightest spot).
TEST(Precision, Bfloat16NetworkLearns) {
    manualSeed(8);
    const auto [x, y] = testing::quadrantTask(256);
    const ModulePtr model = testing::quadrantNet();
    Module& net = *model;
    net.calcMode(DType::bfloat16);
    Adam adam(1e-2f);
    adam.setupOn(net);
    CrossEntropy ce;
    double first = 0, last = 0;
    for (int epoch = 0; epoch < 40; ++epoch) {
        adam.zeroGradParams();
        const CostResult r = ce(net(x), y);
        net.backward(r.grad[0]);
        adam.update();
        if (epoch == 0) first = r.error;
        last = r.error;
    }
    net.evalMode();
    const double error = ce.validate(net(x), y);
    EXPECT_LT(last, first / 4);
    EXPECT_LT(error, 0.05);
}

// CpuBackend::setBfloat16Activations for one test, restored however it ends.
struct LowActivations {
    bool before = CpuBackend::bfloat16Activations();
    explicit LowActivations(bool on) { CpuBackend::setBfloat16Activations(on); }
    ~LowActivations() { CpuBackend::setBfloat16Activations(before); }
};

// The backend ops that run on bfloat16 activations, against float32 on the same values:
// conversions keep blocked layouts, batch norm keeps float32 statistics, ReLU is exact,
// sums round once.
TEST(Precision, Bfloat16ActivationOpsMatchFloat32) {
    Backend& be = backendFor(Device::cpu());
    const Tensor x32 = randomTensor({2, 20, 5, 5}, 11).toLayout(Layout::blocked16); // 20 channels: padded blocks
    const Tensor x16 = x32.convertedTo(DType::bfloat16);
    EXPECT_EQ(x16.dtype(), DType::bfloat16);
    EXPECT_EQ(x16.layout(), Layout::blocked16);
    EXPECT_LT(relL2(x16, x32), std::ldexp(1.0, -8));
    const Tensor xr = x16.convertedTo(DType::float32); // the bfloat16 values in float32
    EXPECT_EQ(xr.layout(), Layout::blocked16);
    EXPECT_EQ(xr.toVector<float>(), x16.toVector<float>());

    // Batch norm: bfloat16 in and out, statistics and parameter gradients in float32.
    const Tensor scale = randomTensor({20}, 12), shift = randomTensor({20}, 13);
    Tensor mean16 = Tensor::empty({20}), var16 = Tensor::empty({20}), mean32 = Tensor::empty({20}),
           var32 = Tensor::empty({20});
    const Tensor y16 = be.batchNormForward(x16, scale, shift, mean16, var16, 1e-5f, true);
    const Tensor y32 = be.batchNormForward(xr, scale, shift, mean32, var32, 1e-5f, true);
    EXPECT_EQ(y16.dtype(), DType::bfloat16);
    EXPECT_EQ(y16.layout(), Layout::blocked16);
    EXPECT_LT(relL2(y16, y32), 1e-2);
    EXPECT_LT(relL2(mean16, mean32), 1e-5);
    EXPECT_LT(relL2(var16, var32), 1e-5);
    const Tensor dy = randomTensor({2, 20, 5, 5}, 14); // a float32 plain gradient: converted on the way in
    Tensor ds16 = Tensor::empty({20}), db16 = Tensor::empty({20}), ds32 = Tensor::empty({20}),
           db32 = Tensor::empty({20});
    const Tensor dx16 = be.batchNormBackward(x16, dy, scale, mean16, var16, 1e-5f, ds16, db16);
    const Tensor dx32 = be.batchNormBackward(xr, dy.astype(DType::bfloat16).astype(DType::float32), scale, mean32,
                                             var32, 1e-5f, ds32, db32);
    EXPECT_EQ(dx16.dtype(), DType::bfloat16);
    EXPECT_LT(relL2(dx16, dx32), 1e-2);
    EXPECT_LT(relL2(ds16, ds32), 1e-4);
    EXPECT_LT(relL2(db16, db32), 1e-4);

    // ReLU: exact on bfloat16 values, forward and backward.
    const ActivationParams relu{ActivationKind::relu};
    Tensor r16 = Tensor::empty(x16.shape(), DType::bfloat16, Device::cpu(), Layout::blocked16);
    Tensor r32 = Tensor::empty(xr.shape(), DType::float32, Device::cpu(), Layout::blocked16);
    be.activationForward(relu, x16, r16);
    be.activationForward(relu, xr, r32);
    EXPECT_EQ(r16.toVector<float>(), r32.toVector<float>());
    Tensor g16 = Tensor::empty(x16.shape(), DType::bfloat16, Device::cpu(), Layout::blocked16);
    Tensor g32 = Tensor::empty(xr.shape(), DType::float32, Device::cpu(), Layout::blocked16);
    const Tensor dyr = dy.astype(DType::bfloat16).astype(DType::float32);
    be.activationBackward(relu, x16, r16, dy, g16);
    be.activationBackward(relu, xr, r32, dyr, g32);
    EXPECT_EQ(g16.toVector<float>(), g32.toVector<float>());
    Tensor wrong = Tensor::empty(x16.shape(), DType::float32, Device::cpu(), Layout::blocked16);
    EXPECT_THROW(be.activationForward(relu, x16, wrong), ShapeError); // y must take x's dtype

    // Sums: all bfloat16 (oneDNN's binary, with coefficients), and mixed dtypes.
    const Tensor b16 = randomTensor({2, 20, 5, 5}, 15).toLayout(Layout::blocked16).convertedTo(DType::bfloat16);
    const Tensor br = b16.convertedTo(DType::float32);
    Tensor z16 = Tensor::empty(x16.shape(), DType::bfloat16, Device::cpu(), Layout::blocked16);
    Tensor z32 = Tensor::empty(x16.shape(), DType::float32, Device::cpu(), Layout::blocked16);
    be.axpbyz(2.0f, x16, -0.5f, b16, z16);
    be.axpbyz(2.0f, xr, -0.5f, br, z32);
    EXPECT_LT(relL2(z16, z32), std::ldexp(1.0, -8)); // one rounding of the float32 result
    Tensor zm = Tensor::empty(x16.shape(), DType::float32, Device::cpu(), Layout::blocked16);
    be.axpbyz(2.0f, x16, -0.5f, br, zm); // mixed: the same float arithmetic on the same values
    EXPECT_EQ(zm.toVector<float>(), z32.toVector<float>());
    Tensor acc = b16.convertedTo(DType::float32).convertedTo(DType::bfloat16); // a copy of its own
    be.axpby(1.0f, x16, 1.0f, acc);                                            // in place, as gradient sums are
    be.axpbyz(1.0f, xr, 1.0f, br, z32);
    EXPECT_LT(relL2(acc, z32), std::ldexp(1.0, -8));
    try {
        be.axpby(1.0f, Tensor::zeros({4}, DType::int32), 1.0f, Tensor::zeros({4}));
        ADD_FAILURE() << "an int32 axpby went through";
    } catch (const BackendError& e) {
        const std::string what = e.what();
        for (const char* part : {"axpby", "int32", "bfloat16"}) EXPECT_NE(what.find(part), std::string::npos) << what;
    }
    EXPECT_THROW(Tensor::empty({2, 20, 5, 5}, DType::float16, Device::cpu(), Layout::blocked16), ShapeError);
}

// Pooling on bfloat16 activations (oneDNN's bfloat16 pooling) against float32 pooling of
// the same values, in the layouts bfloat16 convolutions hand on: max pooling picks the same
// elements, so forward and backward are exact (a bfloat16 gradient routed, not summed,
// where windows do not overlap); averages round once. The module keeps the dtype both ways.
TEST(Precision, Bfloat16PoolingMatchesFloat32) {
    const Tensor x32 = randomTensor({2, 20, 8, 8}, 31);
    const Tensor dy32 = randomTensor({2, 20, 4, 4}, 32);
    for (Layout layout : {Layout::blocked16, Layout::channelsLast, Layout::plain}) {
        const Tensor x16 = x32.toLayout(layout).convertedTo(DType::bfloat16);
        const Tensor xr = x16.convertedTo(DType::float32); // the same values in float32
        for (const auto& [name, make] : std::vector<std::pair<std::string, std::function<ModulePtr()>>>{
                 {"max 2x2", [] { return std::make_shared<MaxPool2D>(2); }},
                 {"max 3x3 stride 2 pad 1",
                  [] {
                      return std::make_shared<MaxPool2D>(3, PoolOptions{{2}, {1}});
                  }},
                 {"avg 2x2", [] { return std::make_shared<AvgPool2D>(2); }}}) {
            SCOPED_TRACE(name + " in " + str(layout));
            ModulePtr low = make(), ref = make();
            const Tensor y16 = (*low)(x16), y32 = (*ref)(xr);
            EXPECT_EQ(y16.dtype(), DType::bfloat16);
            EXPECT_EQ(y16.layout(), layout);
            const bool exact = name.rfind("max", 0) == 0;
            const Tensor dy16 = dy32.convertedTo(DType::bfloat16).toLayout(layout);
            const Tensor dx16 = low->backward(dy16), dx32 = ref->backward(dy16.convertedTo(DType::float32));
            EXPECT_EQ(dx16.dtype(), DType::bfloat16);
            if (exact && name == "max 2x2") {
                EXPECT_EQ(y16.toVector<float>(), y32.toVector<float>());
                EXPECT_EQ(dx16.toVector<float>(), dx32.toVector<float>());
            } else if (exact) { // overlapping windows sum gradients: rounded once
                EXPECT_EQ(y16.toVector<float>(), y32.toVector<float>());
                EXPECT_LT(relL2(dx16, dx32), std::ldexp(1.0, -8));
            } else {
                EXPECT_LT(relL2(y16, y32), std::ldexp(1.0, -8));
                EXPECT_LT(relL2(dx16, dx32), std::ldexp(1.0, -8));
            }
        }
    }
    GlobalAvgPool gap;
    const Tensor g16 = gap(x32.toLayout(Layout::blocked16).convertedTo(DType::bfloat16));
    EXPECT_EQ(g16.dtype(), DType::bfloat16);
    EXPECT_LT(relL2(g16, GlobalAvgPool()(x32)), 1e-2);
    EXPECT_EQ(gap.backward(randomTensor(g16.shape(), 33)).dtype(), DType::bfloat16); // the input's dtype
}

// stem conv -> bn -> relu -> [conv -> bn -> relu -> conv -> bn -> (+ skip) -> relu] ->
// avg pool -> flatten -> linear: a residual network in miniature.
std::shared_ptr<Graph> residualNet() {
    auto relu = [] { return std::make_shared<Activation>(ActivationKind::relu); };
    auto conv = [](int64_t in, int64_t out) {
        return std::make_shared<Conv2D>(in, out, 3, ConvOptions{.pad = {1}, .useBias = false}); // batch norms follow
    };
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto stem = node(conv(3, 16), data, "stem");
    auto r0 = node(relu(), node(std::make_shared<BatchNorm2D>(16), stem, "bn0"), "r0");
    auto c1 = node(conv(16, 16), r0, "c1");
    auto r1 = node(relu(), node(std::make_shared<BatchNorm2D>(16), c1, "bn1"), "r1");
    auto c2 = node(conv(16, 16), r1, "c2");
    auto bn2 = node(std::make_shared<BatchNorm2D>(16), c2, "bn2");
    auto out = node(relu(), node(std::make_shared<Add>(), {bn2, r0}, "add"), "out");
    auto pool = node(std::make_shared<AvgPool2D>(2), out, "pool");
    auto fc = node(std::make_shared<Linear>(16 * 4 * 4, 5), node(std::make_shared<Flatten>(), pool, "flat"), "fc");
    return std::make_shared<Graph>(std::vector<NodePtr>{data}, std::vector<NodePtr>{fc});
}

// With bfloat16 activations, every activation is bfloat16, the convolutions' outputs, the
// pooling, the flattening (a view) and the linear layer's too, and the results match the
// same network with float32 activations within bfloat16's rounding, forward and backward.
// Off, or without bfloat16 kernels, every activation is float32.
TEST(Precision, Bfloat16ActivationsRunThroughAResidualBlock) {
    const Tensor x = randomTensor({4, 3, 8, 8}, 21), dy = randomTensor({4, 5}, 22);
    struct Run {
        Tensor y, dx;
        std::map<std::string, Tensor> grads;
        std::map<std::string, DType> dtypes;
    };
    auto run = [&](bool low, DType compute = DType::bfloat16) {
        LowActivations setting(low);
        manualSeed(20);
        auto net = residualNet();
        net->calcMode(compute);
        Run r;
        r.y = (*net)(x);
        for (const char* n : {"stem", "bn0", "r0", "c1", "bn1", "r1", "c2", "bn2", "add", "out", "pool", "fc"}) {
            r.dtypes[n] = net->getNodeByName(n).outputs().at(0).dtype(); // before backward releases them
        }
        net->zeroGradParams();
        r.dx = net->backward(dy);
        for (const auto& [name, v] : net->namedParams()) r.grads[name] = v->grad.clone();
        return r;
    };
    // bfloat16 compute with float32 and with bfloat16 activations, and float32 throughout.
    const Run f32 = run(false), b16 = run(true), ref = run(false, DType::float32);
    const bool kernels = CpuBackend::bfloat16Kernels();
    for (const auto& [name, t] : b16.dtypes) {
        EXPECT_EQ(t, kernels ? DType::bfloat16 : DType::float32) << name;
        EXPECT_EQ(f32.dtypes.at(name), DType::float32) << name;
    }
    EXPECT_EQ(b16.y.dtype(), kernels ? DType::bfloat16 : DType::float32);
    EXPECT_EQ(b16.dx.dtype(), DType::float32); // the input's dtype
    // Against float32 throughout, bfloat16 activations err by about what bfloat16 compute
    // alone does (in this small batch-normalised net, up to ~10% in some gradients: the
    // batch norms' backward cancels), forward and backward.
    auto close = [&](const Tensor& on, const Tensor& off, const Tensor& exact) {
        return relL2(on, exact) < 3 * relL2(off, exact) + 1e-2;
    };
    EXPECT_TRUE(close(b16.y, f32.y, ref.y));
    EXPECT_TRUE(close(b16.dx, f32.dx, ref.dx));
    for (const auto& [name, g] : ref.grads) {
        EXPECT_TRUE(close(b16.grads.at(name), f32.grads.at(name), g)) << name;
    }
    if (kernels) {
        EXPECT_GT(relL2(b16.y, f32.y), 1e-6); // the activations were rounded: the check can tell
    }
}

} // namespace
} // namespace tessera
