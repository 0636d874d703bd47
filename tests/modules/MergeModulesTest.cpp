// The branch and merge modules: Concat, Split, Slice, Replicate, Add, Mul, Sub, Div, and
// their broadcasting; Sum (PuzzleLib's weighted sum over an axis).
#include <cmath>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "io/Factory.h"
#include "modules/Add.h"
#include "modules/Concat.h"
#include "modules/Replicate.h"
#include "modules/Slice.h"
#include "modules/Split.h"

namespace tessera {
namespace {
using namespace testing;

std::vector<float> iota(size_t n, float start = 0.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
    return v;
}

TEST(Concat, Reference) {
    Concat cat(1);
    // a: [2, 1, 2] = [[0, 1]], [[2, 3]]; b: [2, 2, 2] = 10..17
    Tensor a = Tensor::fromVector({2, 1, 2}, iota(4)), b = Tensor::fromVector({2, 2, 2}, iota(8, 10));
    Tensor y = cat(Tensors{a, b})[0];
    EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
    EXPECT_TRUE(allClose(y, {0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17}));
    const Tensors& dx = cat.backward(Tensors{Tensor::fromVector({2, 3, 2}, iota(12))});
    EXPECT_TRUE(allClose(dx[0], {0, 1, 6, 7}));
    EXPECT_TRUE(allClose(dx[1], {2, 3, 4, 5, 8, 9, 10, 11}));
    // The last axis and the batch axis.
    Concat last(-1), batch(0);
    EXPECT_TRUE(allClose(last(Tensors{a, a})[0], {0, 1, 0, 1, 2, 3, 2, 3}));
    EXPECT_EQ(batch(Tensors{a, a, a})[0].shape(), (Shape{6, 1, 2}));
}

// bfloat16 and float16 inputs go through as they are (a copy moves any type): the output
// and the input gradients keep their type and values; inputs of two types meet in float32.
TEST(Concat, SixteenBitInputsStaySixteenBit) {
    for (DType t : {DType::bfloat16, DType::float16}) {
        SCOPED_TRACE(str(t));
        const Tensor a = Tensor::randn({2, 3, 4}).convertedTo(t), b = Tensor::randn({2, 1, 4}).convertedTo(t);
        Concat cat(1);
        const Tensor y = cat(Tensors{a, b})[0];
        EXPECT_EQ(y.dtype(), t);
        EXPECT_EQ(cat.outputDTypes({a.shape(), b.shape()}, {t, t}, Device::cpu()), std::vector<DType>{t});
        Concat ref(1);
        const Tensor yf = ref(Tensors{a.convertedTo(DType::float32), b.convertedTo(DType::float32)})[0];
        EXPECT_EQ(y.toVector<float>(), yf.toVector<float>());
        const Tensor dy = Tensor::randn(y.shape()).convertedTo(t);
        const Tensors dx = cat.backward(Tensors{dy});
        const Tensors dxf = ref.backward(Tensors{dy.convertedTo(DType::float32)});
        for (size_t i = 0; i < 2; ++i) {
            EXPECT_EQ(dx[i].dtype(), t);
            EXPECT_EQ(dx[i].toVector<float>(), dxf[i].toVector<float>());
        }
        const Tensor mixed = cat(Tensors{a, b.convertedTo(DType::float32)})[0];
        EXPECT_EQ(mixed.dtype(), DType::float32);
        EXPECT_EQ(mixed.toVector<float>(), yf.toVector<float>());
        EXPECT_EQ(cat.backward(Tensors{Tensor::ones(y.shape())})[0].dtype(), t);
    }
}

TEST(Concat, Gradient) {
    Concat cat(2);
    EXPECT_TRUE(
        checkGradients(cat, {randomTensor({2, 3, 2}, 1), randomTensor({2, 3, 4}, 2), randomTensor({2, 3, 1}, 3)}));
}

TEST(Concat, Shape) {
    Concat cat(1);
    EXPECT_TRUE(checkShapes(cat, {randomTensor({2, 3, 4}, 1), randomTensor({2, 5, 4}, 2)}));
    EXPECT_EQ(cat.dataShapeFrom(Shapes{Shape{8, 16, 5}, Shape{8, 32, 5}}), (Shapes{Shape{8, 48, 5}}));
}

TEST(Concat, BadInput) {
    Concat cat(1, "cat");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            cat(Tensors{randomTensor({2, 3, 4}, 1), randomTensor({2, 3, 5}, 1)});
        },
        {"Concat 'cat'", "input 1 [2, 3, 5]", "[2, 3, 4]", "axis 1"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            cat(Tensors{randomTensor({2, 3}, 1), randomTensor({2, 3, 1}, 1)});
        },
        {"input 1"}));
    EXPECT_TRUE(throwsShapeError([&] { Concat(5)(Tensors{randomTensor({2, 3}, 1)}); }, {"axis 5 is out of range"}));
    EXPECT_TRUE(throwsShapeError([&] { cat(Tensors{}); }, {"at least one input"}));
    // int32 joins int32 (ids), not float data.
    EXPECT_TRUE(throwsShapeError(
        [&] {
            cat(Tensors{Tensor::zeros({2, 3}, DType::int32), randomTensor({2, 3}, 1)});
        },
        {"int32"}));
    const Tensor ids = cat(Tensors{Tensor::fromVector({2, 1}, std::vector<int32_t>{0, 0}),
                                   Tensor::fromVector({2, 2}, std::vector<int32_t>{5, 6, 7, 8})})[0];
    EXPECT_EQ(ids.dtype(), DType::int32);
    EXPECT_EQ(ids.toVector<int32_t>(), (std::vector<int32_t>{0, 5, 6, 0, 7, 8}));
    const Tensors none = cat.backward(Tensors{Tensor::zeros({2, 3})});
    ASSERT_EQ(none.size(), 2u);
    EXPECT_FALSE(none[0].defined() || none[1].defined());
    EXPECT_TRUE(throwsShapeError([&] { cat(Tensors{Tensor::empty({0, 3})}); }, {"empty"}));
}

TEST(Split, Reference) {
    Split split(1, {1, 2});
    EXPECT_EQ(split.outputCount(), 2u);
    const Tensors& ys = split(Tensors{Tensor::fromVector({2, 3}, iota(6))});
    ASSERT_EQ(ys.size(), 2u);
    EXPECT_TRUE(allClose(ys[0], {0, 3}));
    EXPECT_TRUE(allClose(ys[1], {1, 2, 4, 5}));
    const Tensors& dx = split.backward(Tensors{Tensor::fromVector({2, 1}, std::vector<float>{-1, -2}),
                                               Tensor::fromVector({2, 2}, std::vector<float>{7, 8, 9, 10})});
    EXPECT_TRUE(allClose(dx[0], {-1, 7, 8, -2, 9, 10}));
}

TEST(Split, Gradient) {
    Split split(-1, {2, 1, 3});
    EXPECT_TRUE(checkGradients(split, {randomTensor({2, 2, 6}, 1)}));
}

TEST(Split, Shape) {
    Split split(1, {4, 12});
    EXPECT_TRUE(checkShapes(split, {randomTensor({3, 16, 2}, 1)}));
}

TEST(Split, BadInput) {
    Split split(1, {2, 2}, "halves");
    EXPECT_TRUE(throwsShapeError([&] { split(randomTensor({2, 5}, 1)); }, {"Split 'halves'", "add up to 4", "[2, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { split(randomTensor({4}, 1)); }, {"axis 1 is out of range"}));
    EXPECT_TRUE(throwsShapeError([&] { split(Tensor::zeros({2, 4}, DType::int32)); }, {"int32"}));
    EXPECT_TRUE(throwsShapeError([&] { split(Tensor::empty({0, 4})); }, {"empty"}));
    EXPECT_THROW(Split(1, {}), ModuleError);
    EXPECT_THROW(Split(1, {2, 0}), ModuleError);
}

TEST(Slice, Reference) {
    Slice slice(1, 1, 3);
    Tensor y = slice(Tensor::fromVector({2, 4}, iota(8)));
    EXPECT_TRUE(allClose(y, {1, 2, 5, 6}));
    EXPECT_TRUE(
        allClose(slice.backward(Tensor::fromVector({2, 2}, std::vector<float>{1, 2, 3, 4})), {0, 1, 2, 0, 0, 3, 4, 0}));
    Slice tail(-1, -2, 0); // the last two along the last axis
    EXPECT_TRUE(allClose(tail(Tensor::fromVector({2, 4}, iota(8))), {2, 3, 6, 7}));
    // int32 ids or positions slice as they are, and have no gradient.
    const Tensor ids = tail(Tensor::fromVector({2, 4}, std::vector<int32_t>{5, 6, 7, 8, 1, 2, 3, 4}));
    EXPECT_EQ(ids.dtype(), DType::int32);
    EXPECT_EQ(ids.toVector<int32_t>(), (std::vector<int32_t>{7, 8, 3, 4}));
    EXPECT_FALSE(tail.backward(Tensor::zeros({2, 2})).defined());
}

TEST(Slice, Gradient) {
    Slice slice(2, 1, 3);
    EXPECT_TRUE(checkGradients(slice, {randomTensor({2, 3, 4}, 1)}));
}

TEST(Slice, Shape) {
    Slice slice(1, 2, -1);
    EXPECT_TRUE(checkShapes(slice, {randomTensor({2, 6, 3}, 1)}));
    EXPECT_EQ(slice.dataShapeFrom(Shape{5, 10}), (Shape{5, 7}));
}

TEST(Slice, BadInput) {
    Slice slice(1, 3, 5, "cut");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            slice(randomTensor({2, 3}, 1));
        },
        {"Slice 'cut'", "range [3, 5) is empty", "[2, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { slice(randomTensor({6}, 1)); }, {"axis 1 is out of range"}));
    EXPECT_TRUE(throwsShapeError([&] { slice(Tensor::empty({0, 6})); }, {"empty"}));
}

TEST(Slice, SeveralAxesReferenceGradientShapeBadInput) {
    // x [2, 3, 4]: x[n, c, w] = 100 n + 10 c + w; x[:, 1:, 1:-1]
    std::vector<float> xs;
    for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 3; ++c)
            for (int w = 0; w < 4; ++w) xs.push_back(static_cast<float>(100 * n + 10 * c + w));
    Slice inner({1, -1}, {1, 1}, {0, -1}, "inner");
    Tensor y = inner(Tensor::fromVector({2, 3, 4}, xs));
    EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
    EXPECT_TRUE(allClose(y, {11, 12, 21, 22, 111, 112, 121, 122}));
    // the gradient lands at the kept positions, zero elsewhere
    const std::vector<float> dx = inner.backward(Tensor::full({2, 2, 2}, 1.0f)).toVector<float>();
    for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 3; ++c)
            for (int w = 0; w < 4; ++w)
                EXPECT_EQ(dx[static_cast<size_t>((n * 3 + c) * 4 + w)], c >= 1 && w >= 1 && w <= 2 ? 1.0f : 0.0f);
    EXPECT_TRUE(checkGradients(inner, {randomTensor({2, 3, 5}, 2)}));
    EXPECT_TRUE(checkShapes(inner, {randomTensor({3, 4, 6}, 3)}));
    EXPECT_EQ(inner.dataShapeFrom(Shape{5, 7, 9}), (Shape{5, 6, 7}));
    // Several axes are written as lists, one as integers (as files before several axes were).
    const std::string several = inner.blueprint().toJson(), one = Slice(1, 2, 3).blueprint().toJson();
    for (const char* part : {"\"axis\": [1, -1]", "\"start\": [1, 1]", "\"end\": [0, -1]"})
        EXPECT_NE(several.find(part), std::string::npos) << part << " in " << several;
    for (const char* part : {"\"axis\": 1", "\"start\": 2", "\"end\": 3"})
        EXPECT_NE(one.find(part), std::string::npos) << part << " in " << one;
    // bad input: an axis twice, an empty range on the second axis, lists of different lengths
    Slice twice({1, -2}, {0, 1}, {2, 0}, "twice");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            twice(randomTensor({2, 3, 4}, 1));
        },
        {"Slice 'twice'", "axis 1 is sliced twice"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            inner(randomTensor({2, 3, 2}, 1));
        },
        {"Slice 'inner'", "range [1, -1) is empty", "along axis 2"}));
    EXPECT_TRUE(throwsModuleError(
        [] {
            Slice({1, 2}, {0}, {1, 2});
        },
        {"one start and one end per axis", "2 axes, 1 starts"}));
}

TEST(Slice, StepsReferenceGradientShapeBadInput) {
    // x [2, 5, 7]: x[n, h, w] = 100 n + 10 h + w; x[:, 0::2, 1:6:3] (patch merging's strided picks)
    std::vector<float> xs;
    for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 5; ++h)
            for (int w = 0; w < 7; ++w) xs.push_back(static_cast<float>(100 * n + 10 * h + w));
    Slice strided({1, 2}, {0, 1}, {0, 6}, SliceOptions{.steps = {2, 3}, .name = "strided"});
    Tensor y = strided(Tensor::fromVector({2, 5, 7}, xs));
    EXPECT_EQ(y.shape(), (Shape{2, 3, 2})); // ceil(5 / 2) rows, ceil(5 / 3) columns
    EXPECT_TRUE(allClose(y, {1, 4, 21, 24, 41, 44, 101, 104, 121, 124, 141, 144}));
    // the gradient lands at the picked positions only
    const std::vector<float> g = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const std::vector<float> dx = strided.backward(Tensor::fromVector({2, 3, 2}, g)).toVector<float>();
    for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 5; ++h)
            for (int w = 0; w < 7; ++w) {
                const bool picked = h % 2 == 0 && (w == 1 || w == 4);
                const float want = picked ? g[static_cast<size_t>(n * 6 + h / 2 * 2 + (w == 4))] : 0.0f;
                EXPECT_EQ(dx[static_cast<size_t>((n * 5 + h) * 7 + w)], want) << n << " " << h << " " << w;
            }
    EXPECT_TRUE(checkGradients(strided, {randomTensor({2, 4, 8}, 2)}));
    EXPECT_TRUE(checkShapes(strided, {randomTensor({3, 6, 9}, 3)}));
    EXPECT_EQ(strided.dataShapeFrom(Shape{4, 6, 9}), (Shape{4, 3, 2}));
    // "step" is written only where a step is not 1, and read back
    const std::string bp = strided.blueprint().toJson();
    EXPECT_NE(bp.find("\"step\": [2, 3]"), std::string::npos) << bp;
    EXPECT_EQ(Slice({1}, {0}, {2}, SliceOptions{.steps = {1}}).blueprint().toJson().find("step"), std::string::npos);
    ModulePtr back = buildModule(strided.blueprint());
    const Tensor x = randomTensor({2, 5, 7}, 4);
    EXPECT_EQ((*back)(x).toVector<float>(), strided(x).toVector<float>());
    // bad input: a step below 1, steps of another count, a range empty before the steps
    EXPECT_TRUE(throwsModuleError([] { Slice({1}, {0}, {0}, SliceOptions{.steps = {0}}); }, {"a step must not be 0"}));
    EXPECT_TRUE(throwsModuleError(
        [] {
            Slice({1, 2}, {0, 0}, {0, 0}, SliceOptions{.steps = {2}});
        },
        {"one start and one end per axis", "1 steps"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            strided(randomTensor({2, 5, 1}, 1));
        },
        {"Slice 'strided'", "range [1, 6) is empty", "along axis 2"}));
}

// Negative steps walk from start down to end (exclusive), as Python's; end 0 means through
// index 0, -D stops before it.
TEST(Slice, NegativeStepsReferenceGradientShapeBadInput) {
    // x [2, 6]: x[n, w] = 10 n + w
    std::vector<float> xs;
    for (int n = 0; n < 2; ++n)
        for (int w = 0; w < 6; ++w) xs.push_back(static_cast<float>(10 * n + w));
    const Tensor x = Tensor::fromVector({2, 6}, xs);
    Slice reversed({1}, {-1}, {0}, SliceOptions{.steps = {-1}, .name = "reversed"}); // x[:, ::-1]
    EXPECT_TRUE(allClose(reversed(x), {5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10}));
    Slice twos({1}, {5}, {-6}, SliceOptions{.steps = {-2}}); // x[:, 5:0:-2]
    EXPECT_EQ(twos(x).shape(), (Shape{2, 3}));
    EXPECT_TRUE(allClose(twos(x), {5, 3, 1, 15, 13, 11}));
    Slice middle({1}, {-2}, {-5}, SliceOptions{.steps = {-1}}); // x[:, -2:-5:-1]
    EXPECT_TRUE(allClose(middle(x), {4, 3, 2, 14, 13, 12}));
    Slice pastTheEnd({1}, {100}, {2}, SliceOptions{.steps = {-3}}); // x[:, 100:2:-3]: from index 5
    EXPECT_TRUE(allClose(pastTheEnd(x), {5, 15}));
    // the gradient lands where each output came from
    const std::vector<float> dx =
        twos.backward(Tensor::fromVector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6})).toVector<float>();
    EXPECT_EQ(dx, (std::vector<float>{0, 3, 0, 2, 0, 1, 0, 6, 0, 5, 0, 4}));
    Slice both({1, 2}, {-1, 4}, {0, 0}, SliceOptions{.steps = {-2, -1}});
    EXPECT_TRUE(checkGradients(both, {randomTensor({2, 5, 6}, 2)}));
    EXPECT_TRUE(checkShapes(both, {randomTensor({3, 6, 7}, 3)}));
    EXPECT_EQ(both.dataShapeFrom(Shape{4, 6, 9}), (Shape{4, 3, 5}));
    ModulePtr back = buildModule(twos.blueprint());
    EXPECT_EQ((*back)(x).toVector<float>(), twos(x).toVector<float>());
    // bad input: a backward range that is empty
    Slice empty({1}, {0}, {3}, SliceOptions{.steps = {-1}, .name = "empty"});
    EXPECT_TRUE(throwsShapeError([&] { empty(x); }, {"Slice 'empty'", "range [0, 3) with step -1 is empty"}));
}

TEST(Replicate, Reference) {
    Replicate rep(3);
    Tensor x = Tensor::fromVector({1, 2}, std::vector<float>{1, 2});
    const Tensors& ys = rep(Tensors{x});
    ASSERT_EQ(ys.size(), 3u);
    for (const Tensor& y : ys) EXPECT_TRUE(y.sharesStorage(x));
    Tensor g = Tensor::fromVector({1, 2}, std::vector<float>{1, 10});
    EXPECT_TRUE(allClose(rep.backward(Tensors{g, g, g})[0], {3, 30}));
    EXPECT_TRUE(allClose(g, {1, 10})); // the gradients were not written
}

TEST(Replicate, Gradient) {
    Replicate rep(2);
    EXPECT_TRUE(checkGradients(rep, {randomTensor({3, 4}, 1)}));
}

TEST(Replicate, Shape) {
    Replicate rep(4);
    EXPECT_TRUE(checkShapes(rep, {randomTensor({3, 4}, 1)}));
}

TEST(Replicate, BadInput) {
    Replicate rep(2, "rep");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            rep(Tensors{randomTensor({2}, 1), randomTensor({2}, 1)});
        },
        {"Replicate 'rep'", "expects 1 input"}));
    EXPECT_TRUE(throwsShapeError([&] { rep(Tensor::zeros({2, 6}, DType::int32)); }, {"int32"}));
    EXPECT_TRUE(throwsShapeError([&] { rep(Tensor::empty({0, 6})); }, {"empty"}));
    EXPECT_THROW(Replicate(0), ModuleError);
}

TEST(Add, Reference) {
    Add add;
    Tensor a = Tensor::fromVector({1, 3}, std::vector<float>{1, 2, 3}),
           b = Tensor::fromVector({1, 3}, std::vector<float>{10, 20, 30});
    EXPECT_TRUE(allClose(add(Tensors{a, b})[0], {11, 22, 33}));
    Add weighted({2.0f, -1.0f});
    EXPECT_TRUE(allClose(weighted(Tensors{a, b})[0], {-8, -16, -24}));
    const Tensors& dx = weighted.backward(Tensors{Tensor::fromVector({1, 3}, std::vector<float>{1, 2, 3})});
    EXPECT_TRUE(allClose(dx[0], {2, 4, 6}));
    EXPECT_TRUE(allClose(dx[1], {-1, -2, -3}));
    Add three;
    EXPECT_TRUE(allClose(three(Tensors{a, a, a})[0], {3, 6, 9}));
}

TEST(Add, Gradient) {
    Add add({0.5f, 2.0f, -1.0f});
    EXPECT_TRUE(checkGradients(add, {randomTensor({2, 3}, 1), randomTensor({2, 3}, 2), randomTensor({2, 3}, 3)}));
}

TEST(Add, Shape) {
    Add add;
    EXPECT_TRUE(checkShapes(add, {randomTensor({2, 3, 4}, 1), randomTensor({2, 3, 4}, 2)}));
}

TEST(Add, BadInput) {
    Add add({}, "sum");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            add(Tensors{randomTensor({2, 3}, 1), randomTensor({2, 4}, 1)});
        },
        {"Add 'sum'", "inputs [2, 3] and [2, 4] do not broadcast: dim 1 of the result would be 3 and 4"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            add(Tensors{randomTensor({2, 3}, 1), randomTensor({2, 3}, 1), randomTensor({2, 4}, 1)});
        },
        {"Add 'sum'", "input 2 [2, 4] differs from input 0 [2, 3]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            Add({1.0f, 2.0f})(Tensors{randomTensor({2}, 1)});
        },
        {"2 coefficients", "1 inputs"}));
    EXPECT_TRUE(throwsShapeError([&] { add(Tensors{Tensor::zeros({2, 6}, DType::int32)}); }, {"int32"}));
    EXPECT_TRUE(throwsShapeError([&] { add(Tensors{Tensor::empty({0, 6})}); }, {"empty"}));
}

TEST(Sum, Reference) {
    // x [1, 2, 3] = [[0, 1, 2], [3, 4, 5]], v [1, 2] = [2, -1]: y = 2 x[:, 0] - x[:, 1].
    Sum sum(1);
    const Tensor x = Tensor::fromVector({1, 2, 3}, iota(6)), v = Tensor::fromVector({1, 2}, std::vector<float>{2, -1});
    const Tensor& y = sum(Tensors{x, v})[0];
    EXPECT_EQ(y.shape(), (Shape{1, 3}));
    EXPECT_TRUE(allClose(y, {-3, -2, -1}));
    const Tensors& d = sum.backward(Tensors{Tensor::fromVector({1, 3}, std::vector<float>{1, 10, 100})});
    EXPECT_TRUE(allClose(d[0], {2, 20, 200, -1, -10, -100}));
    EXPECT_TRUE(allClose(d[1], {0 + 10 + 200, 3 + 40 + 500}));
    Sum plain(2, false);
    const Tensor& z = plain(Tensors{x})[0];
    EXPECT_EQ(z.shape(), (Shape{1, 2}));
    EXPECT_TRUE(allClose(z, {3, 12}));
    EXPECT_TRUE(
        allClose(plain.backward(Tensors{Tensor::fromVector({1, 2}, std::vector<float>{1, 2})})[0], {1, 1, 1, 2, 2, 2}));
}

TEST(Sum, GradientShapeAndBlueprint) {
    Sum weighted(2);
    EXPECT_TRUE(checkGradients(weighted, {randomTensor({2, 3, 4, 5}, 1), randomTensor({2, 3, 4}, 2)}));
    EXPECT_TRUE(checkShapes(weighted, {randomTensor({2, 3, 4, 5}, 1), randomTensor({2, 3, 4}, 2)}));
    Sum last(3);
    EXPECT_TRUE(checkGradients(last, {randomTensor({2, 3, 2, 4}, 3), randomTensor({2, 3, 2, 4}, 4)}));
    Sum plain(1, false);
    EXPECT_TRUE(checkGradients(plain, {randomTensor({2, 1, 5}, 5)}));
    EXPECT_TRUE(checkShapes(plain, {randomTensor({2, 4, 5}, 5)}));
    const ModulePtr rebuilt = buildModule(Sum(2, false, "s").blueprint());
    EXPECT_EQ(rebuilt->classname(), "Sum");
    EXPECT_EQ(rebuilt->dataShapeFrom(Shapes{Shape{2, 3, 4}}), (Shapes{Shape{2, 3}}));
}

TEST(Sum, BadInput) {
    EXPECT_THROW(Sum(0), ModuleError);
    Sum sum(2, true, "attn");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            sum(Tensors{randomTensor({2, 3}, 1), randomTensor({2, 3}, 2)});
        },
        {"attn", "dim 2", "[2, 3]"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            sum(Tensors{randomTensor({2, 3, 4}, 1), randomTensor({2, 4}, 2)});
        },
        {"attn", "through axis 2", "[2, 3, 4]", "[2, 4]"}));
    EXPECT_TRUE(throwsShapeError([&] { sum(Tensors{randomTensor({2, 3, 4}, 1)}); }, {"attn", "2"}));
}

TEST(Mul, Reference) {
    Mul mul;
    Tensor a = Tensor::fromVector({1, 2}, std::vector<float>{2, 3}),
           b = Tensor::fromVector({1, 2}, std::vector<float>{4, 5}),
           c = Tensor::fromVector({1, 2}, std::vector<float>{-1, 10});
    EXPECT_TRUE(allClose(mul(Tensors{a, b, c})[0], {-8, 150}));
    const Tensors& dx = mul.backward(Tensors{Tensor::fromVector({1, 2}, std::vector<float>{1, 2})});
    EXPECT_TRUE(allClose(dx[0], {-4, 100}));
    EXPECT_TRUE(allClose(dx[1], {-2, 60}));
    EXPECT_TRUE(allClose(dx[2], {8, 30}));
}

TEST(Mul, Gradient) {
    Mul mul;
    EXPECT_TRUE(checkGradients(mul, {randomTensor({2, 3}, 1), randomTensor({2, 3}, 2)}));
}

TEST(Mul, Shape) {
    Mul mul;
    EXPECT_TRUE(checkShapes(mul, {randomTensor({2, 3}, 1), randomTensor({2, 3}, 2)}));
}

TEST(Mul, PerChannelGate) {
    // x [1, 2, 2, 1] * g [1, 2, 1, 1]: channel 0 scaled by 3, channel 1 by -2; either order.
    const Tensor x = Tensor::fromVector({1, 2, 2, 1}, std::vector<float>{1, 2, 3, 4});
    const Tensor g = Tensor::fromVector({1, 2, 1, 1}, std::vector<float>{3, -2});
    const Tensor dy = Tensor::fromVector({1, 2, 2, 1}, std::vector<float>{1, 10, 100, 1000});
    for (bool gateFirst : {false, true}) {
        SCOPED_TRACE(gateFirst);
        Mul mul;
        const Tensor& y = mul(gateFirst ? Tensors{g, x} : Tensors{x, g})[0];
        EXPECT_EQ(y.shape(), x.shape());
        EXPECT_TRUE(allClose(y, {3, 6, -6, -8}));
        const Tensors& d = mul.backward(Tensors{dy});
        const Tensor& dx = d[gateFirst ? 1 : 0];
        const Tensor& dg = d[gateFirst ? 0 : 1];
        EXPECT_EQ(dg.shape(), g.shape());
        EXPECT_TRUE(allClose(dx, {3, 30, -200, -2000}));
        EXPECT_TRUE(allClose(dg, {1 * 1 + 2 * 10, 3 * 100 + 4 * 1000}));
        EXPECT_TRUE(checkGradients(mul, gateFirst
                                            ? Tensors{randomTensor({2, 3, 1, 1}, 3), randomTensor({2, 3, 4, 5}, 4)}
                                            : Tensors{randomTensor({2, 3, 4, 5}, 4), randomTensor({2, 3, 1, 1}, 3)}));
        EXPECT_TRUE(checkShapes(mul, {randomTensor({2, 3, 4}, 1), randomTensor({2, 3, 1}, 2)}));
    }
    Mul mul("se");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mul(Tensors{randomTensor({2, 3, 4}, 1), randomTensor({2, 3, 2}, 2)});
        },
        {"Mul 'se'", "[2, 3, 4] and [2, 3, 2] do not broadcast", "dim 2"}));
}

// NumPy's broadcasting in Add, Mul, Sub and Div: the reference against loops, the
// gradients (summed back to each input's shape) against central differences.
float broadcastRef(BinaryOp op, float a, float b) {
    switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    }
    return 0;
}

TEST(Broadcast, ReferenceGradientShape) {
    struct Pair {
        Shape a, b;
    };
    // a bias per channel, a row, a scalar, both sides broadcasting, fewer dims first
    const Pair pairs[] = {
        {{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {4}}, {{2, 3}, {1}}, {{2, 1, 4}, {1, 3, 1}}, {{3, 1}, {2, 3, 4}}};
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
        for (const Pair& p : pairs) {
            SCOPED_TRACE(static_cast<int>(op));
            SCOPED_TRACE(p.a.str() + " op " + p.b.str());
            ModulePtr m = op == BinaryOp::add   ? ModulePtr(std::make_shared<Add>())
                          : op == BinaryOp::sub ? ModulePtr(std::make_shared<Sub>())
                          : op == BinaryOp::mul ? ModulePtr(std::make_shared<Mul>())
                                                : ModulePtr(std::make_shared<Div>());
            // b away from 0 so that Div is smooth
            const Tensor a = randomTensor(p.a, 1), b = randomTensor(p.b, 2, 0.5f, 2.0f);
            const Tensor y = (*m)(Tensors{a, b})[0];
            const Shape ys = broadcastShapes(p.a, p.b);
            ASSERT_EQ(y.shape(), ys);
            // the reference: index y, map to a and b with NumPy's rules
            const std::vector<float> av = a.toVector<float>(), bv = b.toVector<float>(), yv = y.toVector<float>();
            auto at = [](const Shape& s, const std::vector<int64_t>& coord) {
                int64_t off = 0;
                for (size_t k = 0; k < s.rank(); ++k) {
                    const int64_t c = coord[coord.size() - s.rank() + k];
                    off = off * s.dims()[k] + (s.dims()[k] == 1 ? 0 : c);
                }
                return static_cast<size_t>(off);
            };
            for (int64_t i = 0; i < ys.numel(); ++i) {
                std::vector<int64_t> coord(ys.rank());
                int64_t r = i;
                for (size_t k = ys.rank(); k-- > 0;) {
                    coord[k] = r % ys.dims()[k];
                    r /= ys.dims()[k];
                }
                const float want = broadcastRef(op, av[at(p.a, coord)], bv[at(p.b, coord)]);
                ASSERT_NEAR(yv[static_cast<size_t>(i)], want, 1e-6f * (1 + std::fabs(want))) << i;
            }
            EXPECT_TRUE(checkGradients(*m, {a, b}));
            EXPECT_TRUE(checkShapes(*m, {a, b}));
        }
    }
}

TEST(Broadcast, BadInput) {
    Sub sub("minus");
    Div div("ratio");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            sub(Tensors{randomTensor({2, 3}, 1), randomTensor({4}, 2)});
        },
        {"Sub 'minus'", "[2, 3] and [4] do not broadcast"}));
    EXPECT_TRUE(throwsShapeError([&] { div(Tensors{randomTensor({2, 3}, 1)}); }, {"Div 'ratio'", "expects 2 input"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            div(Tensors{randomTensor({2}, 1), randomTensor({2}, 1), randomTensor({2}, 1)});
        },
        {"expects 2 input"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            sub(Tensors{Tensor::zeros({2}, DType::int32), randomTensor({2}, 1)});
        },
        {"Sub 'minus'", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { div(Tensors{Tensor::empty({0, 3}), randomTensor({3}, 1)}); }, {"empty"}));
    // Add broadcasts only without coefficients; more than 8 dims are refused.
    Add weighted(std::vector<float>{1.0f, 2.0f}, "w");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            weighted(Tensors{randomTensor({2, 3}, 1), randomTensor({3}, 1)});
        },
        {"Add 'w'", "differs"}));
    Add add;
    EXPECT_THROW(add(Tensors{randomTensor({1, 1, 1, 1, 1, 1, 1, 1, 2}, 1), randomTensor({2}, 1)}), ShapeError);
    // Same shapes: Sub is a - b, Div a / b.
    const Tensor a = Tensor::fromVector({3}, std::vector<float>{1, 4, 9});
    const Tensor b = Tensor::fromVector({3}, std::vector<float>{2, 2, 3});
    EXPECT_TRUE(allClose(sub(Tensors{a, b})[0], {-1, 2, 6}));
    EXPECT_TRUE(allClose(div(Tensors{a, b})[0], {0.5f, 2, 3}));
    EXPECT_TRUE(
        allClose(div.backward(Tensors{Tensor::fromVector({3}, std::vector<float>{1, 1, 1})})[1], {-0.25f, -1, -1}));
}

TEST(Broadcast, BlueprintsRebuild) {
    for (ModulePtr m : {ModulePtr(std::make_shared<Sub>("s")), ModulePtr(std::make_shared<Div>("d"))}) {
        ModulePtr back = buildModule(m->blueprint());
        EXPECT_EQ(back->classname(), m->classname());
        EXPECT_EQ(back->blueprint().toJson(), m->blueprint().toJson());
    }
}

TEST(Mul, BadInput) {
    Mul mul("gate");
    EXPECT_TRUE(throwsShapeError([&] { mul(Tensors{randomTensor({2, 3}, 1)}); }, {"Mul 'gate'", "at least 2"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mul(Tensors{randomTensor({2, 3}, 1), randomTensor({3, 3}, 1)});
        },
        {"do not broadcast"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            mul(Tensors{Tensor::zeros({2, 6}, DType::int32), Tensor::zeros({2, 6}, DType::int32)});
        },
        {"int32"}));
    EXPECT_TRUE(throwsShapeError([&] { mul(Tensors{Tensor::empty({0, 6}), Tensor::empty({0, 6})}); }, {"empty"}));
}

} // namespace
} // namespace tessera
