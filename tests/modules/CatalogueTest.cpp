// PuzzleLib's Penalty, ToList, DepthConcat and Glue: references, numerical gradients,
// shapes, bad input, and a Glue layer defined by a user that trains in a graph.
#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "GradCheck.h"
#include "backend/cpu/CpuBackend.h"
#include "containers/Graph.h"
#include "data/Idx.h"
#include "io/Factory.h"
#include "modules/Activation.h"
#include "modules/BatchNormND.h"
#include "modules/DepthConcat.h"
#include "modules/Flatten.h"
#include "modules/Glue.h"
#include "modules/GridSample.h"
#include "modules/Identity.h"
#include "modules/LCN.h"
#include "modules/Linear.h"
#include "modules/Penalty.h"
#include "modules/Reshape.h"
#include "modules/SpatialTf.h"
#include "modules/SubtractMean.h"
#include "modules/ToList.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"
#include "training/PointwiseCosts.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Penalty, ForwardIsIdentityAndBackwardAddsThePenaltysGradient) {
    const Tensor x = Tensor::fromVector({2, 3}, std::vector<float>{1.5f, -2.0f, 0.5f, -0.25f, 3.0f, -1.0f});
    const Tensor dy = Tensor::fromVector({2, 3}, std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
    Penalty l1({.mode = PenaltyMode::l1, .weight = 0.5f});
    EXPECT_TRUE(l1(x).sharesStorage(x));
    // weight / N * sign(x) with N = 2
    EXPECT_TRUE(allClose(l1.backward(dy), {0.35f, -0.05f, 0.55f, 0.15f, 0.75f, 0.35f}, 1e-6f));
    EXPECT_NEAR(l1.penalty(), 0.5 * (4.0 + 4.25) / 2, 1e-6); // weight * mean of sum |x|
    Penalty l2({.mode = PenaltyMode::l2, .weight = 0.5f});
    l2(x);
    // weight / N * x
    EXPECT_TRUE(allClose(l2.backward(dy), {0.475f, -0.3f, 0.425f, 0.3375f, 1.25f, 0.35f}, 1e-6f));
    EXPECT_NEAR(l2.penalty(), 0.5 * (6.5 + 10.0625) / 4, 1e-6); // weight * mean of sum x^2 / 2
}

// The gradient is the derivative of <y, r> + penalty: checked numerically with a module
// that adds the penalty to the projected loss (the checker sees outputs only).
TEST(Penalty, GradientsAndErrors) {
    for (PenaltyMode mode : {PenaltyMode::l1, PenaltyMode::l2}) {
        SCOPED_TRACE(str(mode));
        Penalty p({.mode = mode, .weight = 0.3f});
        const Tensor x = randomTensor({4, 5}, 2);
        const Tensor r = randomTensor({4, 5}, 3);
        p(x);
        const std::vector<float> g = p.backward(r).toVector<float>();
        std::vector<float> v = x.toVector<float>();
        auto loss = [&](const std::vector<float>& xv) {
            Penalty q({.mode = mode, .weight = 0.3f});
            const Tensor t = Tensor::fromVector({4, 5}, xv);
            q(t);
            double dot = 0;
            const std::vector<float> rv = r.toVector<float>();
            for (size_t i = 0; i < xv.size(); ++i) dot += xv[i] * rv[i];
            return dot + q.penalty();
        };
        for (size_t i = 0; i < v.size(); ++i) {
            const float s = v[i];
            v[i] = s + 1e-3f;
            const double plus = loss(v);
            v[i] = s - 1e-3f;
            const double minus = loss(v);
            v[i] = s;
            EXPECT_NEAR(g[i], (plus - minus) / 2e-3, 1e-3) << i;
        }
        EXPECT_TRUE(checkShapes(p, {x}));
    }
    EXPECT_THROW(Penalty({.weight = -1.0f}), ModuleError);
    EXPECT_THROW(penaltyModeFromString("l3"), ModuleError);
    Penalty p({.name = "reg"});
    EXPECT_THROW(p.penalty(), ModuleError);
    EXPECT_TRUE(throwsShapeError([&] { p({randomTensor({2}, 1), randomTensor({2}, 1)}); }, {"Penalty 'reg'", "1"}));
}

TEST(ToList, PassesInputsThroughAsSlots) {
    ToList list(2, "pair");
    EXPECT_EQ(list.outputCount(), 2u);
    const Tensor a = randomTensor({2, 3}, 1), b = Tensor::fromVector({2}, std::vector<int32_t>{4, 5});
    const Tensors out = list({a, b});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(out[0].sharesStorage(a));
    EXPECT_TRUE(out[1].sharesStorage(b));
    ToList one;
    EXPECT_TRUE(checkGradients(one, {randomTensor({3, 2}, 2)}));
    EXPECT_TRUE(checkShapes(one, {randomTensor({3, 2}, 2)}));
    EXPECT_TRUE(throwsShapeError([&] { list({a}); }, {"ToList 'pair'", "2 input", "got 1"}));
    EXPECT_THROW(ToList(0), ModuleError);
    // In a graph: two branches gathered into one node, read back by slot.
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto f = node(std::make_shared<Linear>(3, 4), x, "f");
    auto g = node(std::make_shared<Linear>(3, 2), x, "g");
    auto both = node(std::make_shared<ToList>(2), {f, g}, "both");
    auto second = node(std::make_shared<Identity>(), Parent(both, 1), "second");
    Graph net({x}, {second});
    EXPECT_EQ(net.dataShapeFrom(Shapes{{5, 3}}), (Shapes{{5, 2}}));
}

TEST(DepthConcat, CentresEachInputWithZeros) {
    // [1, 1, 2, 2] and [1, 2, 4, 3] -> [1, 3, 4, 3]: the first sits at rows 1..2, cols 0..1
    // (floor((4 - 2) / 2) = 1 before, floor((3 - 2) / 2) = 0 before).
    const Tensor a = Tensor::fromVector({1, 1, 2, 2}, std::vector<float>{1, 2, 3, 4});
    const Tensor b = randomTensor({1, 2, 4, 3}, 5);
    DepthConcat dc;
    const Tensor y = dc({a, b})[0];
    ASSERT_EQ(y.shape(), (Shape{1, 3, 4, 3}));
    std::vector<float> want(12, 0.0f);
    want[3] = 1, want[4] = 2, want[6] = 3, want[7] = 4;
    const std::vector<float> bv = b.toVector<float>();
    want.insert(want.end(), bv.begin(), bv.end());
    EXPECT_TRUE(allClose(y, want, 0.0f));
    EXPECT_TRUE(checkGradients(
        dc, {randomTensor({2, 2, 3, 3}, 1), randomTensor({2, 1, 5, 4}, 2), randomTensor({2, 3, 5, 4}, 3)}));
    EXPECT_TRUE(checkGradients(dc, {randomTensor({2, 2, 3}, 1), randomTensor({2, 1, 6}, 2)}));
    EXPECT_TRUE(checkShapes(dc, {randomTensor({2, 2, 3, 3}, 1), randomTensor({2, 1, 5, 4}, 2)}));
    EXPECT_EQ(dc.dataShapeFrom(Shapes{{8, 16, 7, 7},
                                      {8, 32, 5, 9},
                                      {
                                          8,
                                          8,
                                          3,
                                          3,
                                      }}),
              (Shapes{{8, 56, 7, 9}}));
    DepthConcat named("dc");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({randomTensor({2, 2, 3, 3}, 1), randomTensor({3, 2, 3, 3}, 1)});
        },
        {"DepthConcat 'dc'", "input 1 [3, 2, 3, 3]", "one N"}));
    EXPECT_TRUE(throwsShapeError([&] { named({randomTensor({2, 2}, 1)}); }, {"rank (3 to 5)"}));
}

// Inputs in bfloat16 (which the CPU carries) go through in it, forward and backward, bit
// for bit, those it pads too; float16 ones it pads are converted to float32 first.
TEST(DepthConcat, BFloat16InputsStayBFloat16) {
    DepthConcat dc;
    dc.calcMode(DType::bfloat16);
    const Tensor a = randomTensor({2, 3, 4, 4}, 1).convertedTo(DType::bfloat16);
    const Tensor b = randomTensor({2, 2, 4, 4}, 2).convertedTo(DType::bfloat16);
    const Tensor y = dc({a, b})[0];
    ASSERT_EQ(y.dtype(), DType::bfloat16);
    EXPECT_EQ(dc.outputDTypes({{2, 3, 4, 4}, {2, 2, 4, 4}}, {DType::bfloat16, DType::bfloat16}, Device{}),
              std::vector<DType>{DType::bfloat16});
    auto floats = [](const Tensor& t) { return t.convertedTo(DType::float32).toVector<float>(); };
    std::vector<float> want;
    const std::vector<float> av = floats(a), bv = floats(b);
    for (size_t n = 0; n < 2; ++n) {
        want.insert(want.end(), av.begin() + n * 48, av.begin() + (n + 1) * 48);
        want.insert(want.end(), bv.begin() + n * 32, bv.begin() + (n + 1) * 32);
    }
    EXPECT_EQ(floats(y), want);
    const Tensor dy = randomTensor({2, 5, 4, 4}, 3).convertedTo(DType::bfloat16);
    const Tensors dx = dc.backward(Tensors{dy});
    ASSERT_EQ(dx.size(), 2u);
    EXPECT_EQ(dx[0].dtype(), DType::bfloat16);
    const std::vector<float> dyv = floats(dy), d0 = floats(dx[0]);
    for (size_t n = 0; n < 2; ++n) {
        for (size_t i = 0; i < 48; ++i) ASSERT_EQ(d0[n * 48 + i], dyv[n * 80 + i]) << n << " " << i;
    }
    // Different sizes: padded in bfloat16 too, with the values the float32 padding gives,
    // forward and backward (padding moves values without rounding them).
    const Tensor small = randomTensor({2, 2, 2, 2}, 4).convertedTo(DType::bfloat16);
    const Tensor ys = dc({a, small})[0];
    EXPECT_EQ(ys.dtype(), DType::bfloat16);
    EXPECT_EQ(dc.outputDTypes({{2, 3, 4, 4}, {2, 2, 2, 2}}, {DType::bfloat16, DType::bfloat16}, Device{}),
              std::vector<DType>{DType::bfloat16});
    const Tensors dxs = dc.backward(Tensors{dy});
    EXPECT_EQ(dxs[1].dtype(), DType::bfloat16);
    DepthConcat ref;
    const Tensor yr = ref({a.convertedTo(DType::float32), small.convertedTo(DType::float32)})[0];
    const Tensors dxr = ref.backward(Tensors{dy.convertedTo(DType::float32)});
    EXPECT_EQ(floats(ys), yr.toVector<float>());
    EXPECT_EQ(floats(dxs[1]), dxr[1].toVector<float>());
    // float16, which the CPU does not carry, is padded in float32.
    const Tensor h = a.convertedTo(DType::float16), hs = small.convertedTo(DType::float16);
    EXPECT_EQ(dc({h, hs})[0].dtype(), DType::float32);
    EXPECT_EQ(dc.outputDTypes({{2, 3, 4, 4}, {2, 2, 2, 2}}, {DType::float16, DType::float16}, Device{}),
              std::vector<DType>{DType::float32});
    // The backend pads 16-bit tensors with constants only (reflected positions add up).
    Backend& be = backendFor(Device::cpu());
    const Tensor padded = Tensor::empty({2, 2, 4, 4}, DType::bfloat16);
    EXPECT_NE(errorOf([&] {
                  be.padForward(PadMode::reflect, 0.0f, {1, 1}, {1, 1}, small, padded);
              }).find("bfloat16 to bfloat16 (float32, or one 16-bit type with constant padding)"),
              std::string::npos);
    EXPECT_NE(errorOf([&] {
                  be.padBackward(PadMode::constant, {1, 1}, {1, 1}, padded.convertedTo(DType::float32), small);
              }).find("float32 to bfloat16"),
              std::string::npos);
}

// A plain loop over PuzzleLib's definition: y = x - the window mean.
TEST(SubtractMean, ReferenceGradientsShapesAndErrors) {
    for (bool includePad : {true, false}) {
        SCOPED_TRACE(includePad ? "includePad" : "inside only");
        const int64_t N = 2, C = 2, H = 5, W = 6, S = 3, P = 1;
        SubtractMean sm({.size = S, .includePad = includePad});
        const Tensor x = randomTensor({N, C, H, W}, 7);
        const std::vector<float> xv = x.toVector<float>();
        std::vector<float> want(xv.size());
        for (int64_t p = 0; p < N * C; ++p) {
            for (int64_t i = 0; i < H; ++i) {
                for (int64_t j = 0; j < W; ++j) {
                    double sum = 0;
                    int64_t inside = 0;
                    for (int64_t a = i - P; a <= i + P; ++a) {
                        for (int64_t b = j - P; b <= j + P; ++b) {
                            if (a < 0 || a >= H || b < 0 || b >= W) continue;
                            sum += xv[(p * H + a) * W + b];
                            ++inside;
                        }
                    }
                    const double mean = sum / (includePad ? S * S : inside);
                    want[(p * H + i) * W + j] = static_cast<float>(xv[(p * H + i) * W + j] - mean);
                }
            }
        }
        EXPECT_TRUE(allClose(sm(x), want, 1e-5f));
        EXPECT_TRUE(checkGradients(sm, {randomTensor({N, C, H, W}, 8)}));
        EXPECT_TRUE(checkShapes(sm, {x}));
    }
    EXPECT_THROW(SubtractMean({.size = 4}), ModuleError);
    EXPECT_THROW(SubtractMean({.size = 1}), ModuleError);
    SubtractMean sm({.name = "sub"});
    EXPECT_TRUE(throwsShapeError([&] { sm(randomTensor({2, 3, 4}, 1)); }, {"SubtractMean 'sub'", "[N, C, H, W]"}));
}

// PuzzleLib's LCN unit test as a plain loop: the window mean m, then
// x / (K + alpha / N^2 * sum over the inside of (x_j - m)^2)^beta.
TEST(LCN, ReferenceGradientsShapesAndErrors) {
    for (bool includePad : {true, false}) {
        SCOPED_TRACE(includePad ? "includePad" : "inside only");
        const int64_t B = 2, C = 2, H = 5, W = 6, S = 3, P = 1;
        const LCNOptions o{.N = S, .alpha = 0.8f, .beta = 0.75f, .K = 2.0f, .includePad = includePad};
        LCN lcn(o);
        const Tensor x = randomTensor({B, C, H, W}, 9, -2.0f, 2.0f);
        const std::vector<float> xv = x.toVector<float>();
        std::vector<float> want(xv.size());
        for (int64_t p = 0; p < B * C; ++p) {
            for (int64_t i = 0; i < H; ++i) {
                for (int64_t j = 0; j < W; ++j) {
                    auto inside = [&](auto&& f) {
                        for (int64_t a = std::max<int64_t>(0, i - P); a <= std::min(H - 1, i + P); ++a) {
                            for (int64_t b = std::max<int64_t>(0, j - P); b <= std::min(W - 1, j + P); ++b) {
                                f(static_cast<double>(xv[(p * H + a) * W + b]));
                            }
                        }
                    };
                    double sum = 0;
                    int64_t count = 0;
                    inside([&](double v) { sum += v, ++count; });
                    const double m = sum / (includePad ? S * S : count);
                    double spread = 0;
                    inside([&](double v) { spread += (v - m) * (v - m); });
                    const double norm = o.K + o.alpha / (S * S) * spread;
                    want[(p * H + i) * W + j] = static_cast<float>(xv[(p * H + i) * W + j] / std::pow(norm, o.beta));
                }
            }
        }
        EXPECT_TRUE(allClose(lcn(x), want, 1e-5f));
        EXPECT_TRUE(checkGradients(lcn, {randomTensor({B, C, H, W}, 10, -2.0f, 2.0f)}));
        EXPECT_TRUE(checkShapes(lcn, {x}));
    }
    EXPECT_THROW(LCN({.N = 4}), ModuleError);
    EXPECT_THROW(LCN({.K = 0.0f}), ModuleError);
    LCN lcn({.name = "lcn"});
    EXPECT_TRUE(throwsShapeError([&] { lcn(randomTensor({2, 3, 4}, 1)); }, {"LCN 'lcn'", "[N, C, H, W]"}));
    lcn.evalMode();
    lcn(randomTensor({1, 1, 5, 5}, 1));
    EXPECT_TRUE(throwsModuleError([&] { lcn.backward(randomTensor({1, 1, 5, 5}, 2)); }, {"train mode"}));
}

// The sampler against a plain loop of its definition, and the cases one can see: the
// identity copies, a shift by one pixel's span moves the columns, outside reads zero.
TEST(SpatialTf, ReferenceIdentityShiftAndGradients) {
    const int64_t N = 2, C = 3, H = 5, W = 6, Ho = 4, Wo = 7;
    const Tensor x = randomTensor({N, C, H, W}, 11);
    // Every sample lands at least 0.02 pixels from a pixel row or column (checked below):
    // on one, bilinear interpolation has a kink, where central differences average two slopes.
    const std::vector<float> theta{0.913f,  0.217f,  0.1043f, -0.1537f, 1.0871f, -0.0561f,
                                   0.6672f, 0.2085f, 0.1055f, -0.147f,  0.8477f, -0.0202f};
    SpatialTf stn({.height = Ho, .width = Wo});
    const Tensor y = stn({x, Tensor::fromVector({N, 2, 3}, theta)})[0];
    const std::vector<float> xv = x.toVector<float>();
    std::vector<float> want;
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
            for (int64_t i = 0; i < Ho; ++i) {
                for (int64_t j = 0; j < Wo; ++j) {
                    const double xt = -1.0 + 2.0 * j / (Wo - 1), yt = -1.0 + 2.0 * i / (Ho - 1);
                    const float* t = &theta[static_cast<size_t>(n * 6)];
                    const double u = (t[0] * xt + t[1] * yt + t[2] + 1) / 2 * (W - 1);
                    const double v = (t[3] * xt + t[4] * yt + t[5] + 1) / 2 * (H - 1);
                    ASSERT_GT(std::fabs(u - std::round(u)), 0.02);
                    ASSERT_GT(std::fabs(v - std::round(v)), 0.02);
                    double sum = 0;
                    for (int64_t r = 0; r < H; ++r) { // every pixel, weighted by the tent of bilinear sampling
                        for (int64_t q = 0; q < W; ++q) {
                            const double wr = std::max(0.0, 1 - std::fabs(v - r)),
                                         wq = std::max(0.0, 1 - std::fabs(u - q));
                            sum += wr * wq * xv[static_cast<size_t>(((n * C + c) * H + r) * W + q)];
                        }
                    }
                    want.push_back(static_cast<float>(sum));
                }
            }
        }
    }
    EXPECT_TRUE(allClose(y, want, 1e-5f));
    // Identity at the input's size copies; a shift of 2 / (W - 1) reads one column to the right.
    SpatialTf same;
    std::vector<float> identity;
    for (int64_t n = 0; n < N; ++n) identity.insert(identity.end(), {1, 0, 0, 0, 1, 0});
    EXPECT_TRUE(allClose(same({x, Tensor::fromVector({N, 2, 3}, identity)})[0], xv, 1e-6f));
    std::vector<float> shift = identity;
    for (int64_t n = 0; n < N; ++n) shift[static_cast<size_t>(n * 6 + 2)] = 2.0f / (W - 1);
    const std::vector<float> shifted = same({x, Tensor::fromVector({N, 2, 3}, shift)})[0].toVector<float>();
    for (int64_t p = 0; p < N * C * H; ++p) {
        for (int64_t q = 0; q < W; ++q) {
            const float expect = q + 1 < W ? xv[static_cast<size_t>(p * W + q + 1)] : 0.0f;
            EXPECT_NEAR(shifted[static_cast<size_t>(p * W + q)], expect, 1e-5f);
        }
    }
    // Numerical gradients of x and theta.
    GradCheckOptions o;
    o.eps = 1e-3f;
    EXPECT_TRUE(checkGradients(stn, {randomTensor({N, C, H, W}, 12), Tensor::fromVector({N, 2, 3}, theta)}, o));
    EXPECT_TRUE(checkShapes(stn, {x, Tensor::fromVector({N, 2, 3}, theta)}));
    SpatialTf named({.name = "stn"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({x, randomTensor({N, 3, 2}, 1)});
        },
        {"SpatialTf 'stn'", "[N, 2, 3] = [2, 2, 3]", "[2, 3, 2]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({randomTensor({2, 3, 4}, 1), randomTensor({2, 2, 3}, 1)});
        },
        {"[N, C, H, W]"}));
    EXPECT_THROW(SpatialTf({.height = -1}), ModuleError);
}

// ---- GridSample ---------------------------------------------------------------------------

// PyTorch's grid_sampler_2d, written out in doubles for one output value: the reference.
double reflectedRef(double in, double twiceLow, double twiceHigh) {
    if (twiceLow == twiceHigh) return 0;
    const double low = twiceLow / 2, span = (twiceHigh - twiceLow) / 2;
    in = std::fabs(in - low);
    const double extra = std::fmod(in, span);
    const int64_t flips = static_cast<int64_t>(std::floor(in / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
}

double paddedRef(double c, int64_t size, const GridSampleOptions& o) {
    if (o.padding == GridPadding::zeros) return c;
    if (o.padding == GridPadding::reflection) {
        c = o.alignCorners ? reflectedRef(c, 0, 2.0 * (size - 1)) : reflectedRef(c, -1, 2.0 * size - 1);
    }
    return std::clamp(c, 0.0, size - 1.0);
}

std::vector<float> gridSampleRef(const Tensor& x, const Tensor& grid, const GridSampleOptions& o) {
    const Shape& s = x.shape();
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3], Ho = grid.shape()[1], Wo = grid.shape()[2];
    const std::vector<float> xv = x.toVector<float>(), gv = grid.toVector<float>();
    auto pixel = [&](int64_t n, int64_t c, int64_t r, int64_t q) {
        return r < 0 || r >= H || q < 0 || q >= W ? 0.0 : xv[static_cast<size_t>(((n * C + c) * H + r) * W + q)];
    };
    auto unnormalised = [&](double g, int64_t size) {
        return o.alignCorners ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
    };
    const double A = -0.75;
    auto keys = [&](double t) { // the four taps' weights at fraction t
        auto near = [&](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };
        auto far = [&](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };
        return std::array<double, 4>{far(t + 1), near(t), near(1 - t), far(2 - t)};
    };
    std::vector<float> y;
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
            for (int64_t p = 0; p < Ho * Wo; ++p) {
                const size_t at = static_cast<size_t>((n * Ho * Wo + p) * 2);
                double ix = unnormalised(gv[at], W), iy = unnormalised(gv[at + 1], H);
                double v = 0;
                if (o.mode == GridSampleMode::bicubic) {
                    const double fx = std::floor(ix), fy = std::floor(iy);
                    const auto wx = keys(ix - fx), wy = keys(iy - fy);
                    auto tap = [&](double k, int64_t size) {
                        return static_cast<int64_t>(o.padding == GridPadding::zeros ? k : paddedRef(k, size, o));
                    };
                    for (int a = 0; a < 4; ++a) {
                        for (int b = 0; b < 4; ++b) {
                            v += wy[a] * wx[b] * pixel(n, c, tap(fy - 1 + a, H), tap(fx - 1 + b, W));
                        }
                    }
                } else {
                    ix = paddedRef(ix, W, o);
                    iy = paddedRef(iy, H, o);
                    if (o.mode == GridSampleMode::nearest) {
                        v = pixel(n, c, static_cast<int64_t>(std::nearbyint(iy)),
                                  static_cast<int64_t>(std::nearbyint(ix)));
                    } else {
                        const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy;
                        const auto r = static_cast<int64_t>(fy), q = static_cast<int64_t>(fx);
                        v = (1 - ty) * ((1 - tx) * pixel(n, c, r, q) + tx * pixel(n, c, r, q + 1)) +
                            ty * ((1 - tx) * pixel(n, c, r + 1, q) + tx * pixel(n, c, r + 1, q + 1));
                    }
                }
                y.push_back(static_cast<float>(v));
            }
        }
    }
    return y;
}

// A grid [N, Ho, Wo, 2] whose positions lie inside and up to 3 pixels outside an image of
// H x W, each at least 0.15 pixels from a whole or half pixel coordinate, where sampling or
// its padding has a kink (and central differences would average two slopes).
Tensor gridAwayFromKinks(int64_t N, int64_t Ho, int64_t Wo, int64_t H, int64_t W, bool alignCorners, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<float> g;
    for (int64_t k = 0; k < N * Ho * Wo; ++k) {
        for (int64_t size : {W, H}) {
            const double whole = std::uniform_int_distribution<int>(-3, static_cast<int>(size) + 2)(rng);
            double frac = std::uniform_real_distribution<double>(0.15, 0.35)(rng);
            if (rng() % 2) frac += 0.5;
            const double i = whole + frac;
            const double a = alignCorners ? (size - 1) / 2.0 : size / 2.0, b = (size - 1) / 2.0;
            g.push_back(static_cast<float>((i - b) / a));
        }
    }
    return Tensor::fromVector({N, Ho, Wo, 2}, g);
}

// Every mode, padding and corner alignment against the reference, with numerical gradients
// of x and the grid; halves go to the even pixel in nearest; bad input named.
TEST(GridSample, ReferenceGradientShapeBadInput) {
    const int64_t N = 2, C = 3, H = 4, W = 5, Ho = 3, Wo = 4;
    // with the CPU's tap kernels, then a gather per tap (CUDA's path)
    for (bool kernels : {true, false}) {
        CpuBackend::setTapKernels(kernels);
        for (GridSampleMode mode : {GridSampleMode::bilinear, GridSampleMode::nearest, GridSampleMode::bicubic}) {
            for (GridPadding padding : {GridPadding::zeros, GridPadding::border, GridPadding::reflection}) {
                for (bool align : {false, true}) {
                    const GridSampleOptions o{.mode = mode, .padding = padding, .alignCorners = align};
                    SCOPED_TRACE(str(mode) + " " + str(padding) + (align ? " aligned" : "") +
                                 (kernels ? " tap kernels" : " gathers"));
                    GridSample sample(o);
                    const Tensor x = randomTensor({N, C, H, W}, 3);
                    const Tensor grid = gridAwayFromKinks(N, Ho, Wo, H, W, align, 5 + static_cast<int>(mode));
                    const Tensor y = sample({x, grid})[0];
                    EXPECT_EQ(y.shape(), (Shape{N, C, Ho, Wo}));
                    EXPECT_TRUE(allClose(y, gridSampleRef(x, grid, o), 1e-5f));
                    GradCheckOptions g;
                    g.eps = 1e-3f;
                    EXPECT_TRUE(checkGradients(sample, {x, grid}, g));
                    EXPECT_TRUE(checkShapes(sample, {x, grid}));
                }
            }
        }
    }
    CpuBackend::setTapKernels(true);
    // A grid of the pixel centres copies the image; nearest takes a half to the even pixel.
    const Tensor x = randomTensor({1, 2, 3, 5}, 4);
    std::vector<float> centres;
    for (int r = 0; r < 3; ++r) {
        for (int q = 0; q < 5; ++q) centres.insert(centres.end(), {-1.0f + q * 0.5f, -1.0f + r * 1.0f});
    }
    GridSample aligned({.alignCorners = true});
    EXPECT_TRUE(allClose(aligned({x, Tensor::fromVector({1, 3, 5, 2}, centres)})[0], x.toVector<float>(), 1e-6f));
    // with aligned corners across 5 columns, u = -0.75 + 0.5 k is column 0.5 + k
    GridSample nearest({.mode = GridSampleMode::nearest, .alignCorners = true});
    const Tensor halves =
        Tensor::fromVector({1, 1, 4, 2}, std::vector<float>{-0.75f, -1, -0.25f, -1, 0.25f, -1, 0.75f, -1});
    const std::vector<float> xv = x.toVector<float>();
    EXPECT_TRUE(allClose(nearest({x, halves})[0], {xv[0], xv[2], xv[2], xv[4], xv[15], xv[17], xv[17], xv[19]}, 0.0f));

    GridSample named({.name = "warp"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({randomTensor({2, 3, 4}, 1), randomTensor({2, 3, 4, 2}, 1)});
        },
        {"GridSample 'warp'", "[N, C, H, W]", "[2, 3, 4]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({randomTensor({2, 3, 4, 4}, 1), randomTensor({3, 3, 4, 2}, 1)});
        },
        {"[N, Ho, Wo, 2] with N = 2", "[3, 3, 4, 2]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({randomTensor({2, 3, 4, 4}, 1), randomTensor({2, 3, 4, 3}, 1)});
        },
        {"[N, Ho, Wo, 2]", "[2, 3, 4, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { named({randomTensor({2, 3, 4, 4}, 1)}); }, {"expects 2 input tensors, got 1"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({randomTensor({2, 3, 4, 4}, 1), Tensor::zeros({2, 3, 4, 2}, DType::int32)});
        },
        {"input 1 has dtype int32"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named({Tensor::zeros({1, 1, 4097, 4097}), randomTensor({1, 1, 1, 2}, 1)});
        },
        {"4097 x 4097", "2^24"}));
    EXPECT_THROW(gridSampleModeFromString("area"), ModuleError);
    EXPECT_THROW(gridPaddingFromString("wrap"), ModuleError);
    GridSample full({.mode = GridSampleMode::bicubic, .padding = GridPadding::reflection, .alignCorners = true});
    const std::string json = full.blueprint().toJson();
    for (const char* part : {"\"classname\": \"GridSample\"", "\"mode\": \"bicubic\"", "\"padding\": \"reflection\"",
                             "\"alignCorners\": true"}) {
        EXPECT_NE(json.find(part), std::string::npos) << part << " not in " << json;
    }
    EXPECT_EQ(buildModule(full.blueprint())->blueprint().toJson(), full.blueprint().toJson());
}

// The CPU's tap kernels on a problem large enough to run threaded (taps repeating positions
// and falling outside the image) against the gathers per tap, forward and both gradients;
// the backend ops' bad input named.
TEST(GridSample, TapKernelsMatchGathers) {
    const int64_t N = 3, C = 16, H = 20, W = 24, Ho = 22, Wo = 18;
    for (GridSampleMode mode : {GridSampleMode::bilinear, GridSampleMode::bicubic}) {
        SCOPED_TRACE(str(mode));
        const Tensor x = randomTensor({N, C, H, W}, 7);
        const Tensor grid = gridAwayFromKinks(N, Ho, Wo, H, W, false, 11);
        const Tensor dy = randomTensor({N, C, Ho, Wo}, 13);
        std::array<std::vector<std::vector<float>>, 2> results;
        for (bool kernels : {true, false}) {
            CpuBackend::setTapKernels(kernels);
            GridSample sample({.mode = mode});
            auto& r = results[kernels ? 0 : 1];
            r.push_back(sample({x, grid})[0].toVector<float>());
            for (const Tensor& g : sample.backward(Tensors{dy})) r.push_back(g.toVector<float>());
        }
        CpuBackend::setTapKernels(true);
        ASSERT_EQ(results[0].size(), 3u);
        for (size_t i = 0; i < 3; ++i) {
            SCOPED_TRACE(i == 0 ? "y" : i == 1 ? "dx" : "dgrid");
            const Tensor got = Tensor::fromVector({static_cast<int64_t>(results[0][i].size())}, results[0][i]);
            EXPECT_TRUE(allClose(got, results[1][i], 1e-4f));
        }
    }
    Backend& be = backendFor(Device::cpu());
    const Tensor x = Tensor::zeros({2, 3, 10}), w = Tensor::zeros({4, 2, 5}), y = Tensor::zeros({2, 3, 5});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            be.gatherTaps(x, Tensor::fromVector({4, 2, 5}, std::vector<int32_t>(40, 10)), w, y);
        },
        {"gatherTaps", "index 10 outside [0, 10)"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            be.gatherTaps(x, Tensor::zeros({4, 3, 5}, DType::int32), w, y);
        },
        {"gatherTaps", "idx [4, 3, 5]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            be.gatherTapsBackward(x, Tensor::zeros({4, 2, 5}, DType::int32), w, y, Tensor::zeros({2, 3, 9}), Tensor());
        },
        {"gatherTapsBackward", "dx [2, 3, 10]", "got dx [2, 3, 9]"}));
}

// A spatial transformer network on Fashion-MNIST: a localisation net (starting at the
// identity transform) -> SpatialTf -> a linear classifier, trained in a graph: the loss
// drops and the transform learns.
TEST(SpatialTf, TransformerNetworkTrainsOnFashionMnist) {
    ImageSet train;
    try {
        train = loadMnistFormat(kFashionMnistDir, "train", 2048);
    } catch (const IoError& e) {
        GTEST_SKIP() << e.what() << " (tools/setup.sh installs Debian's dataset-fashion-mnist)";
    }
    manualSeed(7);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto flat = node(std::make_shared<Flatten>(), x, "flat");
    auto loc1 = node(std::make_shared<Linear>(784, 32), flat, "loc1");
    auto act = node(std::make_shared<Activation>(ActivationKind::relu), loc1, "act");
    auto loc2 = node(std::make_shared<Linear>(32, 6), act, "loc2");
    auto theta = node(std::make_shared<Reshape>(Shape{-1, 2, 3}), loc2, "theta");
    auto stn = node(std::make_shared<SpatialTf>(SpatialTfOptions{.height = 20, .width = 20}), {x, theta}, "stn");
    auto flat2 = node(std::make_shared<Flatten>(), stn, "flat2");
    auto fc = node(std::make_shared<Linear>(400, 10), flat2, "fc");
    Graph net({x}, {fc}, "stnNet");
    // The localisation net starts at the identity: zero weights, bias [1, 0, 0, 0, 1, 0].
    Module& l2 = net.getByName("loc2");
    l2.getVar("W")->data.copyFrom(Tensor::zeros({32, 6}));
    l2.getVar("b")->data.copyFrom(Tensor::fromVector({6}, std::vector<float>{1, 0, 0, 0, 1, 0}));
    EXPECT_EQ(net.dataShapeFrom(Shapes{{64, 1, 28, 28}}), (Shapes{{64, 10}}));
    Adam adam(2e-3f);
    adam.setupOn(net);
    CrossEntropy ce;
    HandlerOptions options{.batchsize = 64, .progress = false};
    Trainer trainer(net, ce, adam, options);
    const double first = trainer.train(train.images, train.labels);
    double last = first;
    for (int epoch = 1; epoch < 4; ++epoch) last = trainer.train(train.images, train.labels);
    EXPECT_LT(last, first * 0.7) << "loss " << first << " -> " << last;
    const std::vector<float> b = l2.getVar("b")->data.toVector<float>();
    EXPECT_NE(b, (std::vector<float>{1, 0, 0, 0, 1, 0})); // the transform learnt
    std::printf("STN: loss %.3f -> %.3f\n", first, last);
}

// Any rank, per activation: what BatchNorm1D gives on the [N, size] view, forwards,
// backwards and in the running statistics.
TEST(BatchNorm, AnyRankIsPerActivation) {
    manualSeed(4);
    BatchNorm any(12);
    manualSeed(4);
    BatchNorm1D flat(12);
    const Tensor x = randomTensor({5, 3, 4}, 1), dy = randomTensor({5, 3, 4}, 2);
    const Tensor y = any(x);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(y.toVector<float>(), flat(x.reshape({5, 12})).toVector<float>());
    any.zeroGradParams();
    flat.zeroGradParams();
    EXPECT_EQ(any.backward(dy).toVector<float>(), flat.backward(dy.reshape({5, 12})).toVector<float>());
    EXPECT_EQ(any.getVar("scale")->grad.toVector<float>(), flat.getVar("scale")->grad.toVector<float>());
    EXPECT_EQ(any.getAttr("var").toVector<float>(), flat.getAttr("var").toVector<float>());
    any.evalMode(); // the running statistics of one training batch
    EXPECT_EQ(any(x).toVector<float>(), (flat.evalMode(), flat(x.reshape({5, 12}))).toVector<float>());
    any.trainMode();
    EXPECT_TRUE(checkGradients(any, {randomTensor({4, 2, 2, 3}, 3)}));
    EXPECT_TRUE(checkShapes(any, {randomTensor({3, 6, 2}, 4)}));
    BatchNorm named(12, {.name = "bn"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named(randomTensor({5, 11}, 1));
        },
        {"BatchNorm 'bn'", "12 activations", "[5, 11]"}));
    EXPECT_TRUE(throwsShapeError([&] { named(randomTensor({1, 12}, 1)); }, {"at least 2 samples"}));
}

// A user's layer without subclassing: y = x * w + x^2 (a parameter w of one element),
// with its backward and parameter gradient, registered so that blueprints rebuild it.
GlueSpec scaledSquare() {
    GlueSpec s;
    s.shapes = [](const Shapes& in) {
        if (in.size() != 1) throw ShapeError("expects one input, got " + std::to_string(in.size()));
        return in;
    };
    s.forward = [](Glue& self, const Tensors& in) {
        const std::vector<float> x = in[0].toVector<float>();
        const float w = self.getVar("w")->data.toVector<float>()[0];
        std::vector<float> y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * w + x[i] * x[i];
        return Tensors{Tensor::fromVector(in[0].shape(), y).to(in[0].device())};
    };
    s.backward = [](Glue& self, const Tensors& grads) {
        const std::vector<float> x = self.inData().toVector<float>(), g = grads[0].toVector<float>();
        const float w = self.getVar("w")->data.toVector<float>()[0];
        std::vector<float> dx(x.size());
        for (size_t i = 0; i < x.size(); ++i) dx[i] = g[i] * (w + 2 * x[i]);
        return Tensors{Tensor::fromVector(self.inData().shape(), dx)};
    };
    s.paramGrads = [](Glue& self, const Tensors& grads, float scale, float momentum) {
        const std::vector<float> x = self.inData().toVector<float>(), g = grads[0].toVector<float>();
        double dw = 0;
        for (size_t i = 0; i < x.size(); ++i) dw += g[i] * x[i];
        Tensor& grad = self.getVar("w")->grad;
        const float old = grad.toVector<float>()[0];
        grad.copyFrom(Tensor::fromVector({1}, std::vector<float>{static_cast<float>(scale * dw + momentum * old)}));
    };
    s.params = {{"w", Tensor::fromVector({1}, std::vector<float>{0.5f})}};
    return s;
}

TEST(Glue, AUserLayerComputesChecksAndRoundTrips) {
    registerGlue("scaledSquare", scaledSquare);
    EXPECT_TRUE(isGlueRegistered("scaledSquare"));
    Glue g("scaledSquare", "sq");
    const Tensor x = Tensor::fromVector({2, 2}, std::vector<float>{1, -2, 3, 0.5f});
    EXPECT_TRUE(allClose(g(x), {1.5f, 3.0f, 10.5f, 0.5f}, 1e-6f));
    EXPECT_TRUE(checkGradients(g, {randomTensor({3, 4}, 1)}));
    EXPECT_TRUE(checkShapes(g, {randomTensor({3, 4}, 1)}));
    EXPECT_TRUE(throwsShapeError([&] { g({x, x}); }, {"Glue 'sq'", "expects one input, got 2"}));
    // The blueprint names the kind; the factory rebuilds it from the registry.
    ModulePtr back = buildModule(g.blueprint());
    EXPECT_EQ(back->blueprint().toJson(), g.blueprint().toJson());
    EXPECT_NE(g.blueprint().toJson().find("\"kind\": \"scaledSquare\""), std::string::npos);
    EXPECT_TRUE(throwsModuleError([&] { Glue("unknownKind"); }, {"'unknownKind' is not registered", "scaledSquare"}));
    // A function that breaks its contract is named.
    GlueSpec bad = scaledSquare();
    bad.forward = [](Glue&, const Tensors& in) {
        return Tensors{Tensor::zeros({1, 1}, DType::float32, in[0].device())};
    };
    Glue broken("broken", bad, "b");
    EXPECT_TRUE(throwsModuleError([&] { broken(x); }, {"Glue 'b'", "output 0", "[1, 1]", "[2, 2]"}));
    GlueSpec noBackward = scaledSquare();
    noBackward.backward = nullptr;
    Glue forwardOnly("forwardOnly", noBackward);
    forwardOnly(x);
    EXPECT_TRUE(throwsModuleError([&] { forwardOnly.backward(x); }, {"no backward"}));
    EXPECT_THROW(Glue("empty", GlueSpec{}), ModuleError);
}

// In a graph between two linear layers, shape-checked as a whole, trained: the loss drops
// and the Glue's own parameter moves.
TEST(Glue, TrainsInAGraph) {
    registerGlue("scaledSquare", scaledSquare);
    manualSeed(3);
    auto x = node(std::make_shared<Identity>(), {}, "x");
    auto a = node(std::make_shared<Linear>(2, 4), x, "a");
    auto sq = node(std::make_shared<Glue>("scaledSquare"), a, "sq");
    auto b = node(std::make_shared<Linear>(4, 1), sq, "b");
    Graph net({x}, {b});
    EXPECT_EQ(net.dataShapeFrom(Shapes{{16, 2}}), (Shapes{{16, 1}}));
    const Tensor in = randomTensor({64, 2}, 4);
    std::vector<float> t;
    for (float v : in.toVector<float>()) t.push_back(v); // target: x0^2 + x1 (read pairwise)
    std::vector<float> target(64);
    for (size_t n = 0; n < 64; ++n) target[n] = t[2 * n] * t[2 * n] + t[2 * n + 1];
    const Tensor y = Tensor::fromVector({64, 1}, target);
    Adam adam(0.02f);
    adam.setupOn(net);
    MSE mse;
    const float w0 = net.getByName("sq").getVar("w")->data.toVector<float>()[0];
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
        adam.zeroGradParams();
        const CostResult r = mse(net(in), y);
        net.backward(r.grad[0]);
        adam.update();
        if (step == 0) first = r.error;
        last = r.error;
    }
    EXPECT_LT(last, first / 10);
    EXPECT_NE(net.getByName("sq").getVar("w")->data.toVector<float>()[0], w0);
}

} // namespace
} // namespace tessera
