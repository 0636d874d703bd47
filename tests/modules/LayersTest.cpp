// The smaller layers of the catalogue: each with a reference, a gradient check, a shape
// check, bad input and its blueprint.
#include <algorithm>
#include <cmath>

#include "GradCheck.h"
#include "containers/Graph.h"
#include "io/Factory.h"
#include "io/Hdf5.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Cast.h"
#include "modules/Conv.h"
#include "modules/CumSum.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/GatherElements.h"
#include "modules/Gelu.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/NoiseInjector.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pow.h"
#include "modules/Reduce.h"
#include "modules/Tile.h"
#include "modules/TopK.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera {
namespace {
using namespace testing;
using F = std::vector<float>;

bool blueprintHas(const Module& m, const std::vector<std::string>& parts) {
    const std::string json = m.blueprint().toJson();
    for (const auto& p : parts) {
        if (json.find(p) == std::string::npos) {
            ADD_FAILURE() << p << " not in " << json;
            return false;
        }
    }
    return true;
}

// ---- Dropout2D ------------------------------------------------------------------------

TEST(Dropout2D, DropsWholeMapsAndScalesTheRest) {
    Dropout2D drop({.p = 0.5f, .seed = 3});
    Tensor x = randomTensor({8, 6, 3, 3}, 1, 1.0f, 2.0f);
    const auto y = drop(x).toVector<float>();
    const auto xs = x.toVector<float>();
    const auto mask = drop.mask().toVector<float>();
    int dropped = 0;
    for (size_t p = 0; p < 48; ++p) {
        ASSERT_TRUE(mask[p] == 0.0f || mask[p] == 2.0f) << mask[p];
        dropped += mask[p] == 0.0f;
        for (size_t i = 0; i < 9; ++i) ASSERT_FLOAT_EQ(y[p * 9 + i], xs[p * 9 + i] * mask[p]);
    }
    EXPECT_GT(dropped, 10);
    EXPECT_LT(dropped, 38);
    const auto dx = drop.backward(Tensor::full({8, 6, 3, 3}, 1.0f)).toVector<float>();
    for (size_t i = 0; i < dx.size(); ++i) ASSERT_FLOAT_EQ(dx[i], mask[i / 9]);
    drop.evalMode();
    EXPECT_TRUE(drop(x).sharesStorage(x));
}

TEST(Dropout2D, ZeroRateInTrainModeIsIdentity) {
    Dropout2D drop({.p = 0.0f, .seed = 3});
    ASSERT_TRUE(drop.isTrain());
    const Tensor x = randomTensor({2, 3, 4, 4}, 1), dy = randomTensor({2, 3, 4, 4}, 2);
    EXPECT_TRUE(drop(x).sharesStorage(x));
    EXPECT_TRUE(drop.backward(dy).sharesStorage(dy));
    EXPECT_FALSE(drop.mask().defined());
    const MemoryUse use = drop.memoryUse({{2, 3, 4, 4}}, {Layout::plain}, true, Device{});
    EXPECT_EQ(use.outputViews[0], 0);
    EXPECT_EQ(use.keptBytes, 0);
}

TEST(Dropout2D, GradientShapeBadInput) {
    Dropout2D drop({.p = 0.3f, .seed = 4, .name = "d2"});
    const uint64_t seed = drop.generator().seed();
    GradCheckOptions opts;
    opts.beforeForward = [&] { drop.generator().manualSeed(seed); };
    EXPECT_TRUE(checkGradients(drop, {randomTensor({3, 4, 2, 2}, 2)}, opts));
    EXPECT_TRUE(checkShapes(drop, {randomTensor({3, 4, 2, 2}, 2)}));
    EXPECT_TRUE(throwsShapeError([&] { drop(Tensor::zeros({3, 4})); }, {"Dropout2D 'd2'", "[N, C, H, W]"}));
    EXPECT_THROW(Dropout2D({.p = 1.0f}), ModuleError);
    EXPECT_TRUE(blueprintHas(drop, {"\"p\": 0.300000012"}));
}

// ---- Pad ------------------------------------------------------------------------------

TEST(Pad, Reference) {
    Pad1D constant({1, 2}, {.fillValue = 9.0f});
    EXPECT_TRUE(allClose(constant(Tensor::fromVector({1, 1, 3}, F{1, 2, 3})), {9, 1, 2, 3, 9, 9}));
    Pad1D reflect({2, 1}, {.mode = PadMode::reflect});
    EXPECT_TRUE(allClose(reflect(Tensor::fromVector({1, 1, 3}, F{1, 2, 3})), {3, 2, 1, 2, 3, 2}));
    // Reflected positions add their gradients into the source.
    EXPECT_TRUE(allClose(reflect.backward(Tensor::fromVector({1, 1, 6}, F{1, 10, 100, 1000, 10000, 100000})),
                         {100, 101010, 10001}));
    Pad2D pad2({1, 0, 0, 1});
    EXPECT_TRUE(allClose(pad2(Tensor::fromVector({1, 1, 2, 2}, F{1, 2, 3, 4})), {0, 0, 0, 1, 2, 0, 3, 4, 0}));
    Pad2D reflect2({1}, {.mode = PadMode::reflect});
    const auto y = reflect2(Tensor::fromVector({1, 1, 2, 3}, F{1, 2, 3, 4, 5, 6})).toVector<float>();
    EXPECT_EQ(y, (F{5, 4, 5, 6, 5, 2, 1, 2, 3, 2, 5, 4, 5, 6, 5, 2, 1, 2, 3, 2}));
    // Edge repeats the border value (PyTorch's replicate), any number of times; the
    // repeated positions add their gradients into the border element.
    Pad1D edge({2, 3}, {.mode = PadMode::edge});
    EXPECT_TRUE(allClose(edge(Tensor::fromVector({1, 1, 2}, F{1, 2})), {1, 1, 1, 2, 2, 2, 2}));
    EXPECT_TRUE(allClose(edge.backward(Tensor::fromVector({1, 1, 7}, F{1, 10, 100, 1000, 10000, 100000, 1000000})),
                         {111, 1111000}));
    Pad2D edge2({1, 0, 2, 1}, {.mode = PadMode::edge});
    EXPECT_EQ(edge2(Tensor::fromVector({1, 1, 2, 2}, F{1, 2, 3, 4})).toVector<float>(),
              (F{1, 1, 1, 2, 2, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4}));
    EXPECT_EQ(str(PadMode::edge), "edge");
    EXPECT_EQ(padModeFromString("reflect"), PadMode::reflect);
    EXPECT_THROW(padModeFromString("replicate"), ModuleError);
}

TEST(Pad, GradientShapeBadInput) {
    Pad2D constant({1, 2, 0, 3}, {.fillValue = 0.5f, .name = "pad"});
    Pad2D reflect({1, 2, 2, 1}, {.mode = PadMode::reflect});
    Pad1D pad1({2});
    EXPECT_TRUE(checkGradients(constant, {randomTensor({2, 2, 3, 4}, 3)}));
    EXPECT_TRUE(checkGradients(reflect, {randomTensor({2, 2, 3, 4}, 3)}));
    EXPECT_TRUE(checkGradients(pad1, {randomTensor({2, 2, 3}, 3)}));
    Pad2D edge({3, 1, 0, 4}, {.mode = PadMode::edge, .name = "edge"});
    EXPECT_TRUE(checkGradients(edge, {randomTensor({2, 2, 3, 4}, 3)}));
    EXPECT_TRUE(checkShapes(edge, {randomTensor({2, 2, 3, 4}, 3)}));
    EXPECT_TRUE(throwsShapeError([&] { edge(Tensor::zeros({1, 1, 2})); }, {"Pad2D 'edge'", "[1, 1, 2]"}));
    EXPECT_TRUE(blueprintHas(edge, {"\"mode\": \"edge\""}));
    EXPECT_TRUE(checkShapes(constant, {randomTensor({2, 2, 3, 4}, 3)}));
    EXPECT_TRUE(checkShapes(pad1, {randomTensor({2, 2, 3}, 3)}));
    EXPECT_TRUE(throwsShapeError([&] { constant(Tensor::zeros({2, 3})); }, {"Pad2D 'pad'", "[2, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { reflect(Tensor::zeros({1, 1, 2, 5})); }, {"reflect padding", "[1, 1, 2, 5]"}));
    EXPECT_THROW(Pad2D({1, 2, 3}), ModuleError);
    EXPECT_TRUE(blueprintHas(reflect, {"\"classname\": \"Pad2D\"", "\"pad\": [1, 2, 2, 1]", "\"mode\": \"reflect\""}));
}

// ---- Upsample -------------------------------------------------------------------------

TEST(Upsample, Reference) {
    Upsample2D nearest(2);
    EXPECT_TRUE(allClose(nearest(Tensor::fromVector({1, 1, 1, 2}, F{1, 2})), {1, 1, 2, 2, 1, 1, 2, 2}));
    EXPECT_TRUE(allClose(nearest.backward(Tensor::fromVector({1, 1, 2, 4}, F{1, 2, 3, 4, 5, 6, 7, 8})), {14, 22}));
    // Linear with half-pixel centres: outputs sit at input coordinates -0.25, 0.25, 0.75,
    // 1.25 (clamped at the edges).
    Upsample2D linear(2, {.mode = ResampleMode::linear});
    EXPECT_TRUE(allClose(linear(Tensor::fromVector({1, 1, 1, 2}, F{0, 4})), {0, 1, 3, 4, 0, 1, 3, 4}, 1e-5f));
    Upsample3D up3(2);
    EXPECT_TRUE(allClose(up3(Tensor::fromVector({1, 1, 1, 1, 1}, F{7})), F(8, 7.0f)));
    // Cubic at the same positions from four inputs, the edges repeated: output 1 of [0, 4]
    // sits at 0.25, between taps -1, 0, 1, 2 (inputs 0, 0, 4, 4) at distances 1.25, 0.25,
    // 0.75, 1.75, whose Keys weights are -0.10546875, 0.87890625, 0.26171875, -0.03515625:
    // 0.90625; output 0, at -0.25, overshoots below the input: 4 * -0.10546875. PyTorch's
    // F.interpolate(scale_factor=2, mode='bicubic') gives the same.
    Upsample2D cubic(2, {.mode = ResampleMode::cubic});
    EXPECT_TRUE(allClose(cubic(Tensor::fromVector({1, 1, 1, 2}, F{0, 4})),
                         {-0.421875f, 0.90625f, 3.09375f, 4.421875f, -0.421875f, 0.90625f, 3.09375f, 4.421875f},
                         1e-5f));
}

TEST(Upsample, GradientShapeBadInput) {
    Upsample2D nearest(3, {.name = "up"});
    Upsample2D linear(2, {.mode = ResampleMode::linear});
    Upsample3D linear3(2, {.mode = ResampleMode::linear});
    Upsample2D cubic(2, {.mode = ResampleMode::cubic});
    Upsample3D cubic3(2, {.mode = ResampleMode::cubic, .alignCorners = true});
    EXPECT_TRUE(checkGradients(cubic, {randomTensor({2, 2, 3, 4}, 4)}));
    EXPECT_TRUE(checkGradients(cubic3, {randomTensor({1, 2, 2, 3, 2}, 4)}));
    EXPECT_TRUE(checkShapes(cubic3, {randomTensor({1, 2, 2, 3, 2}, 4)}));
    EXPECT_TRUE(checkGradients(nearest, {randomTensor({2, 2, 2, 3}, 4)}));
    EXPECT_TRUE(checkGradients(linear, {randomTensor({2, 2, 3, 3}, 4)}));
    EXPECT_TRUE(checkGradients(linear3, {randomTensor({1, 2, 2, 2, 3}, 4)}));
    EXPECT_TRUE(checkShapes(nearest, {randomTensor({2, 2, 2, 3}, 4)}));
    EXPECT_TRUE(checkShapes(linear3, {randomTensor({1, 2, 2, 2, 3}, 4)}));
    EXPECT_TRUE(throwsShapeError([&] { nearest(Tensor::zeros({2, 2, 3})); }, {"Upsample2D 'up'", "[2, 2, 3]"}));
    nearest(Tensor::zeros({1, 1, 2, 2}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            nearest.backward(Tensor::zeros({1, 1, 5, 5}));
        },
        {"up", "expected the output shape"}));
    EXPECT_TRUE(blueprintHas(linear, {"\"scale\": 2", "\"mode\": \"linear\""}));
}

// align_corners=True: the corners' centres coincide, so [0, 3] upsampled by 3 spaces six
// outputs evenly from 0 to 3 (PyTorch's nn.Upsample(scale_factor=3, mode='linear',
// align_corners=True) gives the same); nearest has no corners.
TEST(Upsample, AlignCorners) {
    Upsample2D up(3, {.mode = ResampleMode::linear, .alignCorners = true});
    const F row = {0, 0.6f, 1.2f, 1.8f, 2.4f, 3}; // and the one row three times
    F want;
    for (int i = 0; i < 3; ++i) want.insert(want.end(), row.begin(), row.end());
    EXPECT_TRUE(allClose(up(Tensor::fromVector({1, 1, 1, 2}, F{0, 3})), want, 1e-5f));
    EXPECT_TRUE(checkGradients(up, {randomTensor({2, 2, 3, 4}, 4)}));
    EXPECT_TRUE(blueprintHas(up, {"\"alignCorners\": true"}));
    EXPECT_THROW(Upsample2D(2, {.alignCorners = true}), ModuleError);
}

// ---- Resize ---------------------------------------------------------------------------

// Keys' cubic convolution kernel with a = -0.75 at distance x (PyTorch's bicubic).
double keys(double x) {
    const double a = -0.75;
    x = std::abs(x);
    if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    return x < 2 ? ((a * x - 5 * a) * x + 8 * a) * x - 4 * a : 0.0;
}

// A NumPy-style reference of PyTorch's F.interpolate(size=...) along one dim (nearest:
// floor(o * in / out); nearest-exact: floor((o + 0.5) * in / out); linear: half-pixel
// centres or aligned corners, clamped; cubic: the same positions, not clamped, from the four
// inputs around them, each index clamped to the edges).
std::vector<float> interpolate1D(const std::vector<float>& x, int64_t out, ResampleParams p) {
    const auto in = static_cast<int64_t>(x.size());
    std::vector<float> y;
    for (int64_t o = 0; o < out; ++o) {
        if (p.mode == ResampleMode::cubic) {
            const double s = p.alignCorners ? (out > 1 ? o * double(in - 1) / double(out - 1) : 0.0)
                                            : (o + 0.5) * double(in) / double(out) - 0.5;
            const double f = std::floor(s);
            double acc = 0;
            for (int64_t k = -1; k <= 2; ++k) {
                const int64_t i = std::clamp(static_cast<int64_t>(f) + k, int64_t{0}, in - 1);
                acc += keys(f + double(k) - s) * x[size_t(i)];
            }
            y.push_back(static_cast<float>(acc));
            continue;
        }
        if (p.mode == ResampleMode::nearest) {
            y.push_back(x[static_cast<size_t>(o * in / out)]);
            continue;
        }
        if (p.mode == ResampleMode::nearestExact) {
            y.push_back(x[static_cast<size_t>(std::min((2 * o + 1) * in / (2 * out), in - 1))]);
            continue;
        }
        double s = p.alignCorners ? (out > 1 ? o * double(in - 1) / double(out - 1) : 0.0)
                                  : (o + 0.5) * double(in) / double(out) - 0.5;
        s = std::clamp(s, 0.0, double(in - 1));
        const auto i0 = static_cast<int64_t>(std::floor(s));
        const int64_t i1 = std::min(i0 + 1, in - 1);
        const double w = s - double(i0);
        y.push_back(static_cast<float>((1 - w) * x[size_t(i0)] + w * x[size_t(i1)]));
    }
    return y;
}

// Every mode, up and down, by ratios that are not whole, against the reference above, in
// one dim at a time (the other dim kept) and in both at once (separable: the rows, then the
// columns), forward; gradients numerically.
TEST(Resize, ReferenceGradientShapeBadInput) {
    const std::vector<ResampleParams> modes = {{ResampleMode::nearest, false}, {ResampleMode::nearestExact, false},
                                               {ResampleMode::linear, false},  {ResampleMode::linear, true},
                                               {ResampleMode::cubic, false},   {ResampleMode::cubic, true}};
    const Tensor x = randomTensor({2, 3, 5, 7}, 11);
    for (const ResampleParams& p : modes) {
        for (const std::vector<int64_t>& size : {std::vector<int64_t>{8, 3}, std::vector<int64_t>{3, 11},
                                                 std::vector<int64_t>{1, 7}, std::vector<int64_t>{5, 1}}) {
            SCOPED_TRACE(str(p.mode) + (p.alignCorners ? " aligned" : "") + " to " + Shape(size).str());
            Resize2D r(size, {.mode = p.mode, .alignCorners = p.alignCorners});
            const Tensor y = r(x);
            ASSERT_EQ(y.shape(), Shape({2, 3, size[0], size[1]}));
            // Reference: along W for every row, then along H for every column.
            const std::vector<float> xs = x.toVector<float>();
            std::vector<float> want;
            for (int64_t plane = 0; plane < 6; ++plane) {
                std::vector<std::vector<float>> rows; // [5][size[1]]
                for (int64_t h = 0; h < 5; ++h) {
                    const auto at = xs.begin() + (plane * 5 + h) * 7;
                    rows.push_back(interpolate1D(std::vector<float>(at, at + 7), size[1], p));
                }
                std::vector<std::vector<float>> cols; // [size[1]][size[0]]
                for (int64_t w = 0; w < size[1]; ++w) {
                    std::vector<float> col;
                    for (int64_t h = 0; h < 5; ++h) col.push_back(rows[size_t(h)][size_t(w)]);
                    cols.push_back(interpolate1D(col, size[0], p));
                }
                for (int64_t h = 0; h < size[0]; ++h)
                    for (int64_t w = 0; w < size[1]; ++w) want.push_back(cols[size_t(w)][size_t(h)]);
            }
            EXPECT_TRUE(allClose(y, want, 1e-5f));
            if (size[0] == 3) { // down along H, up along W
                EXPECT_TRUE(checkGradients(r, {randomTensor({1, 2, 5, 7}, 12)}));
            }
            EXPECT_TRUE(checkShapes(r, {randomTensor({2, 3, 5, 7}, 13)}));
        }
    }
    // 3-D: every mode against the reference along W, then H, then D, with all three dims
    // resized, with the middle one kept, and with none resized (a copy).
    const Tensor x3 = randomTensor({1, 2, 3, 4, 5}, 15);
    const std::vector<float> xs3 = x3.toVector<float>();
    for (const ResampleParams& p : modes) {
        for (const std::vector<int64_t>& size :
             {std::vector<int64_t>{5, 2, 7}, std::vector<int64_t>{2, 4, 8}, std::vector<int64_t>{3, 4, 5}}) {
            SCOPED_TRACE(str(p.mode) + (p.alignCorners ? " aligned" : "") + " to " + Shape(size).str());
            Resize3D r(size, {.mode = p.mode, .alignCorners = p.alignCorners});
            const int64_t in[3] = {3, 4, 5};
            // cur holds the plane as [D][H][W] with the dims done so far at their new size.
            int64_t dims[3] = {3, 4, 5};
            std::vector<float> want;
            for (int64_t plane = 0; plane < 2; ++plane) {
                std::vector<float> cur(xs3.begin() + plane * 60, xs3.begin() + (plane + 1) * 60);
                std::copy(in, in + 3, dims);
                for (int d = 2; d >= 0; --d) { // resample along dim d every line of cur
                    int64_t next[3] = {dims[0], dims[1], dims[2]};
                    next[d] = size[size_t(d)];
                    std::vector<float> out(size_t(next[0] * next[1] * next[2]));
                    const int64_t st[3] = {dims[1] * dims[2], dims[2], 1}, nt[3] = {next[1] * next[2], next[2], 1};
                    int64_t lines[3] = {dims[0], dims[1], dims[2]};
                    lines[d] = 1; // one line per position of the other two dims
                    for (int64_t i0 = 0; i0 < lines[0]; ++i0)
                        for (int64_t i1 = 0; i1 < lines[1]; ++i1)
                            for (int64_t i2 = 0; i2 < lines[2]; ++i2) {
                                std::vector<float> line;
                                for (int64_t k = 0; k < dims[d]; ++k)
                                    line.push_back(cur[size_t(i0 * st[0] + i1 * st[1] + i2 * st[2] + k * st[d])]);
                                const std::vector<float> got = interpolate1D(line, next[d], p);
                                for (int64_t k = 0; k < next[d]; ++k)
                                    out[size_t(i0 * nt[0] + i1 * nt[1] + i2 * nt[2] + k * nt[d])] = got[size_t(k)];
                            }
                    cur = out;
                    std::copy(next, next + 3, dims);
                }
                want.insert(want.end(), cur.begin(), cur.end());
            }
            EXPECT_TRUE(allClose(r(x3), want, 1e-5f));
            if (p.mode == ResampleMode::cubic && size[1] == 4) {
                EXPECT_TRUE(checkGradients(r, {randomTensor({1, 2, 3, 4, 5}, 16)}));
            }
        }
    }
    // A 1x1x1 input spreads everywhere.
    Resize3D r3({2, 3, 4}, {.mode = ResampleMode::linear});
    EXPECT_TRUE(allClose(r3(Tensor::fromVector({1, 1, 1, 1, 1}, F{7})), F(24, 7.0f)));
    EXPECT_TRUE(checkGradients(r3, {randomTensor({1, 2, 3, 2, 5}, 14)}));
    // Bad input: ranks, sizes, and alignCorners with nearest.
    Resize2D named({4, 4}, {.name = "rs"});
    EXPECT_TRUE(throwsShapeError([&] { named(Tensor::zeros({2, 2, 3})); }, {"Resize2D 'rs'", "[2, 2, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { named(Tensor::zeros({2, 2, 0, 3})); }, {"Resize2D 'rs'", "[2, 2, 0, 3]"}));
    EXPECT_THROW(Resize2D({4}), ModuleError);
    EXPECT_THROW(Resize2D({4, 0}), ModuleError);
    EXPECT_THROW(Resize3D({4, 4}), ModuleError);
    EXPECT_THROW(Resize2D({4, 4}, {.alignCorners = true}), ModuleError);
    EXPECT_THROW(Resize2D({4, 4}, {.mode = ResampleMode::nearestExact, .alignCorners = true}), ModuleError);
    EXPECT_TRUE(blueprintHas(named, {"\"size\": [4, 4]", "\"mode\": \"nearest\""}));
    EXPECT_TRUE(blueprintHas(Resize2D({4, 4}, {.mode = ResampleMode::nearestExact}), {"\"mode\": \"nearest-exact\""}));
    EXPECT_EQ(resampleModeFromString("nearest-exact"), ResampleMode::nearestExact);
    EXPECT_EQ(resampleModeFromString("cubic"), ResampleMode::cubic);
    EXPECT_TRUE(throwsModuleError([] { resampleModeFromString("bicubic"); },
                                  {"nearest, nearest-exact, linear or cubic", "'bicubic'"}));
    // At whole upscales nearest-exact picks nearest's inputs.
    Upsample2D up(3), upExact(3, {.mode = ResampleMode::nearestExact});
    EXPECT_EQ(upExact(x).toVector<float>(), up(x).toVector<float>());
}

// ---- PRelu ----------------------------------------------------------------------------

TEST(PRelu, Reference) {
    PRelu prelu(2);
    prelu.getVar("slopes")->data.copyFrom(Tensor::fromVector({2}, F{0.1f, 0.5f}));
    Tensor x = Tensor::fromVector({1, 2, 2}, F{-1, 2, -4, 3});
    EXPECT_TRUE(allClose(prelu(x), {-0.1f, 2, -2, 3}));
    prelu.zeroGradParams();
    EXPECT_TRUE(allClose(prelu.backward(Tensor::fromVector({1, 2, 2}, F{1, 1, 2, 2})), {0.1f, 1, 1, 2}));
    // dslope[c] = sum over negative inputs of x * dy
    EXPECT_TRUE(allClose(prelu.getVar("slopes")->grad, {-1, -8}));
}

TEST(PRelu, GradientShapeBadInput) {
    PRelu prelu(3, {.name = "prelu"});
    PRelu shared(3, {.sharedMaps = true});
    GradCheckOptions opts;
    opts.kink = 0.0f;
    EXPECT_TRUE(checkGradients(prelu, {randomTensor({2, 3, 4}, 5)}, opts));
    EXPECT_TRUE(checkGradients(shared, {randomTensor({2, 3, 2, 2}, 6)}, opts));
    EXPECT_TRUE(checkShapes(prelu, {randomTensor({2, 3, 4}, 5)}));
    EXPECT_TRUE(throwsShapeError([&] { prelu(Tensor::zeros({2, 4, 4})); }, {"PRelu 'prelu'", "[N, 3, ...]"}));
    EXPECT_EQ(shared.getVar("slopes")->data.shape(), (Shape{1}));
    EXPECT_TRUE(blueprintHas(shared, {"\"maps\": 3", "\"sharedMaps\": true"}));
}

// ---- Gelu -----------------------------------------------------------------------------

TEST(Gelu, ReferenceGradientShape) {
    Gelu gelu("g");
    const F xs = {-3, -1, -0.5f, 0, 0.5f, 2};
    F y, dx;
    for (float x : xs) {
        const double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
        y.push_back(static_cast<float>(x * cdf));
        dx.push_back(static_cast<float>(cdf + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI)));
    }
    EXPECT_TRUE(allClose(gelu(Tensor::fromVector({2, 3}, xs)), y, 1e-5f));
    EXPECT_TRUE(allClose(gelu.backward(Tensor::full({2, 3}, 1.0f)), dx, 1e-4f));
    EXPECT_TRUE(checkGradients(gelu, {randomTensor({3, 5}, 7, -3.0f, 3.0f)}));
    EXPECT_TRUE(checkShapes(gelu, {randomTensor({3, 5}, 7)}));
    EXPECT_TRUE(throwsShapeError([&] { gelu(Tensor::zeros({2}, DType::int32)); }, {"Gelu 'g'", "int32"}));
    EXPECT_EQ(gelu.blueprint().toJson(), "{\"classname\": \"Gelu\", \"scheme\": {\"name\": \"g\"}}");
}

// ---- Embedder -------------------------------------------------------------------------

TEST(Embedder, Reference) {
    Embedder emb(4, 3, 2);
    emb.getVar("W")->data.copyFrom(Tensor::fromVector({4, 2}, F{0, 1, 10, 11, 20, 21, 30, 31}));
    Tensor ids = Tensor::fromVector({2, 3}, std::vector<int32_t>{3, 0, 3, 1, 2, 1});
    EXPECT_TRUE(allClose(emb(ids), {30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 10, 11}));
    emb.zeroGradParams();
    EXPECT_FALSE(emb.backward(Tensor::fromVector({2, 3, 2}, F{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6})).defined());
    EXPECT_TRUE(allClose(emb.getVar("W")->grad, {2, 2, 10, 10, 5, 5, 4, 4}));
}

TEST(Embedder, GradientShapeBadInput) {
    Embedder emb(5, 3, 4, {.name = "emb"});
    Tensor ids = Tensor::fromVector({2, 3}, std::vector<int32_t>{4, 0, 4, 1, 2, 2});
    GradCheckOptions opts;
    opts.checkInputs = false; // ids are discrete
    EXPECT_TRUE(checkGradients(emb, {ids}, opts));
    EXPECT_EQ(emb.dataShapeFrom(ids.shape()), emb(ids).shape());
    EXPECT_EQ(emb.gradShapeFrom(Shape{2, 3, 4}), ids.shape());
    EXPECT_TRUE(throwsShapeError(
        [&] {
            emb(Tensor::fromVector({1, 3}, std::vector<int32_t>{0, 5, 1}));
        },
        {"Embedder 'emb'", "index 5", "[0, 5)"}));
    EXPECT_TRUE(throwsShapeError([&] { emb(Tensor::zeros({2, 3})); }, {"emb", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { emb(Tensor::zeros({2, 4}, DType::int32)); }, {"emb", "[N, 3]"}));
    EXPECT_TRUE(blueprintHas(emb, {"\"vocabulary\": 5", "\"sentlength\": 3", "\"embsize\": 4"}));
    // Tables past 64 bits of bytes are errors, not wrapped sizes.
    EXPECT_TRUE(throwsShapeError([] { Embedder(int64_t{1} << 62, 1, 4); }, {"overflows 64 bits"}));
    EXPECT_TRUE(throwsShapeError([] { Embedder(int64_t{1} << 32, 1, int64_t{1} << 32); }, {"overflows 64 bits"}));
}

TEST(Embedder, PaddingIdxEmbedsToZerosAndLearnsNothing) {
    Embedder emb(4, 3, 2, {.initscheme = InitScheme::uniform, .name = "emb", .paddingIdx = -1}); // id 3
    EXPECT_EQ(emb.getVar("W")->data.toVector<float>()[6], 0.0f);
    EXPECT_EQ(emb.getVar("W")->data.toVector<float>()[7], 0.0f);
    EXPECT_NE(emb.getVar("W")->data.toVector<float>()[0], 0.0f); // the others drawn
    Tensor ids = Tensor::fromVector({2, 3}, std::vector<int32_t>{3, 0, 3, 1, 2, 3});
    const std::vector<float> y = emb(ids).toVector<float>();
    for (size_t k : {0u, 1u, 4u, 5u, 10u, 11u}) EXPECT_EQ(y[k], 0.0f) << k; // the padding positions
    emb.zeroGradParams();
    emb.backward(Tensor::fromVector({2, 3, 2}, F{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}));
    EXPECT_TRUE(allClose(emb.getVar("W")->grad, {2, 2, 4, 4, 5, 5, 0, 0})); // row 3's 1 + 3 + 6 dropped
    // The other rows' gradients are the derivative (the padding row's is dropped by design,
    // as PyTorch's padding_idx drops it).
    GradCheckOptions opts;
    opts.checkInputs = false;
    EXPECT_TRUE(checkGradients(emb, {Tensor::fromVector({1, 3}, std::vector<int32_t>{1, 0, 2})}, opts));
    EXPECT_TRUE(blueprintHas(emb, {"\"paddingIdx\": -1"}));
    EXPECT_EQ(Embedder(4, 3, 2).blueprint().toJson().find("paddingIdx"), std::string::npos);
    EXPECT_TRUE(throwsModuleError([] { Embedder(4, 3, 2, {.paddingIdx = 4}); },
                                  {"Embedder", "paddingIdx 4 is outside the vocabulary of 4"}));
}

// ---- GroupLinear ----------------------------------------------------------------------

TEST(GroupLinear, Reference) {
    for (int64_t batchDim : {0, 1}) {
        SCOPED_TRACE(batchDim);
        GroupLinear gl(2, 2, 1, {.batchDim = batchDim});
        gl.getVar("W")->data.copyFrom(Tensor::fromVector({2, 2, 1}, F{1, 2, 3, 4}));
        gl.getVar("b")->data.copyFrom(Tensor::fromVector({2, 1}, F{10, 20}));
        // batchDim 0: x[n, g]; batchDim 1: x[g, n]. Samples (1, 1), (1, 0) for group 0 and
        // (0, 1), (2, 2) for group 1.
        Tensor x = batchDim == 0 ? Tensor::fromVector({2, 2, 2}, F{1, 1, 0, 1, 1, 0, 2, 2})
                                 : Tensor::fromVector({2, 2, 2}, F{1, 1, 1, 0, 0, 1, 2, 2});
        const F y = batchDim == 0 ? F{13, 24, 11, 34} : F{13, 11, 24, 34};
        EXPECT_TRUE(allClose(gl(x), y));
    }
}

TEST(GroupLinear, GradientShapeBadInput) {
    GroupLinear gl0(3, 4, 2, {.name = "gl"});
    GroupLinear gl1(3, 4, 2, {.batchDim = 1, .useBias = false});
    EXPECT_TRUE(checkGradients(gl0, {randomTensor({5, 3, 4}, 8)}));
    EXPECT_TRUE(checkGradients(gl1, {randomTensor({3, 5, 4}, 8)}));
    EXPECT_TRUE(checkShapes(gl0, {randomTensor({5, 3, 4}, 8)}));
    EXPECT_TRUE(checkShapes(gl1, {randomTensor({3, 5, 4}, 8)}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            gl0(Tensor::zeros({5, 4, 4}));
        },
        {"GroupLinear 'gl'", "[N, 3, 4]", "[5, 4, 4]"}));
    EXPECT_TRUE(throwsShapeError([&] { gl1(Tensor::zeros({5, 3, 4})); }, {"[3, N, 4]"}));
    EXPECT_TRUE(blueprintHas(gl1, {"\"groups\": 3", "\"batchDim\": 1", "\"useBias\": false"}));
}

// inmode "one" is Tile then a full GroupLinear; wmode "one" is a full GroupLinear whose
// groups hold copies of one weight (its gradient the sum of theirs).
TEST(GroupLinear, OneInputAndOneWeightModes) {
    for (int64_t batchDim : {0, 1}) {
        SCOPED_TRACE(batchDim);
        const int groupAxis = static_cast<int>(1 - batchDim);
        GroupLinear one(3, 4, 2, {.batchDim = batchDim, .inmode = "one", .initscheme = InitScheme::uniform});
        GroupLinear full(3, 4, 2, {.batchDim = batchDim});
        backendOf(one.getVar("b")->data).fillUniform(one.getVar("b")->data, -1, 1, globalGenerator());
        full.getVar("W")->data.copyFrom(one.getVar("W")->data);
        full.getVar("b")->data.copyFrom(one.getVar("b")->data);
        const Tensor x = randomTensor(batchDim == 0 ? Shape{5, 1, 4} : Shape{1, 5, 4}, 3);
        Tile tile(groupAxis, 3);
        const Tensor y = one(x);
        EXPECT_EQ(y.shape(), (batchDim == 0 ? Shape{5, 3, 2} : Shape{3, 5, 2}));
        EXPECT_TRUE(allClose(y, full(tile(x)).toVector<float>(), 1e-5f));
        const Tensor dy = randomTensor(y.shape(), 4);
        one.zeroGradParams();
        full.zeroGradParams();
        EXPECT_TRUE(allClose(one.backward(dy), tile.backward(full.backward(dy)).toVector<float>(), 1e-5f));
        EXPECT_TRUE(allClose(one.getVar("W")->grad, full.getVar("W")->grad.toVector<float>(), 1e-5f));
        EXPECT_TRUE(checkGradients(one, {x}));
        EXPECT_TRUE(checkShapes(one, {x}));
        EXPECT_EQ(one.gradShapeFrom(y.shape()), x.shape());
    }
    GroupLinear shared(3, 4, 2, {.wmode = "one", .initscheme = InitScheme::uniform, .name = "shared"});
    EXPECT_EQ(shared.getVar("W")->data.shape(), (Shape{1, 4, 2}));
    EXPECT_EQ(shared.getVar("b")->data.shape(), (Shape{1, 2}));
    backendOf(shared.getVar("b")->data).fillUniform(shared.getVar("b")->data, -1, 1, globalGenerator());
    GroupLinear copies(3, 4, 2);
    for (int64_t g = 0; g < 3; ++g) {
        copies.getVar("W")->data.slice(g, g + 1).copyFrom(shared.getVar("W")->data);
        copies.getVar("b")->data.slice(g, g + 1).copyFrom(shared.getVar("b")->data);
    }
    const Tensor x = randomTensor({5, 3, 4}, 5);
    EXPECT_TRUE(allClose(shared(x), copies(x).toVector<float>(), 1e-5f));
    const Tensor dy = randomTensor({5, 3, 2}, 6);
    shared.zeroGradParams();
    copies.zeroGradParams();
    EXPECT_TRUE(allClose(shared.backward(dy), copies.backward(dy).toVector<float>(), 1e-5f));
    const std::vector<float> dW = copies.getVar("W")->grad.toVector<float>();
    std::vector<float> summed(8, 0.0f);
    for (size_t i = 0; i < dW.size(); ++i) summed[i % 8] += dW[i];
    EXPECT_TRUE(allClose(shared.getVar("W")->grad, summed, 1e-5f));
    EXPECT_TRUE(checkGradients(shared, {x}));
    EXPECT_TRUE(blueprintHas(shared, {"\"wmode\": \"one\""}));
    // Bad input: an unknown mode; a full data group where inmode "one" takes one.
    EXPECT_TRUE(throwsModuleError([] { GroupLinear(3, 4, 2, {.inmode = "each"}); },
                                  {"GroupLinear", "inmode must be 'full' or 'one', got 'each'"}));
    GroupLinear one(3, 4, 2, {.inmode = "one", .name = "g1"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            one(Tensor::zeros({5, 3, 4}));
        },
        {"GroupLinear 'g1'", "expects input [N, 1, 4] (inmode 'one')", "[5, 3, 4]"}));
}

// ---- MulAddConst ----------------------------------------------------------------------

TEST(MulAddConst, ReferenceGradientShape) {
    MulAddConst mac(2.0f, -1.0f, "mac");
    EXPECT_TRUE(allClose(mac(Tensor::fromVector({3}, F{0, 1, 2})), {-1, 1, 3}));
    EXPECT_TRUE(allClose(mac.backward(Tensor::fromVector({3}, F{1, 2, 3})), {2, 4, 6}));
    EXPECT_TRUE(checkGradients(mac, {randomTensor({2, 3}, 9)}));
    EXPECT_TRUE(checkShapes(mac, {randomTensor({2, 3}, 9)}));
    EXPECT_TRUE(throwsShapeError([&] { mac(Tensor::zeros({2}, DType::int32)); }, {"MulAddConst 'mac'", "int32"}));
    EXPECT_TRUE(blueprintHas(mac, {"\"a\": 2", "\"b\": -1"}));
}

// Tensor constants broadcast to the input by NumPy's rules: a per-channel scale and shift
// of [N, C, H, W], saved with the model (attributes) and rebuilt from the blueprint's shapes.
TEST(MulAddConst, TensorConstantsPerChannel) {
    const Tensor scale = Tensor::fromVector({3, 1, 1}, F{2, -1, 0.5f}),
                 shift = Tensor::fromVector({1, 3, 1, 1}, F{1, 0, -3});
    MulAddConst mac(scale, shift, "norm");
    EXPECT_TRUE(mac.tensorScale() && mac.tensorShift());
    const Tensor x = randomTensor({2, 3, 2, 2}, 4);
    const std::vector<float> xs = x.toVector<float>(), y = mac(x).toVector<float>();
    const float a[] = {2, -1, 0.5f}, b[] = {1, 0, -3};
    for (size_t i = 0; i < xs.size(); ++i) {
        const size_t c = (i / 4) % 3;
        ASSERT_FLOAT_EQ(y[i], a[c] * xs[i] + b[c]) << i;
    }
    const std::vector<float> dx = mac.backward(Tensor::ones({2, 3, 2, 2})).toVector<float>();
    for (size_t i = 0; i < dx.size(); ++i) ASSERT_FLOAT_EQ(dx[i], a[(i / 4) % 3]) << i;
    EXPECT_TRUE(checkGradients(mac, {x}));
    EXPECT_TRUE(checkShapes(mac, {x}));
    // Only a scale, only a shift; a number with a tensor of the other.
    MulAddConst onlyShift(Tensor(), Tensor::fromVector({2}, F{1, 2}));
    EXPECT_TRUE(allClose(onlyShift(Tensor::fromVector({2, 2}, F{0, 0, 1, 1})), {1, 2, 2, 3}));
    MulAddConst onlyScale(Tensor::fromVector({2}, F{3, 4}), Tensor());
    EXPECT_TRUE(allClose(onlyScale(Tensor::fromVector({2, 2}, F{1, 1, 2, 2})), {3, 4, 6, 8}));
    // A constant that does not broadcast to the input, or would change its shape.
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mac(Tensor::zeros({2, 4, 2, 2}));
        },
        {"MulAddConst 'norm'", "constant a [3, 1, 1]", "[2, 4, 2, 2]"}));
    EXPECT_TRUE(throwsShapeError([&] { onlyScale(Tensor::zeros({2, 1})); }, {"constant a [2]", "[2, 1]"}));
    EXPECT_TRUE(
        throwsModuleError([] { MulAddConst(Tensor::zeros({2}, DType::int32), Tensor()); }, {"constant a", "int32"}));
    EXPECT_TRUE(throwsModuleError([] { MulAddConst(Tensor(), Tensor::zeros({0})); }, {"constant b", "[0]"}));
    // The blueprint holds the shapes, the model file the values.
    EXPECT_TRUE(blueprintHas(mac, {"\"aShape\": [3, 1, 1]", "\"bShape\": [1, 3, 1, 1]"}));
    const std::string path = ::testing::TempDir() + "mac-tensors.h5";
    saveModel(mac, path);
    ModulePtr back = buildModuleFromFile(path);
    loadModel(*back, path);
    EXPECT_EQ((*back)(x).toVector<float>(), y);
}

// ---- Pow ------------------------------------------------------------------------------

// y = scale * x^exponent against std::pow, its gradient against finite differences, for
// whole, fractional and negative exponents; the edge values follow std::pow.
TEST(Pow, ReferenceGradientShape) {
    const Tensor x = randomTensor({3, 4}, 5, 0.5f, 2.0f);
    const std::vector<float> xs = x.toVector<float>();
    for (const auto& [p, s] : {std::pair{2.0f, 1.0f},
                               {3.0f, -0.5f},
                               {0.5f, 1.0f},
                               {-1.0f, 2.0f},
                               {-0.5f, 1.0f},
                               {1.0f, 3.0f},
                               {0.0f, 2.0f}}) {
        SCOPED_TRACE("exponent " + std::to_string(p) + ", scale " + std::to_string(s));
        Pow pow(p, s, "pow");
        const std::vector<float> y = pow(x).toVector<float>();
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], s * std::pow(xs[i], p), 1e-5f * (1 + std::fabs(y[i])));
        const std::vector<float> dx = pow.backward(Tensor::ones({3, 4})).toVector<float>();
        for (size_t i = 0; i < dx.size(); ++i) {
            ASSERT_NEAR(dx[i], p == 0.0f ? 0.0f : s * p * std::pow(xs[i], p - 1), 1e-5f * (1 + std::fabs(dx[i])));
        }
        EXPECT_TRUE(checkGradients(pow, {x}));
        EXPECT_TRUE(checkShapes(pow, {x}));
    }
    // Negative data: whole exponents keep the sign rules, others give NaN; 0 to a negative exponent is inf.
    Pow cube(3.0f), root(0.5f), inverse(-1.0f);
    EXPECT_TRUE(allClose(cube(Tensor::fromVector({2}, F{-2, 1})), {-8, 1}));
    EXPECT_TRUE(std::isnan(root(Tensor::fromVector({1}, F{-4})).toVector<float>()[0]));
    EXPECT_TRUE(std::isinf(inverse(Tensor::fromVector({1}, F{0})).toVector<float>()[0]));
    Pow named(2.0f, 0.5f, "square");
    EXPECT_TRUE(throwsShapeError([&] { named(Tensor::zeros({2}, DType::int32)); }, {"Pow 'square'", "int32"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            named(Tensors{Tensor::zeros({2}), Tensor::zeros({2})});
        },
        {"Pow 'square'", "1 input"}));
    EXPECT_TRUE(throwsModuleError([] { Pow(std::nanf("")); }, {"exponent and scale must be finite", "nan"}));
    EXPECT_TRUE(throwsModuleError([] { Pow(2.0f, INFINITY); }, {"scale inf"}));
    EXPECT_TRUE(blueprintHas(named, {"\"exponent\": 2", "\"scale\": 0.5"}));
    ModulePtr back = buildModule(named.blueprint());
    EXPECT_EQ(dynamic_cast<Pow&>(*back).exponent(), 2.0f);
    EXPECT_EQ(dynamic_cast<Pow&>(*back).scale(), 0.5f);
}

// The exponents the backend computes by vector arithmetic (squares, cubes, fourth powers,
// square roots, reciprocals and their squares) and the others (libmvec's powf where the C
// library has it: TESSERA_LIBMVEC=0 runs them through powf) give std::pow's values at every
// edge: signed zeros, infinities, NaN, negative data (whole exponents of either sign, odd and
// even), the extremes of float's range (8e-20^-2 is finite though 8e-20^2 is denormal), over
// more elements than one thread takes.
TEST(Pow, VectorExponentsGiveStdPowsValues) {
    std::vector<float> xs = {0.0f,  -0.0f,  INFINITY, -INFINITY, std::nanf(""), -4.0f,      -0.25f, 1e-30f, -1e-30f,
                             1e30f, -1e30f, 3.4e38f,  1.2e-38f,  0.3f,          2.0f,       7.5f,   -7.5f,  1.0f,
                             -1.0f, 1e-20f, 65504.0f, -3e-20f,   5e19f,         0.9999999f, 8e-20f, -8e-20f};
    const Tensor random = randomTensor({40000}, 9, -50.0f, 50.0f);
    for (float v : random.toVector<float>()) xs.push_back(v);
    const Tensor x = Tensor::fromVector({static_cast<int64_t>(xs.size())}, xs);
    Backend& be = backendOf(x);
    for (float p : {1.0f, 2.0f, -1.0f, 0.5f, -0.5f, 1.7f, 3.0f, 4.0f, -2.0f, 5.0f, -3.0f, 0.25f, 2.5f, -1.5f}) {
        SCOPED_TRACE("exponent " + std::to_string(p));
        Tensor y = Tensor::empty(x.shape());
        be.power(x, p, y);
        const std::vector<float> ys = y.toVector<float>();
        for (size_t i = 0; i < xs.size(); ++i) {
            const float want = std::pow(xs[i], p);
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(ys[i])) << "x " << xs[i] << ": " << ys[i];
            } else if (want == 0.0f || std::isinf(want)) {
                ASSERT_EQ(ys[i], want) << "x " << xs[i];
                ASSERT_EQ(std::signbit(ys[i]), std::signbit(want)) << "x " << xs[i];
            } else if (std::fabs(want) >= 1.2e-38f) { // the CPU flushes denormal results to 0
                ASSERT_NEAR(ys[i], want, 3e-7f * std::fabs(want)) << "x " << xs[i]; // two roundings at most
            }
        }
    }
}

// ---- NoiseInjector --------------------------------------------------------------------

TEST(NoiseInjector, AddsOrMultipliesNoiseInTrainModeOnly) {
    NoiseInjector add({.noisetype = NoiseType::uniform, .param1 = -0.5f, .param2 = 0.5f, .seed = 1});
    Tensor x = randomTensor({1000}, 10);
    const auto y = add(x).toVector<float>(), xs = x.toVector<float>(), noise = add.noise().toVector<float>();
    double mean = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_FLOAT_EQ(y[i], xs[i] + noise[i]);
        ASSERT_TRUE(noise[i] >= -0.5f && noise[i] < 0.5f);
        mean += noise[i] / 1000.0;
    }
    EXPECT_NEAR(mean, 0.0, 0.05);
    EXPECT_TRUE(allClose(add.backward(Tensor::full({1000}, 2.0f)), F(1000, 2.0f)));
    NoiseInjector mul(
        {.mode = NoiseMode::mul, .noisetype = NoiseType::gaussian, .param1 = 1.0f, .param2 = 0.1f, .seed = 2});
    const auto ym = mul(x).toVector<float>(), nm = mul.noise().toVector<float>();
    for (size_t i = 0; i < ym.size(); ++i) ASSERT_FLOAT_EQ(ym[i], xs[i] * nm[i]);
    EXPECT_TRUE(allClose(mul.backward(Tensor::full({1000}, 1.0f)), nm));
    mul.evalMode();
    EXPECT_TRUE(mul(x).sharesStorage(x));
}

TEST(NoiseInjector, GradientShapeBadInput) {
    NoiseInjector mul({.mode = NoiseMode::mul, .seed = 3, .name = "noise"});
    const uint64_t seed = mul.generator().seed();
    GradCheckOptions opts;
    opts.beforeForward = [&] { mul.generator().manualSeed(seed); };
    EXPECT_TRUE(checkGradients(mul, {randomTensor({3, 4}, 11)}, opts));
    EXPECT_TRUE(checkShapes(mul, {randomTensor({3, 4}, 11)}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mul(Tensors{Tensor::zeros({2}), Tensor::zeros({2})});
        },
        {"NoiseInjector 'noise'", "1 input"}));
    EXPECT_THROW(NoiseInjector({.param1 = 1.0f, .param2 = 0.0f}), ModuleError);
    EXPECT_TRUE(blueprintHas(mul, {"\"mode\": \"mul\"", "\"noisetype\": \"uniform\"", "\"params\": [0, 1]"}));
}

// ---- Transpose, SwapAxes, MoveAxis ----------------------------------------------------

TEST(Transpose, Reference) {
    Tensor x = Tensor::fromVector({2, 3}, F{1, 2, 3, 4, 5, 6});
    Transpose t({1, 0});
    EXPECT_EQ(t(x).shape(), (Shape{3, 2}));
    EXPECT_TRUE(allClose(t(x), {1, 4, 2, 5, 3, 6}));
    EXPECT_TRUE(allClose(t.backward(Tensor::fromVector({3, 2}, F{1, 4, 2, 5, 3, 6})), {1, 2, 3, 4, 5, 6}));
    Tensor x3 = Tensor::fromVector({2, 2, 3}, F{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    SwapAxes swap(0, -1);
    EXPECT_EQ(swap(x3).shape(), (Shape{3, 2, 2}));
    EXPECT_TRUE(allClose(swap(x3), {0, 6, 3, 9, 1, 7, 4, 10, 2, 8, 5, 11}));
    MoveAxis move(2, 0); // [2, 2, 3] -> [3, 2, 2]: y[k, i, j] = x[i, j, k]
    EXPECT_TRUE(allClose(move(x3), {0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
    MoveAxis move2(0, 2); // [2, 2, 3] -> [2, 3, 2]
    EXPECT_EQ(move2(x3).shape(), (Shape{2, 3, 2}));
    EXPECT_TRUE(allClose(move2(x3), {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11}));
}

TEST(Transpose, GradientShapeBadInput) {
    Transpose t({2, 0, 3, 1}, "t");
    SwapAxes swap(1, 3, "swap");
    MoveAxis move(-1, 1, "move");
    Tensor x = randomTensor({2, 3, 4, 5}, 12);
    for (Module* m : std::vector<Module*>{&t, &swap, &move}) {
        SCOPED_TRACE(m->str());
        EXPECT_TRUE(checkGradients(*m, {x}));
        EXPECT_TRUE(checkShapes(*m, {x}));
    }
    EXPECT_TRUE(throwsShapeError([&] { t(Tensor::zeros({2, 3})); }, {"Transpose 't'", "rank 4", "[2, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { swap(Tensor::zeros({2, 3})); }, {"SwapAxes 'swap'", "rank above 3"}));
    EXPECT_TRUE(throwsShapeError([&] { move(Tensor::zeros({2})); }, {"MoveAxis 'move'", "rank above 1"}));
    EXPECT_THROW(Transpose({0, 0, 1}), ModuleError);
    EXPECT_TRUE(blueprintHas(t, {"\"axes\": [2, 0, 3, 1]"}));
    EXPECT_TRUE(blueprintHas(move, {"\"src\": -1", "\"dst\": 1"}));
}

// ---- Tile -----------------------------------------------------------------------------

TEST(Tile, ReferenceGradientShapeBadInput) {
    Tile tile(1, 3, "tile");
    Tensor x = Tensor::fromVector({2, 2}, F{1, 2, 3, 4});
    EXPECT_TRUE(allClose(tile(x), {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
    EXPECT_TRUE(
        allClose(tile.backward(Tensor::fromVector({2, 6}, F{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})), {9, 12, 27, 30}));
    Tile tile0(0, 2);
    EXPECT_TRUE(allClose(tile0(x), {1, 2, 3, 4, 1, 2, 3, 4}));
    EXPECT_TRUE(checkGradients(tile, {randomTensor({2, 3, 2}, 13)}));
    EXPECT_TRUE(checkShapes(tile, {randomTensor({2, 3, 2}, 13)}));
    EXPECT_TRUE(throwsShapeError([&] { Tile(3, 2, "t3")(Tensor::zeros({2, 2})); }, {"Tile 't3'", "axis 3", "[2, 2]"}));
    EXPECT_THROW(Tile(0, 0), ModuleError);
    EXPECT_TRUE(blueprintHas(tile, {"\"axis\": 1", "\"times\": 3"}));
    // int32 data (a mask expanded): the same copies, int32 out, no gradient
    Tile masks(1, 2, "masks");
    const Tensor ints = masks(Tensor::fromVector({2, 1}, std::vector<int32_t>{1, 0}));
    EXPECT_EQ(ints.dtype(), DType::int32);
    EXPECT_EQ(ints.toVector<int32_t>(), (std::vector<int32_t>{1, 1, 0, 0}));
    EXPECT_EQ(masks.outputDTypes({Shape{2, 1}}, {DType::int32}, Device{}), std::vector<DType>{DType::int32});
    EXPECT_FALSE(masks.backward(Tensor::zeros({2, 2})).defined());
    // Sizes past 64 bits are shape errors, not wrapped dims.
    Tile huge(1, INT64_MAX, "huge");
    EXPECT_TRUE(throwsShapeError([&] { huge.inferDataShape({Shape{2, 2}}); }, {"Tile 'huge'", "overflow 64 bits"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            Tile(0, int64_t{1} << 40, "t")(Tensor::zeros({1 << 12, 1 << 12}));
        },
        {"Tile 't'", "output 0", "overflows 64 bits"}));
}

// ---- Cast -----------------------------------------------------------------------------

TEST(Cast, ReferenceGradientShapeBadInput) {
    Cast toInt(DType::float32, DType::int32, "cast");
    Tensor y = toInt(Tensor::fromVector({4}, F{1.7f, -1.7f, 0.0f, 3.0f}));
    EXPECT_EQ(y.dtype(), DType::int32);
    EXPECT_EQ(y.toVector<int32_t>(), (std::vector<int32_t>{1, -1, 0, 3}));
    EXPECT_FALSE(toInt.backward(Tensor::zeros({4})).defined());
    Cast toFloat(DType::int32, DType::float32);
    EXPECT_TRUE(allClose(toFloat(Tensor::fromVector({2}, std::vector<int32_t>{-3, 5})), {-3, 5}));
    Cast same(DType::float32, DType::float32);
    EXPECT_TRUE(checkGradients(same, {randomTensor({2, 3}, 14)}));
    EXPECT_TRUE(checkShapes(same, {randomTensor({2, 3}, 14)}));
    EXPECT_EQ(toInt.dataShapeFrom(Shape{2, 5}), (Shape{2, 5}));
    EXPECT_TRUE(throwsShapeError([&] { toInt(Tensor::zeros({2}, DType::int32)); },
                                 {"Cast 'cast'", "expects float32", "int32"}));
    EXPECT_TRUE(blueprintHas(toInt, {"\"intype\": \"float32\"", "\"outtype\": \"int32\""}));
}

TEST(Cast, SixteenBitFloatsBothWays) {
    // 1/3 rounds to float16's nearest 0.333251953125 and bfloat16's 0.333984375; 70000
    // overflows float16 to infinity.
    const Tensor x = Tensor::fromVector({2, 2}, F{1.0f / 3.0f, -2.5f, 70000.0f, 0.0f});
    Cast toHalf(DType::float32, DType::float16, "half");
    Tensor h = toHalf(x);
    EXPECT_EQ(h.dtype(), DType::float16);
    const std::vector<float> hv = h.toVector<float>();
    EXPECT_EQ(hv[0], 0.333251953125f);
    EXPECT_EQ(hv[1], -2.5f);
    EXPECT_TRUE(std::isinf(hv[2]));
    EXPECT_EQ(toHalf.outputDTypes({Shape{2, 2}}, {DType::float32}, Device::cpu()),
              (std::vector<DType>{DType::float16}));
    // The gradient converts back to the input's type, from float16 or from float32.
    const Tensor g = Tensor::fromVector({2, 2}, F{0.1f, 1.0f, -3.0f, 2.0f});
    Tensor dx = toHalf.backward(g.astype(DType::float16));
    EXPECT_EQ(dx.dtype(), DType::float32);
    EXPECT_EQ(dx.toVector<float>()[0], 0.0999755859375f); // 0.1 in float16
    EXPECT_EQ(toHalf.backward(g).toVector<float>(), g.toVector<float>());
    // PuzzleLib's direction: float16 data in, float32 out, the gradient back in float16.
    Cast fromHalf(DType::float16, DType::float32);
    Tensor y = fromHalf(h);
    EXPECT_EQ(y.dtype(), DType::float32);
    EXPECT_EQ(y.toVector<float>()[0], 0.333251953125f);
    Tensor dh = fromHalf.backward(g);
    EXPECT_EQ(dh.dtype(), DType::float16);
    EXPECT_EQ(dh.toVector<float>()[0], 0.0999755859375f);
    Cast toBf16(DType::float32, DType::bfloat16);
    EXPECT_EQ(toBf16(x).toVector<float>()[0], 0.333984375f);
    EXPECT_EQ(Cast(DType::bfloat16, DType::float32)(toBf16(x)).toVector<float>()[1], -2.5f);
    // Bad input: the wrong input type, a gradient in a type that is neither float32, bfloat16
    // nor the output's.
    EXPECT_TRUE(throwsShapeError([&] { fromHalf(x); }, {"expects float16 input, got float32"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            fromHalf.backward(Tensor::zeros({2, 2}, DType::float16));
        },
        {"gradient 0 has dtype float16", "expected float32 or bfloat16"}));
    EXPECT_TRUE(blueprintHas(toHalf, {"\"intype\": \"float32\"", "\"outtype\": \"float16\""}));
}

// A float16 activation (a Cast's, or a CUDA layer's under setCuda16BitActivations) reaches a
// layer whose backend does not carry float16: the layer computes on a float32 copy, exactly
// as on the same values given in float32, and the gradient it returns has float16's type.
// The CPU carries bfloat16 only (Backend::carries16Bit), and a module that takes 16-bit
// inputs says so only when every 16-bit input's type is carried.
TEST(Cast, Float16ActivationsGoThroughFloat32WhereTheBackendDoesNotCarryThem) {
    Backend& cpu = backendFor(Device::cpu());
    EXPECT_TRUE(cpu.carries16Bit(DType::bfloat16));
    EXPECT_FALSE(cpu.carries16Bit(DType::float16));
    EXPECT_FALSE(cpu.carries16Bit(DType::float32));
    const Tensor half = Tensor::randn({2, 3, 6, 6}).convertedTo(DType::float16);
    const Tensor asFloat = half.convertedTo(DType::float32); // the same values
    EXPECT_TRUE(Module::backendCarries({asFloat, half.convertedTo(DType::bfloat16)}));
    EXPECT_FALSE(Module::backendCarries({asFloat, half}));

    manualSeed(3);
    Conv2D conv(3, 4, 3, ConvOptions{.pad = 1});
    manualSeed(3);
    Conv2D ref(3, 4, 3, ConvOptions{.pad = 1});
    const Tensor y = conv(half);
    EXPECT_EQ(y.dtype(), DType::float32);
    EXPECT_EQ(y.toVector<float>(), ref(asFloat).toVector<float>());
    const Tensor dy = Tensor::randn(y.shape());
    const Tensor dx = conv.backward(dy);
    EXPECT_EQ(dx.dtype(), DType::float16);
    EXPECT_EQ(dx.toVector<float>(), ref.backward(dy).convertedTo(DType::float16).toVector<float>());
    EXPECT_EQ(conv.getVar("W")->grad.toVector<float>(), ref.getVar("W")->grad.toVector<float>());

    Add add;
    const Tensor sum = add(Tensors{half, half})[0];
    EXPECT_EQ(sum.dtype(), DType::float32);
    const std::vector<float> hv = asFloat.toVector<float>(), sv = sum.toVector<float>();
    for (size_t i = 0; i < hv.size(); ++i) ASSERT_EQ(sv[i], 2 * hv[i]);
    EXPECT_EQ(add.outputDTypes({half.shape(), half.shape()}, {DType::float16, DType::float16}, Device::cpu()),
              std::vector<DType>{DType::float16});
    Activation relu(ActivationKind::relu);
    EXPECT_EQ(relu(half).dtype(), DType::float32);
    EXPECT_EQ(relu.backward(Tensor::ones(half.shape())).dtype(), DType::float16);
    // A float16 input to a layer that takes only floats is no longer refused; int32 still is.
    Linear lin(6, 2);
    EXPECT_EQ(lin(Tensor::randn({5, 6}).convertedTo(DType::float16)).dtype(), DType::float32);
    EXPECT_TRUE(throwsShapeError(
        [&] {
            lin(Tensor::zeros({5, 6}, DType::int32));
        },
        {"input 0 has dtype int32", "expected float32, bfloat16 or float16"}));
}

// ---- ReduceMean --------------------------------------------------------------------------

TEST(ReduceMean, ReferenceGradientShape) {
    // x [2, 3, 2]: x[n, c, w] = 100 n + 10 c + w
    std::vector<float> xs;
    for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 3; ++c)
            for (int w = 0; w < 2; ++w) xs.push_back(static_cast<float>(100 * n + 10 * c + w));
    const Tensor x = Tensor::fromVector({2, 3, 2}, xs);
    ReduceMean overC({1}, true, "m");
    Tensor y = overC(x);
    EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
    EXPECT_TRUE(allClose(y, {10, 11, 110, 111}));
    // dx = dy / 3 spread over the channels
    EXPECT_TRUE(allClose(overC.backward(Tensor::fromVector({2, 1, 2}, std::vector<float>{3, 6, 9, 12})),
                         {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
    ReduceMean lastAndBatch({-1, 0}, false);
    y = lastAndBatch(x);
    EXPECT_EQ(y.shape(), (Shape{3}));
    EXPECT_TRUE(allClose(y, {50.5f, 60.5f, 70.5f}));
    ReduceMean all({}, false);
    EXPECT_EQ(all(x).shape(), (Shape{1}));
    EXPECT_TRUE(allClose(all(x), {60.5f}));
    EXPECT_EQ(ReduceMean({}, true)(x).shape(), (Shape{1, 1, 1}));
    for (ReduceMean* m : {&overC, &lastAndBatch, &all}) {
        EXPECT_TRUE(checkGradients(*m, {randomTensor({2, 3, 4, 2}, 3)}));
        EXPECT_TRUE(checkShapes(*m, {randomTensor({2, 3, 4, 2}, 3)}));
    }
}

TEST(ReduceMean, BadInputAndBlueprint) {
    ReduceMean m({1, 3}, true, "mean");
    EXPECT_TRUE(throwsShapeError([&] { m(randomTensor({2, 3, 4}, 1)); }, {"ReduceMean 'mean'", "axis 3", "[2, 3, 4]"}));
    ReduceMean twice({1, -2}, true, "twice");
    EXPECT_TRUE(throwsShapeError([&] { twice(randomTensor({2, 3, 4}, 1)); }, {"axis -2 is given twice"}));
    EXPECT_TRUE(throwsShapeError([&] { m(Tensor::zeros({2, 3, 4, 5}, DType::int32)); }, {"int32"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            m(Tensors{randomTensor({2, 3, 4, 5}, 1), randomTensor({2}, 1)});
        },
        {"expects 1 input tensor, got 2"}));
    EXPECT_TRUE(blueprintHas(m, {"\"axes\": [1, 3]", "\"keepDims\": true"}));
    ModulePtr back = buildModule(m.blueprint());
    EXPECT_EQ(back->blueprint().toJson(), m.blueprint().toJson());
}

// ---- ReduceSum ---------------------------------------------------------------------------

// The sum over any axes (the batch among them) against loops; the gradient is dy spread
// over the reduced dims; ReduceMean's checks and a blueprint of its own.
TEST(ReduceSum, ReferenceGradientShapeBadInput) {
    // x [2, 3, 2]: x[n, c, w] = 100 n + 10 c + w
    std::vector<float> xs;
    for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 3; ++c)
            for (int w = 0; w < 2; ++w) xs.push_back(static_cast<float>(100 * n + 10 * c + w));
    const Tensor x = Tensor::fromVector({2, 3, 2}, xs);
    ReduceSum overC({1}, true, "s");
    EXPECT_EQ(overC(x).shape(), (Shape{2, 1, 2}));
    EXPECT_TRUE(allClose(overC(x), {30, 33, 330, 333}));
    EXPECT_TRUE(allClose(overC.backward(Tensor::fromVector({2, 1, 2}, std::vector<float>{3, 6, 9, 12})),
                         {3, 6, 3, 6, 3, 6, 9, 12, 9, 12, 9, 12}));
    ReduceSum batchAndLast({0, -1}, false);
    EXPECT_EQ(batchAndLast(x).shape(), (Shape{3}));
    EXPECT_TRUE(allClose(batchAndLast(x), {202, 242, 282}));
    ReduceSum all({}, false);
    EXPECT_EQ(all(x).shape(), (Shape{1}));
    EXPECT_TRUE(allClose(all(x), {726}));
    EXPECT_EQ(ReduceSum({}, true)(x).shape(), (Shape{1, 1, 1}));
    for (ReduceSum* m : {&overC, &batchAndLast, &all}) {
        EXPECT_TRUE(checkGradients(*m, {randomTensor({2, 3, 4, 2}, 3)}));
        EXPECT_TRUE(checkShapes(*m, {randomTensor({2, 3, 4, 2}, 3)}));
    }
    ReduceSum bad({1, 3}, true, "sum");
    EXPECT_TRUE(throwsShapeError([&] { bad(randomTensor({2, 3, 4}, 1)); }, {"ReduceSum 'sum'", "axis 3", "[2, 3, 4]"}));
    EXPECT_TRUE(throwsShapeError([&] { ReduceSum({2, -1})(randomTensor({2, 3, 4}, 1)); }, {"axis -1 is given twice"}));
    EXPECT_TRUE(throwsShapeError([&] { bad(Tensor::zeros({2, 3, 4, 5}, DType::int32)); }, {"int32"}));
    EXPECT_TRUE(blueprintHas(bad, {"\"classname\": \"ReduceSum\"", "\"axes\": [1, 3]", "\"keepDims\": true"}));
    ModulePtr back = buildModule(bad.blueprint());
    EXPECT_EQ(back->classname(), "ReduceSum");
    EXPECT_EQ(back->blueprint().toJson(), bad.blueprint().toJson());
}

// ---- GatherElements --------------------------------------------------------------------

// Values taken along an axis at given positions, against loops (torch.gather); positions
// repeated add their gradients; the positions get none; bad shapes, dtypes and positions.
TEST(GatherElements, ReferenceGradientShapeBadInput) {
    const Tensor x = randomTensor({2, 4, 3}, 21);
    const std::vector<int32_t> at = {3, 0, 0, 1, 1, 1, 2, 3, 2, 0, 0, 3, 3, 3, 1,
                                     2, 0, 1, 1, 2, 3, 0, 1, 2, 2, 2, 2, 0, 3, 1}; // [2, 5, 3], positions along dim 1
    const Tensor idx = Tensor::fromVector({2, 5, 3}, at);
    GatherElements take(1, "take");
    const Tensor y = take(Tensors{x, idx})[0];
    ASSERT_EQ(y.shape(), (Shape{2, 5, 3}));
    const std::vector<float> xs = x.toVector<float>(), ys = y.toVector<float>();
    for (int64_t n = 0; n < 2; ++n)
        for (int64_t j = 0; j < 5; ++j)
            for (int64_t i = 0; i < 3; ++i) {
                const size_t o = static_cast<size_t>((n * 5 + j) * 3 + i);
                ASSERT_EQ(ys[o], xs[static_cast<size_t>((n * 4 + at[o]) * 3 + i)]) << o;
            }
    // dx[n, a, i] = the sum of dy[n, j, i] over the j that take a.
    const Tensor dy = randomTensor({2, 5, 3}, 22);
    const Tensors grads = take.backward(Tensors{dy});
    ASSERT_EQ(grads.size(), 2u);
    EXPECT_FALSE(grads[1].defined());
    std::vector<float> want(24, 0.0f);
    const std::vector<float> dys = dy.toVector<float>();
    for (int64_t n = 0; n < 2; ++n)
        for (int64_t j = 0; j < 5; ++j)
            for (int64_t i = 0; i < 3; ++i) {
                const size_t o = static_cast<size_t>((n * 5 + j) * 3 + i);
                want[static_cast<size_t>((n * 4 + at[o]) * 3 + i)] += dys[o];
            }
    EXPECT_TRUE(allClose(grads[0], want, 1e-6f));
    EXPECT_TRUE(checkGradients(take, {x, idx}));
    EXPECT_TRUE(checkShapes(take, {x, idx}));
    GatherElements last(-1);
    const Tensor row = Tensor::fromVector({1, 4}, std::vector<float>{10, 20, 30, 40});
    EXPECT_TRUE(allClose(last(Tensors{row, Tensor::fromVector({1, 2}, std::vector<int32_t>{3, 0})})[0], {40, 10}));
    // Negative positions count from the end (ONNX's and NumPy's rule), both ways.
    const Tensor fromEnd = Tensor::fromVector({1, 3}, std::vector<int32_t>{-1, -4, -1});
    EXPECT_TRUE(allClose(last(Tensors{row, fromEnd})[0], {40, 10, 40}));
    EXPECT_TRUE(
        allClose(last.backward(Tensors{Tensor::fromVector({1, 3}, std::vector<float>{1, 2, 3})})[0], {2, 0, 0, 4}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            last(Tensors{row, Tensor::fromVector({1, 2}, std::vector<int32_t>{0, -5})});
        },
        {"-1"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            take(Tensors{x, Tensor::zeros({2, 5, 2}, DType::int32)});
        },
        {"GatherElements 'take'", "[2, 5, 2]", "[2, 4, 3]", "but along axis 1"}));
    EXPECT_TRUE(throwsShapeError([&] { GatherElements(3)(Tensors{x, idx}); }, {"axis 3 is out of range"}));
    EXPECT_TRUE(throwsShapeError([&] { take(Tensors{x, randomTensor({2, 5, 3}, 1)}); }, {"positions", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { take(Tensors{x}); }, {"expects 2 input tensors, got 1"}));
    std::vector<int32_t> beyond = at;
    beyond[7] = 4;
    EXPECT_TRUE(throwsShapeError([&] { take(Tensors{x, Tensor::fromVector({2, 5, 3}, beyond)}); }, {"4"}));
    EXPECT_TRUE(blueprintHas(take, {"\"classname\": \"GatherElements\"", "\"axis\": 1"}));
    EXPECT_EQ(buildModule(take.blueprint())->blueprint().toJson(), take.blueprint().toJson());
}

// ScatterElements against a loop: updates replace the values at their positions (a position
// given twice takes the sum) or add to them; gradients, shapes, bad input.
TEST(ScatterElements, ReferenceGradientShapeBadInput) {
    const Tensor x = randomTensor({2, 4, 3}, 51);
    const std::vector<int32_t> at = {3, 0, 2, 1, 1, 1, 0, 2, 3, 3, 3, 0, 2, 1, 1, 0, 0, 2}; // [2, 3, 3] along dim 1
    const Tensor idx = Tensor::fromVector({2, 3, 3}, at);
    const Tensor u = randomTensor({2, 3, 3}, 52);
    const std::vector<float> xs = x.toVector<float>(), us = u.toVector<float>();
    for (const bool add : {false, true}) {
        SCOPED_TRACE(add ? "add" : "replace");
        std::vector<float> want = xs;
        std::vector<bool> hit(xs.size(), false);
        for (int64_t n = 0; n < 2; ++n)
            for (int64_t j = 0; j < 3; ++j)
                for (int64_t i = 0; i < 3; ++i) {
                    const size_t o = static_cast<size_t>((n * 3 + j) * 3 + i);
                    const size_t to = static_cast<size_t>((n * 4 + at[o]) * 3 + i);
                    if (!add && !hit[to]) want[to] = 0.0f;
                    hit[to] = true;
                    want[to] += us[o];
                }
        ScatterElements put(1, add, "put");
        EXPECT_TRUE(allClose(put(Tensors{x, idx, u})[0], want, 1e-6f));
        // dx: dy where nothing was put (everywhere with add); dupdates: dy at the positions.
        const Tensor dy = randomTensor({2, 4, 3}, 53);
        const std::vector<float> dys = dy.toVector<float>();
        const Tensors g = put.backward(Tensors{dy});
        ASSERT_EQ(g.size(), 3u);
        EXPECT_FALSE(g[1].defined());
        std::vector<float> wantDx = dys, wantDu(us.size());
        for (size_t k = 0; k < xs.size(); ++k) {
            if (!add && hit[k]) wantDx[k] = 0.0f;
        }
        for (int64_t n = 0; n < 2; ++n)
            for (int64_t j = 0; j < 3; ++j)
                for (int64_t i = 0; i < 3; ++i) {
                    const size_t o = static_cast<size_t>((n * 3 + j) * 3 + i);
                    wantDu[o] = dys[static_cast<size_t>((n * 4 + at[o]) * 3 + i)];
                }
        EXPECT_TRUE(allClose(g[0], wantDx, 0.0f));
        EXPECT_TRUE(allClose(g[2], wantDu, 0.0f));
        EXPECT_TRUE(checkGradients(put, {x, idx, u}));
        EXPECT_TRUE(checkShapes(put, {x, idx, u}));
    }
    ScatterElements put(1, false, "put");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            put(Tensors{x, idx, randomTensor({2, 3, 2}, 1)});
        },
        {"ScatterElements 'put'", "updates [2, 3, 2]", "positions' shape [2, 3, 3]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            put(Tensors{x, Tensor::zeros({2, 3, 2}, DType::int32), u});
        },
        {"[2, 3, 2]", "but along axis 1"}));
    EXPECT_TRUE(throwsShapeError([&] { put(Tensors{x, u, u}); }, {"positions", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { put(Tensors{x, idx}); }, {"expects 3 input tensors, got 2"}));
    std::vector<int32_t> beyond = at;
    beyond[4] = 4;
    EXPECT_TRUE(throwsShapeError([&] { put(Tensors{x, Tensor::fromVector({2, 3, 3}, beyond), u}); }, {"4"}));
    // Negative positions count from the end: -4 .. -1 are 0 .. 3 along dim 1.
    std::vector<int32_t> negative = at;
    for (size_t k = 0; k < negative.size(); k += 2) negative[k] -= 4;
    const Tensor wrapped = Tensor::fromVector({2, 3, 3}, negative);
    ScatterElements summed(1, true);
    const Tensor want = summed(Tensors{x, idx, u})[0];
    EXPECT_TRUE(allClose(summed(Tensors{x, wrapped, u})[0], want.toVector<float>(), 0.0f));
    const Tensor dy = randomTensor({2, 4, 3}, 54);
    const Tensor du = summed.backward(Tensors{dy})[2];
    summed(Tensors{x, idx, u});
    EXPECT_TRUE(allClose(du, summed.backward(Tensors{dy})[2].toVector<float>(), 0.0f));
    ScatterElements last(-1, true, "last");
    EXPECT_TRUE(blueprintHas(last, {"\"classname\": \"ScatterElements\"", "\"axis\": -1", "\"add\": true"}));
    EXPECT_EQ(buildModule(last.blueprint())->blueprint().toJson(), last.blueprint().toJson());
}

// ---- CumSum ----------------------------------------------------------------------------

// Running sums along any axis, each way, inclusive or not, against a loop over the lines, on
// lengths that are and are not powers of 2 (the scan's passes); gradient, shapes, bad input.
TEST(CumSum, ReferenceGradientShapeBadInput) {
    const int64_t dims[4] = {2, 5, 3, 8};
    const Tensor x = randomTensor({2, 5, 3, 8}, 31);
    const std::vector<float> xs = x.toVector<float>();
    for (int axis : {1, 0, 3, -2}) {
        for (int mode = 0; mode < 4; ++mode) {
            const bool exclusive = mode % 2 == 1, reverse = mode >= 2;
            SCOPED_TRACE(std::to_string(axis) + (exclusive ? " exclusive" : "") + (reverse ? " reverse" : ""));
            const int a = axis < 0 ? axis + 4 : axis;
            int64_t inner = 1, outer = 1;
            for (int d = a + 1; d < 4; ++d) inner *= dims[d];
            for (int d = 0; d < a; ++d) outer *= dims[d];
            std::vector<float> want(xs.size());
            for (int64_t o = 0; o < outer; ++o) {
                for (int64_t i = 0; i < inner; ++i) {
                    double sum = 0.0;
                    for (int64_t step = 0; step < dims[a]; ++step) {
                        const int64_t k = reverse ? dims[a] - 1 - step : step;
                        const size_t at = static_cast<size_t>((o * dims[a] + k) * inner + i);
                        if (!exclusive) sum += xs[at];
                        want[at] = static_cast<float>(sum);
                        if (exclusive) sum += xs[at];
                    }
                }
            }
            CumSum running(axis, CumSumOptions{.exclusive = exclusive, .reverse = reverse, .name = "running"});
            EXPECT_TRUE(allClose(running(x), want, 1e-5f));
            EXPECT_TRUE(checkGradients(running, {x}));
            EXPECT_TRUE(checkShapes(running, {x}));
        }
    }
    // A mask's running count is exact: position ids of a padded batch.
    CumSum count(1);
    const Tensor mask = Tensor::fromVector({2, 5}, std::vector<float>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1});
    EXPECT_EQ(count(mask).toVector<float>(), (std::vector<float>{1, 2, 3, 3, 3, 1, 2, 3, 4, 5}));
    EXPECT_TRUE(allClose(CumSum(0)(Tensor::fromVector({1}, std::vector<float>{4})), {4}));
    EXPECT_TRUE(
        allClose(CumSum(0, CumSumOptions{.exclusive = true})(Tensor::fromVector({1}, std::vector<float>{4})), {0}));
    EXPECT_TRUE(throwsShapeError([&] { CumSum(4, CumSumOptions{.name = "far"})(x); },
                                 {"CumSum 'far'", "axis 4 is out of range for input [2, 5, 3, 8]"}));
    EXPECT_TRUE(throwsShapeError([&] { count(Tensors{mask, mask}); }, {"expects 1 input tensor, got 2"}));
    EXPECT_TRUE(throwsShapeError([&] { count(Tensor::zeros({2, 5}, DType::int32)); }, {"int32", "expected float32"}));
    CumSum back(-1, CumSumOptions{.exclusive = true, .reverse = true, .name = "back"});
    EXPECT_TRUE(
        blueprintHas(back, {"\"classname\": \"CumSum\"", "\"axis\": -1", "\"exclusive\": true", "\"reverse\": true"}));
    EXPECT_EQ(buildModule(back.blueprint())->blueprint().toJson(), back.blueprint().toJson());
}

// ---- TopK ------------------------------------------------------------------------------

// The k largest or smallest values of each line along any axis and their positions, sorted
// (ties in the order they appear) or in the order they appear, against a stable sort of each
// line; infinities; the gradient, shapes and bad input.
TEST(TopK, ReferenceGradientShapeBadInput) {
    const int64_t dims[3] = {2, 9, 4};
    std::vector<float> xs = randomTensor({2, 9, 4}, 41, -3.0f, 3.0f).toVector<float>();
    for (size_t i = 0; i < xs.size(); i += 3) xs[i] = std::round(xs[i]); // ties
    xs[5] = INFINITY;
    xs[11] = -INFINITY;
    const Tensor x = Tensor::fromVector({2, 9, 4}, xs);
    for (int axis : {1, -1, 0}) {
        for (int mode = 0; mode < 4; ++mode) {
            const bool largest = mode % 2 == 0, sorted = mode < 2;
            const int a = axis < 0 ? axis + 3 : axis;
            const int64_t k = a == 0 ? 2 : 3;
            SCOPED_TRACE(std::to_string(axis) + (largest ? " largest" : " smallest") + (sorted ? " sorted" : ""));
            int64_t inner = 1, outer = 1;
            for (int d = a + 1; d < 3; ++d) inner *= dims[d];
            for (int d = 0; d < a; ++d) outer *= dims[d];
            std::vector<float> wantV;
            std::vector<int32_t> wantP;
            for (int64_t o = 0; o < outer; ++o) {
                std::vector<std::vector<std::pair<float, int32_t>>> lines(static_cast<size_t>(inner));
                for (int64_t i = 0; i < inner; ++i) {
                    std::vector<std::pair<float, int32_t>> line;
                    for (int64_t j = 0; j < dims[a]; ++j) {
                        line.emplace_back(xs[static_cast<size_t>((o * dims[a] + j) * inner + i)],
                                          static_cast<int32_t>(j));
                    }
                    std::stable_sort(line.begin(), line.end(), [&](const auto& p, const auto& q) {
                        return largest ? p.first > q.first : p.first < q.first;
                    });
                    line.resize(static_cast<size_t>(k));
                    if (!sorted) {
                        std::sort(line.begin(), line.end(),
                                  [](const auto& p, const auto& q) { return p.second < q.second; });
                    }
                    lines[static_cast<size_t>(i)] = line;
                }
                for (int64_t j = 0; j < k; ++j) {
                    for (int64_t i = 0; i < inner; ++i) {
                        wantV.push_back(lines[static_cast<size_t>(i)][static_cast<size_t>(j)].first);
                        wantP.push_back(lines[static_cast<size_t>(i)][static_cast<size_t>(j)].second);
                    }
                }
            }
            TopK top(k, axis, TopKOptions{.largest = largest, .sorted = sorted, .name = "top"});
            const Tensors y = top(Tensors{x});
            ASSERT_EQ(y.size(), 2u);
            std::vector<int64_t> ys = {2, 9, 4};
            ys[static_cast<size_t>(a)] = k;
            EXPECT_EQ(y[0].shape(), Shape(ys));
            EXPECT_EQ(y[1].dtype(), DType::int32);
            EXPECT_EQ(y[0].toVector<float>(), wantV);
            EXPECT_EQ(y[1].toVector<int32_t>(), wantP);
            // dx: dy at the chosen positions.
            const Tensor dy = randomTensor(Shape(ys), 43);
            const std::vector<float> dys = dy.toVector<float>();
            std::vector<float> want(xs.size(), 0.0f);
            for (int64_t o = 0; o < outer; ++o)
                for (int64_t j = 0; j < k; ++j)
                    for (int64_t i = 0; i < inner; ++i) {
                        const size_t at = static_cast<size_t>((o * k + j) * inner + i);
                        want[static_cast<size_t>((o * dims[a] + wantP[at]) * inner + i)] += dys[at];
                    }
            const Tensors dx = top.backward(Tensors{dy, Tensor::zeros(Shape(ys))});
            EXPECT_TRUE(allClose(dx[0], want, 0.0f));
        }
    }
    const Tensor smooth = randomTensor({3, 7, 2}, 44);
    TopK best(3, 1);
    // The numerical checks read float outputs: the values, through a graph that takes them.
    auto in = node(std::make_shared<Identity>("in"));
    auto chosen = node(std::make_shared<TopK>(3, 1), in, "chosen");
    Graph values({in}, {node(std::make_shared<Identity>(), Parents{Parent(chosen, 0)}, "values")});
    EXPECT_TRUE(checkGradients(values, {smooth}));
    EXPECT_TRUE(checkShapes(values, {smooth}));
    EXPECT_THROW(TopK(0), ModuleError);
    EXPECT_TRUE(throwsShapeError([&] { TopK(10, 1, TopKOptions{.name = "many"})(Tensors{smooth}); },
                                 {"TopK 'many'", "7 values along axis 1, fewer than k = 10"}));
    EXPECT_TRUE(throwsShapeError([&] { best(Tensors{smooth, smooth}); }, {"expects 1 input tensor, got 2"}));
    EXPECT_TRUE(throwsShapeError([&] { TopK(1, 3)(Tensors{smooth}); }, {"axis 3 is out of range"}));
    EXPECT_TRUE(throwsShapeError([&] { best(Tensors{Tensor::zeros({3, 7, 2}, DType::int32)}); }, {"int32"}));
    TopK low(2, 0, TopKOptions{.largest = false, .sorted = false, .name = "low"});
    EXPECT_TRUE(blueprintHas(low, {"\"classname\": \"TopK\"", "\"k\": 2", "\"largest\": false", "\"sorted\": false"}));
    EXPECT_EQ(buildModule(low.blueprint())->blueprint().toJson(), low.blueprint().toJson());
}

// ArgMax/ArgMin along any axis against a loop over the lines (first index on ties; with
// lastIndex the last), with and without keepDims; a NaN's index is taken; the gradient is
// undefined.
TEST(ArgMax, ReferenceShapeTiesAndNaN) {
    // Values of a few levels: lines hold ties.
    std::vector<float> xs = randomTensor({2, 3, 4, 5}, 7, -3.0f, 3.0f).toVector<float>();
    for (float& v : xs) v = std::round(v);
    const Tensor x = Tensor::fromVector({2, 3, 4, 5}, xs);
    const int64_t dims[4] = {2, 3, 4, 5};
    for (int axis : {1, 0, 3, -2}) {
        for (int mode = 0; mode < 4; ++mode) {
            const bool min = mode % 2 == 1, last = mode >= 2;
            SCOPED_TRACE(std::to_string(axis) + (min ? " min" : " max") + (last ? " last" : ""));
            const int a = axis < 0 ? axis + 4 : axis;
            int64_t inner = 1, outer = 1;
            for (int d = a + 1; d < 4; ++d) inner *= dims[d];
            for (int d = 0; d < a; ++d) outer *= dims[d];
            std::vector<int32_t> want;
            for (int64_t o = 0; o < outer; ++o) {
                for (int64_t i = 0; i < inner; ++i) {
                    int32_t best = 0;
                    for (int64_t k = 1; k < dims[a]; ++k) {
                        const float v = xs[(o * dims[a] + k) * inner + i], b = xs[(o * dims[a] + best) * inner + i];
                        if (min ? v < b || (last && v == b) : v > b || (last && v == b)) {
                            best = static_cast<int32_t>(k);
                        }
                    }
                    want.push_back(best);
                }
            }
            const ArgMaxOptions keeps{.lastIndex = last}, drops{.keepDims = false, .lastIndex = last};
            std::unique_ptr<ArgMax> keep =
                min ? std::make_unique<ArgMin>(axis, keeps) : std::make_unique<ArgMax>(axis, keeps);
            const Tensor y = (*keep)(x);
            std::vector<int64_t> kept(dims, dims + 4);
            kept[static_cast<size_t>(a)] = 1;
            EXPECT_EQ(y.shape(), Shape(kept));
            EXPECT_EQ(y.dtype(), DType::int32);
            EXPECT_EQ(y.toVector<int32_t>(), want);
            EXPECT_FALSE(keep->backward(Tensor::zeros(y.shape())).defined());
            std::unique_ptr<ArgMax> drop =
                min ? std::make_unique<ArgMin>(axis, drops) : std::make_unique<ArgMax>(axis, drops);
            kept.erase(kept.begin() + a);
            EXPECT_EQ((*drop)(x).shape(), Shape(kept));
            EXPECT_EQ((*drop)(x).toVector<int32_t>(), want);
            EXPECT_TRUE(checkShapes(*drop, {x}));
        }
    }
    // Ties: the first index; NaN: its index, for both; a rank-1 input without keepDims: [1].
    const Tensor t = Tensor::fromVector({3, 4}, std::vector<float>{1, 5, 5, 0, 2, 2, 2, 2, 0, NAN, 9, NAN});
    EXPECT_EQ(ArgMax(1)(t).toVector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
    EXPECT_EQ(ArgMin(1)(t).toVector<int32_t>(), (std::vector<int32_t>{3, 0, 1}));
    // With lastIndex: the last of tied values, the last NaN.
    EXPECT_EQ(ArgMax(1, {.lastIndex = true})(t).toVector<int32_t>(), (std::vector<int32_t>{2, 3, 3}));
    EXPECT_EQ(ArgMin(1, {.lastIndex = true})(t).toVector<int32_t>(), (std::vector<int32_t>{3, 3, 3}));
    const Tensor v = Tensor::fromVector({4}, std::vector<float>{0, 3, -1, 3});
    EXPECT_EQ(ArgMax(0, false)(v).shape(), (Shape{1}));
    EXPECT_EQ(ArgMax(0, false)(v).toVector<int32_t>(), (std::vector<int32_t>{1}));
    EXPECT_EQ(ArgMin(-1, false)(v).toVector<int32_t>(), (std::vector<int32_t>{2}));
}

// Long contiguous lines (the last axis) are scanned in blocks: the first of tied maxima and
// the first NaN wherever they fall (in the first block, a later one, the tail), at lengths
// around the block's, against a plain loop.
TEST(ArgMax, LongLinesGiveTheFirstMaximumOrNaN) {
    auto reference = [](const std::vector<float>& line, bool min) {
        int32_t best = 0;
        for (size_t k = 1; k < line.size(); ++k) {
            const float v = line[k], b = line[static_cast<size_t>(best)];
            if (!std::isnan(b) && ((min ? v < b : v > b) || std::isnan(v))) best = static_cast<int32_t>(k);
        }
        return best;
    };
    for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 100, 1000, 4099}) {
        const int64_t rows = 9;
        // Values from five levels, so that maxima tie; row r puts a NaN at a place of its own
        // (none in rows 0-2), and row 8 ties 0 with -0 at the top.
        std::vector<float> xs = randomTensor({rows, n}, static_cast<uint64_t>(n), 0.0f, 5.0f).toVector<float>();
        for (float& v : xs) v = std::floor(v) - 4.0f;
        const int64_t nanAt[rows] = {-1, -1, -1, 0, n / 2, n - 1, 16, n / 3, -1};
        for (int64_t r = 0; r < rows; ++r)
            if (nanAt[r] >= 0 && nanAt[r] < n) xs[static_cast<size_t>(r * n + nanAt[r])] = NAN;
        xs[static_cast<size_t>(8 * n + n - 1)] = 0.0f;
        xs[static_cast<size_t>(8 * n + n / 2)] = -0.0f;
        const Tensor x = Tensor::fromVector({rows, n}, xs);
        for (bool min : {false, true}) {
            SCOPED_TRACE(std::to_string(n) + (min ? " min" : " max"));
            std::vector<int32_t> want;
            for (int64_t r = 0; r < rows; ++r)
                want.push_back(reference(std::vector<float>(xs.begin() + r * n, xs.begin() + (r + 1) * n), min));
            const Tensor y = min ? ArgMin(1, false)(x) : ArgMax(1, false)(x);
            EXPECT_EQ(y.toVector<int32_t>(), want);
        }
    }
}

TEST(ArgMax, BadInputAndBlueprint) {
    ArgMax m(3, false, "classes");
    EXPECT_TRUE(throwsShapeError([&] { m(randomTensor({2, 3, 4}, 1)); }, {"ArgMax 'classes'", "axis 3", "[2, 3, 4]"}));
    EXPECT_TRUE(throwsShapeError([&] { ArgMin(-4)(randomTensor({2, 3, 4}, 1)); }, {"ArgMin", "axis -4"}));
    EXPECT_TRUE(throwsShapeError([&] { m(Tensor::zeros({2, 3, 4, 5}, DType::int32)); }, {"int32"}));
    EXPECT_TRUE(throwsShapeError([&] { m(Tensor::empty({0, 3, 4, 5})); }, {"classes", "empty"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            m(Tensors{randomTensor({2, 3, 4, 5}, 1), randomTensor({2}, 1)});
        },
        {"expects 1 input tensor, got 2"}));
    EXPECT_TRUE(blueprintHas(m, {"\"axis\": 3", "\"keepDims\": false", "\"lastIndex\": false"}));
    for (ModulePtr mod :
         {ModulePtr(std::make_shared<ArgMax>(3, false, "classes")), ModulePtr(std::make_shared<ArgMin>(-1)),
          ModulePtr(std::make_shared<ArgMin>(1, ArgMaxOptions{.keepDims = false, .lastIndex = true}))}) {
        ModulePtr back = buildModule(mod->blueprint());
        EXPECT_EQ(back->classname(), mod->classname());
        EXPECT_EQ(back->blueprint().toJson(), mod->blueprint().toJson());
    }
}

} // namespace
} // namespace tessera
