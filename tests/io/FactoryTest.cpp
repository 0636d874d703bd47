// The factory row's signature is the one place a layer's defaults are written: a blueprint
// that leaves an argument out gets the row's default, and every C++ options struct agrees
// with its row (a layer built in C++ with default options has the blueprint of one built
// by the factory from its required arguments alone).
#include <functional>
#include <map>

#include <gmock/gmock.h>

#include "GradCheck.h"
#include "io/Factory.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Attention.h"
#include "modules/BatchNormND.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/CumSum.h"
#include "modules/Deconv.h"
#include "modules/DropPath.h"
#include "modules/Dropout.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/GatherElements.h"
#include "modules/GridSample.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LCN.h"
#include "modules/LRN.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MatMul.h"
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
#include "modules/RowNorm.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/SubtractMean.h"
#include "modules/ToList.h"
#include "modules/TopK.h"
#include "modules/Upsample.h"

namespace tessera {
namespace {

Blueprint scheme(const std::string& classname, std::vector<std::pair<std::string, BlueprintValue>> args) {
    Blueprint bp;
    bp.classname = classname;
    bp.scheme = std::move(args);
    return bp;
}

struct Case {
    Blueprint required;                    // the class with its required arguments only
    std::function<ModulePtr()> withStruct; // the same, built in C++ with default options
};

// Every class whose row gives a default other than name=None.
std::map<std::string, Case> cases() {
    using V = BlueprintValue;
    const V two = int64_t{2}, three = int64_t{3}, four = int64_t{4};
    return {
        {"Linear",
         {scheme("Linear", {{"insize", two}, {"outsize", three}}), [] { return std::make_shared<Linear>(2, 3); }}},
        {"Conv1D",
         {scheme("Conv1D", {{"inmaps", two}, {"outmaps", three}, {"size", four}}),
          [] { return std::make_shared<Conv1D>(2, 3, 4); }}},
        {"Conv2D",
         {scheme("Conv2D", {{"inmaps", two}, {"outmaps", three}, {"size", four}}),
          [] { return std::make_shared<Conv2D>(2, 3, 4); }}},
        {"Conv3D",
         {scheme("Conv3D", {{"inmaps", two}, {"outmaps", three}, {"size", four}}),
          [] { return std::make_shared<Conv3D>(2, 3, 4); }}},
        {"Deconv1D",
         {scheme("Deconv1D", {{"inmaps", two}, {"outmaps", three}, {"size", four}}),
          [] { return std::make_shared<Deconv1D>(2, 3, 4); }}},
        {"Deconv2D",
         {scheme("Deconv2D", {{"inmaps", two}, {"outmaps", three}, {"size", four}}),
          [] { return std::make_shared<Deconv2D>(2, 3, 4); }}},
        {"Deconv3D",
         {scheme("Deconv3D", {{"inmaps", two}, {"outmaps", three}, {"size", four}}),
          [] { return std::make_shared<Deconv3D>(2, 3, 4); }}},
        {"MaxPool1D", {scheme("MaxPool1D", {}), [] { return std::make_shared<MaxPool1D>(); }}},
        {"MaxPool2D", {scheme("MaxPool2D", {}), [] { return std::make_shared<MaxPool2D>(); }}},
        {"MaxPool3D", {scheme("MaxPool3D", {}), [] { return std::make_shared<MaxPool3D>(); }}},
        {"AvgPool1D", {scheme("AvgPool1D", {}), [] { return std::make_shared<AvgPool1D>(); }}},
        {"AvgPool2D", {scheme("AvgPool2D", {}), [] { return std::make_shared<AvgPool2D>(); }}},
        {"AvgPool3D", {scheme("AvgPool3D", {}), [] { return std::make_shared<AvgPool3D>(); }}},
        {"BatchNorm", {scheme("BatchNorm", {{"maps", four}}), [] { return std::make_shared<BatchNorm>(4); }}},
        {"BatchNorm1D", {scheme("BatchNorm1D", {{"maps", four}}), [] { return std::make_shared<BatchNorm1D>(4); }}},
        {"BatchNorm2D", {scheme("BatchNorm2D", {{"maps", four}}), [] { return std::make_shared<BatchNorm2D>(4); }}},
        {"BatchNorm3D", {scheme("BatchNorm3D", {{"maps", four}}), [] { return std::make_shared<BatchNorm3D>(4); }}},
        {"InstanceNorm2D",
         {scheme("InstanceNorm2D", {{"maps", four}}), [] { return std::make_shared<InstanceNorm2D>(4); }}},
        {"LayerNorm",
         {scheme("LayerNorm", {{"shape", std::vector<int64_t>{3, 4}}}),
          [] {
              return std::make_shared<LayerNorm>(std::vector<int64_t>{3, 4});
          }}},
        {"RMSNorm",
         {scheme("RMSNorm", {{"shape", std::vector<int64_t>{8}}}),
          [] { return std::make_shared<RMSNorm>(std::vector<int64_t>{8}); }}},
        {"GroupNorm",
         {scheme("GroupNorm", {{"groups", two}, {"maps", four}}), [] { return std::make_shared<GroupNorm>(2, 4); }}},
        {"CrossMapLRN", {scheme("CrossMapLRN", {}), [] { return std::make_shared<CrossMapLRN>(); }}},
        {"MapLRN", {scheme("MapLRN", {}), [] { return std::make_shared<MapLRN>(); }}},
        {"LCN", {scheme("LCN", {}), [] { return std::make_shared<LCN>(); }}},
        {"SubtractMean", {scheme("SubtractMean", {}), [] { return std::make_shared<SubtractMean>(); }}},
        // C++ names the kind; the row's default kind is relu.
        {"Activation", {scheme("Activation", {}), [] { return std::make_shared<Activation>(ActivationKind::relu); }}},
        {"PRelu", {scheme("PRelu", {{"maps", four}}), [] { return std::make_shared<PRelu>(4); }}},
        {"Dropout", {scheme("Dropout", {}), [] { return std::make_shared<Dropout>(); }}},
        {"Dropout2D", {scheme("Dropout2D", {}), [] { return std::make_shared<Dropout2D>(); }}},
        {"NoiseInjector", {scheme("NoiseInjector", {}), [] { return std::make_shared<NoiseInjector>(); }}},
        {"Penalty", {scheme("Penalty", {}), [] { return std::make_shared<Penalty>(); }}},
        {"MatMul", {scheme("MatMul", {}), [] { return std::make_shared<MatMul>(); }}},
        {"Parameter",
         {scheme("Parameter", {{"shape", std::vector<int64_t>{2, 3}}}),
          [] {
              return std::make_shared<Parameter>(std::vector<int64_t>{2, 3});
          }}},
        {"Scale",
         {scheme("Scale", {{"shape", std::vector<int64_t>{4}}}),
          [] { return std::make_shared<Scale>(std::vector<int64_t>{4}); }}},
        {"DropPath", {scheme("DropPath", {}), [] { return std::make_shared<DropPath>(); }}},
        {"ScaledDotProductAttention",
         {scheme("ScaledDotProductAttention", {}), [] { return std::make_shared<ScaledDotProductAttention>(); }}},
        {"MultiheadAttention",
         {scheme("MultiheadAttention", {{"embedDim", V{int64_t{8}}}, {"numHeads", two}}),
          [] { return std::make_shared<MultiheadAttention>(8, 2); }}},
        {"PositionalEncoding",
         {scheme("PositionalEncoding", {}), [] { return std::make_shared<PositionalEncoding>(); }}},
        {"MulAddConst", {scheme("MulAddConst", {}), [] { return std::make_shared<MulAddConst>(); }}},
        {"Pow", {scheme("Pow", {{"exponent", V{2.0}}}), [] { return std::make_shared<Pow>(2.0f); }}},
        {"Pad1D",
         {scheme("Pad1D", {{"pad", std::vector<int64_t>{1, 2}}}),
          [] {
              return std::make_shared<Pad1D>(std::vector<int64_t>{1, 2});
          }}},
        {"Pad2D",
         {scheme("Pad2D", {{"pad", std::vector<int64_t>{1, 1, 2, 2}}}),
          [] {
              return std::make_shared<Pad2D>(std::vector<int64_t>{1, 1, 2, 2});
          }}},
        {"Upsample2D", {scheme("Upsample2D", {}), [] { return std::make_shared<Upsample2D>(); }}},
        {"Upsample3D", {scheme("Upsample3D", {}), [] { return std::make_shared<Upsample3D>(); }}},
        {"Resize2D",
         {scheme("Resize2D", {{"size", std::vector<int64_t>{3, 4}}}),
          [] {
              return std::make_shared<Resize2D>(std::vector<int64_t>{3, 4});
          }}},
        {"Resize3D",
         {scheme("Resize3D", {{"size", std::vector<int64_t>{2, 3, 4}}}),
          [] {
              return std::make_shared<Resize3D>(std::vector<int64_t>{2, 3, 4});
          }}},
        {"Embedder",
         {scheme("Embedder", {{"vocabulary", int64_t{10}}, {"sentlength", three}, {"embsize", four}}),
          [] { return std::make_shared<Embedder>(10, 3, 4); }}},
        {"GroupLinear",
         {scheme("GroupLinear", {{"groups", two}, {"insize", three}, {"outsize", four}}),
          [] { return std::make_shared<GroupLinear>(2, 3, 4); }}},
        {"RNN", {scheme("RNN", {{"insize", three}, {"hsize", four}}), [] { return std::make_shared<RNN>(3, 4); }}},
        {"ReduceMean", {scheme("ReduceMean", {}), [] { return std::make_shared<ReduceMean>(); }}},
        {"ReduceSum", {scheme("ReduceSum", {}), [] { return std::make_shared<ReduceSum>(); }}},
        {"GatherElements", {scheme("GatherElements", {}), [] { return std::make_shared<GatherElements>(); }}},
        {"CumSum", {scheme("CumSum", {}), [] { return std::make_shared<CumSum>(); }}},
        {"ScatterElements", {scheme("ScatterElements", {}), [] { return std::make_shared<ScatterElements>(); }}},
        {"TopK", {scheme("TopK", {{"k", three}}), [] { return std::make_shared<TopK>(3); }}},
        {"ArgMax", {scheme("ArgMax", {}), [] { return std::make_shared<ArgMax>(); }}},
        {"ArgMin", {scheme("ArgMin", {}), [] { return std::make_shared<ArgMin>(); }}},
        {"SpatialTf", {scheme("SpatialTf", {}), [] { return std::make_shared<SpatialTf>(); }}},
        {"GridSample", {scheme("GridSample", {}), [] { return std::make_shared<GridSample>(); }}},
        {"SoftMax", {scheme("SoftMax", {}), [] { return std::make_shared<SoftMax>(); }}},
        {"LogSoftMax", {scheme("LogSoftMax", {}), [] { return std::make_shared<LogSoftMax>(); }}},
        {"Concat", {scheme("Concat", {}), [] { return std::make_shared<Concat>(); }}},
        {"Sum", {scheme("Sum", {{"axis", two}}), [] { return std::make_shared<Sum>(2); }}},
        {"ToList", {scheme("ToList", {}), [] { return std::make_shared<ToList>(); }}},
        // Cast's C++ constructor names both dtypes; the row's defaults are float32.
        {"Cast", {scheme("Cast", {}), [] { return std::make_shared<Cast>(DType::float32, DType::float32); }}},
    };
}

// The names in a signature that have a default other than None.
std::vector<std::string> defaulted(const std::string& signature) {
    std::vector<std::string> out;
    int depth = 0;
    std::string part;
    for (char c : signature + ",") {
        depth += (c == '(' || c == '[') - (c == ')' || c == ']');
        if (c != ',' || depth > 0) {
            part += c;
            continue;
        }
        const size_t eq = part.find('=');
        if (eq != std::string::npos && part.substr(eq + 1) != "None") {
            out.push_back(part.substr(part.find_first_not_of(' '), eq - part.find_first_not_of(' ')));
        }
        part.clear();
    }
    return out;
}

TEST(Factory, EveryOptionsStructAgreesWithItsRow) {
    const auto all = cases();
    for (const std::string& c : factoryClassnames()) {
        const std::vector<std::string> names = defaulted(factorySignature(c));
        auto it = all.find(c);
        if (it == all.end()) {
            EXPECT_TRUE(names.empty()) << c << "'s row gives defaults (" << ::testing::PrintToString(names)
                                       << ") that no case here checks against its C++ options";
            continue;
        }
        SCOPED_TRACE(c);
        EXPECT_FALSE(names.empty()) << c << " has no defaults to check";
        const std::string fromRow = buildModule(it->second.required)->blueprint().toJson();
        const std::string fromStruct = it->second.withStruct()->blueprint().toJson();
        EXPECT_EQ(fromRow, fromStruct);
    }
}

TEST(Factory, ARowsDefaultFillsWhatTheBlueprintLeavesOut) {
    const ModulePtr d = buildModule(scheme("Dropout", {}));
    EXPECT_THAT(d->blueprint().toJson(), ::testing::HasSubstr("\"p\": 0.5"));
    EXPECT_EQ(factorySignature("Dropout"), "p=0.5, name=None");
    const ModulePtr pool = buildModule(scheme("MaxPool2D", {{"size", int64_t{3}}})); // stride=None: the size
    EXPECT_EQ(pool->dataShapeFrom(Shapes{Shape{1, 1, 9, 9}})[0], (Shape{1, 1, 3, 3}));
}

TEST(Factory, RequiredArgumentsAndUnknownClassesAreNamed) {
    EXPECT_THAT(testing::errorOf([] {
                    buildModule(scheme("Linear", {{"insize", int64_t{2}}}));
                }),
                ::testing::HasSubstr("Linear: missing argument 'outsize'"));
    EXPECT_THAT(testing::errorOf([] { factorySignature("Linaer"); }),
                ::testing::HasSubstr("unknown module class 'Linaer'"));
    EXPECT_THAT(testing::errorOf([] {
                    buildModule(scheme("Linear", {{"insize", 2.5}, {"outsize", int64_t{3}}}));
                }),
                ::testing::HasSubstr("argument 'insize' must be an integer"));
}

// A class the table does not have goes to the resolver registered for its prefix (the
// Python package's "python:" builds layers written in Python); other names stay unknown.
TEST(Factory, ClassResolversBuildThePrefixesTheyRegistered) {
    std::string seen;
    registerClassResolver("test-resolver:", [&seen](const Blueprint& bp) -> ModulePtr {
        seen = bp.classname;
        if (bp.classname == "test-resolver:fails") throw ModuleError("cannot build it");
        return std::make_shared<Identity>("resolved");
    });
    ModulePtr m = buildModule(scheme("test-resolver:layer", {}));
    EXPECT_EQ(seen, "test-resolver:layer");
    EXPECT_EQ(m->classname(), "Identity");
    EXPECT_EQ(m->name(), "resolved");
    EXPECT_THAT(testing::errorOf([] { buildModule(scheme("test-resolver:fails", {}), "net.a: "); }),
                ::testing::HasSubstr("net.a: cannot build it"));
    EXPECT_THAT(testing::errorOf([] { buildModule(scheme("other:layer", {})); }),
                ::testing::HasSubstr("unknown module class 'other:layer'"));
    registerClassResolver("test-resolver:", [](const Blueprint&) -> ModulePtr { return nullptr; }); // replaced
    EXPECT_EQ(buildModule(scheme("test-resolver:layer", {})), nullptr);
}

} // namespace
} // namespace tessera
