// The Module API shared by every layer: variables, attributes, modes, parameter updates.
#include "GradCheck.h"
#include "modules/Dropout.h"
#include "modules/Linear.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Module, VariablesAndAttributes) {
    Linear lin(4, 3, {.name = "fc"});
    EXPECT_EQ(lin.numOfParams(), 4 * 3 + 3);
    EXPECT_EQ(lin.paramSize(), (4u * 3 + 3) * sizeof(float));
    const NamedVariables params = lin.namedParams();
    ASSERT_EQ(params.size(), 2u);
    EXPECT_EQ(params[0].first, "W");
    EXPECT_EQ(params[1].first, "b");
    EXPECT_THROW(lin.getVar("gamma"), ContainerError);

    lin.setAttr("runningMean", Tensor::full({3}, 0.25f));
    EXPECT_EQ(lin.getAttr("runningMean").toVector<float>(), std::vector<float>(3, 0.25f));
    EXPECT_EQ(lin.namedAttrs().size(), 1u);
    EXPECT_THROW(lin.getAttr("runningVar"), ContainerError);

    // Replacing a variable keeps one entry.
    lin.setVar("b", Variable::of(Tensor::zeros({3})));
    EXPECT_EQ(lin.namedParams().size(), 2u);
}

TEST(Module, UpdateAndZeroGradParams) {
    Linear lin(2, 1);
    lin.getVar("W")->data.copyFrom(Tensor::fromVector({2, 1}, std::vector<float>{1, 1}));
    lin(Tensor::fromVector({1, 2}, std::vector<float>{2, 3}));
    lin.backward(Tensor::fromVector({1, 1}, std::vector<float>{1}));
    lin.updateParams(0.5f); // W -= 0.5 * [2, 3]; b -= 0.5 * 1
    EXPECT_TRUE(allClose(lin.getVar("W")->data, {0.0f, -0.5f}));
    EXPECT_TRUE(allClose(lin.getVar("b")->data, {-0.5f}));
    lin.zeroGradParams();
    EXPECT_TRUE(allClose(lin.getVar("W")->grad, {0, 0}));
}

TEST(Module, SharedVariableCountsOnce) {
    Linear a(3, 3), b(3, 3);
    b.setVar("W", a.getVar("W"));
    EXPECT_EQ(a.getVar("W").get(), b.getVar("W").get());
    EXPECT_EQ(b.numOfParams(), 9 + 3);
}

TEST(Module, ModesAndReset) {
    Dropout drop;
    EXPECT_TRUE(drop.isTrain());
    drop.evalMode();
    EXPECT_FALSE(drop.isTrain());
    drop.trainMode();
    drop(randomTensor({2, 2}, 1));
    EXPECT_TRUE(drop.data().defined());
    drop.reset();
    EXPECT_TRUE(drop.dataList().empty());
    EXPECT_TRUE(drop.inDataList().empty());
    EXPECT_FALSE(drop.mask().defined());
    EXPECT_TRUE(throwsModuleError([&] { drop.backward(randomTensor({2, 2}, 1)); }, {"before forward"}));
}

TEST(Module, CalcModeAndOptimizeForShape) {
    Linear lin(2, 2);
    EXPECT_NO_THROW(lin.calcMode(DType::float32));
    EXPECT_TRUE(throwsModuleError([&] { lin.calcMode(DType::int32); }, {"calcMode(int32)", "float32"}));
    EXPECT_NO_THROW(lin.optimizeForShape({Shape{4, 2}}, 1 << 20));
}

TEST(Module, ErrorsAreTypedAndCatchable) {
    Linear lin(2, 2, {.name = "fc"});
    try {
        lin(randomTensor({1, 3}, 1));
        FAIL();
    } catch (const Error& e) { // every Tessera error derives from tessera::Error
        EXPECT_NE(std::string(e.what()).find("fc"), std::string::npos);
    }
    EXPECT_TRUE(throwsShapeError([&] { lin(Tensor()); }, {"undefined"}));
}

} // namespace
} // namespace tessera
