#include "models/ResNet.h"
#include "GradCheck.h"
#include "models/Zoo.h"
#include "modules/Init.h"

namespace tessera {
namespace {
using namespace testing;

// Parameter counts of the published networks (ImageNet stem, 1000 classes).
TEST(ResNet, ParameterCountsMatchThePublishedOnes) {
    EXPECT_EQ(loadResNet(18)->numOfParams(), 11689512);
    EXPECT_EQ(loadResNet(34)->numOfParams(), 21797672);
    EXPECT_EQ(loadResNet(50)->numOfParams(), 25557032);
    EXPECT_EQ(loadResNet(101)->numOfParams(), 44549160);
    EXPECT_EQ(loadResNet(152)->numOfParams(), 60192808);
    EXPECT_THROW(loadResNet(20), ModuleError);
}

TEST(ResNet, ShapesWithoutRunning) {
    EXPECT_EQ(loadResNet(50)->dataShapeFrom(Shape{1, 3, 224, 224}), (Shape{1, 1000}));
    EXPECT_EQ(loadResNet(18, ResNetStem::cifar, 10)->dataShapeFrom(Shape{64, 3, 32, 32}), (Shape{64, 10}));
}

TEST(ResNet, CifarResNet18RunsForwardAndBackward) {
    auto net = loadResNet(18, ResNetStem::cifar, 10);
    EXPECT_TRUE(checkShapes(*net, {randomTensor({2, 3, 32, 32}, 1)}));
}

// BN-Inception runs forward and backward at its real input size, and its 3c and 4e units
// halve the spatial size (28 -> 14 -> 7) as in the paper's table.
TEST(Zoo, InceptionBNRunsAndReducesAsPublished) {
    auto net = loadInceptionBN(10);
    EXPECT_TRUE(checkShapes(*net, {randomTensor({1, 3, 224, 224}, 2)}));
    auto* g = dynamic_cast<Graph*>(net.get());
    ASSERT_NE(g, nullptr);
    const Shape in{1, 3, 224, 224};
    EXPECT_EQ(g->dataShapeFrom(Shapes{in}), (Shapes{{1, 10}}));
    auto shapeOf = [&](const std::string& name) { return g->getNodeByName(name).outShapes().at(0); };
    EXPECT_EQ(shapeOf("inception_3b_output"), (Shape{1, 320, 28, 28}));
    EXPECT_EQ(shapeOf("inception_3c_output"), (Shape{1, 576, 14, 14}));
    EXPECT_EQ(shapeOf("inception_4e_output"), (Shape{1, 1056, 7, 7}));
    EXPECT_EQ(shapeOf("inception_5b_output"), (Shape{1, 1024, 7, 7}));
}

// Every zoo model with a published parameter count matches it, and every zoo model passes
// the whole-model shape check at its typical input without running.
// loadZooModel(name, classes): every classifier of the zoo scores that many classes (a
// U-Net gives that many maps); 0 keeps each model's own; gpt-mini takes none.
TEST(Zoo, ClassesSetTheHead) {
    ShapeOnlyBuild noInit;
    for (const ZooEntry& e : zooModels()) {
        if (e.name == "gpt-mini") continue;
        SCOPED_TRACE(e.name);
        std::vector<int64_t> dims;
        for (size_t at = 0, x; at <= e.input.size(); at = x + 1) {
            x = e.input.find('x', at);
            if (x == std::string::npos) x = e.input.size();
            dims.push_back(std::stoll(e.input.substr(at, x - at)));
        }
        const Shape out = loadZooModel(e.name, 5)->dataShapeFrom(Shape(dims));
        EXPECT_EQ(out[1], 5) << out.str();
    }
    EXPECT_EQ(loadZooModel("resnet18")->dataShapeFrom(Shape{1, 3, 224, 224}), (Shape{1, 1000}));
    EXPECT_THROW(loadZooModel("gpt-mini", 5), ModuleError);
    EXPECT_THROW(loadZooModel("lenet", -1), ModuleError);
}

TEST(Zoo, PublishedParameterCountsAndShapeChecks) {
    ShapeOnlyBuild noInit;
    for (const ZooEntry& e : zooModels()) {
        SCOPED_TRACE(e.name);
        ModulePtr m = loadZooModel(e.name);
        if (e.publishedParams) {
            EXPECT_EQ(m->numOfParams(), e.publishedParams) << e.source;
        }
        const Shape input = parseShape(e.input);
        const Shapes out = m->inferDataShape({input});
        EXPECT_EQ(out.size(), 1u);
        EXPECT_EQ(m->gradShapeFrom(out), (Shapes{input}));
    }
    EXPECT_THROW(loadZooModel("alexnet"), ModuleError);
}

} // namespace
} // namespace tessera
