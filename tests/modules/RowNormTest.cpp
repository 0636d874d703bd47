// LayerNorm, RMSNorm and GroupNorm against a double-precision reference written from
// their definitions, their gradients by central differences, shapes and bad input.
#include <cmath>
#include <functional>

#include "GradCheck.h"
#include "io/Factory.h"
#include "modules/RowNorm.h"

namespace tessera {
namespace {
using namespace testing;
using F = std::vector<float>;

// x seen as [rows, D]: each row normalised by its mean (0 without subtractMean) and its
// mean square deviation, then weight and bias of channel (row % G) * (D / inner) + d / inner.
F reference(const F& x, int64_t rows, int64_t D, int64_t G, int64_t inner, bool subtractMean, const F& w, const F& b,
            float eps) {
    F y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, sq = 0;
        for (int64_t d = 0; d < D; ++d) mean += subtractMean ? x[r * D + d] : 0.0;
        mean /= static_cast<double>(D);
        for (int64_t d = 0; d < D; ++d) sq += (x[r * D + d] - mean) * (x[r * D + d] - mean);
        const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(D) + eps);
        for (int64_t d = 0; d < D; ++d) {
            const size_t c = static_cast<size_t>((r % G) * (D / inner) + d / inner);
            y[r * D + d] =
                static_cast<float>((x[r * D + d] - mean) * rstd * (w.empty() ? 1.0 : w[c]) + (b.empty() ? 0.0 : b[c]));
        }
    }
    return y;
}

void setValues(Module& m, const char* name, const Tensor& values) { m.getVar(name)->data.copyFrom(values); }

TEST(LayerNorm, ReferenceGradientShape) {
    LayerNorm ln({3, 4}, {.epsilon = 1e-3f});
    const Tensor w = randomTensor({3, 4}, 11, 0.5f, 1.5f), b = randomTensor({3, 4}, 12);
    setValues(ln, "weight", w);
    setValues(ln, "bias", b);
    Tensor x = randomTensor({2, 5, 3, 4}, 7, -2.0f, 3.0f);
    EXPECT_TRUE(allClose(
        ln(x), reference(x.toVector<float>(), 10, 12, 1, 1, true, w.toVector<float>(), b.toVector<float>(), 1e-3f),
        1e-5f));
    EXPECT_TRUE(checkGradients(ln, {x}));
    EXPECT_TRUE(checkShapes(ln, {x}));
    EXPECT_EQ(ln.namedParams().size(), 2u);
    EXPECT_EQ(ln.getVar("weight")->data.shape(), (Shape{3, 4}));
    // PyTorch's defaults: a weight of ones, a bias of zeros; the mean over the last dim.
    LayerNorm plain({6});
    Tensor v = randomTensor({4, 6}, 3);
    EXPECT_TRUE(allClose(plain(v), reference(v.toVector<float>(), 4, 6, 1, 1, true, {}, {}, 1e-5f), 1e-5f));
}

// Every affine form (weight and bias, weight only, none), through both backward paths:
// with parameter gradients and without (frozen parameters), the input gradient is the same
// and matches central differences; the parameter gradients match them too.
TEST(LayerNorm, AffineFormsAndBackwardWithoutParameterGradients) {
    for (const LayerNormOptions& o :
         {LayerNormOptions{}, LayerNormOptions{.useBias = false}, LayerNormOptions{.affine = false}}) {
        SCOPED_TRACE(std::to_string(o.affine) + std::to_string(o.useBias));
        LayerNorm ln({16}, o);
        if (o.affine) setValues(ln, "weight", randomTensor({16}, 21, 0.5f, 1.5f));
        if (o.affine && o.useBias) setValues(ln, "bias", randomTensor({16}, 22));
        const Tensor x = randomTensor({3, 7, 16}, 23, -2.0f, 2.0f), dy = randomTensor({3, 7, 16}, 24);
        EXPECT_TRUE(checkGradients(ln, {x}));
        ln(x);
        const F withParams = ln.backward(dy, true, true, 1.0f, 0.0f).toVector<float>();
        ln(x);
        const F without = ln.backward(dy, false, true, 1.0f, 0.0f).toVector<float>();
        ASSERT_EQ(withParams.size(), without.size());
        for (size_t i = 0; i < without.size(); ++i) EXPECT_NEAR(without[i], withParams[i], 1e-6f) << i;
    }
}

TEST(LayerNorm, WithoutAffineHasNoParameters) {
    LayerNorm ln({5}, {.affine = false});
    EXPECT_TRUE(ln.namedParams().empty());
    Tensor x = randomTensor({3, 5}, 2);
    EXPECT_TRUE(allClose(ln(x), reference(x.toVector<float>(), 3, 5, 1, 1, true, {}, {}, 1e-5f), 1e-5f));
    EXPECT_TRUE(checkGradients(ln, {x}));
    LayerNorm noBias({5}, {.useBias = false});
    EXPECT_EQ(noBias.namedParams().size(), 1u);
    EXPECT_TRUE(checkGradients(noBias, {x}));
}

TEST(LayerNorm, BadInput) {
    LayerNorm ln({3, 4}, {.name = "ln1"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            ln(Tensor::zeros({2, 4, 3}));
        },
        {"LayerNorm 'ln1'", "last dims are [3, 4]", "[2, 4, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { ln(Tensor::zeros({4})); }, {"[3, 4]", "got [4]"}));
    EXPECT_TRUE(throwsModuleError([] { LayerNorm({}); }, {"LayerNorm", "empty"}));
    EXPECT_TRUE(throwsModuleError([] { LayerNorm({3, 0}); }, {"at least 1", "[3, 0]"}));
    EXPECT_TRUE(throwsModuleError([] { LayerNorm({3}, {.epsilon = 0.0f}); }, {"epsilon must be positive"}));
}

TEST(RMSNorm, ReferenceGradientShape) {
    RMSNorm rms({8});
    const Tensor w = randomTensor({8}, 4, 0.5f, 1.5f);
    setValues(rms, "weight", w);
    Tensor x = randomTensor({3, 2, 8}, 9, -2.0f, 2.0f);
    EXPECT_TRUE(allClose(
        rms(x), reference(x.toVector<float>(), 6, 8, 1, 1, false, w.toVector<float>(), {}, 1.1920929e-07f), 1e-5f));
    EXPECT_TRUE(checkGradients(rms, {x}));
    EXPECT_TRUE(checkShapes(rms, {x}));
    EXPECT_EQ(rms.namedParams().size(), 1u);
    EXPECT_TRUE(RMSNorm({8}, {.affine = false}).namedParams().empty());
    EXPECT_TRUE(throwsShapeError([&] { rms(Tensor::zeros({2, 7})); }, {"RMSNorm", "last dims are [8]"}));
    EXPECT_TRUE(throwsModuleError([] { RMSNorm({-1}); }, {"RMSNorm", "at least 1"}));
}

TEST(GroupNorm, ReferenceGradientShape) {
    GroupNorm gn(2, 6, {.epsilon = 1e-4f});
    const Tensor w = randomTensor({6}, 5, 0.5f, 1.5f), b = randomTensor({6}, 6);
    setValues(gn, "weight", w);
    setValues(gn, "bias", b);
    Tensor x = randomTensor({3, 6, 2, 5}, 8, -2.0f, 3.0f);
    // rows: (sample, group), each 3 maps of 10 positions; channel = group * 3 + d / 10.
    EXPECT_TRUE(allClose(
        gn(x), reference(x.toVector<float>(), 6, 30, 2, 10, true, w.toVector<float>(), b.toVector<float>(), 1e-4f),
        1e-5f));
    EXPECT_TRUE(checkGradients(gn, {x}));
    EXPECT_TRUE(checkShapes(gn, {x}));
    // One group is LayerNorm over [C, H, W]; as many groups as maps, instance norm.
    GroupNorm one(1, 6), each(6, 6);
    Tensor v = randomTensor({2, 6, 3}, 10);
    EXPECT_TRUE(allClose(one(v), reference(v.toVector<float>(), 2, 18, 1, 3, true, {}, {}, 1e-5f), 1e-5f));
    EXPECT_TRUE(allClose(each(v), reference(v.toVector<float>(), 12, 3, 6, 3, true, {}, {}, 1e-5f), 1e-5f));
    EXPECT_TRUE(checkGradients(each, {v}));
    // [N, C] alone: each group of maps is a row.
    EXPECT_TRUE(checkGradients(gn, {randomTensor({4, 6}, 12)}));
}

TEST(GroupNorm, BadInput) {
    GroupNorm gn(2, 6, {.name = "gn1"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            gn(Tensor::zeros({2, 4, 3}));
        },
        {"GroupNorm 'gn1'", "[N, 6, ...]", "[2, 4, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { gn(Tensor::zeros({6})); }, {"[N, 6, ...]"}));
    EXPECT_TRUE(throwsModuleError([] { GroupNorm(4, 6); }, {"GroupNorm", "multiple of groups (4)"}));
    EXPECT_TRUE(throwsModuleError([] { GroupNorm(0, 6); }, {"GroupNorm"}));
}

TEST(RowNorm, ParameterGradientsAccumulateWithScaleAndMomentum) {
    LayerNorm ln({4});
    Tensor x = randomTensor({5, 4}, 1), dy = randomTensor({5, 4}, 2);
    ln(x);
    ln.backward(dy, true, true, 1.0f, 0.0f);
    const F once = ln.getVar("weight")->grad.toVector<float>();
    ln(x);
    ln.backward(dy, true, true, 0.5f, 1.0f); // 0.5 new + 1.0 old
    const F twice = ln.getVar("weight")->grad.toVector<float>();
    for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 1.5f * once[i], 1e-5f) << i;
}

TEST(RowNorm, BlueprintsRebuildTheSameModule) {
    for (const ModulePtr& m :
         std::vector<ModulePtr>{std::make_shared<LayerNorm>(std::vector<int64_t>{3, 4},
                                                            LayerNormOptions{.epsilon = 1e-3f, .useBias = false}),
                                std::make_shared<RMSNorm>(std::vector<int64_t>{8}, RMSNormOptions{.affine = false}),
                                std::make_shared<GroupNorm>(2, 6, GroupNormOptions{.epsilon = 1e-4f})}) {
        const std::string json = m->blueprint().toJson();
        EXPECT_EQ(buildModule(m->blueprint())->blueprint().toJson(), json);
    }
}

// bfloat16 in, bfloat16 out (the CPU carries bfloat16): LayerNorm on oneDNN's bfloat16
// primitive where the CPU has bfloat16 kernels, the others (and LayerNorm elsewhere) in the
// generic loop; each against the float32 layer on the same rounded operands, within
// bfloat16's rounding, forward and backward; the statistics, parameters and their
// gradients stay float32. A float32 gradient for a bfloat16 output works too.
TEST(RowNorm, Bfloat16InAndOut) {
    const DType bf16 = DType::bfloat16, f32 = DType::float32;
    auto round = [&](const Tensor& t) { return t.convertedTo(bf16).convertedTo(f32); };
    struct Case {
        const char* name;
        std::function<ModulePtr()> make;
        Shape in;
    };
    const Case cases[] = {
        {"LayerNorm", [] { return std::make_shared<LayerNorm>(std::vector<int64_t>{48}); }, {4, 6, 48}},
        {"RMSNorm",
         [] {
             return std::make_shared<RMSNorm>(std::vector<int64_t>{3, 16});
         },
         {5, 3, 16}},
        {"GroupNorm", [] { return std::make_shared<GroupNorm>(2, 6); }, {3, 6, 5, 4}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const ModulePtr low = c.make(), ref = c.make();
        for (const ModulePtr& m : {low, ref}) { // parameters that matter in every channel
            for (const auto& [name, v] : m->namedParams())
                v->data.copyFrom(randomTensor(v->data.shape(), 9, 0.5f, 1.5f));
        }
        const Tensor x = randomTensor(c.in, 1, -2.0f, 3.0f).convertedTo(bf16), dy = randomTensor(c.in, 2);
        const Tensor y = (*low)(x), yr = (*ref)(x.convertedTo(f32));
        EXPECT_EQ(y.dtype(), bf16);
        EXPECT_EQ(low->outputDTypes({c.in}, {bf16}, Device::cpu()), std::vector<DType>{bf16});
        EXPECT_LT(relL2(y, yr), std::ldexp(1.0, -8)); // rounded once
        EXPECT_LT(relL2(y, round(yr)), 1e-3);
        low->zeroGradParams();
        ref->zeroGradParams();
        const Tensor dx = low->backward(dy.convertedTo(bf16)), dxr = ref->backward(round(dy));
        EXPECT_EQ(dx.dtype(), bf16);
        EXPECT_LT(relL2(dx, dxr), 1e-2);
        const auto pl = low->namedParams(), pr = ref->namedParams();
        for (size_t i = 0; i < pl.size(); ++i) {
            EXPECT_EQ(pl[i].second->grad.dtype(), f32);
            EXPECT_LT(relL2(pl[i].second->grad, pr[i].second->grad), 1e-3) << pl[i].first;
        }
        // A float32 gradient (a cost's) for the bfloat16 output: the input gradient is bfloat16.
        (*low)(x);
        const Tensor dx32 = low->backward(round(dy));
        EXPECT_EQ(dx32.dtype(), bf16);
        EXPECT_LT(relL2(dx32, dxr), 1e-2);
    }
}

} // namespace
} // namespace tessera
