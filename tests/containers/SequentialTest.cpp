#include "containers/Sequential.h"
#include "GradCheck.h"
#include "modules/Activation.h"
#include "modules/Cast.h"
#include "modules/Dropout.h"
#include "modules/Flatten.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/Reduce.h"
#include "modules/SoftMax.h"

namespace tessera {
namespace {
using namespace testing;

std::shared_ptr<Sequential> mlp4() {
    auto net = std::make_shared<Sequential>("mlp");
    net->append(std::make_shared<Linear>(6, 8, LinearOptions{.name = "fc1"}))
        .append(std::make_shared<Activation>(ActivationKind::tanh))
        .append(std::make_shared<Linear>(8, 8, LinearOptions{.name = "fc2"}))
        .append(std::make_shared<Activation>(ActivationKind::sigmoid))
        .append(std::make_shared<Linear>(8, 7, LinearOptions{.name = "fc3"}))
        .append(std::make_shared<Activation>(ActivationKind::elu))
        .append(std::make_shared<Linear>(7, 4, LinearOptions{.name = "fc4"}))
        .append(std::make_shared<SoftMax>());
    return net;
}

TEST(Sequential, GradientThroughFourLayerMlp) {
    manualSeed(11);
    auto net = mlp4();
    for (const auto& [name, var] : net->namedParams()) {
        if (name.ends_with(".b")) var->data.copyFrom(randomTensor(var->data.shape(), 3, -0.5f, 0.5f));
    }
    GradCheckOptions opts;
    opts.maxElements = 24;
    EXPECT_TRUE(checkGradients(*net, {randomTensor({5, 6}, 1)}, opts));
}

TEST(Sequential, ReferenceMatchesChainedModules) {
    manualSeed(2);
    auto net = mlp4();
    Tensor x = randomTensor({3, 6}, 4);
    Tensor y = (*net)(x);
    Tensor expected = x;
    for (size_t i = 0; i < net->size(); ++i) expected = (*net)[i](expected);
    EXPECT_TRUE(allClose(y, expected.toVector<float>(), 0.0f));
}

TEST(Sequential, Shape) {
    auto net = std::make_shared<Sequential>();
    net->append(std::make_shared<Flatten>()).append(std::make_shared<Linear>(12, 5));
    EXPECT_TRUE(checkShapes(*net, {randomTensor({2, 3, 4}, 1)}));
    EXPECT_EQ(net->dataShapeFrom(Shape{9, 3, 4}), (Shape{9, 5}));
    EXPECT_EQ(net->gradShapeFrom(Shape{9, 5}), (Shape{9, 3, 4}));
    EXPECT_TRUE(throwsShapeError([&] { (*net)(Tensor::zeros({2, 3, 4}, DType::int32)); }, {"input -> 0", "int32"}));
}

TEST(Sequential, BadShapeNamesThePath) {
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(10, 20, LinearOptions{.name = "fc1"}))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Linear>(30, 5, LinearOptions{.name = "fc2"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            net->dataShapeFrom(Shape{4, 10});
        },
        {"Sequential 'net'", "input -> fc1 -> 1 -> fc2", "Linear 'fc2'", "[..., 30]", "got [4, 20]"}));
    EXPECT_TRUE(throwsShapeError([&] { (*net)(randomTensor({4, 10}, 1)); }, {"input -> fc1 -> 1 -> fc2"}));
    EXPECT_TRUE(throwsShapeError([&] { (*net)(randomTensor({4, 11}, 1)); }, {"input -> fc1:", "got [4, 11]"}));
    EXPECT_TRUE(throwsModuleError([&] { Sequential().dataShapeFrom(Shape{1, 2}); }, {"is empty"}));
}

TEST(Sequential, AppendInsertPopAndErrors) {
    Sequential net("net");
    auto a = std::make_shared<Linear>(4, 4, LinearOptions{.name = "a"});
    net.append(a).append(std::make_shared<Activation>(ActivationKind::relu));
    EXPECT_EQ(net.childName(1), "1");
    net.insert(1, std::make_shared<Linear>(4, 4, LinearOptions{.name = "b"}));
    EXPECT_EQ(net.childName(1), "b");
    EXPECT_EQ(net.size(), 3u);
    // Unnamed modules get the smallest free number at or after their position.
    net.insert(1, std::make_shared<Identity>());
    EXPECT_EQ(net.childName(1), "2");

    try {
        net.insert(9, std::make_shared<Identity>());
        FAIL();
    } catch (const ContainerError& e) {
        EXPECT_NE(std::string(e.what()).find("insert at position 9"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("valid: 0..4"), std::string::npos) << e.what();
    }
    EXPECT_THROW(net.append(std::make_shared<Linear>(4, 4, LinearOptions{.name = "a"})), ContainerError);
    EXPECT_THROW(net.append(a), ContainerError);
    EXPECT_THROW(net.append(nullptr), ContainerError);
    EXPECT_THROW(net.append(std::make_shared<Identity>("x.y")), ContainerError);

    // extend is all or nothing.
    EXPECT_THROW(net.extend({std::make_shared<Identity>("c"), std::make_shared<Identity>("c")}), ContainerError);
    EXPECT_EQ(net.size(), 4u);
    net.extend({std::make_shared<Identity>("c"), std::make_shared<Identity>("d")});
    EXPECT_EQ(net.size(), 6u);

    EXPECT_EQ(net.pop()->name(), "d");
    EXPECT_EQ(net.pop(0).get(), a.get());
    EXPECT_THROW(net.pop(10), ContainerError);
    EXPECT_THROW(Sequential().pop(), ContainerError);
}

TEST(Sequential, DottedNamesModesAndBlueprint) {
    auto inner = std::make_shared<Sequential>("block1");
    inner->append(std::make_shared<Linear>(3, 3, LinearOptions{.name = "fc1"}))
        .append(std::make_shared<Dropout>(DropoutOptions{.name = "drop"}));
    Sequential net("net");
    net.append(inner).append(std::make_shared<Linear>(3, 2, LinearOptions{.name = "head"}));

    std::vector<std::string> names;
    for (const auto& [n, v] : net.namedParams()) names.push_back(n);
    EXPECT_EQ(names, (std::vector<std::string>{"block1.fc1.W", "block1.fc1.b", "head.W", "head.b"}));
    EXPECT_EQ(net.numOfParams(), 9 + 3 + 6 + 2);
    EXPECT_EQ(&net.getByName("block1.drop"), &(*inner)[1]);
    EXPECT_THROW(net.getByName("block1.nope"), ContainerError);
    EXPECT_THROW(net.getByName("head.W"), ContainerError);

    net.evalMode();
    EXPECT_FALSE(net.getByName("block1.drop").isTrain());
    net.trainMode();
    EXPECT_TRUE(net.getByName("block1.fc1").isTrain());

    EXPECT_EQ(net.blueprint().modules.size(), 2u);
    EXPECT_EQ(net.blueprint().modules[0].modules[1].classname, "Dropout");
}

// An integer value in the chain (ArgMax's indices, then a Cast to float: a one-hot, say)
// passes no gradient: the layers before it get zeros, their parameters zero gradients.
TEST(Sequential, AnIntegerValueInTheChainPassesZeros) {
    manualSeed(3);
    Sequential seq;
    seq.append(std::make_shared<Linear>(4, 3, LinearOptions{.name = "fc"}))
        .append(std::make_shared<ArgMax>(1, true))
        .append(std::make_shared<Cast>(DType::int32, DType::float32))
        .append(std::make_shared<MulAddConst>(2.0f, 1.0f));
    const Tensor x = randomTensor({5, 4}, 1);
    ASSERT_EQ(seq(x).shape(), (Shape{5, 1}));
    const Tensor dx = seq.backward(Tensor::ones({5, 1}));
    ASSERT_TRUE(dx.defined());
    EXPECT_TRUE(allClose(dx, std::vector<float>(20, 0.0f)));
    for (const auto& [name, v] : seq.namedParams()) {
        EXPECT_TRUE(allClose(v->grad, std::vector<float>(static_cast<size_t>(v->grad.numel()), 0.0f))) << name;
    }
}

TEST(Sequential, BackwardHonoursUpdGradAndUpdParamGrads) {
    manualSeed(5);
    Sequential net;
    net.append(std::make_shared<Linear>(3, 3)).append(std::make_shared<Linear>(3, 2));
    net(randomTensor({2, 3}, 1));
    net.zeroGradParams();
    EXPECT_TRUE(net.backward(randomTensor({2, 2}, 2), false, false).defined() == false);
    for (const auto& [n, v] : net.namedParams()) {
        for (float g : v->grad.toVector<float>()) ASSERT_EQ(g, 0.0f) << n;
    }
    // A backward releases what the children kept for it: a second one needs a forward first.
    EXPECT_TRUE(throwsModuleError(
        [&] {
            net.backward(randomTensor({2, 2}, 2));
        },
        {"a second backward after one forward", "run the forward again"}));
    net(randomTensor({2, 3}, 1));
    EXPECT_EQ(net.backward(randomTensor({2, 2}, 2)).shape(), (Shape{2, 3}));
}

} // namespace
} // namespace tessera
