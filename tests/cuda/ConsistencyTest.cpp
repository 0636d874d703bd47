// CPU versus CUDA: every module, cost and optimizer runs one seeded case on both backends,
// forward and backward, and the results must agree within a stated tolerance. TF32 is
// switched off, so both sides compute in float32 and differ only by summation order.
//
// Every test skips when no CUDA device is present; TESSERA_CONSISTENCY_DEVICE=cpu runs the
// same cases CPU against CPU, which checks the harness and the case list on any machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>

#include "GradCheck.h"
#include "backend/AttentionSpec.h"
#include "backend/Backend.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "containers/Sequential.h"
#include "data/Dataset.h"
#include "data/Loader.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "models/Zoo.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Attention.h"
#include "modules/BatchNormND.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/CumSum.h"
#include "modules/Deconv.h"
#include "modules/DepthConcat.h"
#include "modules/Dropout.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/GatherElements.h"
#include "modules/Gelu.h"
#include "modules/GridSample.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/InstanceNorm2D.h"
#include "modules/KMaxPool.h"
#include "modules/LCN.h"
#include "modules/LRN.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MatMul.h"
#include "modules/MaxUnpool2D.h"
#include "modules/MulAddConst.h"
#include "modules/MultiheadAttention.h"
#include "modules/NoiseInjector.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Penalty.h"
#include "modules/Pool.h"
#include "modules/PositionalEncoding.h"
#include "modules/Pow.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Replicate.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/SubtractMean.h"
#include "modules/Tile.h"
#include "modules/ToList.h"
#include "modules/TopK.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"
#include "training/CTC.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/L1Hinge.h"
#include "training/Optimizer.h"
#include "training/PointwiseCosts.h"
#include "training/SVM.h"

namespace tessera {
namespace {

using testing::randomTensor;

// The device under test: the first GPU, or the CPU when TESSERA_CONSISTENCY_DEVICE=cpu.
bool selfCheck() {
    const char* v = std::getenv("TESSERA_CONSISTENCY_DEVICE");
    return v && std::string(v) == "cpu";
}
Device testDevice() { return selfCheck() ? Device::cpu() : Device::cuda(0); }

#define REQUIRE_DEVICE()                                                                                               \
    do {                                                                                                               \
        if (!selfCheck() && cudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";                                  \
        setCudaAllowTF32(false);                                                                                       \
    } while (0)

// max |a - b| / (1 + max |b|), over the elements in row-major order.
double relDiff(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.dtype(), b.dtype());
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
    std::vector<float> x, y;
    if (a.dtype() == DType::int32) {
        for (int32_t v : a.toVector<int32_t>()) x.push_back(static_cast<float>(v));
        for (int32_t v : b.toVector<int32_t>()) y.push_back(static_cast<float>(v));
    } else {
        x = a.toVector<float>();
        y = b.toVector<float>();
    }
    double diff = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
        if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    }
    return diff / (1.0 + scale);
}

// ||a - b|| / ||b|| (Euclidean norms over all elements).
double normDiff(const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.toVector<float>(), y = b.toVector<float>();
    if (x.size() != y.size()) return INFINITY;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        norm += static_cast<double>(y[i]) * y[i];
    }
    return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

struct Case {
    std::string name;
    std::function<ModulePtr()> make;
    Shapes inputs;
    double tol = 1e-4;
    int32_t intInputs = 0; ///< > 0: int32 inputs drawn from [0, intInputs)
    bool backward = true;
    /// > 0: gradients are compared by normDiff against this instead of relDiff against
    /// `tol`. For whole networks: a ReLU input within rounding of zero flips between the
    /// devices, and the gradient is not continuous there (see the ResNet-18 case).
    double gradNormTol = 0;
    int32_t intLastInput = 0; ///< > 0: the last input int32, drawn from [0, intLastInput) (positions)
    int intInput = -1;        ///< >= 0: that input int32, drawn from [0, intInputRange) (positions)
    int32_t intInputRange = 0;
};

Tensor intTensor(const Shape& shape, int32_t range, uint64_t seed) {
    std::vector<int32_t> v(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<int32_t>(randomBits(seed, i) % static_cast<uint64_t>(range));
    }
    return Tensor::fromVector(shape, v);
}

void runCase(const Case& c) {
    SCOPED_TRACE(c.name);
    const Device dev = testDevice();
    manualSeed(11);
    ModulePtr cpu = c.make();
    manualSeed(11);
    ModulePtr gpu = c.make();
    gpu->to(dev);
    EXPECT_EQ(gpu->device(), cpu->numOfParams() || !cpu->namedAttrs().empty() ? dev : Device::cpu());

    Tensors xc, xg;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
        const int32_t ints = c.intLastInput && i + 1 == c.inputs.size() ? c.intLastInput
                             : static_cast<int>(i) == c.intInput        ? c.intInputRange
                                                                        : c.intInputs;
        xc.push_back(ints ? intTensor(c.inputs[i], ints, 100 + i) : randomTensor(c.inputs[i], 100 + i));
        xg.push_back(xc.back().to(dev));
    }
    const Tensors yc = (*cpu)(xc);
    const Tensors yg = (*gpu)(xg);
    ASSERT_EQ(yc.size(), yg.size());
    for (size_t i = 0; i < yc.size(); ++i) {
        EXPECT_EQ(yg[i].device(), dev);
        EXPECT_LE(relDiff(yg[i], yc[i]), c.tol) << "output " << i;
    }
    for (size_t i = 0; i < cpu->namedAttrs().size(); ++i) {
        EXPECT_LE(relDiff(gpu->namedAttrs()[i].second, cpu->namedAttrs()[i].second), c.tol)
            << "attribute " << cpu->namedAttrs()[i].first;
    }
    if (!c.backward) return;

    Tensors gc, gg;
    for (size_t i = 0; i < yc.size(); ++i) {
        gc.push_back(randomTensor(yc[i].shape(), 200 + i));
        gg.push_back(gc.back().to(dev));
    }
    const Tensors dxc = cpu->backward(gc);
    const Tensors dxg = gpu->backward(gg);
    ASSERT_EQ(dxc.size(), dxg.size());
    for (size_t i = 0; i < dxc.size(); ++i) {
        if (!dxc[i].defined()) continue;
        if (c.gradNormTol > 0) {
            EXPECT_LE(normDiff(dxg[i], dxc[i]), c.gradNormTol) << "input gradient " << i;
            std::printf("%s: input gradient %zu differs by %.2e (norm), %.2e (max)\n", c.name.c_str(), i,
                        normDiff(dxg[i], dxc[i]), relDiff(dxg[i], dxc[i]));
        } else {
            EXPECT_LE(relDiff(dxg[i], dxc[i]), c.tol) << "input gradient " << i;
        }
    }
    const auto pc = cpu->namedParams(), pg = gpu->namedParams();
    ASSERT_EQ(pc.size(), pg.size());
    double worstNorm = 0;
    for (size_t i = 0; i < pc.size(); ++i) {
        if (!pc[i].second->grad.defined()) continue;
        if (c.gradNormTol > 0) {
            const double d = normDiff(pg[i].second->grad, pc[i].second->grad);
            EXPECT_LE(d, c.gradNormTol) << "gradient of " << pc[i].first;
            worstNorm = std::max(worstNorm, d);
        } else {
            EXPECT_LE(relDiff(pg[i].second->grad, pc[i].second->grad), c.tol) << "gradient of " << pc[i].first;
        }
    }
    if (c.gradNormTol > 0)
        std::printf("%s: parameter gradients differ by at most %.2e (norm)\n", c.name.c_str(), worstNorm);
}

template <class M, class... A> std::function<ModulePtr()> make(A... args) {
    return [=] { return std::make_shared<M>(args...); };
}

TEST(CudaConsistency, EveryModule) {
    REQUIRE_DEVICE();
    const std::vector<Case> cases = {
        {"Linear", make<Linear>(6, 5), {{4, 6}}},
        {"Linear no bias", make<Linear>(6, 5, LinearOptions{.useBias = false}), {{3, 6}}},
        // 1,200 rows: the bias gradient is a column sum over many rows (gemv with ones).
        {"Linear on tokens", make<Linear>(16, 8), {{4, 300, 16}}},
        {"Linear transposed (W [out, in])", make<Linear>(16, 8, LinearOptions{.transposed = true}), {{4, 30, 16}}},
        {"Conv1D",
         make<Conv1D>(2, 4, 3, ConvOptions{.stride = {2}, .pad = {1}, .dilation = {2}, .groups = 2}),
         {{2, 2, 11}}},
        {"Conv2D", make<Conv2D>(3, 8, 3, ConvOptions{.stride = {2}, .pad = {1}}), {{2, 3, 9, 9}}},
        {"Conv2D 3x1 no bias",
         make<Conv2D>(3, 6, std::vector<int64_t>{3, 1}, ConvOptions{.useBias = false}),
         {{2, 3, 7, 5}}},
        {"Conv2D groups dilation",
         make<Conv2D>(4, 8, 3, ConvOptions{.pad = {2}, .dilation = {2}, .groups = 4}),
         {{2, 4, 8, 8}}},
        {"Conv3D", make<Conv3D>(2, 3, 2), {{2, 2, 4, 5, 4}}},
        {"Deconv1D", make<Deconv1D>(4, 2, 3, ConvOptions{.stride = {2}}), {{2, 4, 6}}},
        {"Deconv2D", make<Deconv2D>(4, 4, 2, ConvOptions{.stride = {2}, .groups = 2}), {{2, 4, 5, 5}}},
        {"Deconv3D", make<Deconv3D>(2, 1, 2), {{1, 2, 3, 3, 3}}},
        {"Deconv2D postpad",
         make<Deconv2D>(3, 4, 3, ConvOptions{.stride = {2, 3}, .pad = {1, 0}, .postpad = {1, 2}}),
         {{2, 3, 4, 5}}},
        {"MaxPool1D", make<MaxPool1D>(3), {{2, 3, 10}}},
        {"MaxPool2D", make<MaxPool2D>(3, PoolOptions{.stride = {2}, .pad = {1}}), {{2, 3, 9, 9}}},
        {"MaxPool3D", make<MaxPool3D>(2), {{1, 2, 4, 4, 4}}},
        {"AvgPool1D", make<AvgPool1D>(2), {{2, 3, 8}}},
        {"AvgPool2D with pad", make<AvgPool2D>(3, PoolOptions{.stride = {1}, .pad = {1}}), {{2, 3, 6, 6}}},
        {"AvgPool2D without pad",
         make<AvgPool2D>(3, PoolOptions{.stride = {1}, .pad = {1}, .includePad = false}),
         {{2, 3, 6, 6}}},
        {"AvgPool3D", make<AvgPool3D>(2), {{1, 2, 4, 4, 4}}},
        {"GlobalAvgPool", make<GlobalAvgPool>(), {{2, 3, 5, 5}}},
        {"Identity", make<Identity>(), {{2, 3}}},
        {"KMaxPool", make<KMaxPool>(2, -1), {{2, 3, 7}}},
        {"GatherElements", make<GatherElements>(1), {{2, 7, 5}, {2, 9, 5}}, 1e-4, 0, true, 0, 7},
        {"CumSum", make<CumSum>(1), {{2, 37, 5}}, 1e-4},
        {"ScatterElements", make<ScatterElements>(1), {{2, 7, 5}, {2, 4, 5}, {2, 4, 5}}, 1e-5, 0, true, 0, 0, 1, 7},
        {"ScatterElements add",
         make<ScatterElements>(-1, true),
         {{3, 2, 9}, {3, 2, 12}, {3, 2, 12}},
         1e-5,
         0,
         true,
         0,
         0,
         1,
         9},
        {"TopK", make<TopK>(5, 1), {{2, 37, 5}}, 1e-6},
        {"TopK smallest unsorted", make<TopK>(3, -1, TopKOptions{.largest = false, .sorted = false}), {{4, 3, 20}}, 1e-6},
        {"CumSum exclusive reverse", make<CumSum>(-1, CumSumOptions{.exclusive = true, .reverse = true}), {{3, 4, 9}},
         1e-4},
        {"BatchNorm1D", make<BatchNorm1D>(5, BatchNormOptions{.epsilon = 1e-3f}), {{4, 5, 6}}, 1e-3},
        {"BatchNorm2D", make<BatchNorm2D>(5), {{4, 5, 3, 3}}, 1e-3},
        {"BatchNorm3D", make<BatchNorm3D>(5), {{2, 5, 2, 3, 3}}, 1e-3},
        {"InstanceNorm2D", make<InstanceNorm2D>(3), {{2, 3, 4, 4}}, 1e-3},
        {"LayerNorm", make<LayerNorm>(std::vector<int64_t>{3, 4}), {{2, 5, 3, 4}}, 1e-3},
        {"LayerNorm wide", make<LayerNorm>(std::vector<int64_t>{300}), {{37, 300}}, 1e-3},
        // 1,000 rows: the parameter gradients are summed in chunks of rows on the device.
        {"LayerNorm many rows", make<LayerNorm>(std::vector<int64_t>{24}), {{5, 200, 24}}, 1e-3},
        {"LayerNorm no bias",
         make<LayerNorm>(std::vector<int64_t>{24}, LayerNormOptions{.useBias = false}),
         {{3, 100, 24}},
         1e-3},
        {"RMSNorm", make<RMSNorm>(std::vector<int64_t>{8}), {{3, 2, 8}}, 1e-3},
        {"GroupNorm", make<GroupNorm>(2, 6), {{3, 6, 2, 5}}, 1e-3},
        {"CrossMapLRN", make<CrossMapLRN>(LRNOptions{.N = 3, .alpha = 0.01f}), {{2, 6, 4, 4}}},
        {"MapLRN", make<MapLRN>(), {{2, 3, 6, 6}}},
        {"sigmoid", make<Activation>(ActivationKind::sigmoid), {{3, 7}}},
        {"tanh", make<Activation>(ActivationKind::tanh), {{3, 7}}},
        {"relu", make<Activation>(ActivationKind::relu), {{3, 7}}},
        {"leakyRelu", make<Activation>(ActivationKind::leakyRelu, ActivationOptions{.slope = 0.2f}), {{3, 7}}},
        {"elu", make<Activation>(ActivationKind::elu), {{3, 7}}},
        {"softPlus", make<Activation>(ActivationKind::softPlus), {{3, 7}}},
        {"clip", make<Activation>(ActivationKind::clip, ActivationOptions{.min = -0.5f, .max = 0.5f}), {{3, 7}}},
        {"Gelu", make<Gelu>(), {{3, 7}}},
        {"hardSigmoid", make<Activation>(ActivationKind::hardSigmoid, ActivationOptions{.hardSlope = 0.2f}), {{3, 7}}},
        {"hardSwish", make<Activation>(ActivationKind::hardSwish), {{3, 7}}},
        {"silu", make<Activation>(ActivationKind::silu), {{3, 7}}},
        {"mish", make<Activation>(ActivationKind::mish), {{3, 7}}},
        {"exp", make<Activation>(ActivationKind::exp), {{3, 7}}},
        {"abs", make<Activation>(ActivationKind::abs), {{3, 7}}},
        {"sin", make<Activation>(ActivationKind::sin), {{3, 7}}},
        {"cos", make<Activation>(ActivationKind::cos), {{3, 7}}},
        {"tan", make<Activation>(ActivationKind::tan), {{3, 7}}},
        {"atan", make<Activation>(ActivationKind::atan), {{3, 7}}},
        {"sinh", make<Activation>(ActivationKind::sinh), {{3, 7}}},
        {"cosh", make<Activation>(ActivationKind::cosh), {{3, 7}}},
        {"asinh", make<Activation>(ActivationKind::asinh), {{3, 7}}},
        {"erf", make<Activation>(ActivationKind::erf), {{3, 7}}},
        {"sign", make<Activation>(ActivationKind::sign), {{3, 7}}},
        // asin, acos and atanh of x / 2, away from their poles at -1 and 1; acosh of |x| + 1.5.
        {"asin, acos, atanh of x / 2",
         [] {
             auto seq = std::make_shared<Sequential>();
             seq->append(std::make_shared<MulAddConst>(0.5f, 0.0f));
             seq->append(std::make_shared<Activation>(ActivationKind::asin));
             seq->append(std::make_shared<MulAddConst>(0.5f, 0.0f));
             seq->append(std::make_shared<Activation>(ActivationKind::acos));
             seq->append(std::make_shared<MulAddConst>(0.5f, -0.5f));
             seq->append(std::make_shared<Activation>(ActivationKind::atanh));
             return ModulePtr(seq);
         },
         {{3, 7}}},
        {"acosh of |x| + 1.5",
         [] {
             auto seq = std::make_shared<Sequential>();
             seq->append(std::make_shared<Activation>(ActivationKind::abs));
             seq->append(std::make_shared<MulAddConst>(1.0f, 1.5f));
             seq->append(std::make_shared<Activation>(ActivationKind::acosh));
             return ModulePtr(seq);
         },
         {{3, 7}}},
        {"log of |x| + 0.5",
         [] {
             auto seq = std::make_shared<Sequential>();
             seq->append(std::make_shared<Activation>(ActivationKind::abs));
             seq->append(std::make_shared<MulAddConst>(1.0f, 0.5f));
             seq->append(std::make_shared<Activation>(ActivationKind::log));
             return ModulePtr(seq);
         },
         {{3, 7}}},
        {"PRelu", make<PRelu>(4), {{2, 4, 3, 3}}},
        {"PRelu shared", make<PRelu>(4, PReluOptions{.sharedMaps = true, .init = 0.1f}), {{2, 4, 3}}},
        {"SoftMax", make<SoftMax>(), {{3, 5, 2}}},
        {"LogSoftMax", make<LogSoftMax>(), {{3, 5, 2}}},
        {"LogSoftMax last axis", make<LogSoftMax>(-1), {{2, 3, 6}}},
        {"Dropout", make<Dropout>(DropoutOptions{.p = 0.25f}), {{4, 9}}},
        {"Dropout2D", make<Dropout2D>(Dropout2DOptions{.p = 0.3f}), {{2, 5, 3, 3}}},
        {"NoiseInjector", make<NoiseInjector>(NoiseInjectorOptions{}), {{4, 6}}},
        {"Pad1D", make<Pad1D>(std::vector<int64_t>{1, 2}, PadOptions{.fillValue = 3.0f}), {{2, 3, 5}}},
        {"Pad2D reflect",
         make<Pad2D>(std::vector<int64_t>{1, 2, 0, 1}, PadOptions{.mode = PadMode::reflect}),
         {{2, 3, 4, 5}}},
        {"Pad2D edge",
         make<Pad2D>(std::vector<int64_t>{3, 1, 0, 5}, PadOptions{.mode = PadMode::edge}),
         {{2, 3, 4, 5}}},
        {"Upsample2D nearest", make<Upsample2D>(2), {{2, 3, 3, 4}}},
        {"Upsample2D linear", make<Upsample2D>(3, UpsampleOptions{.mode = ResampleMode::linear}), {{2, 3, 3, 4}}},
        {"Upsample3D", make<Upsample3D>(2), {{1, 2, 2, 3, 2}}},
        {"Upsample2D linear, corners aligned",
         make<Upsample2D>(2, UpsampleOptions{.mode = ResampleMode::linear, .alignCorners = true}),
         {{2, 3, 3, 4}}},
        {"Resize2D nearest, down and up", make<Resize2D>(std::vector<int64_t>{2, 7}), {{2, 3, 5, 4}}},
        {"Resize2D nearest-exact, down and up",
         make<Resize2D>(std::vector<int64_t>{3, 7}, UpsampleOptions{.mode = ResampleMode::nearestExact}),
         {{2, 3, 5, 4}}},
        {"Resize2D linear, down and up",
         make<Resize2D>(std::vector<int64_t>{3, 9}, UpsampleOptions{.mode = ResampleMode::linear}),
         {{2, 3, 5, 4}}},
        {"Resize2D cubic, down and up",
         make<Resize2D>(std::vector<int64_t>{3, 9}, UpsampleOptions{.mode = ResampleMode::cubic}),
         {{2, 3, 5, 4}}},
        {"Upsample3D cubic, corners aligned",
         make<Upsample3D>(2, UpsampleOptions{.mode = ResampleMode::cubic, .alignCorners = true}),
         {{1, 2, 2, 3, 2}}},
        {"Resize3D linear, corners aligned",
         make<Resize3D>(std::vector<int64_t>{3, 2, 5},
                        UpsampleOptions{.mode = ResampleMode::linear, .alignCorners = true}),
         {{1, 2, 2, 3, 4}}},
        {"Embedder", make<Embedder>(10, 3, 4), {{5, 3}}, 1e-4, 10},
        {"Embedder padding", make<Embedder>(10, 3, 4, EmbedderOptions{.paddingIdx = 2}), {{5, 3}}, 1e-4, 10},
        {"GroupLinear", make<GroupLinear>(2, 3, 4), {{5, 2, 3}}},
        {"GroupLinear one input", make<GroupLinear>(2, 3, 4, GroupLinearOptions{.inmode = "one"}), {{5, 1, 3}}},
        {"GroupLinear one weight",
         make<GroupLinear>(3, 3, 4, GroupLinearOptions{.batchDim = 1, .wmode = "one"}),
         {{3, 5, 3}}},
        {"MulAddConst", make<MulAddConst>(2.0f, -1.5f), {{3, 4}}},
        {"Pow", make<Pow>(3.0f, 0.5f), {{3, 4}}},
        {"MulAddConst per-channel",
         make<MulAddConst>(Tensor::fromVector({3, 1, 1}, std::vector<float>{2, -1, 0.5f}),
                           Tensor::fromVector({1, 3, 1, 1}, std::vector<float>{1, 0, -3})),
         {{2, 3, 2, 2}}},
        {"Flatten", make<Flatten>(), {{2, 3, 4}}},
        {"Reshape", make<Reshape>(Shape{-1, 4, 2}), {{2, 8}}},
        {"Transpose", make<Transpose>(std::vector<int64_t>{0, 2, 1}), {{2, 3, 4}}},
        {"SwapAxes", make<SwapAxes>(1, -1), {{2, 3, 4}}},
        {"MoveAxis", make<MoveAxis>(0, 2), {{2, 3, 4}}},
        {"Tile", make<Tile>(-1, 3), {{2, 3}}},
        {"Cast", make<Cast>(DType::float32, DType::int32), {{3, 4}}, 0.0, 0, false},
        {"Cast float16", make<Cast>(DType::float32, DType::float16), {{3, 4}}, 0.0},
        {"Cast bfloat16", make<Cast>(DType::float32, DType::bfloat16), {{3, 4}}, 0.0},
        {"Concat", make<Concat>(1), {{2, 3, 2}, {2, 1, 2}}},
        {"Split", make<Split>(1, std::vector<int64_t>{2, 3}), {{2, 5, 2}}},
        {"Slice", make<Slice>(1, 1, 3), {{2, 4, 3}}},
        {"Slice several axes",
         make<Slice>(std::vector<int>{1, 2}, std::vector<int64_t>{1, 0}, std::vector<int64_t>{3, -1}),
         {{2, 4, 3}}},
        {"Slice with steps",
         make<Slice>(std::vector<int>{1, 2}, std::vector<int64_t>{0, 1}, std::vector<int64_t>{0, 0},
                     SliceOptions{.steps = {2, 3}}),
         {{2, 5, 7, 3}}},
        {"Replicate", make<Replicate>(3), {{2, 3}}},
        {"Add", make<Add>(std::vector<float>{0.5f, 2.0f}), {{2, 3}, {2, 3}}},
        {"Mul", make<Mul>(), {{2, 3}, {2, 3}}},
        {"Mul gate", make<Mul>(), {{2, 3, 1, 1}, {2, 3, 4, 5}}},
        {"Mul broadcast", make<Mul>(), {{2, 3, 4}, {3, 1}}},
        {"Sum weighted", make<Sum>(2), {{2, 3, 4, 5}, {2, 3, 4}}},
        {"Sum", make<Sum>(1, false), {{2, 3, 4}}},
        {"MatMul", make<MatMul>(), {{2, 3, 4, 5}, {3, 5, 6}}},
        {"Parameter", make<Parameter>(std::vector<int64_t>{3, 4}, ParameterOptions{.std = 0.5f}), {{2, 7}}},
        {"Scale", make<Scale>(std::vector<int64_t>{3, 1, 1}, ScaleOptions{.init = 0.5f}), {{2, 3, 4, 4}}},
        {"ScaledDotProductAttention causal",
         make<ScaledDotProductAttention>(AttentionOptions{.causal = true}),
         {{2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 4}}},
        {"MultiheadAttention masks",
         make<MultiheadAttention>(8, 2, MultiheadAttentionOptions{.causal = true, .keyPaddingMask = true}),
         {{2, 5, 8}, {2, 5}}},
        {"MultiheadAttention cross time-major",
         make<MultiheadAttention>(8, 4, MultiheadAttentionOptions{.batchFirst = false}),
         {{5, 2, 8}, {6, 2, 8}, {6, 2, 8}}},
        // Scores of 2 x 8 heads of 200 x 200 take 2.5 MiB: two blocks of heads.
        {"ScaledDotProductAttention blocks of heads",
         make<ScaledDotProductAttention>(),
         {{2, 8, 200, 16}, {2, 8, 200, 16}, {2, 8, 200, 16}}},
        {"ScaledDotProductAttention dropout",
         make<ScaledDotProductAttention>(AttentionOptions{.dropout = 0.3f, .seed = 5}),
         {{2, 3, 6, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}}},
        {"PositionalEncoding", make<PositionalEncoding>(), {{2, 5, 6}}},
        {"MatMul transB", make<MatMul>(MatMulOptions{.transB = true, .alpha = 0.5f}), {{2, 7, 8}, {2, 9, 8}}},
        {"Add broadcast", make<Add>(), {{4}, {2, 3, 4}}},
        {"Sub broadcast", make<Sub>(), {{2, 1, 4}, {1, 3, 1}}},
        {"ReduceMean", make<ReduceMean>(std::vector<int64_t>{1, -1}, false), {{2, 3, 4, 5}}},
        {"ReduceSum over the batch", make<ReduceSum>(std::vector<int64_t>{0, 2}), {{2, 3, 4, 5}}},
        {"ArgMax", make<ArgMax>(1, false), {{2, 7, 4, 5}}, 0.0, 0, false},
        {"ArgMin last axis", make<ArgMin>(-1), {{3, 4, 37}}, 0.0, 0, false},
        {"ArgMax last index", make<ArgMax>(2, ArgMaxOptions{.lastIndex = true}), {{2, 7, 4, 5}}, 0.0, 0, false},
        {"Penalty l1", make<Penalty>(PenaltyOptions{.weight = 0.3f}), {{4, 5}}},
        {"Penalty l2", make<Penalty>(PenaltyOptions{.mode = PenaltyMode::l2, .weight = 0.3f}), {{2, 3, 4}}},
        {"DepthConcat", make<DepthConcat>(), {{2, 2, 3, 3}, {2, 3, 5, 4}, {2, 1, 4, 4}}},
        {"ToList", make<ToList>(2), {{2, 3}, {4}}},
        {"SubtractMean", make<SubtractMean>(SubtractMeanOptions{.size = 3}), {{2, 3, 6, 5}}},
        {"LCN", make<LCN>(LCNOptions{.N = 3, .alpha = 0.5f}), {{2, 3, 6, 5}}},
        {"LCN no pad", make<LCN>(LCNOptions{.alpha = 0.3f, .includePad = false}), {{2, 2, 7, 7}}},
        {"BatchNorm any rank", make<BatchNorm>(12), {{5, 3, 4}}},
        {"SpatialTf", make<SpatialTf>(SpatialTfOptions{.height = 5, .width = 7}), {{2, 3, 6, 8}, {2, 2, 3}}, 1e-4},
        {"GridSample", make<GridSample>(), {{2, 3, 6, 8}, {2, 5, 7, 2}}, 1e-4},
        {"GridSample bicubic reflection aligned",
         make<GridSample>(GridSampleOptions{
             .mode = GridSampleMode::bicubic, .padding = GridPadding::reflection, .alignCorners = true}),
         {{2, 3, 6, 8}, {2, 5, 7, 2}},
         1e-4},
        {"GridSample nearest border",
         make<GridSample>(GridSampleOptions{.mode = GridSampleMode::nearest, .padding = GridPadding::border}),
         {{2, 3, 6, 8}, {2, 5, 7, 2}},
         1e-4},
        {"SubtractMean no pad", make<SubtractMean>(SubtractMeanOptions{.includePad = false}), {{2, 2, 7, 7}}},
        {"RNN lstm bi x2",
         make<RNN>(5, 6, RNNOptions{.layers = 2, .mode = RnnMode::lstm, .bidirectional = true, .getSequences = true}),
         {{4, 3, 5}}},
        {"RNN gru batch-first last step",
         make<RNN>(5, 6, RNNOptions{.mode = RnnMode::gru, .batchFirst = true}),
         {{3, 4, 5}}},
        {"RNN tanh bi", make<RNN>(5, 6, RNNOptions{.mode = RnnMode::tanh, .bidirectional = true}), {{4, 3, 5}}},
        {"RNN relu x2",
         make<RNN>(5, 6, RNNOptions{.layers = 2, .mode = RnnMode::relu, .getSequences = true}),
         {{4, 3, 5}}},
        {"RNN lstm states",
         make<RNN>(5, 6,
                   RNNOptions{.layers = 2,
                              .mode = RnnMode::lstm,
                              .bidirectional = true,
                              .initialStates = true,
                              .finalStates = true}),
         {{4, 3, 5}, {4, 3, 6}, {4, 3, 6}}},
        {"RNN gru x2 dropout",
         make<RNN>(5, 6, RNNOptions{.layers = 2, .mode = RnnMode::gru, .getSequences = true, .dropout = 0.3f}),
         {{4, 3, 5}}},
        {"LeNet", [] { return ModulePtr(loadLeNet()); }, {{4, 1, 28, 28}}, 1e-3},
        // ResNet-18's gradients are compared by norm. On the CPU alone, scaling the input by
        // 1 +- 6e-6 moves its input gradient by 0.56% (norm) and 0.84% (max) and a
        // parameter gradient by up to 0.95% (norm): ReLU inputs within rounding of zero
        // flip, and the gradient jumps there. The H100 differed from the CPU by as much
        // (0.84% max on the input gradient, 2.4% max on layer1_1_a_conv.W), while its
        // outputs agreed to 2e-3. A wrong kernel moves these by far more than 3%.
        {"ResNet-18 (CIFAR)",
         [] { return loadResNet(18, ResNetStem::cifar, 10); },
         {{2, 3, 32, 32}},
         2e-3,
         0,
         true,
         3e-2},
    };
    for (const Case& c : cases) runCase(c);
}

// Two seeded copies of a case's module: float32 on the CPU with its weights `W` rounded to
// `low`, and on `dev` in calcMode(low).
std::pair<ModulePtr, ModulePtr> roundedPair(const std::function<ModulePtr()>& make, DType low, Device dev) {
    manualSeed(11);
    ModulePtr cpu = make();
    for (const auto& [name, v] : cpu->namedParams()) {
        if (name == "W") v->data.copyFrom(v->data.convertedTo(low).convertedTo(DType::float32));
    }
    manualSeed(11);
    ModulePtr gpu = make();
    gpu->to(dev);
    gpu->calcMode(low);
    return {cpu, gpu};
}

// The numerical gradient checker on the device: parameters and inputs live on the GPU,
// each perturbation is written there, and the CUDA backward is compared with central
// differences of the CUDA forward (not with the CPU).
// calcMode(float16) and calcMode(bfloat16) on the device against float32 on the CPU fed
// the same operands already rounded to the 16-bit type (inputs, output gradients and the
// weights `W`): the two then differ by the order of float32 sums and by the rounding of
// 16-bit results (convolutions write their outputs and gradients in the 16-bit type), a
// few units of the type's rounding, relative to the largest value. Against float32 on
// unrounded operands the device's results must differ, or the operands were not rounded.
// (Under TESSERA_CONSISTENCY_DEVICE=cpu only bfloat16 runs: the CPU has no float16.)
TEST(CudaConsistency, Float16AndBfloat16MatchFloat32OnRoundedOperands) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    struct LowCase {
        std::string name;
        std::function<ModulePtr()> make;
        Shape input;
    };
    const std::vector<LowCase> cases = {
        {"Linear", make<Linear>(40, 24), {16, 40}},
        {"GroupLinear", make<GroupLinear>(3, 16, 8), {6, 3, 16}},
        {"Conv2D", make<Conv2D>(8, 16, 3, ConvOptions{.stride = {2}, .pad = {1}}), {4, 8, 11, 11}},
        {"Conv2D grouped", make<Conv2D>(8, 8, 3, ConvOptions{.pad = {1}, .groups = 2}), {2, 8, 7, 7}},
        {"Conv1D", make<Conv1D>(4, 8, 5, ConvOptions{.pad = {2}}), {3, 4, 20}},
        {"Conv3D", make<Conv3D>(4, 8, 3, ConvOptions{.pad = {1}}), {2, 4, 5, 6, 5}},
        {"Deconv2D", make<Deconv2D>(8, 4, 3, ConvOptions{.stride = {2}, .pad = {1}}), {2, 8, 6, 6}},
    };
    auto asFloat = [](const Tensor& t) { return t.convertedTo(DType::float32); };
    for (DType low : {DType::float16, DType::bfloat16}) {
        if (selfCheck() && low == DType::float16) continue;
        const double eps = low == DType::float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
        const double tol = 8 * eps;
        auto rounded = [&](const Tensor& t) { return t.convertedTo(low).convertedTo(DType::float32); };
        for (const LowCase& c : cases) {
            SCOPED_TRACE(c.name + " in " + str(low));
            manualSeed(11);
            ModulePtr exact = c.make(); // float32 on unrounded operands
            const auto [cpu, gpu] = roundedPair(c.make, low, dev);
            const Tensor x = randomTensor(c.input, 100);
            const Tensor ye = (*exact)(x), yc = (*cpu)(rounded(x)), yg = asFloat((*gpu)(x.to(dev)));
            EXPECT_LE(relDiff(yg, yc), tol) << "output";
            EXPECT_GT(relDiff(yg, ye), 1e-6) << "output: the operands were not rounded";
            const Tensor dy = randomTensor(yc.shape(), 200);
            for (const ModulePtr& m : {exact, cpu, gpu}) m->zeroGradParams();
            exact->backward(dy);
            const Tensor dxc = cpu->backward(rounded(dy)), dxg = asFloat(gpu->backward(dy.to(dev)));
            EXPECT_LE(relDiff(dxg, dxc), tol) << "input gradient";
            const auto pe = exact->namedParams(), pc = cpu->namedParams(), pg = gpu->namedParams();
            ASSERT_EQ(pc.size(), pg.size());
            double worst = 0;
            for (size_t i = 0; i < pc.size(); ++i) {
                const double d = relDiff(pg[i].second->grad, pc[i].second->grad);
                EXPECT_LE(d, tol) << "gradient of " << pc[i].first;
                worst = std::max(worst, d);
                if (pc[i].first == "W") {
                    EXPECT_GT(relDiff(pg[i].second->grad, pe[i].second->grad), 1e-6) << "gradient of W: not rounded";
                }
            }
            std::printf("%s in %s: output %.1e, input gradient %.1e, parameter gradients %.1e (tolerance %.1e)\n",
                        c.name.c_str(), str(low).c_str(), relDiff(yg, yc), relDiff(dxg, dxc), worst, tol);
        }
    }
}

// While it lives, CUDA layers carry 16-bit activations or not, as `on` says
// (setCuda16BitActivations); then the setting is what it was before.
struct Carry16Bit {
    explicit Carry16Bit(bool on) : before(cuda16BitActivations()) { setCuda16BitActivations(on); }
    ~Carry16Bit() { setCuda16BitActivations(before); }
    const bool before;
    Carry16Bit(const Carry16Bit&) = delete;
    Carry16Bit& operator=(const Carry16Bit&) = delete;
};

// With 16-bit activations carried, each layer that carries them, handed 16-bit inputs on
// the device in calcMode(float16) and calcMode(bfloat16), writes its output and input
// gradients in that type, and they match float32 on the CPU fed the same (rounded) inputs,
// output gradients and weights within a few units of the type's rounding; so do the
// parameter gradients (float32). Convolutions with a bias cover the bias added to a
// 16-bit output; max pooling with overlapping windows the float32 sums of its backward;
// a batch norm and a sum each followed by a ReLU run fused (containers/Fusion.h: CUDA
// fuses batch norm + ReLU while the switch is on); dropout draws the same masks on both
// sides (one seed, counter-based draws); Linear writes 16-bit outputs and input gradients
// (the bias added to the 16-bit product), and a batch of 600 rows sums its bias gradient
// over more than one chunk of rows; row norms read and write 16-bit data with float32
// statistics; MultiheadAttention takes 16-bit sequences and writes 16-bit outputs (its
// heads and scores float32).
struct LowCase {
    std::string name;
    std::function<ModulePtr()> make;
    Shapes inputs;
    double tolerance = 8; // in units of the 16-bit type's rounding
};

// One LowCase in calcMode(low) on the device against float32 on the CPU fed the same
// rounded inputs, output gradients and weights: output and input gradients in `low`, and
// each of those and the parameter gradients within c.tolerance units of its rounding.
void checkLowCase(const LowCase& c, DType low, Device dev) {
    SCOPED_TRACE(c.name + " in " + str(low));
    const double eps = low == DType::float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double tol = c.tolerance * eps;
    auto rounded = [&](const Tensor& t) { return t.convertedTo(low).convertedTo(DType::float32); };
    auto asFloat = [](const Tensor& t) { return t.convertedTo(DType::float32).toHost(); };
    const auto [cpu, gpu] = roundedPair(c.make, low, dev);
    Tensors xc, xg;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
        const Tensor x = rounded(randomTensor(c.inputs[i], 100 + static_cast<uint64_t>(i)));
        xc.push_back(x);
        xg.push_back(x.convertedTo(low).to(dev));
    }
    const Tensor yc = (*cpu)(xc)[0], yg = (*gpu)(xg)[0];
    if (!selfCheck()) {
        EXPECT_EQ(yg.dtype(), low) << "output";
    }
    EXPECT_LE(relDiff(asFloat(yg), yc), tol) << "output";
    const Tensor dy = rounded(randomTensor(yc.shape(), 200));
    for (const ModulePtr& m : {cpu, gpu}) m->zeroGradParams();
    const Tensors dxc = cpu->backward(Tensors{dy}), dxg = gpu->backward(Tensors{dy.convertedTo(low).to(dev)});
    ASSERT_EQ(dxc.size(), dxg.size());
    double worst = 0;
    for (size_t i = 0; i < dxc.size(); ++i) {
        EXPECT_EQ(dxg[i].dtype(), low) << "input gradient " << i; // each input's own type
        EXPECT_LE(relDiff(asFloat(dxg[i]), dxc[i]), tol) << "input gradient " << i;
        worst = std::max(worst, relDiff(asFloat(dxg[i]), dxc[i]));
    }
    const auto pc = cpu->namedParams(), pg = gpu->namedParams();
    ASSERT_EQ(pc.size(), pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
        EXPECT_LE(relDiff(pg[i].second->grad.toHost(), pc[i].second->grad), tol) << "gradient of " << pc[i].first;
        worst = std::max(worst, relDiff(pg[i].second->grad.toHost(), pc[i].second->grad));
    }
    if (c.tolerance > 8) {
        std::printf("%s in %s: output %.1e, worst gradient %.1e (tolerance %.1e)\n", c.name.c_str(), str(low).c_str(),
                    relDiff(asFloat(yg), yc), worst, tol);
    }
}

TEST(CudaConsistency, SixteenBitActivationsMatchFloat32LayerByLayer) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Carry16Bit carrying(true);
    const std::vector<LowCase> cases = {
        {"Conv2D with bias", make<Conv2D>(8, 16, 3, ConvOptions{.stride = 2, .pad = 1}), {{4, 8, 11, 11}}},
        {"Deconv2D with bias", make<Deconv2D>(8, 4, 3, ConvOptions{.stride = 2, .pad = 1}), {{2, 8, 6, 6}}},
        {"BatchNorm2D", make<BatchNorm2D>(6), {{4, 6, 5, 5}}},
        {"BatchNorm2D with its ReLU fused",
         [] {
             auto seq = std::make_shared<Sequential>();
             seq->append(std::make_shared<BatchNorm2D>(6)).append(std::make_shared<Activation>(ActivationKind::relu));
             return seq;
         },
         {{4, 6, 5, 5}}},
        {"Add with its ReLU fused",
         [] {
             auto a = node(std::make_shared<Identity>(), {}, "a"), b = node(std::make_shared<Identity>(), {}, "b");
             auto sum = node(std::make_shared<Add>(), {a, b}, "sum");
             return std::make_shared<Graph>(
                 std::vector<NodePtr>{a, b},
                 std::vector<NodePtr>{node(std::make_shared<Activation>(ActivationKind::relu), sum, "relu")});
         },
         {{2, 3, 4, 4}, {2, 3, 4, 4}}},
        {"relu", make<Activation>(ActivationKind::relu), {{3, 4, 5, 5}}},
        {"gelu", make<Activation>(ActivationKind::gelu), {{3, 4, 5, 5}}},
        {"MaxPool2D 3x3 stride 2",
         make<MaxPool2D>(std::vector<int64_t>{3, 3}, PoolOptions{.stride = 2, .pad = 1}),
         {{2, 3, 9, 9}}},
        {"AvgPool2D", make<AvgPool2D>(std::vector<int64_t>{2, 2}), {{2, 3, 8, 8}}},
        {"Add", make<Add>(), {{2, 3, 4, 4}, {2, 3, 4, 4}}},
        {"Add with coefficients", make<Add>(std::vector<float>{0.5f, -2.0f}), {{2, 3, 4, 4}, {2, 3, 4, 4}}},
        {"Dropout", make<Dropout>(DropoutOptions{.p = 0.3f, .seed = 5}), {{4, 6, 5, 5}}},
        {"DepthConcat of one spatial size", make<DepthConcat>(), {{2, 2, 4, 4}, {2, 3, 4, 4}}},
        {"DepthConcat that pads", make<DepthConcat>(), {{2, 2, 5, 3}, {2, 3, 4, 6}}},
        {"LayerNorm", make<LayerNorm>(std::vector<int64_t>{24}), {{4, 5, 24}}},
        {"RMSNorm", make<RMSNorm>(std::vector<int64_t>{3, 8}), {{5, 3, 8}}},
        {"GroupNorm", make<GroupNorm>(2, 6), {{3, 6, 5, 4}}},
        {"MultiheadAttention", make<MultiheadAttention>(16, 4), {{3, 7, 16}}},
        {"Linear", make<Linear>(40, 24), {{16, 40}}},
        {"Linear over 3-D, no bias", make<Linear>(24, 12, LinearOptions{.useBias = false}), {{2, 5, 24}}},
        {"Flatten, then Linear",
         [] {
             auto seq = std::make_shared<Sequential>();
             seq->append(std::make_shared<Flatten>()).append(std::make_shared<Linear>(48, 10));
             return seq;
         },
         {{600, 3, 4, 4}}},
    };
    for (DType low : {DType::float16, DType::bfloat16}) {
        if (selfCheck() && low == DType::float16) continue;
        for (const LowCase& c : cases) checkLowCase(c, low, dev);
    }
}

// While it lives, CUDA activations are channels-last between 2-D convolutions, batch
// norm, pooling and sums (setCudaChannelsLast).
struct ChannelsLast {
    explicit ChannelsLast(bool on) : before(cudaChannelsLast()) { setCudaChannelsLast(on); }
    ~ChannelsLast() { setCudaChannelsLast(before); }
    const bool before;
    ChannelsLast(const ChannelsLast&) = delete;
    ChannelsLast& operator=(const ChannelsLast&) = delete;
};

// conv (bias) -> bn -> relu -> max pool 3x3 stride 2 -> grouped conv -> bn -> (+ the pool's
// output) -> relu -> avg pool 2x2 -> global avg pool -> flatten -> linear: every op that
// keeps channels-last, with a sum of two channels-last values, ending in a plain layer.
std::shared_ptr<Graph> channelsLastNet() {
    auto relu = [] { return std::make_shared<Activation>(ActivationKind::relu); };
    auto in = node(std::make_shared<Identity>(), {}, "in");
    auto c1 = node(std::make_shared<Conv2D>(3, 8, 3, ConvOptions{.pad = {1}}), in, "c1");
    auto b1 = node(std::make_shared<BatchNorm2D>(8), c1, "b1");
    auto r1 = node(relu(), b1, "r1");
    auto mp =
        node(std::make_shared<MaxPool2D>(std::vector<int64_t>{3, 3}, PoolOptions{.stride = 2, .pad = 1}), r1, "mp");
    auto c2 = node(std::make_shared<Conv2D>(8, 8, 3, ConvOptions{.pad = {1}, .groups = 2, .useBias = false}), mp, "c2");
    auto b2 = node(std::make_shared<BatchNorm2D>(8), c2, "b2");
    auto sum = node(std::make_shared<Add>(), {b2, mp}, "sum");
    auto r2 = node(relu(), sum, "r2");
    auto ap = node(std::make_shared<AvgPool2D>(std::vector<int64_t>{2, 2}), r2, "ap");
    auto gp = node(std::make_shared<GlobalAvgPool>(), ap, "gp");
    auto fl = node(std::make_shared<Flatten>(), gp, "fl");
    auto fc = node(std::make_shared<Linear>(8, 5), fl, "fc");
    return std::make_shared<Graph>(std::vector<NodePtr>{in}, std::vector<NodePtr>{fc});
}

// With channels-last on (setCudaChannelsLast) and 16-bit activations carried,
// convolutions (with a bias, grouped, transposed, strided), batch norm and its fused ReLU,
// max pooling with overlapping windows, average and global pooling, and a sum with its
// fused ReLU match float32 on the CPU fed the same rounded operands, in float16 and
// bfloat16, as the layers one by one do above (the network within 32 units of rounding:
// each of its layers rounds what it writes). On a GPU the layers from the first
// convolution to the global pooling write channelsLast, and the flatten after it takes a
// plain copy; in float32 the same network stays plain (channels-last is for carried 16-bit
// types only).
TEST(CudaConsistency, ChannelsLastMatchesTheCpu) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Carry16Bit carrying(true);
    const ChannelsLast last(true);
    const std::vector<LowCase> cases = {
        {"conv, batch norm, pooling and a sum in channels-last",
         [] { return ModulePtr(channelsLastNet()); },
         {{4, 3, 12, 12}},
         32},
        {"Conv2D stride 2 with bias", make<Conv2D>(8, 16, 3, ConvOptions{.stride = {2}, .pad = {1}}), {{4, 8, 11, 11}}},
        {"Deconv2D stride 2 with bias",
         make<Deconv2D>(8, 4, 3, ConvOptions{.stride = {2}, .pad = {1}}),
         {{2, 8, 6, 6}}},
        {"Conv1D (stays plain)", make<Conv1D>(4, 8, 5, ConvOptions{.pad = {2}}), {{3, 4, 20}}},
    };
    for (DType low : {DType::float16, DType::bfloat16}) {
        if (selfCheck() && low == DType::float16) continue;
        for (const LowCase& c : cases) checkLowCase(c, low, dev);
    }
    if (selfCheck()) return; // the CPU picks its own layouts
    for (DType type : {DType::bfloat16, DType::float32}) {
        SCOPED_TRACE(str(type));
        manualSeed(11);
        const std::shared_ptr<Graph> net = channelsLastNet();
        net->to(dev);
        if (type != DType::float32) net->calcMode(type);
        (*net)(randomTensor({4, 3, 12, 12}, 100).to(dev));
        const Layout want = type == DType::float32 ? Layout::plain : Layout::channelsLast;
        for (const char* name : {"c1", "b1", "r1", "mp", "c2", "b2", "sum", "r2", "ap", "gp"}) {
            EXPECT_EQ(net->getNodeByName(name).outputs()[0].layout(), want) << name;
        }
        EXPECT_EQ(net->getNodeByName("fc").outputs()[0].layout(), Layout::plain);
    }
}

// A batch norm that alone feeds a sum, with a ReLU after it, on 16-bit channels-last
// tensors (both switches on): the sum runs the normalisation, the addition and the ReLU in
// one call (containers/Fusion.h; on CUDA cuDNN's fused batch norm + add + ReLU where it
// takes them, else the normalisation and the sum apart). Output, input gradients,
// parameter gradients and running statistics match float32 on the CPU fed the same
// rounded operands, as the layers above do.
TEST(CudaConsistency, BatchNormAddReluOnSixteenBitChannelsLastMatchesTheCpu) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Carry16Bit carrying(true);
    const ChannelsLast last(true);
    auto make = [] {
        auto a = node(std::make_shared<Identity>(), {}, "a"), b = node(std::make_shared<Identity>(), {}, "b");
        auto bn = node(std::make_shared<BatchNorm2D>(8), a, "bn");
        auto sum = node(std::make_shared<Add>(), {bn, b}, "sum");
        auto out = node(std::make_shared<Activation>(ActivationKind::relu), sum, "relu");
        return ModulePtr(std::make_shared<Graph>(std::vector<NodePtr>{a, b}, std::vector<NodePtr>{out}));
    };
    for (DType low : {DType::float16, DType::bfloat16}) {
        if (selfCheck() && low == DType::float16) continue;
        SCOPED_TRACE(str(low));
        const double tol = 8 * (low == DType::float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8));
        auto rounded = [&](const Tensor& t) { return t.convertedTo(low).convertedTo(DType::float32); };
        auto asFloat = [](const Tensor& t) { return t.convertedTo(DType::float32).toHost(); };
        const auto [cpu, gpu] = roundedPair(make, low, dev);
        for (const ModulePtr& m : {cpu, gpu}) { // a scale and shift that make the ReLU cut
            for (const auto& [name, v] : m->namedParams()) {
                const bool scale = name.find("scale") != std::string::npos;
                v->data.copyFrom(randomTensor(v->data.shape(), scale ? 5 : 6, scale ? 0.5f : -0.5f, scale ? 1.5f : 0.5f)
                                     .to(v->data.device()));
            }
        }
        const Tensor x = rounded(randomTensor({4, 8, 6, 6}, 101)), z = rounded(randomTensor({4, 8, 6, 6}, 102));
        Tensor xg = x.convertedTo(low).to(dev), zg = z.convertedTo(low).to(dev);
        if (!selfCheck()) xg = xg.toLayout(Layout::channelsLast); // as a channels-last convolution writes it
        const Tensor yc = (*cpu)(Tensors{x, z})[0], yg = (*gpu)(Tensors{xg, zg})[0];
        const auto& sum = dynamic_cast<const Add&>(dynamic_cast<Graph&>(*gpu).getNodeByName("sum").module());
        EXPECT_TRUE(sum.normalisedInSum());
        if (!selfCheck()) {
            EXPECT_EQ(yg.dtype(), low);
        }
        EXPECT_LE(relDiff(asFloat(yg), yc), tol) << "output";
        const std::vector<float> yv = yc.toVector<float>();
        EXPECT_GT(std::count(yv.begin(), yv.end(), 0.0f), 20); // the ReLU cut
        const Tensor dy = rounded(randomTensor(yc.shape(), 200));
        for (const ModulePtr& m : {cpu, gpu}) m->zeroGradParams();
        const Tensors dxc = cpu->backward(Tensors{dy}), dxg = gpu->backward(Tensors{dy.convertedTo(low).to(dev)});
        ASSERT_EQ(dxg.size(), 2u);
        for (size_t i = 0; i < 2; ++i) EXPECT_LE(relDiff(asFloat(dxg[i]), dxc[i]), tol) << "input gradient " << i;
        const auto pc = cpu->namedParams(), pg = gpu->namedParams();
        ASSERT_EQ(pc.size(), pg.size());
        for (size_t i = 0; i < pc.size(); ++i) {
            EXPECT_LE(relDiff(pg[i].second->grad.toHost(), pc[i].second->grad), tol) << "gradient of " << pc[i].first;
        }
        for (const char* attr : {"mean", "var"}) {
            const Module& bc = dynamic_cast<Graph&>(*cpu).getNodeByName("bn").module();
            const Module& bg = dynamic_cast<Graph&>(*gpu).getNodeByName("bn").module();
            EXPECT_LE(relDiff(bg.getAttr(attr).toHost(), bc.getAttr(attr)), tol) << attr;
        }
    }
}

// One training step of a seeded ResNet-18 (its ImageNet stem: max pooling too) in
// calcMode(low): the output and every parameter gradient, and the dtypes its first batch
// norm and first sum wrote, and the layout of the first batch norm's output.
struct StepResult {
    Tensor y;
    std::vector<Tensor> grads;
    DType normOut = DType::int32, addOut = DType::int32;
    Layout normLayout = Layout::plain;
};

// The first leaf (depth first, in order) that is a T, in `m` or below.
template <class T> const Module* firstOf(const Module& m) {
    if (dynamic_cast<const T*>(&m)) return &m;
    for (const auto& [name, child] : m.namedChildren()) {
        if (const Module* found = firstOf<T>(*child)) return found;
    }
    return nullptr;
}

DType outputDType(const Module* m) { return m && !m->dataList().empty() ? m->dataList()[0].dtype() : DType::int32; }

StepResult resnetStep(DType low, const Tensor& x, const Tensor& dy, Device dev, bool carry, bool channelsLast = false) {
    const Carry16Bit carrying(carry);
    const ChannelsLast last(channelsLast);
    manualSeed(21);
    const std::shared_ptr<Graph> net = loadResNet(18, ResNetStem::imagenet, 10);
    net->to(dev);
    if (low != DType::float32) net->calcMode(low);
    net->zeroGradParams();
    StepResult r;
    r.y = (*net)(x.to(dev)).convertedTo(DType::float32).toHost();
    r.normOut = outputDType(firstOf<BatchNormND>(*net));
    r.addOut = outputDType(firstOf<Add>(*net));
    if (const Module* bn = firstOf<BatchNormND>(*net); bn && !bn->dataList().empty()) {
        r.normLayout = bn->dataList()[0].layout();
    }
    net->backward(dy.to(dev));
    for (const auto& [name, v] : net->namedParams()) r.grads.push_back(v->grad.toHost());
    return r;
}

// With 16-bit activations carried (setCuda16BitActivations), a ResNet step in
// calcMode(float16) and calcMode(bfloat16) writes its batch norms' and sums' outputs in
// the 16-bit type, and its output stays as close to float32's as the same step's with
// float32 activations between layers (within three times its distance: both round every
// convolution; carrying also rounds what batch norm, ReLU, pooling and the sums write).
// Its parameter gradients are only checked to be finite and within 100% of float32's:
// batch norm's backward subtracts the batch mean of a 16-bit output gradient, and that
// cancellation leaves them 35% from float32's in the CPU's bfloat16 step here (which
// carries bfloat16 too); the layer-by-layer test above checks each layer closely. The
// memory plan of the carrying step is smaller and still matches the device. (Under
// TESSERA_CONSISTENCY_DEVICE=cpu only bfloat16 runs, and the CPU carries it either way.)
TEST(CudaConsistency, SixteenBitActivationsStayCloseToFloat32) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Tensor x = randomTensor({8, 3, 64, 64}, 31);
    const Tensor dy = randomTensor({8, 10}, 32);
    const StepResult exact = resnetStep(DType::float32, x, dy, dev, false);
    for (DType low : {DType::float16, DType::bfloat16}) {
        if (selfCheck() && low == DType::float16) continue;
        SCOPED_TRACE(str(low));
        const StepResult converted = resnetStep(low, x, dy, dev, false);
        const StepResult carried = resnetStep(low, x, dy, dev, true);
        // (The CPU's step carries bfloat16 either way where it has bfloat16 kernels, and
        // writes float32 from its convolutions where it has not: no dtype to expect there.)
        if (!selfCheck()) {
            EXPECT_EQ(carried.normOut, low);
            EXPECT_EQ(carried.addOut, low);
            EXPECT_EQ(converted.normOut, DType::float32);
            EXPECT_EQ(converted.addOut, DType::float32);
        }
        const double eps = low == DType::float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
        const double yConverted = relDiff(converted.y, exact.y), yCarried = relDiff(carried.y, exact.y);
        EXPECT_LE(yCarried, 3 * yConverted + eps) << "output";
        ASSERT_EQ(carried.grads.size(), exact.grads.size());
        // ||g - g32|| / ||g32|| over all parameter gradients together (one tiny gradient's
        // relative error says little).
        auto distance = [&](const StepResult& r) {
            double diff = 0, norm = 0;
            for (size_t i = 0; i < exact.grads.size(); ++i) {
                const std::vector<float> a = r.grads[i].toVector<float>(), b = exact.grads[i].toVector<float>();
                for (size_t j = 0; j < a.size(); ++j) {
                    diff += (double(a[j]) - b[j]) * (double(a[j]) - b[j]);
                    norm += double(b[j]) * b[j];
                }
            }
            return std::sqrt(diff / norm);
        };
        const double gConverted = distance(converted), gCarried = distance(carried);
        EXPECT_LT(gCarried, 1.0) << "parameter gradients"; // NaN fails too
        std::printf("ResNet-18 step in %s, against float32: output %.1e converted, %.1e carried; parameter "
                    "gradients %.1e converted, %.1e carried\n",
                    str(low).c_str(), yConverted, yCarried, gConverted, gCarried);

        manualSeed(21);
        const std::shared_ptr<Graph> net = loadResNet(18, ResNetStem::imagenet, 10);
        net->to(dev);
        net->calcMode(low);
        const ChannelsLast plain(false);
        const MemoryPlan off = [&] {
            const Carry16Bit converting(false);
            return planMemory(*net, {x.shape()}, dev);
        }();
        const Carry16Bit carrying(true);
        const MemoryPlan on = planMemory(*net, {x.shape()}, dev);
        const testing::MeasuredPeaks m = testing::measurePeaks(*net, x.shape(), dev);
        EXPECT_TRUE(testing::within10Percent("training step", on.training, m.training));
        EXPECT_TRUE(testing::within10Percent("inference", on.inference, m.inference));
        if (!selfCheck()) {
            EXPECT_LT(on.training, off.training * 0.8);
        }
        std::printf("ResNet-18 planned step in %s: %.1f MiB with float32 activations, %.1f MiB carried (measured "
                    "%.1f MiB)\n",
                    str(low).c_str(), off.training / 1048576.0, on.training / 1048576.0, m.training / 1048576.0);
    }
}

// ResNet-18 steps with channels-last on (setCudaChannelsLast) against the same steps in
// plain layouts on the device: in float32 the switch leaves the step plain (outputs within
// 2e-3, parameter gradients within 3% by norm: cuDNN may pick other algorithms, the bounds
// of ResNet's case above); in float16 and bfloat16 with 16-bit activations carried, the
// channels-last step stays as close to float32's as the plain one (within three times its
// distance) and writes its batch norms' outputs channels-last in the 16-bit type. The
// memory plan of a bfloat16 channels-last step matches the device.
TEST(CudaConsistency, ChannelsLastResNetStepsMatchPlainOnes) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Tensor x = randomTensor({8, 3, 64, 64}, 31);
    const Tensor dy = randomTensor({8, 10}, 32);
    auto gradientDistance = [](const StepResult& a, const StepResult& b) {
        double worst = 0;
        for (size_t i = 0; i < b.grads.size(); ++i) worst = std::max(worst, normDiff(a.grads[i], b.grads[i]));
        return worst;
    };
    const StepResult plain32 = resnetStep(DType::float32, x, dy, dev, false, false);
    const StepResult last32 = resnetStep(DType::float32, x, dy, dev, false, true);
    ASSERT_EQ(last32.grads.size(), plain32.grads.size());
    EXPECT_LE(relDiff(last32.y, plain32.y), 2e-3) << "float32 output";
    EXPECT_LE(gradientDistance(last32, plain32), 3e-2) << "float32 parameter gradients";
    if (!selfCheck()) {
        EXPECT_EQ(last32.normLayout, Layout::plain);
    }
    std::printf("ResNet-18 step in float32, channels-last against plain: output %.1e, parameter gradients %.1e\n",
                relDiff(last32.y, plain32.y), gradientDistance(last32, plain32));
    for (DType low : {DType::float16, DType::bfloat16}) {
        if (selfCheck() && low == DType::float16) continue;
        SCOPED_TRACE(str(low));
        const StepResult plain = resnetStep(low, x, dy, dev, true, false);
        const StepResult last = resnetStep(low, x, dy, dev, true, true);
        if (!selfCheck()) {
            EXPECT_EQ(last.normOut, low);
            EXPECT_EQ(last.normLayout, Layout::channelsLast);
        }
        const double eps = low == DType::float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
        const double yPlain = relDiff(plain.y, plain32.y), yLast = relDiff(last.y, plain32.y);
        EXPECT_LE(yLast, 3 * yPlain + eps) << "output";
        std::printf("ResNet-18 step in %s carried, against float32: output %.1e plain, %.1e channels-last\n",
                    str(low).c_str(), yPlain, yLast);
    }
    const Carry16Bit carrying(true);
    const ChannelsLast last(true);
    manualSeed(21);
    const std::shared_ptr<Graph> net = loadResNet(18, ResNetStem::imagenet, 10);
    net->to(dev);
    net->calcMode(DType::bfloat16);
    const MemoryPlan plan = planMemory(*net, {x.shape()}, dev);
    const testing::MeasuredPeaks m = testing::measurePeaks(*net, x.shape(), dev);
    EXPECT_TRUE(testing::within10Percent("training step", plan.training, m.training));
    EXPECT_TRUE(testing::within10Percent("inference", plan.inference, m.inference));
}

// A small convolutional network learns on the device in float16 (with dynamic loss
// scaling, as float16 training needs) and in bfloat16: the loss drops fourfold and the
// training-set error falls under 5% (the class is which quadrant holds the brightest spot).
TEST(CudaConsistency, Float16AndBfloat16NetworksLearn) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    manualSeed(8);
    const auto [xHost, yHost] = testing::quadrantTask(256);
    const Tensor x = xHost.to(dev), y = yHost.to(dev);
    for (const auto& [low, carry] : {std::pair{DType::float16, false}, std::pair{DType::bfloat16, false},
                                     std::pair{DType::float16, true}, std::pair{DType::bfloat16, true}}) {
        if (selfCheck() && low == DType::float16) continue;
        SCOPED_TRACE(str(low) + (carry ? ", 16-bit activations carried" : ""));
        const Carry16Bit carrying(carry);
        manualSeed(8);
        const ModulePtr model = testing::quadrantNet();
        Module& net = *model;
        net.to(dev);
        net.calcMode(low);
        Adam adam(1e-2f);
        adam.setupOn(net);
        if (low == DType::float16) adam.enableLossScaling();
        CrossEntropy ce;
        double first = 0, last = 0;
        int applied = 0;
        for (int step = 0; step < 60; ++step) {
            adam.zeroGradParams();
            const CostResult r = ce(net(x), y);
            adam.scaleLossGradients(r.grad);
            net.backward(r.grad[0]);
            applied += adam.update() ? 1 : 0;
            if (step == 0) first = r.error;
            last = r.error;
        }
        net.evalMode();
        const double error = ce.validate(net(x), y);
        std::printf("%s%s: loss %.3f -> %.3f, error %.3f, %d of 60 steps applied, loss scale %g\n", str(low).c_str(),
                    carry ? " carried" : "", first, last, error, applied, adam.lossScale());
        EXPECT_LT(last, first / 4);
        EXPECT_LT(error, 0.05);
        EXPECT_GE(applied, 40);
    }
}

// Uploads from page-locked memory run on a copy stream while the compute stream is busy:
// each arrives before the kernels that read it, no upload buffer is overwritten while an
// earlier reader is still queued, and no host block is handed out again while a copy
// still reads it (each would change the sums below).
TEST(CudaConsistency, UploadsFromPageLockedMemoryArriveInOrder) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    Backend& be = backendFor(dev);
    const int64_t n = selfCheck() ? 128 : 2048; // on a GPU, a product that outlasts each copy
    const Tensor a = Tensor::randn({n, n}).to(dev);
    const Tensor c = Tensor::zeros({n, n}, DType::float32, dev);
    const Tensor sum = Tensor::zeros({4096}, DType::float32, dev);
    std::vector<std::pair<int, Tensor>> kept;
    const int rounds = 40;
    auto value = [](int i, int64_t j) { return static_cast<float>(i) + static_cast<float>(j % 64) / 64.0f; };
    for (int i = 0; i < rounds; ++i) {
        Tensor host = pinnedEmpty({4096});
        EXPECT_EQ(isPinned(host), !selfCheck());
        float* p = host.data<float>();
        for (int64_t j = 0; j < 4096; ++j) p[j] = value(i, j);
        const Tensor d = be.upload(host);
        host = Tensor(); // freed while its copy may be queued
        EXPECT_EQ(d.device(), dev);
        be.gemm(false, false, 1.0f, a, a, 0.0f, c, DType::float32); // keeps the compute stream busy
        be.axpby(1.0f, d, 1.0f, sum);                               // reads the upload
        if (i % 4 == 0) kept.emplace_back(i, d);                    // the others' buffers are reused
    }
    const std::vector<float> got = sum.toVector<float>();
    for (int64_t j = 0; j < 4096; ++j) {
        double want = 0;
        for (int i = 0; i < rounds; ++i) want += value(i, j);
        ASSERT_NEAR(got[static_cast<size_t>(j)], want, 1e-3) << "element " << j;
    }
    for (const auto& [i, d] : kept) {
        const std::vector<float> v = d.toVector<float>();
        for (int64_t j = 0; j < 4096; ++j) ASSERT_EQ(v[static_cast<size_t>(j)], value(i, j)) << "upload " << i;
    }
    // From ordinary memory, upload is an ordinary copy.
    const Tensor ordinary = Tensor::fromVector({3}, std::vector<float>{1, 2, 3});
    EXPECT_FALSE(isPinned(ordinary));
    EXPECT_EQ(be.upload(ordinary).toVector<float>(), (std::vector<float>{1, 2, 3}));
}

// Two epochs of LeNet through Trainer from page-locked batches (uploaded on the copy
// stream) and from ordinary ones (copied on the compute stream) end with the same weights,
// bit for bit once cuDNN's algorithms are the deterministic ones (the heuristic's first
// choices may sum with atomics: 1e-3 apart after 20 steps on an H200).
TEST(CudaConsistency, TrainingFromPageLockedBatchesEqualsOrdinaryBatches) {
    REQUIRE_DEVICE();
    testing::CudaDeterministic deterministic;
    const Device dev = testDevice();
    manualSeed(4);
    const Tensor images = Tensor::rand({320, 1, 28, 28});
    const Tensor labels = Tensor::randint({320}, 10);
    auto run = [&](bool pinned) {
        manualSeed(3);
        ModulePtr net = loadLeNet();
        net->to(dev);
        MomentumSGD sgd(0.05f, 0.9f);
        sgd.setupOn(*net, true);
        CrossEntropy cost;
        Trainer trainer(*net, cost, sgd, {.batchsize = 32, .progress = false, .device = dev});
        Loader loader(tensorDataset(images, labels, 10), {},
                      {.batchsize = 32, .seed = 5, .workers = 2, .pinned = pinned});
        for (int epoch = 0; epoch < 2; ++epoch) trainer.train(loader);
        return sgd.globalParams().toVector<float>();
    };
    const std::vector<float> pinned = run(true), ordinary = run(false);
    EXPECT_EQ(pinned, ordinary);
}

TEST(CudaConsistency, GradientCheckOnTheDevice) {
    REQUIRE_DEVICE();
    using testing::checkGradients;
    using testing::GradCheckOptions;
    const Device dev = testDevice();
    struct GradCase {
        std::string name;
        std::function<ModulePtr()> make;
        Shape input;
        GradCheckOptions opts;
        float lo = -1.0f, hi = 1.0f;
    };
    GradCheckOptions conv;
    conv.maxElements = 24;
    GradCheckOptions pool;
    pool.maxElements = 32;
    pool.eps = 1e-3f;
    GradCheckOptions bn;
    bn.atol = 5e-3f;
    GradCheckOptions relu;
    relu.kink = 0.0f;
    const std::vector<GradCase> cases = {
        {"Linear", make<Linear>(5, 4), {3, 5}, {}},
        {"Conv2D", make<Conv2D>(2, 4, 3, ConvOptions{.stride = {2}, .pad = {1}}), {2, 2, 7, 6}, conv},
        {"Conv2D grouped", make<Conv2D>(4, 4, 3, ConvOptions{.pad = {1}, .groups = 2}), {1, 4, 5, 5}, conv},
        {"Deconv2D", make<Deconv2D>(3, 2, 3, ConvOptions{.stride = {2}}), {1, 3, 4, 4}, conv},
        {"BatchNorm2D", make<BatchNorm2D>(3), {2, 3, 4, 4}, bn},
        {"InstanceNorm2D", make<InstanceNorm2D>(3), {2, 3, 3, 4}, {}, -2.0f, 2.0f},
        {"LayerNorm", make<LayerNorm>(std::vector<int64_t>{6}), {4, 6}, {}, -2.0f, 2.0f},
        {"GroupNorm", make<GroupNorm>(2, 4), {2, 4, 3, 3}, {}, -2.0f, 2.0f},
        {"MaxPool2D", make<MaxPool2D>(2), {2, 2, 6, 6}, pool, -4.0f, 4.0f},
        {"AvgPool2D", make<AvgPool2D>(3, PoolOptions{.stride = {2}, .pad = {1}}), {2, 2, 7, 7}, pool},
        {"CrossMapLRN",
         [] { return ModulePtr(std::make_shared<CrossMapLRN>(LRNOptions{.N = 3, .alpha = 0.5f})); },
         {2, 5, 4, 4},
         {}},
        {"SoftMax", make<SoftMax>(), {3, 5}, {}, -2.0f, 2.0f},
        {"LogSoftMax", make<LogSoftMax>(), {3, 5}, {}, -2.0f, 2.0f},
        {"Activation tanh", make<Activation>(ActivationKind::tanh), {3, 4}, {}},
        {"Activation relu", make<Activation>(ActivationKind::relu), {3, 4}, relu},
        {"Gelu", make<Gelu>(), {3, 4}, {}},
    };
    for (const GradCase& c : cases) {
        SCOPED_TRACE(c.name);
        manualSeed(5);
        ModulePtr m = c.make();
        m->to(dev);
        const Tensor x = randomTensor(c.input, 21, c.lo, c.hi).to(dev);
        EXPECT_TRUE(checkGradients(*m, {x}, c.opts));
        for (const auto& [name, var] : m->namedParams()) EXPECT_EQ(var->data.device(), dev) << name;
    }
}

// The static memory plan on the device: planned peaks within 10% of the device
// allocator's (layouts are plain there; max pooling keeps int32 indices).
TEST(CudaConsistency, MemoryPlanMatchesTheDevice) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    struct PlanCase {
        const char* name;
        ModulePtr net;
        Shape input;
    };
    manualSeed(1);
    const PlanCase cases[] = {
        {"LeNet", loadLeNet(), {64, 1, 28, 28}},
        {"ResNet-18", loadResNet(18, ResNetStem::cifar, 10), {8, 3, 32, 32}},
        {"U-Net", loadZooModel("unet"), {1, 1, 64, 64}},
    };
    for (const PlanCase& c : cases) {
        SCOPED_TRACE(c.name);
        const MemoryPlan plan = planMemory(*c.net, {c.input}, dev);
        const testing::MeasuredPeaks m = testing::measurePeaks(*c.net, c.input, dev);
        EXPECT_TRUE(testing::within10Percent("inference", plan.inference, m.inference));
        EXPECT_TRUE(testing::within10Percent("train forward", plan.trainForward, m.trainForward));
        EXPECT_TRUE(testing::within10Percent("training step", plan.training, m.training));
    }
}

// cuDNN's fused attention (setCudaFusedAttention) in float16 and bfloat16:
// ScaledDotProductAttention's and MultiheadAttention's outputs, input gradients and
// parameter gradients on the device against float32 on the CPU, the attention unmasked
// (what fuses). Where the cuDNN loaded refuses the problem the test skips, saying so.
// CPU against CPU (no fused attention there) it checks the harness in bfloat16.
TEST(CudaConsistency, FusedAttentionMatchesTheCpu) {
    REQUIRE_DEVICE();
    struct FusedOn {
        const bool before = cudaFusedAttention();
        FusedOn() { setCudaFusedAttention(true); }
        ~FusedOn() { setCudaFusedAttention(before); }
    } on;
    const Device dev = testDevice();
    Backend& be = backendFor(dev);
    struct AttentionCase {
        std::string name;
        std::function<ModulePtr()> make;
        Shapes inputs;
        Shapes heads; // the kernel's q, k, v as [heads, T, d]
    };
    const AttentionCase cases[] = {
        {"ScaledDotProductAttention",
         make<ScaledDotProductAttention>(),
         {{2, 4, 50, 64}, {2, 4, 70, 64}, {2, 4, 70, 64}},
         {{8, 50, 64}, {8, 70, 64}, {8, 70, 64}}},
        {"MultiheadAttention",
         make<MultiheadAttention>(256, 4),
         {{3, 40, 256}},
         {{12, 40, 64}, {12, 40, 64}, {12, 40, 64}}},
    };
    for (DType type : {DType::float16, DType::bfloat16}) {
        for (const AttentionCase& c : cases) {
            SCOPED_TRACE(c.name + " " + str(type));
            if (selfCheck() && type == DType::float16) continue;
            if (!selfCheck() && !be.fusesAttention({}, c.heads[0], c.heads[1], c.heads[2], type, false)) {
                GTEST_SKIP() << "cuDNN refused the fused attention of " << c.name << " in " << str(type)
                             << " here (its reason is on stderr)";
            }
            if (!selfCheck()) {
                std::printf("%s %s: fused forward, %s backward\n", c.name.c_str(), str(type).c_str(),
                            be.fusesAttention({}, c.heads[0], c.heads[1], c.heads[2], type, true) ? "fused"
                                                                                                  : "unfused");
            }
            manualSeed(5);
            ModulePtr cpu = c.make();
            manualSeed(5);
            ModulePtr gpu = c.make();
            gpu->to(dev);
            gpu->calcMode(type);
            Tensors xc, xg, gc, gg;
            for (size_t i = 0; i < c.inputs.size(); ++i) {
                xc.push_back(randomTensor(c.inputs[i], 60 + i));
                xg.push_back(xc.back().to(dev));
            }
            const Tensor yc = (*cpu)(xc)[0], yg = (*gpu)(xg)[0];
            const double tol = type == DType::bfloat16 ? 3e-2 : 1e-2;
            EXPECT_LE(relDiff(yg.to(Device::cpu()).plain().astype(DType::float32), yc), tol) << "output";
            gc.push_back(randomTensor(yc.shape(), 70));
            gg.push_back(gc.back().to(dev));
            const Tensors dxc = cpu->backward(gc), dxg = gpu->backward(gg);
            ASSERT_EQ(dxc.size(), dxg.size());
            for (size_t i = 0; i < dxc.size(); ++i) {
                EXPECT_LE(relDiff(dxg[i].to(Device::cpu()).plain().astype(DType::float32), dxc[i]), tol)
                    << "input gradient " << i;
            }
            const auto pc = cpu->namedParams(), pg = gpu->namedParams();
            for (size_t i = 0; i < pc.size(); ++i) {
                EXPECT_LE(relDiff(pg[i].second->grad.to(Device::cpu()), pc[i].second->grad), tol)
                    << "gradient of " << pc[i].first;
            }
        }
    }
}

// MaxUnpool2D needs its MaxPool2D to have run first, so it gets a test of its own.
TEST(CudaConsistency, MaxUnpool2D) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    auto poolC = std::make_shared<MaxPool2D>(2), poolG = std::make_shared<MaxPool2D>(2);
    MaxUnpool2D unpoolC(poolC), unpoolG(poolG);
    const Tensor x = randomTensor({2, 3, 6, 6}, 1);
    const Tensor yc = unpoolC((*poolC)(x));
    const Tensor yg = unpoolG((*poolG)(x.to(dev)));
    EXPECT_LE(relDiff(yg, yc), 1e-6);
    const Tensor g = randomTensor(yc.shape(), 2);
    EXPECT_LE(relDiff(unpoolG.backward(g.to(dev)), unpoolC.backward(g)), 1e-6);
}

// A padded batch with lengths on both devices (the groups of equal length run apart).
TEST(CudaConsistency, RnnWithLengths) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    for (RnnMode mode : {RnnMode::lstm, RnnMode::gru}) {
        SCOPED_TRACE(str(mode));
        const RNNOptions o{.layers = 2,
                           .mode = mode,
                           .bidirectional = true,
                           .getSequences = true,
                           .finalStates = true,
                           .lengths = true};
        manualSeed(4);
        RNN cpu(3, 5, o);
        manualSeed(4);
        RNN gpu(3, 5, o);
        gpu.to(dev);
        const Tensor x = randomTensor({6, 4, 3}, 1);
        const Tensor lengths = Tensor::fromVector({4}, std::vector<int32_t>{6, 2, 6, 4});
        const Tensors yc = cpu({x, lengths}), yg = gpu({x.to(dev), lengths.to(dev)});
        ASSERT_EQ(yc.size(), yg.size());
        for (size_t i = 0; i < yc.size(); ++i) EXPECT_LE(relDiff(yg[i], yc[i]), 1e-4) << "output " << i;
        Tensors gc, gg;
        for (size_t i = 0; i < yc.size(); ++i) {
            gc.push_back(randomTensor(yc[i].shape(), 10 + i));
            gg.push_back(gc.back().to(dev));
        }
        EXPECT_LE(relDiff(gpu.backward(gg)[0], cpu.backward(gc)[0]), 1e-4);
        const auto pc = cpu.namedParams(), pg = gpu.namedParams();
        for (size_t i = 0; i < pc.size(); ++i) {
            EXPECT_LE(relDiff(pg[i].second->grad, pc[i].second->grad), 1e-4) << "gradient of " << pc[i].first;
        }
    }
}

// A GRU that applies the reset before its product has no cuDNN form: a CUDA forward says so.
TEST(CudaConsistency, GruWithResetBeforeProductIsRefusedOnCuda) {
    REQUIRE_DEVICE();
    if (selfCheck()) GTEST_SKIP() << "the CPU runs this GRU (RNN.ReferenceEveryModeDirectionAndLayers)";
    RNN gru(3, 5, {.mode = RnnMode::gru, .linearBeforeReset = false});
    gru.to(testDevice());
    try {
        gru(randomTensor({6, 4, 3}, 1).to(testDevice()));
        ADD_FAILURE() << "a CUDA forward ran";
    } catch (const BackendError& e) {
        EXPECT_NE(std::string(e.what()).find("cuDNN computes only the linear-before-reset GRU; run this layer on "
                                             "the CPU"),
                  std::string::npos)
            << e.what();
    }
}

// CTC on both devices: the error, the gradient (zero past each input), and the same
// clear error for a target longer than its input.
TEST(CudaConsistency, CTC) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const int64_t T = 20, N = 4, V = 7;
    const Tensor scores = randomTensor({T, N, V}, 8, -3.0f, 3.0f);
    const Tensors target{
        Tensor::fromVector({N, 5}, std::vector<int32_t>{1, 2, 2, 3, 6, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 5, 1, 5, 1, 5}),
        Tensor::fromVector({N}, std::vector<int32_t>{5, 3, 0, 5}),
        Tensor::fromVector({N}, std::vector<int32_t>{20, 9, 3, 14})};
    Tensors onDev;
    for (const Tensor& t : target) onDev.push_back(t.to(dev));
    for (bool normalized : {false, true}) {
        SCOPED_TRACE(normalized ? "normalized" : "plain");
        CTC onCpu({.normalized = normalized}), onGpu({.normalized = normalized});
        const CostResult rc = onCpu({scores}, target);
        const CostResult rg = onGpu({scores.to(dev)}, onDev);
        EXPECT_NEAR(rg.error, rc.error, 1e-5 * (1.0 + std::fabs(rc.error)));
        EXPECT_LE(relDiff(rg.grad[0], rc.grad[0]), 1e-5);
        EXPECT_NEAR(onGpu.validate({scores.to(dev)}, onDev), onCpu.validate({scores}, target), 1e-12);
    }
    CTC ctc;
    const Tensors tooLong{Tensor::fromVector({1, 3}, std::vector<int32_t>{1, 1, 2}),
                          Tensor::fromVector({1}, std::vector<int32_t>{3})};
    const std::string msg = testing::errorOf([&] {
        ctc({randomTensor({3, 1, 4}, 1).to(dev)}, {tooLong[0].to(dev), tooLong[1].to(dev)});
    });
    EXPECT_NE(msg.find("longer than the input"), std::string::npos) << msg;
}

// The sum of squares that gradient clipping measures, on both devices.
TEST(CudaConsistency, SumSquares) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Tensor x = randomTensor({1000, 37}, 5);
    const double c = backendOf(x).sumSquares(x), g = backendFor(dev).sumSquares(x.to(dev));
    EXPECT_NEAR(g, c, 1e-6 * c);
    std::vector<float> v = x.toVector<float>();
    v[4242] = std::nanf("");
    EXPECT_TRUE(std::isnan(backendFor(dev).sumSquares(Tensor::fromVector(x.shape(), v).to(dev))));
}

// Attention's batched products (cuBLAS's strided batched GEMM on the device) give what the
// CPU's products give, for every transpose, with alpha and beta, and refuse mismatched shapes.
TEST(CudaConsistency, GemmBatched) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    Backend& be = backendFor(dev);
    const int64_t batch = 6, M = 33, N = 17, K = 40;
    for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb));
        const Tensor A = randomTensor(ta ? Shape{batch, K, M} : Shape{batch, M, K}, 1);
        const Tensor B = randomTensor(tb ? Shape{batch, N, K} : Shape{batch, K, N}, 2);
        const Tensor C0 = randomTensor({batch, M, N}, 3);
        const Tensor want = C0.clone(), got = C0.to(dev);
        backendOf(want).gemmBatched(ta, tb, 0.5f, A, B, 2.0f, want);
        be.gemmBatched(ta, tb, 0.5f, A.to(dev), B.to(dev), 2.0f, got);
        EXPECT_LE(relDiff(got.to(Device::cpu()), want), 1e-5);
        // A block of the batch, as attention passes them: slices of the first dimension.
        const Tensor part = C0.to(dev);
        be.gemmBatched(ta, tb, 0.5f, A.to(dev).slice(2, 5), B.to(dev).slice(2, 5), 2.0f, part.slice(2, 5));
        EXPECT_LE(relDiff(part.slice(2, 5).to(Device::cpu()), want.slice(2, 5).clone()), 1e-5);
        EXPECT_LE(relDiff(part.slice(0, 2).to(Device::cpu()), C0.slice(0, 2).clone()), 0.0);
    }
    EXPECT_THROW(be.gemmBatched(false, false, 1.0f, Tensor::zeros({2, 3, 4}).to(dev), Tensor::zeros({2, 5, 6}).to(dev),
                                0.0f, Tensor::zeros({2, 3, 6}).to(dev)),
                 ShapeError);
}

// Loss scaling's unscale-and-check on both devices: the same scaled values, and an Inf
// or a NaN anywhere is found.
TEST(CudaConsistency, ScaleCheckFinite) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    const Tensor x = randomTensor({1000, 37}, 3);
    const Tensor c = x.clone(), g = x.to(dev);
    EXPECT_TRUE(backendOf(c).scaleCheckFinite(c, 0.125f));
    EXPECT_TRUE(backendOf(g).scaleCheckFinite(g, 0.125f));
    EXPECT_LE(relDiff(g, c), 0.0);
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
        std::vector<float> v = x.toVector<float>();
        v[31337] = bad;
        const Tensor b = Tensor::fromVector(x.shape(), v).to(dev);
        EXPECT_FALSE(backendOf(b).scaleCheckFinite(b, 0.5f));
    }
}

TEST(CudaConsistency, EvalModeUsesRunningStatistics) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    manualSeed(3);
    auto cpu = std::make_shared<BatchNorm2D>(4);
    manualSeed(3);
    auto gpu = std::make_shared<BatchNorm2D>(4);
    gpu->to(dev);
    const Tensor x = randomTensor({3, 4, 5, 5}, 1);
    (*cpu)(x);
    (*gpu)(x.to(dev)); // one training batch updates the running statistics
    cpu->evalMode();
    gpu->evalMode();
    const Tensor x2 = randomTensor({2, 4, 5, 5}, 2);
    EXPECT_LE(relDiff((*gpu)(x2.to(dev)), (*cpu)(x2)), 1e-4);
}

// Inference with packed weights folds each batch norm into the convolution before it
// (containers/Fusion.h): the folded network on the device, in float32 and in both 16-bit
// types with the default switches (16-bit activations, channels-last), matches the
// unfolded float32 one on the CPU, and its convolutions did fold.
TEST(CudaConsistency, FoldedBatchNormInferenceMatchesTheCpu) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    manualSeed(21);
    const std::shared_ptr<Graph> cpu = channelsLastNet();
    manualSeed(21);
    const std::shared_ptr<Graph> gpu = channelsLastNet();
    gpu->to(dev);
    for (int i = 0; i < 2; ++i) { // running statistics away from their defaults
        const Tensor x = randomTensor({4, 3, 12, 12}, 30 + i, -1.0f, 2.0f);
        (*cpu)(x);
        (*gpu)(x.to(dev));
    }
    cpu->evalMode();
    gpu->evalMode();
    gpu->packWeights();
    const Tensor x = randomTensor({4, 3, 12, 12}, 40);
    const Tensor want = (*cpu)(x).plain();
    for (DType type : {DType::float32, DType::float16, DType::bfloat16}) {
        if (selfCheck() && type == DType::float16) continue;
        SCOPED_TRACE(str(type));
        gpu->calcMode(type);
        const Tensor got = (*gpu)(x.to(dev)).to(Device::cpu()).plain().astype(DType::float32);
        EXPECT_TRUE(dynamic_cast<ConvND&>(gpu->getNodeByName("c1").module()).folded());
        EXPECT_TRUE(dynamic_cast<ConvND&>(gpu->getNodeByName("c2").module()).folded());
        EXPECT_LE(relDiff(got, want), type == DType::float32 ? 1e-4 : 3e-2);
    }
    gpu->calcMode(DType::float32);
    gpu->packWeights(false);
}

TEST(CudaConsistency, EveryCost) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    struct CostCase {
        std::string name;
        std::function<std::unique_ptr<Cost>()> make;
        Shape pred;
        Shape target;
        int32_t labels; ///< > 0: int32 targets in [0, labels); < 0: targets +-1
    };
    const std::vector<CostCase> cases = {
        {"CrossEntropy", [] { return std::make_unique<CrossEntropy>(); }, {6, 5}, {6}, 5},
        {"CrossEntropy dense weighted",
         [] {
             return std::make_unique<CrossEntropy>(CrossEntropyOptions{.weights = {1, 2, 0.5f}});
         },
         {2, 3, 4},
         {2, 4},
         3},
        {"CrossEntropy label smoothing",
         [] {
             return std::make_unique<CrossEntropy>(
                 CrossEntropyOptions{.weights = {1, 2, 0.5f}, .labelSmoothing = 0.1f});
         },
         {2, 3, 4},
         {2, 4},
         3},
        {"MSE", [] { return std::make_unique<MSE>(); }, {4, 3}, {4, 3}, 0},
        {"Abs", [] { return std::make_unique<Abs>(); }, {4, 3}, {4, 3}, 0},
        {"SmoothL1", [] { return std::make_unique<SmoothL1>(); }, {4, 3}, {4, 3}, 0},
        {"BCE", [] { return std::make_unique<BCE>(); }, {4, 3}, {4, 3}, 0},
        {"Hinge", [] { return std::make_unique<Hinge>(); }, {4, 3}, {4, 3}, -1},
        {"KLDivergence", [] { return std::make_unique<KLDivergence>(); }, {4, 5}, {4, 5}, 0},
        {"CrossEntropy probabilities",
         [] { return std::make_unique<CrossEntropy>(CrossEntropyOptions{.labelSmoothing = 0.1f}); },
         {4, 5},
         {4, 5},
         0},
        {"SVM", [] { return std::make_unique<SVM>(); }, {5, 4}, {5}, 4},
        {"SVM l2", [] { return std::make_unique<SVM>(true); }, {5, 4}, {5}, 4},
    };
    for (const CostCase& c : cases) {
        SCOPED_TRACE(c.name);
        const Tensor pred = randomTensor(c.pred, 5, -2.0f, 2.0f);
        Tensor target;
        if (c.labels > 0) {
            target = intTensor(c.target, c.labels, 6);
        } else if (c.labels < 0) {
            std::vector<float> v;
            for (float x : randomTensor(c.target, 6).toVector<float>()) v.push_back(x < 0 ? -1.0f : 1.0f);
            target = Tensor::fromVector(c.target, v);
        } else if (c.name == "KLDivergence" || c.name == "CrossEntropy probabilities") {
            std::vector<float> v = randomTensor(c.target, 6, 0.1f, 1.0f).toVector<float>();
            for (int64_t r = 0; r < c.target[0]; ++r) { // rows sum to one
                float sum = 0;
                for (int64_t k = 0; k < c.target[1]; ++k) sum += v[r * c.target[1] + k];
                for (int64_t k = 0; k < c.target[1]; ++k) v[r * c.target[1] + k] /= sum;
            }
            target = Tensor::fromVector(c.target, v);
        } else {
            target = randomTensor(c.target, 6, c.name == "BCE" ? 0.0f : -1.0f, 1.0f);
        }
        auto onCpu = c.make();
        auto onGpu = c.make();
        const CostResult rc = (*onCpu)(pred, target);
        const CostResult rg = (*onGpu)(pred.to(dev), target.to(dev));
        EXPECT_NEAR(rg.error, rc.error, 1e-5 * (1.0 + std::fabs(rc.error)));
        ASSERT_EQ(rg.grad.size(), rc.grad.size());
        EXPECT_LE(relDiff(rg.grad[0], rc.grad[0]), 1e-5);
        EXPECT_NEAR(onGpu->validate(pred.to(dev), target.to(dev)), onCpu->validate(pred, target), 1e-5);
    }
    // A bad label is the same clear error on both devices.
    CrossEntropy ce;
    const Tensor bad = Tensor::fromVector({2}, std::vector<int32_t>{1, 7});
    const std::string msg = testing::errorOf([&] { ce(randomTensor({2, 3}, 1).to(dev), bad.to(dev)); });
    EXPECT_NE(msg.find("label 7"), std::string::npos) << msg;
}

TEST(CudaConsistency, EveryOptimizer) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    for (const char* name : {"sgd", "momentum", "nesterov", "adam", "adagrad", "adadelta", "rmsprop", "rmspropgraves",
                             "smorms3", "adamw"}) {
        for (auto [global, clip] : {std::pair{false, 0.0f}, {true, 0.0f}, {false, 0.5f}, {true, 0.5f}}) {
            SCOPED_TRACE(std::string(name) + (global ? " (global state)" : "") +
                         (clip > 0 ? ", gradients clipped to norm 0.5" : ""));
            manualSeed(4);
            auto cpu = std::make_shared<Linear>(5, 3);
            manualSeed(4);
            auto gpu = std::make_shared<Linear>(5, 3);
            gpu->to(dev);
            auto oc = makeOptimizer(name);
            auto og = makeOptimizer(name);
            oc->setWeightDecay(0.01f);
            og->setWeightDecay(0.01f);
            oc->setupOn(*cpu, global);
            og->setupOn(*gpu, global);
            oc->setGradientClipping(clip);
            og->setGradientClipping(clip);
            for (int step = 0; step < 3; ++step) {
                const Tensor x = randomTensor({4, 5}, 10 + step);
                const Tensor g = randomTensor({4, 3}, 20 + step);
                oc->zeroGradParams();
                og->zeroGradParams();
                (*cpu)(x);
                (*gpu)(x.to(dev));
                cpu->backward(g);
                gpu->backward(g.to(dev));
                oc->update();
                og->update();
                if (clip > 0) {
                    EXPECT_NEAR(og->lastGradientNorm(), oc->lastGradientNorm(), 1e-5 * oc->lastGradientNorm());
                }
            }
            const auto pc = cpu->namedParams(), pg = gpu->namedParams();
            for (size_t i = 0; i < pc.size(); ++i) {
                EXPECT_LE(relDiff(pg[i].second->data, pc[i].second->data), 1e-5) << pc[i].first;
            }
        }
    }
}

TEST(CudaConsistency, RandomFillsDrawTheSameNumbers) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    Generator a(9), b(9);
    Tensor hc = Tensor::empty({1000}), hg = Tensor::empty({1000}, DType::float32, dev);
    backendFor(Device::cpu()).fillNormal(hc, 0.5f, 2.0f, a);
    backendFor(dev).fillNormal(hg, 0.5f, 2.0f, b);
    EXPECT_LE(relDiff(hg, hc), 1e-5);
    backendFor(Device::cpu()).fillUniform(hc, -1.0f, 3.0f, a);
    backendFor(dev).fillUniform(hg, -1.0f, 3.0f, b);
    EXPECT_LE(relDiff(hg, hc), 1e-6);
}

TEST(CudaConsistency, SixteenBitFillsCoverEveryElement) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    for (DType t : {DType::float16, DType::bfloat16}) {
        for (float v : {0.0f, -2.5f}) {
            Tensor g = Tensor::empty({7}, t, dev); // an odd count: the last element is half a float32
            backendFor(dev).fillBytes(g, 0xff);
            backendFor(dev).fill(g, v);
            EXPECT_EQ(g.toVector<float>(), std::vector<float>(7, v)) << str(t);
        }
    }
}

TEST(CudaConsistency, ModelsMoveBetweenDevices) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    manualSeed(2);
    auto net = loadLeNet();
    const Tensor x = randomTensor({2, 1, 28, 28}, 3);
    const Tensor before = (*net)(x);
    net->to(dev);
    EXPECT_EQ(net->device(), dev);
    const Tensor onDevice = (*net)(x.to(dev));
    net->to(Device::cpu());
    EXPECT_EQ(net->device(), Device::cpu());
    EXPECT_LE(relDiff(onDevice, before), 1e-4);
    EXPECT_LE(relDiff((*net)(x), before), 0.0);
}

TEST(CudaConsistency, AllocatorReusesMemory) {
    REQUIRE_DEVICE();
    if (selfCheck()) GTEST_SKIP() << "the CPU backend has no cache to check";
    Backend& be = backendFor(testDevice());
    { Tensor warm = Tensor::empty({1 << 20}, DType::float32, testDevice()); }
    const MemoryStats before = be.memoryStats();
    for (int i = 0; i < 10; ++i) {
        Tensor t = Tensor::empty({1 << 20}, DType::float32, testDevice());
        EXPECT_GE(be.memoryStats().current, before.current + (size_t{4} << 20));
    }
    EXPECT_EQ(be.memoryStats().current, before.current);
}

TEST(CudaConsistency, BadIndicesAreClearErrorsOnTheDevice) {
    REQUIRE_DEVICE();
    const Device dev = testDevice();
    auto emb = std::make_shared<Embedder>(10, 2, 3);
    emb->to(dev);
    const Tensor ids = Tensor::fromVector({1, 2}, std::vector<int32_t>{3, 12}).to(dev);
    const std::string msg = testing::errorOf([&] { (*emb)(ids); });
    EXPECT_NE(msg.find("12"), std::string::npos) << msg;
}

} // namespace
} // namespace tessera
