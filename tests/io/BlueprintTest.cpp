#include <functional>
#include <set>

#include <gmock/gmock.h>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "io/Factory.h"
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
#include "modules/DropPath.h"
#include "modules/Dropout.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/GatherElements.h"
#include "modules/Gelu.h"
#include "modules/Glue.h"
#include "modules/GridSample.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/Init.h"
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

namespace tessera {
namespace {
using namespace testing;

// A Glue layer's kind, registered for the round trip.
GlueSpec glueSpec() {
    GlueSpec s;
    s.shapes = [](const Shapes& in) { return in; };
    s.forward = [](Glue&, const Tensors& in) { return in; };
    return s;
}
const bool glueRegistered = (registerGlue("blueprintTestGlue", glueSpec), true);

// One instance of every class the factory knows (but MaxUnpool2D), with arguments away
// from their defaults where there are any.
std::vector<ModulePtr> everyModule() {
    return {
        std::make_shared<Linear>(
            3, 4, LinearOptions{.wscale = 0.5f, .useBias = false, .initscheme = InitScheme::he, .name = "fc"}),
        std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = -1.0f, .max = 2.5f}),
        std::make_shared<Activation>(ActivationKind::hardSigmoid,
                                     ActivationOptions{.hardSlope = 0.2f, .hardOffset = 0.25f}),
        std::make_shared<Activation>(ActivationKind::leakyRelu, ActivationOptions{.slope = 0.2f}),
        std::make_shared<SoftMax>("sm"),
        std::make_shared<LogSoftMax>(-1, "logp"),
        std::make_shared<Activation>(ActivationKind::log),
        std::make_shared<Flatten>(),
        std::make_shared<Reshape>(Shape{-1, 4, 2}),
        std::make_shared<Identity>("id"),
        std::make_shared<Dropout>(DropoutOptions{.p = 0.25f}),
        std::make_shared<Concat>(2),
        std::make_shared<Split>(1, std::vector<int64_t>{2, 3}),
        std::make_shared<Slice>(1, 1, 3),
        std::make_shared<Replicate>(3),
        std::make_shared<Add>(std::vector<float>{0.5f, 2.0f}),
        std::make_shared<Mul>(),
        std::make_shared<Sub>("minus"),
        std::make_shared<Div>(),
        std::make_shared<ReduceMean>(std::vector<int64_t>{1, -1}, false, "mean"),
        std::make_shared<ReduceSum>(std::vector<int64_t>{0, 2}, true, "sum"),
        std::make_shared<ArgMax>(-1, false, "best"),
        std::make_shared<ArgMin>(2),
        std::make_shared<RNN>(
            3, 4, RNNOptions{.layers = 2, .mode = RnnMode::gru, .bidirectional = true, .getSequences = true}),
        std::make_shared<Conv1D>(2, 4, 3, ConvOptions{.stride = {2}, .pad = {1}, .dilation = {2}, .groups = 2}),
        std::make_shared<Conv2D>(3, 6, std::vector<int64_t>{3, 1}, ConvOptions{.useBias = false, .wscale = 2.0f}),
        std::make_shared<Conv3D>(1, 2, 2),
        std::make_shared<Deconv1D>(4, 2, 3, ConvOptions{.stride = {2}}),
        std::make_shared<Deconv2D>(4, 4, 2, ConvOptions{.groups = 2}),
        std::make_shared<Deconv2D>(3, 2, 3, ConvOptions{.stride = {2, 3}, .pad = {1}, .postpad = {1, 2}}),
        std::make_shared<Cast>(DType::float32, DType::float16),
        std::make_shared<Deconv3D>(2, 1, 2),
        std::make_shared<MaxPool1D>(3),
        std::make_shared<MaxPool2D>(3, PoolOptions{.stride = {2}, .pad = {1}}),
        std::make_shared<MaxPool3D>(2),
        std::make_shared<AvgPool1D>(2),
        std::make_shared<AvgPool2D>(3, PoolOptions{.stride = {1}, .pad = {1}, .includePad = false}),
        std::make_shared<AvgPool3D>(2),
        std::make_shared<GlobalAvgPool>(),
        std::make_shared<KMaxPool>(2, -1),
        std::make_shared<GatherElements>(-2, "take"),
        std::make_shared<ScatterElements>(-1, true, "put"),
        std::make_shared<CumSum>(-1, CumSumOptions{.exclusive = true, .reverse = true, .name = "running"}),
        std::make_shared<TopK>(2, 1, TopKOptions{.largest = false, .sorted = false, .name = "best"}),
        std::make_shared<BatchNorm1D>(5, BatchNormOptions{.epsilon = 1e-3f, .minFactor = 0.2f}),
        std::make_shared<BatchNorm2D>(5),
        std::make_shared<BatchNorm3D>(5),
        std::make_shared<InstanceNorm2D>(3),
        std::make_shared<LayerNorm>(std::vector<int64_t>{3, 4}, LayerNormOptions{.epsilon = 1e-3f, .useBias = false}),
        std::make_shared<RMSNorm>(std::vector<int64_t>{8}, RMSNormOptions{.affine = false}),
        std::make_shared<GroupNorm>(2, 6, GroupNormOptions{.epsilon = 1e-4f}),
        std::make_shared<Activation>(ActivationKind::silu),
        std::make_shared<CrossMapLRN>(LRNOptions{.N = 3, .alpha = 0.01f}),
        std::make_shared<MapLRN>(),
        std::make_shared<Dropout2D>(Dropout2DOptions{.p = 0.1f}),
        std::make_shared<Pad1D>(std::vector<int64_t>{1, 2}, PadOptions{.fillValue = 3.0f}),
        std::make_shared<Pad2D>(std::vector<int64_t>{1, 2, 0, 1}, PadOptions{.mode = PadMode::reflect}),
        std::make_shared<Upsample2D>(3, UpsampleOptions{.mode = ResampleMode::linear}),
        std::make_shared<Upsample3D>(2, UpsampleOptions{.mode = ResampleMode::linear, .alignCorners = true}),
        std::make_shared<Resize2D>(std::vector<int64_t>{5, 7}, UpsampleOptions{.mode = ResampleMode::linear}),
        std::make_shared<Resize3D>(std::vector<int64_t>{2, 3, 1}),
        std::make_shared<Resize2D>(std::vector<int64_t>{4, 9}, UpsampleOptions{.mode = ResampleMode::nearestExact}),
        std::make_shared<Resize2D>(std::vector<int64_t>{6, 2},
                                   UpsampleOptions{.mode = ResampleMode::cubic, .alignCorners = true}),
        std::make_shared<PRelu>(4, PReluOptions{.sharedMaps = true, .init = 0.1f}),
        std::make_shared<Gelu>("g"),
        std::make_shared<Embedder>(10, 3, 4, EmbedderOptions{.learnable = false}),
        std::make_shared<GroupLinear>(2, 3, 4, GroupLinearOptions{.batchDim = 1}),
        std::make_shared<MatMul>(MatMulOptions{.transB = true, .alpha = 0.125f}),
        std::make_shared<Parameter>(std::vector<int64_t>{1, 8}, ParameterOptions{.std = 0.02f}),
        std::make_shared<Scale>(std::vector<int64_t>{4, 1, 1}, ScaleOptions{.init = 1e-6f}),
        std::make_shared<DropPath>(DropPathOptions{.p = 0.2f}),
        std::make_shared<ScaledDotProductAttention>(AttentionOptions{.causal = true, .scale = 0.5f, .dropout = 0.1f}),
        std::make_shared<MultiheadAttention>(
            8, 2,
            MultiheadAttentionOptions{
                .dropout = 0.1f, .bias = false, .batchFirst = false, .causal = true, .keyPaddingMask = true}),
        std::make_shared<PositionalEncoding>(PositionalEncodingOptions{.base = 100.0f}),
        std::make_shared<MulAddConst>(2.0f, -1.5f),
        std::make_shared<MulAddConst>(Tensor::full({3, 1, 1}, 2.0f), Tensor()),
        std::make_shared<Pow>(-0.5f, 2.0f),
        std::make_shared<NoiseInjector>(NoiseInjectorOptions{
            .mode = NoiseMode::mul, .noisetype = NoiseType::gaussian, .param1 = 1.0f, .param2 = 0.1f}),
        std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1}),
        std::make_shared<SwapAxes>(1, -1),
        std::make_shared<MoveAxis>(0, 2),
        std::make_shared<Tile>(-1, 3),
        std::make_shared<Sum>(2, false, "sum"),
        std::make_shared<Cast>(DType::float32, DType::int32),
        std::make_shared<Penalty>(PenaltyOptions{.mode = PenaltyMode::l2, .weight = 0.25f, .name = "reg"}),
        std::make_shared<ToList>(3),
        std::make_shared<DepthConcat>("dc"),
        std::make_shared<SubtractMean>(SubtractMeanOptions{.size = 3, .includePad = false}),
        std::make_shared<SpatialTf>(SpatialTfOptions{.height = 7, .width = 5, .name = "stn"}),
        std::make_shared<GridSample>(GridSampleOptions{
            .mode = GridSampleMode::nearest, .padding = GridPadding::border, .alignCorners = true, .name = "warp"}),
        std::make_shared<BatchNorm>(12, BatchNormOptions{.epsilon = 1e-3f, .name = "bnAny"}),
        std::make_shared<LCN>(LCNOptions{.N = 3, .alpha = 0.5f, .beta = 0.5f, .K = 1.5f, .includePad = false}),
        std::make_shared<Glue>("blueprintTestGlue", glueSpec()),
    };
}

std::string roundTrip(const Module& m) {
    const std::string json = m.blueprint().toJson();
    ModulePtr rebuilt = buildModule(blueprintFromJson(json));
    return rebuilt->blueprint().toJson();
}

TEST(Blueprint, EveryModuleRoundTrips) {
    std::set<std::string> seen;
    for (const ModulePtr& m : everyModule()) {
        SCOPED_TRACE(m->blueprint().toJson());
        EXPECT_EQ(roundTrip(*m), m->blueprint().toJson());
        seen.insert(m->classname());
    }
    // Every class of the factory table is covered (MaxUnpool2D cannot be rebuilt alone;
    // the containers are covered below).
    for (const std::string& c : factoryClassnames()) {
        if (c == "MaxUnpool2D" || c == "Sequential" || c == "Parallel" || c == "Graph") continue;
        EXPECT_TRUE(seen.count(c)) << c << " has no round-trip case";
    }
}

TEST(Blueprint, StrictArgumentsRejectWhatTheClassDoesNotTake) {
    Blueprint bp;
    bp.classname = "Linear";
    bp.scheme = {{"insize", int64_t{2}}, {"outsize", int64_t{3}}, {"insise", int64_t{4}}};
    EXPECT_NO_THROW(buildModule(bp, "", /*strictArguments=*/false)); // asked for: ignored
    try {
        buildModule(bp, "net -> "); // blueprint files too: a misspelled key would change the model
        FAIL() << "an unknown argument passed the strict check";
    } catch (const ModuleError& e) {
        EXPECT_THAT(e.what(),
                    ::testing::HasSubstr("net -> Linear: unknown argument 'insise' (did you mean 'insize'?)"));
        EXPECT_THAT(e.what(),
                    ::testing::HasSubstr("it takes insize, outsize, wscale, useBias, initscheme, transposed, name"));
    }
    // Inside a container, the path names it; the case differs ("usebias" for "useBias").
    Blueprint seq;
    seq.classname = "Sequential";
    Blueprint conv;
    conv.classname = "Conv2D";
    conv.scheme = {{"inmaps", int64_t{1}}, {"outmaps", int64_t{2}}, {"size", int64_t{3}}, {"usebias", false}};
    seq.modules = {conv};
    EXPECT_THAT(testing::errorOf([&] { buildModule(seq); }),
                ::testing::HasSubstr("Sequential[0] -> Conv2D: unknown argument 'usebias' (did you mean 'useBias'?)"));
    // What every module writes into its blueprint, the strict check accepts.
    for (const ModulePtr& m : everyModule()) {
        SCOPED_TRACE(m->blueprint().toJson());
        EXPECT_NO_THROW(buildModule(m->blueprint(), {}, true));
    }
}

// Copies every parameter of `from` into `to` by dotted name.
void copyParams(const Module& from, Module& to) {
    auto dst = to.namedParams();
    for (const auto& [name, v] : from.namedParams()) {
        bool found = false;
        for (auto& [n, w] : dst) {
            if (n == name) {
                w->data.copyFrom(v->data);
                found = true;
            }
        }
        ASSERT_TRUE(found) << name;
    }
}

TEST(Blueprint, ContainersAndGraphsWithSlotsRoundTripAndComputeTheSame) {
    auto seq = std::make_shared<Sequential>("seq");
    seq->append(std::make_shared<Linear>(4, 8, LinearOptions{.name = "a"}));
    seq->append(std::make_shared<Activation>(ActivationKind::tanh));
    // A graph whose Split feeds two branches through slots 0 and 1, merged by Concat.
    auto data = node(std::make_shared<Identity>(), {}, "data");
    auto split = node(std::make_shared<Split>(1, std::vector<int64_t>{2, 4}), data, "split");
    auto left = node(std::make_shared<Linear>(2, 3), Parent(split, 0), "left");
    auto right = node(seq, Parent(split, 1), "right");
    auto right2 = node(std::make_shared<Linear>(8, 3), right, "right2");
    auto both = node(std::make_shared<Concat>(1), {left, right2}, "both");
    auto sum = node(std::make_shared<Add>(), {left, right2}, "sum");
    Graph g({data}, {both, sum}, "g");
    const std::string json = g.blueprint().toJson();
    EXPECT_NE(json.find("[\"split\", [1]]"), std::string::npos) << json;
    ModulePtr rebuilt = buildModule(blueprintFromJson(json));
    EXPECT_EQ(rebuilt->blueprint().toJson(), json);
    copyParams(g, *rebuilt);
    Tensor x = randomTensor({3, 6}, 1);
    const Tensors a = g(Tensors{x});
    const Tensors b = (*rebuilt)(Tensors{x});
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(allClose(b[i], a[i].toVector<float>(), 1e-6f));

    Parallel par("par");
    par.append(std::make_shared<Linear>(2, 2));
    par.append(std::make_shared<SoftMax>());
    EXPECT_EQ(roundTrip(par), par.blueprint().toJson());
}

TEST(Blueprint, OneModuleInTwoNodesStaysOneModule) {
    auto tower = std::make_shared<Linear>(4, 3, LinearOptions{.name = "tower"});
    auto x1 = node(std::make_shared<Identity>(), {}, "x1");
    auto x2 = node(std::make_shared<Identity>(), {}, "x2");
    auto a = node(tower, x1, "a");
    auto b = node(tower, x2, "b");
    auto sum = node(std::make_shared<Add>(), {a, b}, "sum");
    Graph g({x1, x2}, {sum}, "siamese");
    const std::string json = g.blueprint().toJson();
    EXPECT_NE(json.find(R"("name": "b", "parents": [["x2", [0]]], "sameModuleAs": "a")"), std::string::npos) << json;
    ModulePtr rebuilt = buildModule(blueprintFromJson(json));
    EXPECT_EQ(rebuilt->blueprint().toJson(), json);
    auto& rg = dynamic_cast<Graph&>(*rebuilt);
    EXPECT_EQ(&rg.getNodeByName("a").module(), &rg.getNodeByName("b").module());
    EXPECT_EQ(rebuilt->numOfParams(), 4 * 3 + 3);
    EXPECT_TRUE(throwsModuleError(
        [] {
            buildModule(blueprintFromJson(
                R"({"classname": "Graph", "modules": [{"classname": "Identity"}], "nodes": [{"name": "a", "parents": [], "sameModuleAs": "z"}], "inputs": ["a"], "outputs": ["a"]})"));
        },
        {"'z'", "not an earlier node"}));
}

TEST(Blueprint, ZooModelsRoundTrip) {
    auto lenet = loadLeNet();
    EXPECT_EQ(roundTrip(*lenet), lenet->blueprint().toJson());
    auto resnet = loadResNet(18, ResNetStem::cifar, 10);
    ModulePtr rebuilt = buildModule(blueprintFromJson(resnet->blueprint().toJson()));
    EXPECT_EQ(rebuilt->numOfParams(), resnet->numOfParams());
    EXPECT_EQ(rebuilt->dataShapeFrom(Shape{2, 3, 32, 32}), (Shape{2, 10}));

    ShapeOnlyBuild noInit;
    auto inception = loadInceptionBN();
    EXPECT_EQ(roundTrip(*inception), inception->blueprint().toJson());
}

// A shape-only build (what `tessera check` and `summary` use) allocates no parameter
// memory: a 100-billion-parameter blueprint builds and checks with nothing allocated, and
// every zoo model does too; running such a model is a clear error, not a crash.
TEST(Blueprint, ShapeOnlyBuildAllocatesNothing) {
    Backend& be = backendFor(Device::cpu());
    const size_t before = be.memoryStats().current;
    {
        ShapeOnlyBuild shapeOnly;
        ModulePtr huge = buildModule(blueprintFromJson(R"({"classname": "Sequential", "modules": [
            {"classname": "Linear", "scheme": {"name": "fc1", "insize": 100000, "outsize": 1000000}},
            {"classname": "Linear", "scheme": {"name": "fc2", "insize": 1000000, "outsize": 10}}]})"));
        EXPECT_EQ(huge->numOfParams(), int64_t{100000} * 1000000 + 1000000 + 1000000 * 10 + 10);
        EXPECT_EQ(huge->dataShapeFrom(Shape{4, 100000}), (Shape{4, 10}));
        EXPECT_EQ(be.memoryStats().current, before);
        const Tensor& w = huge->namedParams()[0].second->data;
        EXPECT_FALSE(w.hasData());
        EXPECT_EQ(w.nbytes(), size_t{400000000000});
        EXPECT_NE(errorOf([&] { (void)w.data<float>(); }).find("shape-only build"), std::string::npos);
        for (const ZooEntry& e : zooModels()) {
            ModulePtr m = loadZooModel(e.name);
            EXPECT_GT(m->numOfParams(), 0) << e.name;
            EXPECT_EQ(be.memoryStats().current, before) << e.name << " allocated in a shape-only build";
        }
        // Values a module computes while being built are real even in a shape-only build.
        EXPECT_TRUE(Tensor::fromVector({2}, std::vector<float>{1, 2}).hasData());
    }
    EXPECT_TRUE(Tensor::zeros({2}).hasData()); // the scope is over
    ModulePtr lin = buildModule(blueprintFromJson(R"({"classname": "Linear", "scheme": {"insize": 3, "outsize": 2}})"));
    EXPECT_TRUE(lin->namedParams()[0].second->data.hasData());
}

TEST(Blueprint, BadBlueprintsSayWhatAndWhere) {
    EXPECT_NE(errorOf([] { blueprintFromJson("{\"classname\": \"Linear\", "); }).find("blueprint JSON"),
              std::string::npos);
    EXPECT_NE(errorOf([] {
                  buildModule(blueprintFromJson(R"({"classname": "Lineer"})"));
              }).find("unknown module class 'Lineer'"),
              std::string::npos);
    EXPECT_NE(errorOf([] {
                  buildModule(blueprintFromJson(R"({"classname": "Linear", "scheme": {"insize": 3}})"));
              }).find("Linear: missing argument 'outsize'"),
              std::string::npos);
    EXPECT_NE(
        errorOf([] {
            buildModule(blueprintFromJson(
                R"({"classname": "Sequential", "modules": [{"classname": "Linear", "scheme": {"insize": "3", "outsize": 2}}]})"));
        }).find("Sequential[0] -> Linear: argument 'insize' must be an integer"),
        std::string::npos);
    EXPECT_NE(
        errorOf([] {
            buildModule(blueprintFromJson(
                R"({"classname": "Graph", "modules": [{"classname": "Identity"}], "nodes": [{"name": "a", "parents": [["b", [0]]]}], "inputs": ["a"], "outputs": ["a"]})"));
        }).find("node 'a' has parent 'b', but there is no node named 'b'"),
        std::string::npos);
    EXPECT_NE(
        errorOf([] {
            buildModule(blueprintFromJson(
                R"({"classname": "Graph", "modules": [{"classname": "Identity"}, {"classname": "Identity"}], "nodes": [{"name": "a", "parents": [["b", [0]]]}, {"name": "b", "parents": []}], "inputs": ["b"], "outputs": ["a"]})"));
        }).find("node 'a' has parent 'b', which is listed after it"),
        std::string::npos);
    EXPECT_NE(errorOf([] {
                  buildModule(blueprintFromJson(R"({"classname": "MulAddConst", "scheme": {"aShape": [-3, 2]}})"));
              }).find("MulAddConst: aShape and bShape hold dims of at least 1, got [-3, 2]"),
              std::string::npos);
    // A JSON syntax error says where in the text.
    EXPECT_NE(errorOf([] { blueprintFromJson("{\"classname\": "); }).find("blueprint JSON"), std::string::npos);
    // A slot too large for an integer (JSON reads it as a float) is refused, not converted.
    for (const char* slot : {"166666666666666666666666666666666", "1.5"}) {
        const std::string text = std::string(R"({"classname": "Graph", "modules": [{"classname": "Identity"}], )") +
                                 R"("nodes": [{"name": "a", "parents": [["b", [)" + slot + "]]]}]}";
        EXPECT_NE(errorOf([&] { blueprintFromJson(text); }).find("node 'a': slots must be integers"), std::string::npos)
            << slot;
    }
}

// Sequentials nested 20,000 deep (which once overflowed the stack) are refused while
// parsing; 500 deep still builds.
TEST(Blueprint, DeepNestingIsRefusedNotACrash) {
    auto nested = [](int depth) {
        std::string open, close;
        for (int i = 0; i < depth; ++i) {
            open += R"({"classname": "Sequential", "modules": [)";
            close += "]}";
        }
        return open + R"({"classname": "Identity"})" + close;
    };
    for (int depth : {20000, 1001}) {
        const std::string e = errorOf([&] { blueprintFromJson(nested(depth)); });
        EXPECT_NE(e.find("blueprint JSON: "), std::string::npos) << e;
        EXPECT_NE(e.find("deep"), std::string::npos) << e;
    }
    ModulePtr m = buildModule(blueprintFromJson(nested(500)));
    EXPECT_EQ(m->classname(), "Sequential");
}

} // namespace
} // namespace tessera

namespace tessera {
namespace {
using namespace testing;

// copyModule: a model that computes what the original does and shares nothing with it.
TEST(Blueprint, CopiedModulesComputeTheSameAndShareNothing) {
    manualSeed(8);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Conv2D>(1, 4, 3, ConvOptions{.pad = {1}, .name = "conv"}))
        .append(std::make_shared<BatchNorm2D>(4, BatchNormOptions{.name = "bn"}))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Dropout>(DropoutOptions{.p = 0.3f, .name = "drop"}))
        .append(std::make_shared<Flatten>())
        .append(std::make_shared<Linear>(4 * 6 * 6, 3, LinearOptions{.name = "fc"}));
    const Tensor x = randomTensor({2, 1, 6, 6}, 1);
    for (int i = 0; i < 3; ++i) (*net)(x); // running statistics, batches seen and the dropout stream move on
    net->getByName("fc").calcMode(DType::bfloat16);

    const ModulePtr copied = copyModule(*net);
    auto* copy = dynamic_cast<Sequential*>(copied.get());
    ASSERT_NE(copy, nullptr);
    EXPECT_EQ(copy->blueprint().toJson(), net->blueprint().toJson());
    EXPECT_EQ(copy->getByName("fc").computeDType(), DType::bfloat16);
    EXPECT_EQ(copy->getByName("conv").computeDType(), DType::float32);
    EXPECT_EQ(*copy->namedCounters().at(0).second, 3);
    // Train mode (batch statistics, the same dropout mask) and eval mode: the same outputs.
    EXPECT_TRUE(allClose((*copy)(x), (*net)(x).toVector<float>(), 0.0f));
    net->evalMode();
    copy->evalMode();
    EXPECT_TRUE(allClose((*copy)(x), (*net)(x).toVector<float>(), 0.0f));
    // Nothing shared: a change to the original leaves the copy as it was.
    const std::vector<float> before = copy->getByName("conv").getVar("W")->data.toVector<float>();
    net->getByName("conv").getVar("W")->data.copyFrom(Tensor::full({4, 1, 3, 3}, 0.25f));
    Tensor(net->getByName("bn").getAttr("mean")).copyFrom(Tensor::full({4}, 9.0f));
    EXPECT_EQ(copy->getByName("conv").getVar("W")->data.toVector<float>(), before);
    EXPECT_NE(copy->getByName("bn").getAttr("mean").toVector<float>()[0], 9.0f);

    // A module its blueprint does not rebuild whole is an error naming it.
    auto pool = std::make_shared<MaxPool2D>(2);
    auto pair = std::make_shared<Sequential>("pair");
    pair->append(pool).append(std::make_shared<MaxUnpool2D>(pool));
    EXPECT_TRUE(throwsModuleError([&] { copyModule(*pair); }, {"MaxUnpool2D"}));
}

// A weight the model shares between two of its layers (a head tied to the token table) is
// shared in the copy too, with none of the original's.
TEST(Blueprint, CopiesShareWhatTheModelSharesInside) {
    auto lm = std::make_shared<Sequential>("lm");
    auto emb = std::make_shared<Embedder>(7, 3, 5, EmbedderOptions{.name = "wte"});
    auto head = std::make_shared<Linear>(5, 7, LinearOptions{.useBias = false, .name = "head", .transposed = true});
    head->setVar("W", emb->getVar("W"));
    lm->append(emb).append(head);
    const ModulePtr copied = copyModule(*lm);
    auto* copy = dynamic_cast<Sequential*>(copied.get());
    ASSERT_NE(copy, nullptr);
    EXPECT_EQ(copy->getByName("head").getVar("W"), copy->getByName("wte").getVar("W"));
    EXPECT_NE(copy->getByName("wte").getVar("W"), emb->getVar("W"));
    EXPECT_EQ(copy->numOfParams(), 35);
    const Tensor ids = Tensor::fromVector({1, 3}, std::vector<int32_t>{1, 6, 2});
    EXPECT_TRUE(allClose((*copy)(ids), (*lm)(ids).toVector<float>(), 0.0f));
    EXPECT_TRUE(throwsError<ContainerError>([&] { copy->shareVarAt("head.b", emb->getVar("W")); }, {"head.b"}));
}

} // namespace
} // namespace tessera
