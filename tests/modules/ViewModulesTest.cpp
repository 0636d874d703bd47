// Flatten, Reshape and Identity: modules that only change how data is viewed.
#include "GradCheck.h"
#include "modules/Flatten.h"
#include "modules/Identity.h"
#include "modules/Reshape.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Flatten, Reference) {
    Flatten f;
    std::vector<float> v(24);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    Tensor x = Tensor::fromVector({2, 3, 2, 2}, v);
    Tensor y = f(x);
    EXPECT_EQ(y.shape(), (Shape{2, 12}));
    EXPECT_TRUE(y.sharesStorage(x)); // a view, no copy
    EXPECT_TRUE(allClose(y, v));
    Tensor dx = f.backward(Tensor::fromVector({2, 12}, v));
    EXPECT_EQ(dx.shape(), (Shape{2, 3, 2, 2}));
    EXPECT_TRUE(allClose(dx, v));
}

TEST(Flatten, Gradient) {
    Flatten f;
    EXPECT_TRUE(checkGradients(f, {randomTensor({2, 3, 4}, 1)}));
}

TEST(Flatten, Shape) {
    Flatten f;
    EXPECT_TRUE(checkShapes(f, {randomTensor({2, 3, 4, 5}, 1)}));
    EXPECT_EQ(f.dataShapeFrom(Shape{8, 16, 5, 5}), (Shape{8, 400}));
    // Pure: the input shapes are given, whatever ran before.
    EXPECT_EQ(f.gradShapeFrom(Shapes{{8, 16, 5, 5}}, Shapes{{8, 400}}), (Shapes{{8, 16, 5, 5}}));
    EXPECT_EQ(f.gradShapeFrom(Shapes{{8, 2, 200}}, Shapes{{8, 400}}), (Shapes{{8, 2, 200}}));
    // The one-argument form reads the last forward ([2, 3, 4, 5]), at the gradient's batch.
    EXPECT_EQ(f.gradShapeFrom(Shape{8, 60}), (Shape{8, 3, 4, 5}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            f.gradShapeFrom(Shapes{{8, 16, 5, 5}}, Shapes{{8, 401}});
        },
        {"gradient 0 has shape [8, 401]", "output shape [8, 400]"}));
}

TEST(Flatten, BadInput) {
    Flatten f("flat");
    EXPECT_TRUE(throwsShapeError([&] { f(randomTensor({5}, 1)); }, {"Flatten 'flat'", "rank >= 2", "got [5]"}));
    EXPECT_TRUE(throwsShapeError([&] { f(Tensor::zeros({2, 3}, DType::int32)); }, {"flat", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { f(Tensor::empty({0, 3})); }, {"flat", "empty"}));
    Flatten fresh;
    EXPECT_TRUE(throwsModuleError([&] { fresh.gradShapeFrom(Shape{2, 6}); }, {"run forward first"}));
}

TEST(Reshape, Reference) {
    Reshape r(Shape{0, 2, -1});
    std::vector<float> v(12);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
    Tensor x = Tensor::fromVector({2, 6}, v);
    Tensor y = r(x);
    EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
    EXPECT_TRUE(y.sharesStorage(x));
    EXPECT_TRUE(allClose(y, v));
    Tensor dx = r.backward(Tensor::fromVector({2, 2, 3}, v));
    EXPECT_EQ(dx.shape(), (Shape{2, 6}));
    EXPECT_TRUE(allClose(dx, v));
}

TEST(Reshape, Gradient) {
    Reshape r(Shape{-1, 4});
    EXPECT_TRUE(checkGradients(r, {randomTensor({2, 6}, 1)}));
}

TEST(Reshape, Shape) {
    Reshape r(Shape{0, 1, 4, 4});
    EXPECT_TRUE(checkShapes(r, {randomTensor({3, 16}, 1)}));
    EXPECT_EQ(r.dataShapeFrom(Shape{7, 16}), (Shape{7, 1, 4, 4}));
    EXPECT_EQ(r.gradShapeFrom(Shapes{{7, 16}}, Shapes{{7, 1, 4, 4}}), (Shapes{{7, 16}}));
    EXPECT_EQ(r.gradShapeFrom(Shape{7, 1, 4, 4}), (Shape{7, 16})); // the last forward's [3, 16] at batch 7
}

TEST(Reshape, BadInput) {
    Reshape r(Shape{0, 5}, "rs");
    EXPECT_TRUE(throwsShapeError(
        [&] {
            r(randomTensor({2, 6}, 1));
        },
        {"Reshape 'rs'", "cannot view input [2, 6]", "[0, 5]"}));
    EXPECT_TRUE(throwsShapeError([&] { r(Tensor::empty({0, 5})); }, {"rs", "empty"}));
    Reshape rank(Shape{0, 0, 0, 2});
    EXPECT_TRUE(throwsShapeError([&] { rank(randomTensor({2, 6}, 1)); }, {"cannot view input"}));
    EXPECT_THROW(Reshape(Shape{-1, -1}), ShapeError);
    EXPECT_THROW(Reshape(Shape{2, -3}), ShapeError);
    // dims whose product overflows int64 (a fuzzed ONNX file's): an error, not a wrapped count
    for (const Shape& to : {Shape{1000003, 3602879701896396800, -1}, Shape{1000003, 3602879701896396800}}) {
        const Reshape huge(to);
        EXPECT_TRUE(throwsShapeError([&] { huge.checkDataShape({Shape{2, 6}}); }, {"cannot view input [2, 6]"}));
    }
}

// int32 values (ids, an attention mask) are viewed as floats are.
TEST(Reshape, ViewsInt32Values) {
    Reshape r(Shape{0, 1, 1, -1});
    const Tensor mask = Tensor::fromVector({2, 3}, std::vector<int32_t>{1, 1, 0, 1, 0, 0});
    const Tensor y = r(mask);
    EXPECT_EQ(y.shape(), (Shape{2, 1, 1, 3}));
    EXPECT_EQ(y.dtype(), DType::int32);
    EXPECT_EQ(y.toVector<int32_t>(), mask.toVector<int32_t>());
}

TEST(Reshape, Blueprint) {
    EXPECT_EQ(Reshape(Shape{0, 1, 28, 28}).blueprint().toJson(),
              "{\"classname\": \"Reshape\", \"scheme\": {\"shape\": [0, 1, 28, 28]}}");
}

TEST(Identity, Reference) {
    Identity id;
    Tensor x = Tensor::fromVector({1, 3}, std::vector<float>{1, -2, 3});
    EXPECT_TRUE(id(x).sharesStorage(x));
    EXPECT_TRUE(allClose(id.backward(Tensor::fromVector({1, 3}, std::vector<float>{4, 5, 6})), {4, 5, 6}));
}

TEST(Identity, Gradient) {
    Identity id;
    EXPECT_TRUE(checkGradients(id, {randomTensor({2, 3}, 1)}));
}

TEST(Identity, Shape) {
    Identity id;
    EXPECT_TRUE(checkShapes(id, {randomTensor({2, 3, 4}, 1)}));
}

TEST(Identity, BadInput) {
    Identity id("same");
    // Any dtype passes through (a graph's input node hands int32 ids to an Embedder).
    const Tensor ids = Tensor::fromVector({1, 3}, std::vector<int32_t>{4, 0, 7});
    EXPECT_EQ(id(ids).toVector<int32_t>(), (std::vector<int32_t>{4, 0, 7}));
    EXPECT_TRUE(throwsShapeError([&] { id(Tensor::empty({2, 0})); }, {"same", "empty"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            id(Tensors{randomTensor({2}, 1), randomTensor({2}, 1)});
        },
        {"expects 1 input"}));
}

} // namespace
} // namespace tessera
