// The numerics check (Module::setCheckNumerics): a NaN or infinity stops the run at the
// layer that made it, in forward and in backward, with the layer's path, the phase, the
// first bad element and what the layer was given; nothing is checked when it is off.
#include <algorithm>
#include <cmath>
#include <limits>

#include "GradCheck.h"
#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Conv.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {
using namespace testing;

struct CheckNumerics {
    CheckNumerics() { Module::setCheckNumerics(true); }
    ~CheckNumerics() { Module::setCheckNumerics(false); }
};

// Parameter `name` of `m` or any descendant (a dotted name, as namedParams gives it).
VariablePtr param(const Module& m, const std::string& name) {
    std::string names;
    for (const auto& [n, v] : m.namedParams()) {
        if (n == name) return v;
        names += " " + n;
    }
    throw std::runtime_error("no parameter " + name + " among" + names);
}

// fc1 -> relu -> fc2 -> fc3, fc2's weights large enough that its outputs overflow float32.
std::shared_ptr<Sequential> overflowingNet() {
    manualSeed(4);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(4, 8, LinearOptions{.name = "fc1"}));
    net->append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu"}));
    net->append(std::make_shared<Linear>(8, 8, LinearOptions{.name = "fc2"}));
    net->append(std::make_shared<Linear>(8, 2, LinearOptions{.name = "fc3"}));
    param(*net, "fc2.W")->data.copyFrom(Tensor::full({8, 8}, 1e38f));
    return net;
}

TEST(Numerics, OverflowInForwardNamesTheLayer) {
    auto net = overflowingNet();
    const Tensor x = Tensor::full({3, 4}, 1.0f);
    EXPECT_FALSE(Module::checkNumerics());
    EXPECT_NO_THROW((*net)(x)); // off: the infinities flow on
    CheckNumerics on;
    std::string e;
    try {
        (*net)(x);
    } catch (const NumericsError& err) {
        e = err.what();
    }
    for (const char* part :
         {"Sequential 'net': input -> fc1 -> relu -> fc2: Linear 'fc2': forward: output 0 [3, 8]", "at index 0 [0, 0]",
          "24 of 24 elements are NaN or infinite", "input 0 [3, 8]", "all finite"}) {
        EXPECT_NE(e.find(part), std::string::npos) << part << " not in: " << e;
    }
}

TEST(Numerics, NaNGradientsNameTheLayerAndPhase) {
    manualSeed(5);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(4, 3, LinearOptions{.name = "fc1"}));
    net->append(std::make_shared<Linear>(3, 2, LinearOptions{.name = "fc2"}));
    const Tensor x = randomTensor({2, 4}, 1);
    CheckNumerics on;
    (*net)(x);
    std::vector<float> g(4, 0.5f);
    g[3] = std::numeric_limits<float>::quiet_NaN();
    std::string e;
    try {
        net->backward(Tensor::fromVector({2, 2}, g));
    } catch (const NumericsError& err) {
        e = err.what();
    }
    for (const char* part : {"backward at fc2: Linear 'fc2': backward: input gradient 0 [2, 3] has NaN",
                             "output gradient 0 [2, 2]: min 0.5, max 0.5, mean 0.5, 1 NaN or infinite"}) {
        EXPECT_NE(e.find(part), std::string::npos) << part << " not in: " << e;
    }
    // A parameter gradient: input gradients not asked for, so the weights' are the first.
    auto single = std::make_shared<Linear>(4, 2, LinearOptions{.name = "solo"});
    (*single)(x);
    e.clear();
    try {
        single->backward(Tensor::fromVector({2, 2}, g), /*updParamGrads=*/true, /*updGrad=*/false);
    } catch (const NumericsError& err) {
        e = err.what();
    }
    EXPECT_NE(e.find("Linear 'solo': backward: gradient of parameter 'W' [4, 2] has NaN"), std::string::npos) << e;
}

TEST(Numerics, GraphNodesAndFiniteRunsPass) {
    auto in = node(std::make_shared<Identity>(), {}, "in");
    auto fc = node(std::make_shared<Linear>(4, 3), in, "fc");
    auto act = node(std::make_shared<Activation>(ActivationKind::sigmoid), fc, "act");
    Graph g({in}, {act}, "g");
    CheckNumerics on;
    const Tensor x = randomTensor({2, 4}, 2);
    EXPECT_NO_THROW(g(x));
    EXPECT_NO_THROW(g.backward(Tensor::full({2, 3}, 1.0f)));
    param(g, "fc.W")->data.copyFrom(Tensor::full({4, 3}, std::numeric_limits<float>::infinity()));
    std::string e;
    try {
        g(x);
    } catch (const NumericsError& err) {
        e = err.what();
    }
    EXPECT_NE(e.find("'fc'"), std::string::npos) << e;
    EXPECT_NE(e.find("forward: output 0 [2, 3]"), std::string::npos) << e;
}

// Without setCheckNumerics, one NaN pixel in one training image still stops training: the
// ReLU and max pooling map NaN to 0 on the CPU, so the loss stays finite while the first
// convolution's weights turn NaN; Trainer's check after the epoch names them.
TEST(Numerics, TrainerStopsWhenAParameterBecomesNaN) {
    manualSeed(9);
    auto [x, y] = testing::quadrantTask(64);
    x.data<float>()[3 * 64 + 17] = std::numeric_limits<float>::quiet_NaN();
    const ModulePtr net = testing::quadrantNet();
    Adam adam(1e-2f);
    adam.setupOn(*net);
    CrossEntropy ce;
    Trainer trainer(*net, ce, adam, {.batchsize = 16, .progress = false});
    try {
        trainer.train(x, y);
        ADD_FAILURE() << "an epoch that made NaN weights went through";
    } catch (const NumericsError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("after epoch 1, parameter 0.W holds NaN or infinity"), std::string::npos) << what;
    }
    // The same data without the NaN trains without complaint.
    manualSeed(9);
    auto [x2, y2] = testing::quadrantTask(64);
    const ModulePtr clean = testing::quadrantNet();
    Adam adam2(1e-2f);
    adam2.setupOn(*clean);
    Trainer ok(*clean, ce, adam2, {.batchsize = 16, .progress = false});
    EXPECT_TRUE(std::isfinite(ok.train(x2, y2)));
}

// The float32 kernels oneDNN picks for this CPU (and ISA cap: .ci/run runs this under
// ONEDNN_MAX_CPU_ISA=AVX2 and AVX512_CORE too) against float64 loops, at the sizes of a
// small VGG layer: a 3x3 convolution's forward, input gradient and weight gradient (sums
// of 288 and 1,024 products) and a Linear layer's. Float32 rounding of such sums errs by
// about 1e-6 of the largest value; a kernel that lost precision (a bfloat16 path taken by
// mistake, a badly blocked sum) errs by 1e-3 or more.
TEST(Numerics, ConvolutionAndLinearKernelsAgreeWithFloat64) {
    const int64_t N = 4, C = 32, K = 32, H = 16, W = 16;
    const Tensor x = randomTensor({N, C, H, W}, 41), dy = randomTensor({N, K, H, W}, 42);
    Conv2D conv(C, K, 3, ConvOptions{.pad = {1}, .useBias = false});
    const Tensor y = conv(x);
    const Tensor dx = conv.backward(dy);
    const std::vector<float> xv = x.toVector<float>(), dyv = dy.toVector<float>(),
                             wv = conv.getVar("W")->data.toVector<float>();
    std::vector<double> y64(static_cast<size_t>(N * K * H * W)), dx64(xv.size()), dw64(wv.size());
    auto X = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
        return xv[static_cast<size_t>(((n * C + c) * H + h) * W + w)];
    };
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t w = 0; w < W; ++w) {
                    const double g = dyv[static_cast<size_t>(((n * K + k) * H + h) * W + w)];
                    double sum = 0;
                    for (int64_t c = 0; c < C; ++c)
                        for (int64_t r = 0; r < 3; ++r)
                            for (int64_t q = 0; q < 3; ++q) {
                                const int64_t hi = h + r - 1, wi = w + q - 1;
                                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                                const size_t wIndex = static_cast<size_t>(((k * C + c) * 3 + r) * 3 + q);
                                const size_t xIndex = static_cast<size_t>(((n * C + c) * H + hi) * W + wi);
                                sum += static_cast<double>(wv[wIndex]) * X(n, c, hi, wi);
                                dx64[xIndex] += static_cast<double>(wv[wIndex]) * g;
                                dw64[wIndex] += static_cast<double>(X(n, c, hi, wi)) * g;
                            }
                    y64[static_cast<size_t>(((n * K + k) * H + h) * W + w)] = sum;
                }
    // The largest difference, relative to the largest reference value.
    auto worst = [](const Tensor& got, const std::vector<double>& want) {
        const std::vector<float> g = got.toVector<float>();
        double diff = 0, scale = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            diff = std::max(diff, std::abs(static_cast<double>(g[i]) - want[i]));
            scale = std::max(scale, std::abs(want[i]));
        }
        return diff / scale;
    };
    EXPECT_LT(worst(y, y64), 1e-5) << "forward";
    EXPECT_LT(worst(dx, dx64), 1e-5) << "input gradient";
    EXPECT_LT(worst(conv.getVar("W")->grad, dw64), 1e-5) << "weight gradient";

    const int64_t M = 64, In = 512, Out = 256;
    Linear fc(In, Out, LinearOptions{.useBias = false});
    const Tensor a = randomTensor({M, In}, 43), da = randomTensor({M, Out}, 44);
    const Tensor b = fc(a), dIn = fc.backward(da);
    const std::vector<float> av = a.toVector<float>(), dav = da.toVector<float>(),
                             fw = fc.getVar("W")->data.toVector<float>();
    std::vector<double> b64(static_cast<size_t>(M * Out)), dIn64(av.size()), dW64(fw.size());
    for (int64_t m = 0; m < M; ++m)
        for (int64_t o = 0; o < Out; ++o) {
            const double g = dav[static_cast<size_t>(m * Out + o)];
            double sum = 0;
            for (int64_t i = 0; i < In; ++i) {
                const double wio = fw[static_cast<size_t>(i * Out + o)], aim = av[static_cast<size_t>(m * In + i)];
                sum += aim * wio;
                dIn64[static_cast<size_t>(m * In + i)] += wio * g;
                dW64[static_cast<size_t>(i * Out + o)] += aim * g;
            }
            b64[static_cast<size_t>(m * Out + o)] = sum;
        }
    EXPECT_LT(worst(b, b64), 1e-5) << "Linear forward";
    EXPECT_LT(worst(dIn, dIn64), 1e-5) << "Linear input gradient";
    EXPECT_LT(worst(fc.getVar("W")->grad, dW64), 1e-5) << "Linear weight gradient";
}

} // namespace
} // namespace tessera
