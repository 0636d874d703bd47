// The factory table: class name -> builder from a blueprint's scheme. Every module class
// is listed here explicitly; there is no registration at a distance.
#include "io/Factory.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "io/Hdf5.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/DepthConcat.h"
#include "modules/Dropout.h"
#include "modules/Dropout2D.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Glue.h"
#include "modules/GroupLinear.h"
#include "modules/Identity.h"
#include "modules/InstanceNorm2D.h"
#include "modules/KMaxPool.h"
#include "modules/LCN.h"
#include "modules/LRN.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/NoiseInjector.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Penalty.h"
#include "modules/Pool.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Replicate.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/SubtractMean.h"
#include "modules/Tile.h"
#include "modules/ToList.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera {

namespace {

// Typed access to a scheme, with the module's path in every error.
class Args {
public:
    Args(const Blueprint& bp, std::string where) : bp_(bp), where_(std::move(where)) {}

    int64_t i(const std::string& key) const { return std::get<int64_t>(need(key, "an integer", isInt)); }
    int64_t i(const std::string& key, int64_t def) const { return has(key) ? i(key) : def; }
    float f(const std::string& key, float def) const {
        if (!has(key)) return def;
        const BlueprintValue& v = need(
            key, "a number", [](const BlueprintValue& x) { return isInt(x) || std::holds_alternative<double>(x); });
        return isInt(v) ? static_cast<float>(std::get<int64_t>(v)) : static_cast<float>(std::get<double>(v));
    }
    bool b(const std::string& key, bool def) const {
        return has(key) ? std::get<bool>(need(key, "true or false",
                                              [](const BlueprintValue& x) { return std::holds_alternative<bool>(x); }))
                        : def;
    }
    std::string s(const std::string& key, const std::string& def) const {
        if (!has(key)) return def;
        return std::get<std::string>(
            need(key, "a string", [](const BlueprintValue& x) { return std::holds_alternative<std::string>(x); }));
    }
    std::vector<int64_t> ints(const std::string& key) const {
        const BlueprintValue& v = need(key, "a list of integers", [](const BlueprintValue& x) {
            return std::holds_alternative<std::vector<int64_t>>(x) || isInt(x);
        });
        return isInt(v) ? std::vector<int64_t>{std::get<int64_t>(v)} : std::get<std::vector<int64_t>>(v);
    }
    std::vector<int64_t> ints(const std::string& key, std::vector<int64_t> def) const {
        return has(key) ? ints(key) : def;
    }
    std::vector<float> floats(const std::string& key) const {
        if (!has(key)) return {};
        const BlueprintValue& v = need(key, "a list of numbers", [](const BlueprintValue& x) {
            return std::holds_alternative<std::vector<double>>(x) || std::holds_alternative<std::vector<int64_t>>(x);
        });
        std::vector<float> out;
        if (const auto* d = std::get_if<std::vector<double>>(&v)) {
            for (double x : *d) out.push_back(static_cast<float>(x));
        } else {
            for (int64_t x : std::get<std::vector<int64_t>>(v)) out.push_back(static_cast<float>(x));
        }
        return out;
    }
    std::string name() const { return s("name", ""); }
    InitScheme init(InitScheme def) const {
        return has("initscheme") ? initSchemeFromString(s("initscheme", "")) : def;
    }
    ModuleError error(const std::string& what) const { return ModuleError(where_ + bp_.classname + ": " + what); }
    const std::string& where() const { return where_; }

private:
    static bool isInt(const BlueprintValue& x) { return std::holds_alternative<int64_t>(x); }
    bool has(const std::string& key) const {
        read_.insert(key);
        return bp_.find(key) != nullptr;
    }
    template <class Ok> const BlueprintValue& need(const std::string& key, const char* what, Ok ok) const {
        read_.insert(key);
        const BlueprintValue* v = bp_.find(key);
        if (!v) throw error("missing argument '" + key + "'");
        if (!ok(*v)) throw error("argument '" + key + "' must be " + what);
        return *v;
    }

    const Blueprint& bp_;
    std::string where_;
    mutable std::set<std::string> read_; // every argument the builder asked for

public:
    // The arguments the builder asked for, in order, "a, b, c".
    std::string readList() const {
        std::string out;
        for (const std::string& k : read_) out += (out.empty() ? "" : ", ") + k;
        return out;
    }
    bool wasRead(const std::string& key) const { return read_.count(key) != 0; }
    // The argument the builder asked for nearest to `key` (case and one or two letters
    // apart: "strides" for "stride", "usebias" for "useBias"), or "".
    std::string nearest(const std::string& key) const {
        auto lower = [](std::string t) {
            for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return t;
        };
        const std::string k = lower(key);
        std::string best;
        size_t bestDistance = 3;
        for (const std::string& known : read_) {
            const std::string t = lower(known);
            std::vector<size_t> row(t.size() + 1); // Levenshtein distance, one row at a time
            for (size_t j = 0; j <= t.size(); ++j) row[j] = j;
            for (size_t i = 1; i <= k.size(); ++i) {
                size_t diagonal = row[0];
                row[0] = i;
                for (size_t j = 1; j <= t.size(); ++j) {
                    const size_t up = row[j];
                    row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (k[i - 1] == t[j - 1] ? 0 : 1)});
                    diagonal = up;
                }
            }
            if (row[t.size()] < bestDistance) bestDistance = row[t.size()], best = known;
        }
        return best;
    }
};

DType dtypeFromString(const Args& a, const std::string& s) {
    if (s == "float32") return DType::float32;
    if (s == "int32") return DType::int32;
    throw a.error("unknown dtype '" + s + "'; expected float32 or int32");
}

ConvOptions convOptions(const Args& a) {
    return {.stride = a.ints("stride", {1}),
            .pad = a.ints("pad", {0}),
            .dilation = a.ints("dilation", {1}),
            .groups = a.i("groups", 1),
            .useBias = a.b("useBias", true),
            .initscheme = a.init(InitScheme::xavier),
            .wscale = a.f("wscale", 1.0f),
            .name = a.name()};
}

PoolOptions poolOptions(const Args& a) {
    return {.stride = a.ints("stride", {}),
            .pad = a.ints("pad", {0}),
            .includePad = a.b("includePad", true),
            .name = a.name()};
}

template <class T> ModulePtr conv(const Args& a) {
    return std::make_shared<T>(a.i("inmaps"), a.i("outmaps"), a.ints("size"), convOptions(a));
}
template <class T> ModulePtr pool(const Args& a) { return std::make_shared<T>(a.ints("size", {2}), poolOptions(a)); }
template <class T> ModulePtr batchNorm(const Args& a) {
    return std::make_shared<T>(a.i("maps"), BatchNormOptions{.epsilon = a.f("epsilon", 1e-5f),
                                                             .initFactor = a.f("initFactor", 1.0f),
                                                             .minFactor = a.f("minFactor", 0.1f),
                                                             .name = a.name()});
}
template <class T> ModulePtr lrn(const Args& a) {
    return std::make_shared<T>(LRNOptions{.N = a.i("N", 5),
                                          .alpha = a.f("alpha", 1e-4f),
                                          .beta = a.f("beta", 0.75f),
                                          .K = a.f("K", 2.0f),
                                          .name = a.name()});
}
template <class T> ModulePtr pad(const Args& a) {
    const std::string mode = a.s("mode", "constant");
    if (mode != "constant" && mode != "reflect") throw a.error("mode must be constant or reflect, got '" + mode + "'");
    return std::make_shared<T>(a.ints("pad"),
                               PadOptions{.mode = mode == "reflect" ? PadMode::reflect : PadMode::constant,
                                          .fillValue = a.f("fillValue", 0.0f),
                                          .name = a.name()});
}
template <class T> ModulePtr upsample(const Args& a) {
    const std::string mode = a.s("mode", "nearest");
    if (mode != "nearest" && mode != "linear") throw a.error("mode must be nearest or linear, got '" + mode + "'");
    return std::make_shared<T>(
        a.i("scale", 2),
        UpsampleOptions{.mode = mode == "linear" ? ResampleMode::linear : ResampleMode::nearest, .name = a.name()});
}

ModulePtr buildGraph(const Blueprint& bp, const Args& a);

template <class C> ModulePtr container(const Blueprint& bp, const Args& a) {
    auto c = std::make_shared<C>(a.name());
    for (size_t i = 0; i < bp.modules.size(); ++i) {
        c->append(buildModule(bp.modules[i], a.where() + bp.classname + "[" + std::to_string(i) + "] -> ", true));
    }
    return c;
}

using Builder = std::function<ModulePtr(const Blueprint&, const Args&)>;

const std::map<std::string, Builder>& table() {
    static const std::map<std::string, Builder> t = {
        {"Linear",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Linear>(a.i("insize"), a.i("outsize"),
                                             LinearOptions{.wscale = a.f("wscale", 1.0f),
                                                           .useBias = a.b("useBias", true),
                                                           .initscheme = a.init(InitScheme::xavier),
                                                           .name = a.name()});
         }},
        {"Activation",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Activation>(activationFromString(a.s("activation", "relu")),
                                                 ActivationOptions{.slope = a.f("slope", 0.01f),
                                                                   .alpha = a.f("alpha", 1.0f),
                                                                   .min = a.f("min", 0.0f),
                                                                   .max = a.f("max", 6.0f),
                                                                   .hardSlope = a.f("hardSlope", 1.0f / 6.0f),
                                                                   .hardOffset = a.f("hardOffset", 0.5f),
                                                                   .name = a.name()});
         }},
        {"SoftMax", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<SoftMax>(a.name()); }},
        {"Flatten", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Flatten>(a.name()); }},
        {"Reshape",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Reshape>(Shape(a.ints("shape")), a.name());
         }},
        {"Identity", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Identity>(a.name()); }},
        {"Dropout",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Dropout>(DropoutOptions{.p = a.f("p", 0.5f), .name = a.name()});
         }},
        {"Concat",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Concat>(static_cast<int>(a.i("axis", 1)), a.name());
         }},
        {"DepthConcat",
         [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<DepthConcat>(a.name()); }},
        {"ToList",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<ToList>(a.i("count", 1), a.name());
         }},
        {"Penalty",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Penalty>(PenaltyOptions{
                 .mode = penaltyModeFromString(a.s("mode", "l1")), .weight = a.f("weight", 1e-2f), .name = a.name()});
         }},
        {"SubtractMean",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<SubtractMean>(
                 SubtractMeanOptions{.size = a.i("size", 5), .includePad = a.b("includePad", true), .name = a.name()});
         }},
        {"LCN",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<LCN>(LCNOptions{.N = a.i("N", 5),
                                                     .alpha = a.f("alpha", 1e-4f),
                                                     .beta = a.f("beta", 0.75f),
                                                     .K = a.f("K", 2.0f),
                                                     .includePad = a.b("includePad", true),
                                                     .name = a.name()});
         }},
        {"SpatialTf",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<SpatialTf>(
                 SpatialTfOptions{.height = a.i("height", 0), .width = a.i("width", 0), .name = a.name()});
         }},
        {"Glue",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Glue>(a.s("kind", ""), a.name());
         }},
        {"Split",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Split>(static_cast<int>(a.i("axis")), a.ints("sections"), a.name());
         }},
        {"Slice",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Slice>(static_cast<int>(a.i("axis")), a.i("start"), a.i("end"), a.name());
         }},
        {"Replicate",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Replicate>(static_cast<int>(a.i("times")), a.name());
         }},
        {"Add",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Add>(a.floats("coefficients"), a.name());
         }},
        {"Mul", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Mul>(a.name()); }},
        {"RNN",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<RNN>(a.i("insize"), a.i("hsize"),
                                          RNNOptions{.layers = a.i("layers", 1),
                                                     .mode = rnnModeFromString(a.s("mode", "lstm")),
                                                     .bidirectional = a.b("bidirectional", false),
                                                     .getSequences = a.b("getSequences", false),
                                                     .batchFirst = a.b("batchFirst", false),
                                                     .initialStates = a.b("initialStates", false),
                                                     .finalStates = a.b("finalStates", false),
                                                     .lengths = a.b("lengths", false),
                                                     .dropout = a.f("dropout", 0.0f),
                                                     .name = a.name()});
         }},
        {"ReduceMean",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<ReduceMean>(a.ints("axes", {}), a.b("keepDims", true), a.name());
         }},
        {"Sub", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Sub>(a.name()); }},
        {"Div", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Div>(a.name()); }},
        {"Conv1D", [](const Blueprint&, const Args& a) { return conv<Conv1D>(a); }},
        {"Conv2D", [](const Blueprint&, const Args& a) { return conv<Conv2D>(a); }},
        {"Conv3D", [](const Blueprint&, const Args& a) { return conv<Conv3D>(a); }},
        {"Deconv1D", [](const Blueprint&, const Args& a) { return conv<Deconv1D>(a); }},
        {"Deconv2D", [](const Blueprint&, const Args& a) { return conv<Deconv2D>(a); }},
        {"Deconv3D", [](const Blueprint&, const Args& a) { return conv<Deconv3D>(a); }},
        {"MaxPool1D", [](const Blueprint&, const Args& a) { return pool<MaxPool1D>(a); }},
        {"MaxPool2D", [](const Blueprint&, const Args& a) { return pool<MaxPool2D>(a); }},
        {"MaxPool3D", [](const Blueprint&, const Args& a) { return pool<MaxPool3D>(a); }},
        {"AvgPool1D", [](const Blueprint&, const Args& a) { return pool<AvgPool1D>(a); }},
        {"AvgPool2D", [](const Blueprint&, const Args& a) { return pool<AvgPool2D>(a); }},
        {"AvgPool3D", [](const Blueprint&, const Args& a) { return pool<AvgPool3D>(a); }},
        {"GlobalAvgPool",
         [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<GlobalAvgPool>(a.name()); }},
        {"KMaxPool",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<KMaxPool>(a.i("topk"), static_cast<int>(a.i("axis")), a.name());
         }},
        {"MaxUnpool2D",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             throw a.error("is tied to the MaxPool2D module it inverts and cannot be rebuilt from a blueprint alone");
         }},
        {"BatchNorm", [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm>(a); }},
        {"BatchNorm1D", [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm1D>(a); }},
        {"BatchNorm2D", [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm2D>(a); }},
        {"BatchNorm3D", [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm3D>(a); }},
        {"InstanceNorm2D",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<InstanceNorm2D>(
                 a.i("maps"), InstanceNormOptions{.epsilon = a.f("epsilon", 1e-5f), .name = a.name()});
         }},
        {"CrossMapLRN", [](const Blueprint&, const Args& a) { return lrn<CrossMapLRN>(a); }},
        {"MapLRN", [](const Blueprint&, const Args& a) { return lrn<MapLRN>(a); }},
        {"Dropout2D",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Dropout2D>(Dropout2DOptions{.p = a.f("p", 0.5f), .name = a.name()});
         }},
        {"Pad1D", [](const Blueprint&, const Args& a) { return pad<Pad1D>(a); }},
        {"Pad2D", [](const Blueprint&, const Args& a) { return pad<Pad2D>(a); }},
        {"Upsample2D", [](const Blueprint&, const Args& a) { return upsample<Upsample2D>(a); }},
        {"Upsample3D", [](const Blueprint&, const Args& a) { return upsample<Upsample3D>(a); }},
        {"PRelu",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<PRelu>(
                 a.i("maps"),
                 PReluOptions{.sharedMaps = a.b("sharedMaps", false), .init = a.f("init", 0.25f), .name = a.name()});
         }},
        {"Gelu", [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Gelu>(a.name()); }},
        {"Embedder",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Embedder>(a.i("vocabulary"), a.i("sentlength"), a.i("embsize"),
                                               EmbedderOptions{.initscheme = a.init(InitScheme::uniform),
                                                               .wscale = a.f("wscale", 1.0f),
                                                               .learnable = a.b("learnable", true),
                                                               .name = a.name()});
         }},
        {"GroupLinear",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<GroupLinear>(a.i("groups"), a.i("insize"), a.i("outsize"),
                                                  GroupLinearOptions{.batchDim = a.i("batchDim", 0),
                                                                     .useBias = a.b("useBias", true),
                                                                     .initscheme = a.init(InitScheme::xavier),
                                                                     .wscale = a.f("wscale", 1.0f),
                                                                     .name = a.name()});
         }},
        {"MulAddConst",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             const std::vector<int64_t> aShape = a.ints("aShape", {}), bShape = a.ints("bShape", {});
             if (aShape.empty() && bShape.empty()) {
                 return std::make_shared<MulAddConst>(a.f("a", 1.0f), a.f("b", 0.0f), a.name());
             }
             // Tensor constants: their shapes here, their values from the model file's attributes.
             auto constant = [&](const std::vector<int64_t>& dims, float fill) {
                 for (int64_t d : dims) {
                     if (d < 1) throw a.error("aShape and bShape hold dims of at least 1, got " + Shape(dims).str());
                 }
                 return dims.empty() ? Tensor() : Tensor::full(Shape(dims), fill);
             };
             return std::make_shared<MulAddConst>(constant(aShape, a.f("a", 1.0f)), constant(bShape, a.f("b", 0.0f)),
                                                  a.name());
         }},
        {"NoiseInjector",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             const std::vector<float> p = a.floats("params");
             return std::make_shared<NoiseInjector>(NoiseInjectorOptions{
                 .mode = a.s("mode", "add") == "mul" ? NoiseMode::mul : NoiseMode::add,
                 .noisetype = a.s("noisetype", "uniform") == "gaussian" ? NoiseType::gaussian : NoiseType::uniform,
                 .param1 = p.size() > 0 ? p[0] : 0.0f,
                 .param2 = p.size() > 1 ? p[1] : 1.0f,
                 .name = a.name()});
         }},
        {"Transpose",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Transpose>(a.ints("axes"), a.name());
         }},
        {"SwapAxes",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<SwapAxes>(a.i("axis1"), a.i("axis2"), a.name());
         }},
        {"MoveAxis",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<MoveAxis>(a.i("src"), a.i("dst"), a.name());
         }},
        {"Tile",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Tile>(static_cast<int>(a.i("axis")), a.i("times"), a.name());
         }},
        {"Cast",
         [](const Blueprint&, const Args& a) -> ModulePtr {
             return std::make_shared<Cast>(dtypeFromString(a, a.s("intype", "float32")),
                                           dtypeFromString(a, a.s("outtype", "float32")), a.name());
         }},
        {"Sequential", [](const Blueprint& bp, const Args& a) { return container<Sequential>(bp, a); }},
        {"Parallel", [](const Blueprint& bp, const Args& a) { return container<Parallel>(bp, a); }},
        {"Graph", [](const Blueprint& bp, const Args& a) { return buildGraph(bp, a); }},
    };
    return t;
}

// Nodes in blueprint order (parents come first); parents are resolved by name.
ModulePtr buildGraph(const Blueprint& bp, const Args& a) {
    if (bp.nodes.size() != bp.modules.size()) {
        throw a.error(std::to_string(bp.nodes.size()) + " nodes for " + std::to_string(bp.modules.size()) + " modules");
    }
    std::unordered_map<std::string, NodePtr> byName;
    for (size_t i = 0; i < bp.nodes.size(); ++i) {
        const NodeBlueprint& nb = bp.nodes[i];
        Parents parents;
        for (const auto& [parent, slots] : nb.parents) {
            auto it = byName.find(parent);
            if (it == byName.end()) {
                bool later = false;
                for (const NodeBlueprint& other : bp.nodes) later = later || other.name == parent;
                throw a.error("node '" + nb.name + "' has parent '" + parent + "', " +
                              (later ? std::string("which is listed after it; list every node after its parents")
                                     : "but there is no node named '" + parent + "'"));
            }
            parents.push_back(Parent(it->second, std::vector<int>(slots.begin(), slots.end())));
        }
        ModulePtr mod;
        if (!nb.sameModuleAs.empty()) { // one module in several nodes: the earlier node's
            auto it = byName.find(nb.sameModuleAs);
            if (it == byName.end()) {
                throw a.error("node '" + nb.name + "' runs the module of '" + nb.sameModuleAs +
                              "', which is not an earlier node");
            }
            mod = it->second->modulePtr();
        } else {
            mod = buildModule(bp.modules[i], a.where() + "Graph node '" + nb.name + "' -> ", true);
        }
        if (!byName.emplace(nb.name, node(mod, parents, nb.name)).second) {
            throw a.error("two nodes are named '" + nb.name + "'");
        }
    }
    auto lookup = [&](const std::vector<std::string>& names, const char* what) {
        std::vector<NodePtr> out;
        for (const std::string& n : names) {
            auto it = byName.find(n);
            if (it == byName.end()) throw a.error(std::string(what) + " '" + n + "' is not a node");
            out.push_back(it->second);
        }
        return out;
    };
    return std::make_shared<Graph>(lookup(bp.inputs, "input"), lookup(bp.outputs, "output"), a.name());
}

} // namespace

ModulePtr buildModule(const Blueprint& bp, const std::string& where, bool strictArguments) {
    const auto& t = table();
    auto it = t.find(bp.classname);
    if (it == t.end()) {
        throw ModuleError(where + "unknown module class '" + bp.classname + "' (the factory knows " +
                          std::to_string(t.size()) + " classes; see factoryClassnames())");
    }
    Args args(bp, where);
    ModulePtr mod;
    try {
        mod = it->second(bp, args);
    } catch (const std::bad_variant_access&) {
        throw args.error("an argument has the wrong type");
    }
    if (strictArguments) {
        for (const auto& [key, value] : bp.scheme) {
            if (!args.wasRead(key)) {
                const std::string close = args.nearest(key);
                throw args.error("unknown argument '" + key + "'" +
                                 (close.empty() ? "" : " (did you mean '" + close + "'?)") + "; it takes " +
                                 args.readList());
            }
        }
    }
    return mod;
}

ModulePtr buildModuleFromFile(const std::string& path) {
    const std::string json = readBlueprint(path); // its errors name the file
    Blueprint bp;
    try {
        bp = blueprintFromJson(json);
    } catch (const IoError& e) {
        throw IoError(path + ": " + e.what());
    }
    return buildModule(bp);
}

namespace {
// Compute types, modes and random streams, module by module (the two trees have one shape).
void copyState(Module& from, Module& to) {
    if (to.computeDType() != from.computeDType()) to.calcMode(from.computeDType());
    if (to.isTrain() != from.isTrain()) from.isTrain() ? to.trainMode() : to.evalMode();
    if (Generator* g = from.randomStream()) {
        if (Generator* h = to.randomStream()) *h = *g;
    }
    const auto a = from.namedChildren(), b = to.namedChildren();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) copyState(*a[i].second, *b[i].second);
}

template <class Named, class Value>
void copyValues(const std::string& what, const Module& module, const Named& src, const Named& dst, Value value) {
    if (src.size() != dst.size()) {
        throw ModuleError("copyModule: " + module.str() + " rebuilt from its blueprint has " +
                          std::to_string(dst.size()) + " " + what + "s, the module " + std::to_string(src.size()));
    }
    for (size_t i = 0; i < src.size(); ++i) {
        const Tensor &s = value(src[i].second), &d = value(dst[i].second);
        if (src[i].first != dst[i].first || s.shape() != d.shape() || s.dtype() != d.dtype()) {
            throw ModuleError("copyModule: " + what + " " + src[i].first + " " + s.shape().str() + " " +
                              str(s.dtype()) + " is rebuilt from the blueprint as " + dst[i].first + " " +
                              d.shape().str() + " " + str(d.dtype()) + "; " + module.str() +
                              " cannot be copied through its blueprint");
        }
        if (s.hasData()) Tensor(d).copyFrom(s);
    }
}
} // namespace

ModulePtr copyModule(const Module& module) {
    ModulePtr copy = buildModule(module.blueprint());
    copy->to(module.device());
    copyValues("parameter", module, module.namedParams(), copy->namedParams(),
               [](const VariablePtr& v) -> const Tensor& { return v->data; });
    copyValues("attribute", module, module.namedAttrs(), copy->namedAttrs(),
               [](const Tensor& t) -> const Tensor& { return t; });
    auto& from = const_cast<Module&>(module); // read only
    const auto a = from.namedCounters(), b = copy->namedCounters();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) *b[i].second = *a[i].second;
    copyState(from, *copy);
    return copy;
}

std::vector<std::string> factoryClassnames() {
    std::vector<std::string> names;
    for (const auto& [n, b] : table()) names.push_back(n);
    return names;
}

} // namespace tessera
