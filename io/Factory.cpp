// The factory table: class name -> builder from a blueprint's scheme. Every module class
// is listed here explicitly; there is no registration at a distance.
#include "io/Factory.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "io/Hdf5.h"
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
#include "modules/InstanceNorm2D.h"
#include "modules/KMaxPool.h"
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

// A factory row's signature, written once in Python's syntax so Python's classes take it
// as it is: "insize, outsize, wscale=1.0, useBias=True, initscheme='xavier', name=None".
// A name without a default is required; None means no fixed default (the class decides:
// a pool's stride is its size). Every default a layer has lives here and nowhere else in
// the factory; the options structs are checked against it (tests/io/FactoryTest.cpp).
struct Param {
    enum Kind { required, none, given } kind = required;
    std::string name;
    BlueprintValue value;
};
using Signature = std::vector<Param>;

// The literal `text` (a default in a signature) as a blueprint value; ModuleError
// for what the factory's own rows must never hold.
BlueprintValue parseLiteral(const std::string& classname, const std::string& text) {
    auto bad = [&] { return ModuleError("factory row " + classname + ": cannot read the default '" + text + "'"); };
    if (text == "True" || text == "False") return text == "True";
    if (text.size() >= 2 && (text.front() == '\'' && text.back() == '\'')) return text.substr(1, text.size() - 2);
    auto number = [&](const std::string& t) -> BlueprintValue {
        size_t used = 0;
        if (t.find_first_of(".eE") == std::string::npos) {
            const int64_t v = std::stoll(t, &used);
            if (used != t.size()) throw bad();
            return v;
        }
        const double v = std::stod(t, &used);
        if (used != t.size()) throw bad();
        return v;
    };
    try {
        if (text.size() >= 2 && (text.front() == '(' || text.front() == '[')) {
            std::vector<int64_t> ints;
            std::vector<double> reals;
            bool real = false;
            std::string item;
            for (char c : text.substr(1, text.size() - 2) + ",") {
                if (c != ',') {
                    if (c != ' ') item += c;
                    continue;
                }
                if (item.empty()) continue;
                const BlueprintValue v = number(item);
                real = real || std::holds_alternative<double>(v);
                reals.push_back(std::holds_alternative<double>(v) ? std::get<double>(v)
                                                                  : static_cast<double>(std::get<int64_t>(v)));
                if (std::holds_alternative<int64_t>(v)) ints.push_back(std::get<int64_t>(v));
                item.clear();
            }
            if (real) return reals;
            return ints;
        }
        return number(text);
    } catch (const std::invalid_argument&) {
        throw bad();
    } catch (const std::out_of_range&) {
        throw bad();
    }
}

Signature parseSignature(const std::string& classname, const std::string& text) {
    Signature sig;
    std::string part;
    int depth = 0;
    auto finish = [&] {
        const size_t b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
        if (b == std::string::npos) throw ModuleError("factory row " + classname + ": an empty parameter");
        const std::string p = part.substr(b, e - b + 1);
        const size_t eq = p.find('=');
        Param param;
        param.name = p.substr(0, eq);
        if (eq != std::string::npos) {
            const std::string def = p.substr(eq + 1);
            if (def == "None") {
                param.kind = Param::none;
            } else {
                param.kind = Param::given;
                param.value = parseLiteral(classname, def);
            }
        }
        for (const Param& q : sig) {
            if (q.name == param.name) throw ModuleError("factory row " + classname + ": '" + q.name + "' twice");
        }
        sig.push_back(std::move(param));
        part.clear();
    };
    for (char c : text) {
        depth += (c == '(' || c == '[') - (c == ')' || c == ']');
        if (c == ',' && depth == 0) {
            finish();
        } else {
            part += c;
        }
    }
    if (!text.empty()) finish();
    return sig;
}

// Typed access to a scheme, with the module's path in every error; an argument the scheme
// leaves out takes the default its factory row's signature gives.
class Args {
public:
    Args(const Blueprint& bp, const Signature& sig, std::string where) : bp_(bp), sig_(sig), where_(std::move(where)) {}

    int64_t i(const std::string& key) const {
        const BlueprintValue* v = get(key, "an integer", isInt);
        if (!v) throw error("missing argument '" + key + "'");
        return std::get<int64_t>(*v);
    }
    float f(const std::string& key) const {
        const BlueprintValue* v =
            get(key, "a number", [](const BlueprintValue& x) { return isInt(x) || std::holds_alternative<double>(x); });
        if (!v) throw error("missing argument '" + key + "'");
        return isInt(*v) ? static_cast<float>(std::get<int64_t>(*v)) : static_cast<float>(std::get<double>(*v));
    }
    bool b(const std::string& key) const {
        const BlueprintValue* v =
            get(key, "true or false", [](const BlueprintValue& x) { return std::holds_alternative<bool>(x); });
        if (!v) throw error("missing argument '" + key + "'");
        return std::get<bool>(*v);
    }
    /// "" for an argument left out whose default is None.
    std::string s(const std::string& key) const {
        const BlueprintValue* v =
            get(key, "a string", [](const BlueprintValue& x) { return std::holds_alternative<std::string>(x); });
        return v ? std::get<std::string>(*v) : std::string();
    }
    /// {} for an argument left out whose default is None.
    std::vector<int64_t> ints(const std::string& key) const {
        const BlueprintValue* v = get(key, "a list of integers", [](const BlueprintValue& x) {
            return std::holds_alternative<std::vector<int64_t>>(x) || isInt(x);
        });
        if (!v) return {};
        return isInt(*v) ? std::vector<int64_t>{std::get<int64_t>(*v)} : std::get<std::vector<int64_t>>(*v);
    }
    /// {} for an argument left out whose default is None.
    std::vector<float> floats(const std::string& key) const {
        const BlueprintValue* v = get(key, "a list of numbers", [](const BlueprintValue& x) {
            return std::holds_alternative<std::vector<double>>(x) || std::holds_alternative<std::vector<int64_t>>(x);
        });
        std::vector<float> out;
        if (!v) return out;
        if (const auto* d = std::get_if<std::vector<double>>(v)) {
            for (double x : *d) out.push_back(static_cast<float>(x));
        } else {
            for (int64_t x : std::get<std::vector<int64_t>>(*v)) out.push_back(static_cast<float>(x));
        }
        return out;
    }
    std::string name() const { return s("name"); }
    InitScheme init() const { return initSchemeFromString(s("initscheme")); }
    ModuleError error(const std::string& what) const { return ModuleError(where_ + bp_.classname + ": " + what); }
    const std::string& where() const { return where_; }

    // The signature's names, "a, b, c".
    std::string takes() const {
        std::string out;
        for (const Param& p : sig_) out += (out.empty() ? "" : ", ") + p.name;
        return out;
    }
    bool takes(const std::string& key) const { return find(key) != nullptr; }
    // The argument the class takes nearest to `key` (case and one or two letters apart:
    // "strides" for "stride", "usebias" for "useBias"), or "".
    std::string nearest(const std::string& key) const {
        auto lower = [](std::string t) {
            for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return t;
        };
        const std::string k = lower(key);
        std::string best;
        size_t bestDistance = 3;
        for (const Param& p : sig_) {
            const std::string t = lower(p.name);
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
            if (row[t.size()] < bestDistance) bestDistance = row[t.size()], best = p.name;
        }
        return best;
    }

private:
    static bool isInt(const BlueprintValue& x) { return std::holds_alternative<int64_t>(x); }
    const Param* find(const std::string& key) const {
        for (const Param& p : sig_) {
            if (p.name == key) return &p;
        }
        return nullptr;
    }
    // The scheme's value, else the signature's default; nullptr for a None default.
    template <class Ok> const BlueprintValue* get(const std::string& key, const char* what, Ok ok) const {
        const Param* p = find(key);
        if (!p) { // the row's builder and its signature disagree: the factory's own fault
            throw ModuleError("factory row " + bp_.classname + " reads '" + key + "', which its signature (" + takes() +
                              ") does not name");
        }
        const BlueprintValue* v = bp_.find(key);
        if (!v) {
            if (p->kind == Param::required) throw error("missing argument '" + key + "'");
            if (p->kind == Param::none) return nullptr;
            v = &p->value;
        }
        if (!ok(*v)) throw error("argument '" + key + "' must be " + what);
        return v;
    }

    const Blueprint& bp_;
    const Signature& sig_;
    std::string where_;
};

DType dtypeFromString(const Args& a, const std::string& s) {
    if (s == "float32") return DType::float32;
    if (s == "int32") return DType::int32;
    if (s == "bfloat16") return DType::bfloat16;
    if (s == "float16") return DType::float16;
    throw a.error("unknown dtype '" + s + "'; expected float32, int32, bfloat16 or float16");
}

ConvOptions convOptions(const Args& a) {
    return {.stride = a.ints("stride"),
            .pad = a.ints("pad"),
            .dilation = a.ints("dilation"),
            .groups = a.i("groups"),
            .useBias = a.b("useBias"),
            .initscheme = a.init(),
            .wscale = a.f("wscale"),
            .name = a.name()};
}

PoolOptions poolOptions(const Args& a) {
    return {.stride = a.ints("stride"), .pad = a.ints("pad"), .includePad = a.b("includePad"), .name = a.name()};
}

template <class T> ModulePtr conv(const Args& a) {
    return std::make_shared<T>(a.i("inmaps"), a.i("outmaps"), a.ints("size"), convOptions(a));
}
template <class T> ModulePtr deconv(const Args& a) {
    ConvOptions o = convOptions(a);
    o.postpad = a.ints("postpad");
    return std::make_shared<T>(a.i("inmaps"), a.i("outmaps"), a.ints("size"), o);
}
template <class T> ModulePtr pool(const Args& a) { return std::make_shared<T>(a.ints("size"), poolOptions(a)); }
template <class T> ModulePtr batchNorm(const Args& a) {
    return std::make_shared<T>(a.i("maps"), BatchNormOptions{.epsilon = a.f("epsilon"),
                                                             .initFactor = a.f("initFactor"),
                                                             .minFactor = a.f("minFactor"),
                                                             .name = a.name()});
}
template <class T> ModulePtr lrn(const Args& a) {
    return std::make_shared<T>(
        LRNOptions{.N = a.i("N"), .alpha = a.f("alpha"), .beta = a.f("beta"), .K = a.f("K"), .name = a.name()});
}
template <class T> ModulePtr pad(const Args& a) {
    PadMode mode = PadMode::constant;
    try {
        mode = padModeFromString(a.s("mode"));
    } catch (const ModuleError& e) {
        throw a.error(e.what());
    }
    return std::make_shared<T>(a.ints("pad"),
                               PadOptions{.mode = mode, .fillValue = a.f("fillValue"), .name = a.name()});
}
UpsampleOptions upsampleOptions(const Args& a) {
    ResampleMode mode = ResampleMode::nearest;
    try {
        mode = resampleModeFromString(a.s("mode"));
    } catch (const ModuleError& e) {
        throw a.error(e.what());
    }
    return {.mode = mode, .alignCorners = a.b("alignCorners"), .name = a.name()};
}
template <class T> ModulePtr upsample(const Args& a) { return std::make_shared<T>(a.i("scale"), upsampleOptions(a)); }
template <class T> ModulePtr resize(const Args& a) { return std::make_shared<T>(a.ints("size"), upsampleOptions(a)); }

ModulePtr buildGraph(const Blueprint& bp, const Args& a);

template <class C> ModulePtr container(const Blueprint& bp, const Args& a) {
    auto c = std::make_shared<C>(a.name());
    for (size_t i = 0; i < bp.modules.size(); ++i) {
        c->append(buildModule(bp.modules[i], a.where() + bp.classname + "[" + std::to_string(i) + "] -> ", true));
    }
    return c;
}

using Builder = std::function<ModulePtr(const Blueprint&, const Args&)>;

// One class: its name, its signature (the arguments, in PuzzleLib's order, with their
// defaults; Python's classes are made from it) and its builder.
struct Row {
    std::string classname;
    std::string text;
    Builder build;
    Signature signature = {}; // `text`, parsed
};

const std::map<std::string, Row>& table() {
    static const std::map<std::string, Row> t = [] {
        std::vector<Row> rows = {
            {"Linear", "insize, outsize, wscale=1.0, useBias=True, initscheme='xavier', transposed=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Linear>(
                     a.i("insize"), a.i("outsize"),
                     LinearOptions{
                         .wscale = a.f("wscale"),
                         .useBias = a.b("useBias"),
                         .initscheme = a.init(),
                         .name = a.name(),
                         .transposed = a.b("transposed")});
             }},
            {"Activation",
             "activation='relu', slope=0.01, alpha=1.0, min=0.0, max=6.0, hardSlope=0.16666666666666666, "
             "hardOffset=0.5, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Activation>(activationFromString(a.s("activation")),
                                                     ActivationOptions{.slope = a.f("slope"),
                                                                       .alpha = a.f("alpha"),
                                                                       .min = a.f("min"),
                                                                       .max = a.f("max"),
                                                                       .hardSlope = a.f("hardSlope"),
                                                                       .hardOffset = a.f("hardOffset"),
                                                                       .name = a.name()});
             }},
            {"SoftMax", "axis=1, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<SoftMax>(static_cast<int>(a.i("axis")), a.name());
             }},
            {"LogSoftMax", "axis=1, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<LogSoftMax>(static_cast<int>(a.i("axis")), a.name());
             }},
            {"Flatten", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Flatten>(a.name()); }},
            {"Reshape", "shape, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Reshape>(Shape(a.ints("shape")), a.name());
             }},
            {"Identity", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Identity>(a.name()); }},
            {"Dropout", "p=0.5, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Dropout>(DropoutOptions{.p = a.f("p"), .name = a.name()});
             }},
            {"Concat", "axis=1, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Concat>(static_cast<int>(a.i("axis")), a.name());
             }},
            {"DepthConcat", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<DepthConcat>(a.name()); }},
            {"ToList", "count=1, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ToList>(a.i("count"), a.name());
             }},
            {"Penalty", "mode='l1', weight=0.01, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Penalty>(PenaltyOptions{
                     .mode = penaltyModeFromString(a.s("mode")), .weight = a.f("weight"), .name = a.name()});
             }},
            {"SubtractMean", "size=5, includePad=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<SubtractMean>(
                     SubtractMeanOptions{.size = a.i("size"), .includePad = a.b("includePad"), .name = a.name()});
             }},
            {"LCN", "N=5, alpha=0.0001, beta=0.75, K=2.0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<LCN>(LCNOptions{.N = a.i("N"),
                                                         .alpha = a.f("alpha"),
                                                         .beta = a.f("beta"),
                                                         .K = a.f("K"),
                                                         .includePad = a.b("includePad"),
                                                         .name = a.name()});
             }},
            {"GridSample", "mode='bilinear', padding='zeros', alignCorners=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 GridSampleOptions o{.alignCorners = a.b("alignCorners"), .name = a.name()};
                 try {
                     o.mode = gridSampleModeFromString(a.s("mode"));
                     o.padding = gridPaddingFromString(a.s("padding"));
                 } catch (const ModuleError& e) {
                     throw a.error(e.what());
                 }
                 return std::make_shared<GridSample>(o);
             }},
            {"SpatialTf", "height=0, width=0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<SpatialTf>(
                     SpatialTfOptions{.height = a.i("height"), .width = a.i("width"), .name = a.name()});
             }},
            {"Glue", "kind, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Glue>(a.s("kind"), a.name());
             }},
            {"Split", "axis, sections, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Split>(static_cast<int>(a.i("axis")), a.ints("sections"), a.name());
             }},
            {"Slice", "axis, start, end, step=None, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 const std::vector<int64_t> axes = a.ints("axis");
                 return std::make_shared<Slice>(std::vector<int>(axes.begin(), axes.end()), a.ints("start"),
                                                a.ints("end"), SliceOptions{.steps = a.ints("step"), .name = a.name()});
             }},
            {"Replicate", "times, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Replicate>(static_cast<int>(a.i("times")), a.name());
             }},
            {"Add", "coefficients=None, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Add>(a.floats("coefficients"), a.name());
             }},
            {"Mul", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Mul>(a.name()); }},
            {"Sum", "axis, useWeights=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Sum>(a.i("axis"), a.b("useWeights"), a.name());
             }},
            {"RNN",
             "insize, hsize, layers=1, mode='lstm', linearBeforeReset=True, bidirectional=False, getSequences=False, "
             "batchFirst=False, initialStates=False, finalStates=False, lengths=False, dropout=0.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<RNN>(a.i("insize"), a.i("hsize"),
                                              RNNOptions{.layers = a.i("layers"),
                                                         .mode = rnnModeFromString(a.s("mode")),
                                                         .linearBeforeReset = a.b("linearBeforeReset"),
                                                         .bidirectional = a.b("bidirectional"),
                                                         .getSequences = a.b("getSequences"),
                                                         .batchFirst = a.b("batchFirst"),
                                                         .initialStates = a.b("initialStates"),
                                                         .finalStates = a.b("finalStates"),
                                                         .lengths = a.b("lengths"),
                                                         .dropout = a.f("dropout"),
                                                         .name = a.name()});
             }},
            {"ArgMax", "axis=1, keepDims=True, lastIndex=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ArgMax>(
                     static_cast<int>(a.i("axis")),
                     ArgMaxOptions{.keepDims = a.b("keepDims"), .lastIndex = a.b("lastIndex"), .name = a.name()});
             }},
            {"ArgMin", "axis=1, keepDims=True, lastIndex=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ArgMin>(
                     static_cast<int>(a.i("axis")),
                     ArgMaxOptions{.keepDims = a.b("keepDims"), .lastIndex = a.b("lastIndex"), .name = a.name()});
             }},
            {"ReduceMean", "axes=None, keepDims=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ReduceMean>(a.ints("axes"), a.b("keepDims"), a.name());
             }},
            {"ReduceSum", "axes=None, keepDims=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ReduceSum>(a.ints("axes"), a.b("keepDims"), a.name());
             }},
            {"Sub", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Sub>(a.name()); }},
            {"Div", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Div>(a.name()); }},
            {"Conv1D",
             "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, "
             "initscheme='xavier', groups=1",
             [](const Blueprint&, const Args& a) { return conv<Conv1D>(a); }},
            {"Conv2D",
             "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, "
             "initscheme='xavier', groups=1",
             [](const Blueprint&, const Args& a) { return conv<Conv2D>(a); }},
            {"Conv3D",
             "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, "
             "initscheme='xavier', groups=1",
             [](const Blueprint&, const Args& a) { return conv<Conv3D>(a); }},
            {"Deconv1D",
             "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, "
             "initscheme='xavier', groups=1, postpad=0",
             [](const Blueprint&, const Args& a) { return deconv<Deconv1D>(a); }},
            {"Deconv2D",
             "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, "
             "initscheme='xavier', groups=1, postpad=0",
             [](const Blueprint&, const Args& a) { return deconv<Deconv2D>(a); }},
            {"Deconv3D",
             "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, "
             "initscheme='xavier', groups=1, postpad=0",
             [](const Blueprint&, const Args& a) { return deconv<Deconv3D>(a); }},
            {"MaxPool1D", "size=2, stride=None, pad=0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) { return pool<MaxPool1D>(a); }},
            {"MaxPool2D", "size=2, stride=None, pad=0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) { return pool<MaxPool2D>(a); }},
            {"MaxPool3D", "size=2, stride=None, pad=0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) { return pool<MaxPool3D>(a); }},
            {"AvgPool1D", "size=2, stride=None, pad=0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) { return pool<AvgPool1D>(a); }},
            {"AvgPool2D", "size=2, stride=None, pad=0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) { return pool<AvgPool2D>(a); }},
            {"AvgPool3D", "size=2, stride=None, pad=0, includePad=True, name=None",
             [](const Blueprint&, const Args& a) { return pool<AvgPool3D>(a); }},
            {"GlobalAvgPool", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<GlobalAvgPool>(a.name()); }},
            {"GatherElements", "axis=0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<GatherElements>(static_cast<int>(a.i("axis")), a.name());
             }},
            {"ScatterElements", "axis=0, add=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ScatterElements>(static_cast<int>(a.i("axis")), a.b("add"), a.name());
             }},
            {"CumSum", "axis=0, exclusive=False, reverse=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<CumSum>(
                     static_cast<int>(a.i("axis")),
                     CumSumOptions{.exclusive = a.b("exclusive"), .reverse = a.b("reverse"), .name = a.name()});
             }},
            {"TopK", "k, axis=-1, largest=True, sorted=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<TopK>(
                     a.i("k"), static_cast<int>(a.i("axis")),
                     TopKOptions{.largest = a.b("largest"), .sorted = a.b("sorted"), .name = a.name()});
             }},
            {"KMaxPool", "topk, axis, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<KMaxPool>(a.i("topk"), static_cast<int>(a.i("axis")), a.name());
             }},
            {"MaxUnpool2D", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 throw a.error(
                     "is tied to the MaxPool2D module it inverts and cannot be rebuilt from a blueprint alone");
             }},
            {"BatchNorm", "maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None",
             [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm>(a); }},
            {"BatchNorm1D", "maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None",
             [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm1D>(a); }},
            {"BatchNorm2D", "maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None",
             [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm2D>(a); }},
            {"BatchNorm3D", "maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None",
             [](const Blueprint&, const Args& a) { return batchNorm<BatchNorm3D>(a); }},
            {"InstanceNorm2D", "maps, epsilon=1e-05, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<InstanceNorm2D>(
                     a.i("maps"), InstanceNormOptions{.epsilon = a.f("epsilon"), .name = a.name()});
             }},
            {"LayerNorm", "shape, epsilon=1e-05, affine=True, useBias=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<LayerNorm>(a.ints("shape"), LayerNormOptions{.epsilon = a.f("epsilon"),
                                                                                      .affine = a.b("affine"),
                                                                                      .useBias = a.b("useBias"),
                                                                                      .name = a.name()});
             }},
            {"RMSNorm", "shape, epsilon=1.1920928955078125e-07, affine=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<RMSNorm>(
                     a.ints("shape"),
                     RMSNormOptions{.epsilon = a.f("epsilon"), .affine = a.b("affine"), .name = a.name()});
             }},
            {"GroupNorm", "groups, maps, epsilon=1e-05, affine=True, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<GroupNorm>(
                     a.i("groups"), a.i("maps"),
                     GroupNormOptions{.epsilon = a.f("epsilon"), .affine = a.b("affine"), .name = a.name()});
             }},
            {"CrossMapLRN", "N=5, alpha=0.0001, beta=0.75, K=2.0, name=None",
             [](const Blueprint&, const Args& a) { return lrn<CrossMapLRN>(a); }},
            {"MapLRN", "N=5, alpha=0.0001, beta=0.75, K=2.0, name=None",
             [](const Blueprint&, const Args& a) { return lrn<MapLRN>(a); }},
            {"Dropout2D", "p=0.5, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Dropout2D>(Dropout2DOptions{.p = a.f("p"), .name = a.name()});
             }},
            {"Pad1D", "pad, mode='constant', fillValue=0.0, name=None",
             [](const Blueprint&, const Args& a) { return pad<Pad1D>(a); }},
            {"Pad2D", "pad, mode='constant', fillValue=0.0, name=None",
             [](const Blueprint&, const Args& a) { return pad<Pad2D>(a); }},
            {"Upsample2D", "scale=2, mode='nearest', alignCorners=False, name=None",
             [](const Blueprint&, const Args& a) { return upsample<Upsample2D>(a); }},
            {"Upsample3D", "scale=2, mode='nearest', alignCorners=False, name=None",
             [](const Blueprint&, const Args& a) { return upsample<Upsample3D>(a); }},
            {"Resize2D", "size, mode='nearest', alignCorners=False, name=None",
             [](const Blueprint&, const Args& a) { return resize<Resize2D>(a); }},
            {"Resize3D", "size, mode='nearest', alignCorners=False, name=None",
             [](const Blueprint&, const Args& a) { return resize<Resize3D>(a); }},
            {"PRelu", "maps, sharedMaps=False, init=0.25, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<PRelu>(
                     a.i("maps"), PReluOptions{.sharedMaps = a.b("sharedMaps"), .init = a.f("init"), .name = a.name()});
             }},
            {"Gelu", "name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr { return std::make_shared<Gelu>(a.name()); }},
            {"Embedder",
             "vocabulary, sentlength, embsize, initscheme='uniform', wscale=1.0, learnable=True, name=None, "
             "paddingIdx=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 EmbedderOptions o{
                     .initscheme = a.init(), .wscale = a.f("wscale"), .learnable = a.b("learnable"), .name = a.name()};
                 if (const std::vector<int64_t> p = a.ints("paddingIdx"); !p.empty()) o.paddingIdx = p[0];
                 return std::make_shared<Embedder>(a.i("vocabulary"), a.i("sentlength"), a.i("embsize"), o);
             }},
            {"GroupLinear",
             "groups, insize, outsize, batchDim=0, useBias=True, initscheme='xavier', wscale=1.0, name=None, "
             "inmode='full', wmode='full'",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<GroupLinear>(a.i("groups"), a.i("insize"), a.i("outsize"),
                                                      GroupLinearOptions{.batchDim = a.i("batchDim"),
                                                                         .inmode = a.s("inmode"),
                                                                         .wmode = a.s("wmode"),
                                                                         .useBias = a.b("useBias"),
                                                                         .initscheme = a.init(),
                                                                         .wscale = a.f("wscale"),
                                                                         .name = a.name()});
             }},
            {"MatMul", "transB=False, alpha=1.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<MatMul>(
                     MatMulOptions{.transB = a.b("transB"), .alpha = a.f("alpha"), .name = a.name()});
             }},
            {"ScaledDotProductAttention", "causal=False, scale=0.0, dropout=0.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<ScaledDotProductAttention>(AttentionOptions{
                     .causal = a.b("causal"), .scale = a.f("scale"), .dropout = a.f("dropout"), .name = a.name()});
             }},
            {"MultiheadAttention",
             "embedDim, numHeads, dropout=0.0, bias=True, batchFirst=True, causal=False, keyPaddingMask=False, "
             "attnMask=False, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<MultiheadAttention>(a.i("embedDim"), a.i("numHeads"),
                                                             MultiheadAttentionOptions{
                                                                 .dropout = a.f("dropout"),
                                                                 .bias = a.b("bias"),
                                                                 .batchFirst = a.b("batchFirst"),
                                                                 .causal = a.b("causal"),
                                                                 .keyPaddingMask = a.b("keyPaddingMask"),
                                                                 .attnMask = a.b("attnMask"),
                                                                 .name = a.name(),
                                                             });
             }},
            {"PositionalEncoding", "base=10000.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<PositionalEncoding>(
                     PositionalEncodingOptions{.base = a.f("base"), .name = a.name()});
             }},
            {"Parameter", "shape, std=0.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Parameter>(a.ints("shape"),
                                                    ParameterOptions{.std = a.f("std"), .name = a.name()});
             }},
            {"Scale", "shape, init=1.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Scale>(a.ints("shape"), ScaleOptions{.init = a.f("init"), .name = a.name()});
             }},
            {"DropPath", "p=0.1, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<DropPath>(DropPathOptions{.p = a.f("p"), .name = a.name()});
             }},
            {"MulAddConst", "a=1.0, b=0.0, name=None, aShape=None, bShape=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 const std::vector<int64_t> aShape = a.ints("aShape"), bShape = a.ints("bShape");
                 if (aShape.empty() && bShape.empty()) {
                     return std::make_shared<MulAddConst>(a.f("a"), a.f("b"), a.name());
                 }
                 // Tensor constants: their shapes here, their values from the model file's attributes.
                 auto constant = [&](const std::vector<int64_t>& dims, float fill) {
                     for (int64_t d : dims) {
                         if (d < 1)
                             throw a.error("aShape and bShape hold dims of at least 1, got " + Shape(dims).str());
                     }
                     return dims.empty() ? Tensor() : Tensor::full(Shape(dims), fill);
                 };
                 return std::make_shared<MulAddConst>(constant(aShape, a.f("a")), constant(bShape, a.f("b")), a.name());
             }},
            {"Pow", "exponent, scale=1.0, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Pow>(a.f("exponent"), a.f("scale"), a.name());
             }},
            {"NoiseInjector", "mode='add', noisetype='uniform', params=(0.0, 1.0), name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 const std::vector<float> p = a.floats("params");
                 return std::make_shared<NoiseInjector>(NoiseInjectorOptions{
                     .mode = a.s("mode") == "mul" ? NoiseMode::mul : NoiseMode::add,
                     .noisetype = a.s("noisetype") == "gaussian" ? NoiseType::gaussian : NoiseType::uniform,
                     .param1 = p.size() > 0 ? p[0] : 0.0f,
                     .param2 = p.size() > 1 ? p[1] : 1.0f,
                     .name = a.name()});
             }},
            {"Transpose", "axes, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Transpose>(a.ints("axes"), a.name());
             }},
            {"SwapAxes", "axis1, axis2, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<SwapAxes>(a.i("axis1"), a.i("axis2"), a.name());
             }},
            {"MoveAxis", "src, dst, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<MoveAxis>(a.i("src"), a.i("dst"), a.name());
             }},
            {"Tile", "axis, times, name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Tile>(static_cast<int>(a.i("axis")), a.i("times"), a.name());
             }},
            {"Cast", "intype='float32', outtype='float32', name=None",
             [](const Blueprint&, const Args& a) -> ModulePtr {
                 return std::make_shared<Cast>(dtypeFromString(a, a.s("intype")), dtypeFromString(a, a.s("outtype")),
                                               a.name());
             }},
            {"Sequential", "name=None",
             [](const Blueprint& bp, const Args& a) { return container<Sequential>(bp, a); }},
            {"Parallel", "name=None", [](const Blueprint& bp, const Args& a) { return container<Parallel>(bp, a); }},
            {"Graph", "name=None", [](const Blueprint& bp, const Args& a) { return buildGraph(bp, a); }},
        };
        std::map<std::string, Row> byName;
        for (Row& r : rows) {
            r.signature = parseSignature(r.classname, r.text);
            const std::string name = r.classname;
            if (!byName.emplace(name, std::move(r)).second) throw ModuleError("factory row " + name + " twice");
        }
        return byName;
    }();
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

namespace {
std::mutex resolversMutex;
std::vector<std::pair<std::string, std::function<ModulePtr(const Blueprint&)>>>& resolvers() {
    static std::vector<std::pair<std::string, std::function<ModulePtr(const Blueprint&)>>> r;
    return r;
}
} // namespace

void registerClassResolver(const std::string& prefix, std::function<ModulePtr(const Blueprint& bp)> build) {
    std::lock_guard<std::mutex> lock(resolversMutex);
    for (auto& [p, b] : resolvers()) {
        if (p == prefix) {
            b = std::move(build);
            return;
        }
    }
    resolvers().emplace_back(prefix, std::move(build));
}

ModulePtr buildModule(const Blueprint& bp, const std::string& where, bool strictArguments) {
    const auto& t = table();
    auto it = t.find(bp.classname);
    if (it == t.end()) {
        std::function<ModulePtr(const Blueprint&)> resolve;
        {
            std::lock_guard<std::mutex> lock(resolversMutex);
            for (const auto& [prefix, build] : resolvers()) {
                if (bp.classname.rfind(prefix, 0) == 0) resolve = build;
            }
        }
        if (resolve) {
            try {
                return resolve(bp);
            } catch (const ModuleError& e) {
                throw ModuleError(where + e.what());
            }
        }
        throw ModuleError(where + "unknown module class '" + bp.classname + "' (the factory knows " +
                          std::to_string(t.size()) + " classes; see factoryClassnames())");
    }
    const Row& row = it->second;
    Args args(bp, row.signature, where);
    if (strictArguments) {
        for (const auto& [key, value] : bp.scheme) {
            if (!args.takes(key)) {
                const std::string close = args.nearest(key);
                throw args.error("unknown argument '" + key + "'" +
                                 (close.empty() ? "" : " (did you mean '" + close + "'?)") + "; it takes " +
                                 args.takes());
            }
        }
    }
    ModulePtr mod;
    try {
        mod = row.build(bp, args);
    } catch (const std::bad_variant_access&) {
        throw args.error("an argument has the wrong type");
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
    copy->shareVarsAs(module);                // weights the module shares between its layers (setVar), shared again
    auto& from = const_cast<Module&>(module); // read only
    const auto a = from.namedCounters(), b = copy->namedCounters();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) *b[i].second = *a[i].second;
    copyState(from, *copy);
    return copy;
}

std::vector<std::string> factoryClassnames() {
    std::vector<std::string> names;
    for (const auto& [n, row] : table()) names.push_back(n);
    return names;
}

std::string factorySignature(const std::string& classname) {
    const auto& t = table();
    auto it = t.find(classname);
    if (it == t.end()) throw ModuleError("unknown module class '" + classname + "'");
    return it->second.text;
}

} // namespace tessera
