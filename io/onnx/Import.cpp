#include "io/onnx/Importer.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <nlohmann/json.hpp>

#include "backend/ElementMath.h"
#include "backend/Errors.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/Tile.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera::onnx_io {

namespace {

// The names of the free dims (dim_param) of `g`'s inputs that are not initializers, per
// input: "" for a dim of a fixed size or without a name; none for an input without a shape.
std::vector<std::vector<std::string>> inputDimNames(const onnx::GraphProto& g) {
    std::unordered_set<std::string> initializers;
    for (const onnx::TensorProto& t : g.initializer()) initializers.insert(t.name());
    std::vector<std::vector<std::string>> names;
    for (const onnx::ValueInfoProto& v : g.input()) {
        if (initializers.count(v.name())) continue;
        names.emplace_back();
        if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
        for (const auto& d : v.type().tensor_type().shape().dim())
            names.back().push_back(!d.has_dim_value() && d.has_dim_param() ? d.dim_param() : std::string());
    }
    return names;
}

// inputDimNames less the batch's: "" for every input's dim 0 and for a dim named as some
// input's dim 0. What is left are the dims a model needs given sizes (OnnxImportOptions::dims):
// a sequence length; the batch stays free.
std::vector<std::vector<std::string>> sizedDimNames(const onnx::GraphProto& g) {
    std::vector<std::vector<std::string>> names = inputDimNames(g);
    std::set<std::string> batches;
    for (const std::vector<std::string>& input : names) {
        if (!input.empty() && !input[0].empty()) batches.insert(input[0]);
    }
    for (std::vector<std::string>& input : names) {
        for (size_t j = 0; j < input.size(); ++j) {
            if (j == 0 || batches.count(input[j])) input[j].clear();
        }
    }
    return names;
}

} // namespace

std::shared_ptr<Graph> Importer::run() {
    const onnx::GraphProto& g = model_.graph();
    opset_ = 0;
    for (const onnx::OperatorSetIdProto& o : model_.opset_import()) {
        if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
    }
    if (opset_ < 6 || opset_ > 17) {
        throw IoError(path_ + ": opset " + std::to_string(opset_) + " is not supported (6 to 17 are)");
    }
    // Every node's structure first (the passes below index inputs and outputs): at
    // least one output, and the input and output counts and attribute types of its
    // op's schema where ONNX knows the op (an unknown op is reported further on).
    {
        std::vector<std::string> bad;
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& n = g.node(i);
            const std::string where = "node " + std::to_string(i) + " '" + n.name() + "' (" + n.op_type() + ")";
            if (std::all_of(n.output().begin(), n.output().end(), [](const std::string& o) { return o.empty(); })) {
                bad.push_back(where + ": has no output");
                continue;
            }
            const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), opset_, n.domain());
            if (!schema) continue;
            try {
                schema->Verify(n);
            } catch (const std::exception& e) {
                bad.push_back(where + ": " + e.what());
            }
        }
        if (!bad.empty()) {
            std::string s = path_ + ": " + std::to_string(bad.size()) + " malformed node(s):";
            for (size_t i = 0; i < bad.size() && i < 10; ++i) s += "\n  " + bad[i];
            if (bad.size() > 10) s += "\n  ...";
            throw IoError(s);
        }
    }
    // The shapes of the values, as declared (with the sizes given for named dims) and as
    // ONNX's shape inference finds them: negative axes resolve by their ranks, shape
    // computations fold by their dims.
    fixNamedDims();
    inferShapes();
    for (const auto* list : {&g.input(), &g.output(), &g.value_info()}) {
        for (const onnx::ValueInfoProto& v : *list) {
            if (!v.type().has_tensor_type()) continue;
            elemTypes_[v.name()] = v.type().tensor_type().elem_type();
            if (!v.type().tensor_type().has_shape()) continue;
            std::vector<Dim> dims;
            for (const auto& d : v.type().tensor_type().shape().dim()) {
                if (d.has_dim_value()) {
                    dims.push_back({d.dim_value(), {}});
                } else {
                    // ONNX's inference names the sizes it cannot tell "unk__N": not known, as unnamed ones
                    const bool named = d.has_dim_param() && !d.dim_param().empty() &&
                                       !(list == &g.value_info() && d.dim_param().rfind("unk__", 0) == 0);
                    dims.push_back({-1, named ? d.dim_param() : "?" + v.name() + ":" + std::to_string(dims.size())});
                }
            }
            ranks_[v.name()] = static_cast<int64_t>(dims.size());
            shapes_[v.name()] = std::move(dims);
        }
    }
    for (const onnx::StringStringEntryProto& meta : model_.metadata_props()) {
        if (meta.key() != "padding_idx") continue;
        try {
            for (const auto& [table, idx] : nlohmann::json::parse(meta.value()).get<std::map<std::string, int64_t>>()) {
                paddingIdx_[table] = idx;
            }
        } catch (const nlohmann::json::exception& e) {
            throw IoError(path_ + ": its embedders' padding ids (metadata 'padding_idx') are malformed (" +
                          std::string(e.what()) + ")");
        }
    }
    for (int i = 0; i < g.initializer_size(); ++i) {
        const onnx::TensorProto& t = g.initializer(i);
        constants_[t.name()] =
            constantOf(t, path_ + ": initializer '" + t.name() + "'", file_ ? file_->rawData(i) : std::string_view());
        if (file_) file_->release(i);
        initializers_.insert(t.name());
    }
    std::vector<NodePtr> inputs;
    for (const onnx::ValueInfoProto& v : g.input()) {
        if (constants_.count(v.name())) continue; // an initializer listed as an input too
        auto n = node(std::make_shared<Identity>(), {}, nodeName(v.name()));
        values_[v.name()] = {n, 0};
        inputs.push_back(n);
    }
    std::vector<std::string> errors;
    size_t dependents = 0; // nodes whose own op and attributes are fine but whose input is missing
    for (const onnx::NodeProto& n : g.node()) usedValues_.insert(n.input().begin(), n.input().end());
    for (const onnx::ValueInfoProto& v : g.output()) usedValues_.insert(v.name());
    findGelus();
    findSpatialTfs();
    findLayerPatterns();
    if (options_.attention) findAttention();
    const std::vector<std::vector<std::string>> lastReaders = constantsByLastReader();
    // Imports node i by `how`; an op it cannot take is listed (or counted, when its input was
    // not imported) and its outputs are missing.
    auto importAt = [&](int i, const std::function<void(const onnx::NodeProto&)>& how) {
        const onnx::NodeProto& n = g.node(i);
        const std::string where = "node '" + (n.name().empty() ? n.output(0) : n.name()) + "' (" + n.op_type() + ")";
        try {
            if (!n.domain().empty() && n.domain() != "ai.onnx") {
                throw Unsupported{"domain '" + n.domain() + "' is not supported"};
            }
            how(n);
        } catch (const Unsupported& u) {
            if (u.dependent) {
                ++dependents;
            } else {
                errors.push_back(where + ": " + u.why);
            }
            for (const std::string& out : n.output()) missing_.insert(out);
        } catch (const Error& e) {
            errors.push_back(where + ": " + e.what());
            for (const std::string& out : n.output()) missing_.insert(out);
        }
    };
    for (int i = 0; i < g.node_size(); ++i) {
        importAt(i, [&](const onnx::NodeProto& n) {
            if (auto gelu = gelus_.find(i); gelu != gelus_.end()) {
                auto x = values_.find(gelu->second);
                if (x == values_.end() && missing_.count(gelu->second))
                    throw Unsupported{"input '" + gelu->second + "' comes from a node that was not imported", true};
                if (x == values_.end()) throw Unsupported{"the GELU of a constant"};
                define(n, std::make_shared<Gelu>(), Parents{Parent(x->second.node, x->second.slot)}, {gelu->second});
            } else if (auto st = spatialTfs_.find(i); st != spatialTfs_.end()) {
                define(n,
                       std::make_shared<SpatialTf>(
                           SpatialTfOptions{.height = st->second.height, .width = st->second.width}),
                       dataInputs(st->second.inputs), st->second.inputs);
            } else if (auto p = patternLayers_.find(i); p != patternLayers_.end()) {
                Parents parents = dataInputs(p->second.inputs); // first: an input not imported is named
                define(n, p->second.make(), parents, p->second.inputs);
            } else if (auto at = attentions_.find(i); at != attentions_.end()) {
                if (!importAttention(n, at->second)) { // not attention after all: its nodes one by one
                    for (int k : at->second.nodes) importAt(k, [&](const onnx::NodeProto& m) { importNode(m); });
                    importNode(n);
                }
            } else if (!absorbed_.count(i)) {
                importNode(n);
            }
        });
        for (const std::string& name : lastReaders[static_cast<size_t>(i)]) constants_.erase(name);
    }
    if (!errors.empty()) {
        std::string s = path_ + ": " + std::to_string(errors.size()) + " node(s) cannot be imported:";
        for (const std::string& e : errors) s += "\n  " + e;
        if (dependents) {
            s +=
                "\n  (" + std::to_string(dependents) + " node(s) after these take their outputs and were not imported)";
        }
        // Named free dims besides the batch (a sequence length) that were not given sizes.
        std::set<std::string> free;
        for (const std::vector<std::string>& input : sizedDimNames(g)) {
            for (const std::string& name : input) {
                if (!name.empty() && !options_.dims.count(name)) free.insert(name);
            }
        }
        std::string names;
        for (const std::string& f : free) names += (names.empty() ? "'" : ", '") + f + "'";
        if (!names.empty()) {
            s += "\n  (the inputs' dims " + names +
                 " have no size in the file: give them, and the graph takes those sizes only: "
                 "OnnxImportOptions::dims, Python's importOnnx(path, dims={...}), tessera's --input)";
        }
        throw IoError(s);
    }
    // Inputs an op took as constants are no graph inputs (unless also used as data).
    std::vector<NodePtr> dataInputs;
    for (const onnx::ValueInfoProto& v : g.input()) {
        if (!values_.count(v.name()) || values_.at(v.name()).node->bwds().size()) continue;
        if (takenAsConstant_.count(v.name()) && !usedAsData_.count(v.name())) continue;
        dataInputs.push_back(values_.at(v.name()).node);
    }
    inputs = dataInputs;
    std::vector<NodePtr> outputs;
    for (const onnx::ValueInfoProto& v : g.output()) {
        auto it = values_.find(v.name());
        if (it == values_.end() && constants_.count(v.name()))
            throw IoError(path_ + ": graph output '" + v.name() +
                          "' is a constant computed at import (a Tessera graph's outputs are computed by layers)");
        if (it == values_.end()) throw IoError(path_ + ": graph output '" + v.name() + "' is not computed");
        Source src = it->second;
        const bool whole = src.slot == 0 && src.node->module().outputCount() == 1;
        const bool taken = src.node->fwds().size() > 0;
        if (whole && !taken && !isInput(src.node, inputs)) {
            outputs.push_back(src.node);
        } else { // an output must end a branch: a copy of the value
            outputs.push_back(node(std::make_shared<Identity>(), Parent{src.node, src.slot}, nodeName(v.name())));
        }
    }
    // Outputs consumed by another output's branch end in copies too.
    for (NodePtr& o : outputs) {
        if (!o->fwds().empty()) o = node(std::make_shared<Identity>(), o, nodeName(o->name() + "_out"));
    }
    return std::make_shared<Graph>(inputs, outputs, model_.graph().name().empty() ? "onnx" : model_.graph().name());
}

// Node i's inputs are read when node i is imported, or, for a node absorbed into a pattern,
// when the pattern's last node is. After that reader no node needs a value, so a constant is
// dropped there: its layer holds its own copy, and the constant's memory goes (large ones
// back to the OS, constantOf), which keeps an import's peak near one copy of the weights.
// Graph outputs stay (a constant output is an error, named after the loop).
std::vector<std::vector<std::string>> Importer::constantsByLastReader() const {
    const onnx::GraphProto& g = model_.graph();
    std::unordered_map<std::string, int> last;
    for (int i = 0; i < g.node_size(); ++i) {
        auto into = absorbed_.find(i);
        const int reader = into == absorbed_.end() ? i : into->second;
        for (const std::string& in : g.node(i).input()) {
            if (in.empty()) continue;
            int& at = last.try_emplace(in, reader).first->second;
            at = std::max(at, reader);
        }
    }
    for (const onnx::ValueInfoProto& v : g.output()) last.erase(v.name());
    std::vector<std::vector<std::string>> byReader(static_cast<size_t>(g.node_size()));
    for (const auto& [name, reader] : last) byReader[static_cast<size_t>(reader)].push_back(name);
    return byReader;
}

// `axis` of input `k`, negative ones counted from the end when its rank is declared.
int64_t Importer::resolveAxis(const onnx::NodeProto& n, int k, int64_t axis) const {
    if (axis >= 0) return axis;
    auto r = ranks_.find(n.input(k));
    if (r == ranks_.end()) throw Unsupported{"a negative axis on an input whose rank the model does not declare"};
    return axis + r->second;
}

std::vector<int64_t> Importer::spatialDimsOf(const onnx::NodeProto& n, int k, size_t dims) const {
    std::vector<int64_t> out(dims, -1);
    auto s = shapes_.find(n.input(k));
    if (s == shapes_.end() || s->second.size() != dims + 2) return out;
    for (size_t d = 0; d < dims; ++d) out[d] = s->second[2 + d].value;
    return out;
}

int64_t Importer::dimOf(const onnx::NodeProto& n, int k, int64_t axis) const {
    auto s = shapes_.find(n.input(k));
    if (s == shapes_.end() || axis < 0 || axis >= static_cast<int64_t>(s->second.size())) return -1;
    return s->second[static_cast<size_t>(axis)].value;
}

int64_t Importer::rankOf(const onnx::NodeProto& n, int k) const {
    auto r = ranks_.find(n.input(k));
    return r == ranks_.end() ? -1 : r->second;
}

void Importer::fixNamedDims() {
    if (options_.dims.empty()) return;
    onnx::GraphProto& g = *model_.mutable_graph();
    std::set<std::string> declared; // the graph inputs' named dims
    for (const std::vector<std::string>& input : inputDimNames(g)) {
        for (const std::string& name : input) {
            if (!name.empty()) declared.insert(name);
        }
    }
    for (const auto& [name, size] : options_.dims) {
        if (!declared.count(name)) {
            std::string known;
            for (const std::string& d : declared) known += (known.empty() ? "" : ", ") + d;
            throw IoError(path_ + ": OnnxImportOptions::dims names '" + name + "', which no input's dim is named (" +
                          (known.empty() ? std::string("the inputs name no dims") : "they name " + known) + ")");
        }
        if (size < 1) {
            throw IoError(path_ + ": OnnxImportOptions::dims gives '" + name + "' the size " + std::to_string(size) +
                          " (at least 1)");
        }
    }
    for (auto* list : {g.mutable_input(), g.mutable_output(), g.mutable_value_info()}) {
        for (onnx::ValueInfoProto& v : *list) {
            if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
            for (auto& d : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
                if (d.has_dim_value() || !d.has_dim_param()) continue;
                const auto it = options_.dims.find(d.dim_param());
                if (it != options_.dims.end()) d.set_dim_value(it->second); // clears the name
            }
        }
    }
}

bool Importer::isInput(const NodePtr& n, const std::vector<NodePtr>& inputs) {
    for (const NodePtr& i : inputs) {
        if (i == n) return true;
    }
    return false;
}

// A unique node name without dots (dots separate dotted parameter names).
std::string Importer::nodeName(std::string base) {
    for (char& c : base) {
        if (c == '.' || c == ':' || c == '/') c = '_';
    }
    if (base.empty()) base = "node";
    std::string name = base;
    for (int k = 1; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
}

const Constant* Importer::constant(const std::string& name) {
    auto it = constants_.find(name);
    if (it != constants_.end()) return &it->second;
    auto given = options_.inputValues.find(name);
    if (given == options_.inputValues.end()) return nullptr;
    Constant c;
    c.tensor = given->second;
    c.dims = c.tensor.shape().dims();
    if (c.tensor.dtype() == DType::int32) {
        c.isInt = true;
        for (int32_t x : c.tensor.toVector<int32_t>()) c.ints.push_back(x);
    }
    takenAsConstant_.insert(name);
    return &(constants_[name] = c);
}

Source Importer::value(const onnx::NodeProto& n, int k) { return value(n.input(k), k); }

Source Importer::value(const std::string& name, int k) {
    auto it = values_.find(name);
    if (it != values_.end()) {
        usedAsData_.insert(name);
        return it->second;
    }
    if (missing_.count(name)) throw Unsupported{"input '" + name + "' comes from a node that was not imported", true};
    if (constants_.count(name)) throw Unsupported{"input " + std::to_string(k) + " ('" + name + "') is a constant"};
    throw Unsupported{"input '" + name + "' is not computed by any node"};
}

const Constant& Importer::requireConstant(const onnx::NodeProto& n, int k, const char* what) {
    if (k >= n.input_size() || n.input(k).empty()) throw Unsupported{std::string(what) + " is missing"};
    const Constant* c = constant(n.input(k));
    if (!c && missing_.count(n.input(k))) {
        throw Unsupported{std::string(what) + " comes from a node that was not imported", true};
    }
    if (!c) throw Unsupported{std::string(what) + " must be a constant (an initializer or a Constant node)"};
    return *c;
}

// The values of input k, a constant of integers.
const std::vector<int64_t>& Importer::requireInts(const onnx::NodeProto& n, int k, const char* what) {
    const Constant& c = requireConstant(n, k, what);
    if (!c.isInt) throw Unsupported{std::string(what) + " must be integers; input " + std::to_string(k) + " is not"};
    return c.ints;
}

// The one value of input k, a constant holding exactly one number (a scalar or a
// one-element tensor, integer or floating).
float Importer::requireScalar(const onnx::NodeProto& n, int k, const char* what) {
    const Constant& c = requireConstant(n, k, what);
    if (c.isInt && c.ints.size() == 1) return static_cast<float>(c.ints[0]);
    if (!c.isInt && c.tensor.defined() && c.tensor.numel() == 1) return c.tensor.toVector<float>()[0];
    const int64_t count = c.isInt ? static_cast<int64_t>(c.ints.size()) : c.tensor.defined() ? c.tensor.numel() : -1;
    throw Unsupported{std::string(what) + " must hold one value; it holds " +
                      (count < 0 ? std::string("values of a shape known only at run time") : std::to_string(count))};
}

void Importer::define(const onnx::NodeProto& n, ModulePtr module, const Parents& parents) {
    define(n, std::move(module), parents, {n.input().begin(), n.input().end()});
}

// A layer with parameters built from the same constants, by the same op with the same
// attributes, as an earlier one, and equal to it (its blueprint, parameters and attributes):
// a weight the export shares between nodes (a shared MLP, a siamese tower). The earlier layer
// then runs in this node too, so that training updates one set of weights, as it would in the
// exported model, and the parameters count once. Tessera writes one set of initializers only
// for a module in several nodes. PyTorch's export (in eval mode) also merges initializers of
// equal values, which distinct layers have where they start from a constant (batch norms'
// ones and zeros, a zeroed layer): from other producers a layer is shared only when one of its
// parameters holds values that are not all equal.
ModulePtr Importer::sharedLayer(const onnx::NodeProto& n, ModulePtr module) {
    if (module->numOfParams() == 0 || dynamic_cast<const Container*>(module.get())) return module;
    std::string key = n.domain() + "/" + n.op_type();
    bool constants = false;
    for (const std::string& in : n.input()) {
        const bool c = !in.empty() && isConstant(in);
        constants = constants || c;
        key += "|" + (c ? in : std::string());
    }
    if (!constants) return module;
    if (model_.producer_name() != "tessera") {
        bool distinctive = false; // a parameter whose values are not one value repeated
        for (const auto& [name, v] : module->namedParams()) {
            const Tensor& t = v->data;
            if (distinctive || !t.defined() || t.numel() < 2 || !t.device().isCpu()) continue;
            const size_t size = t.nbytes() / static_cast<size_t>(t.numel());
            const auto* bytes = static_cast<const char*>(t.raw());
            for (int64_t k = 1; !distinctive && k < t.numel(); ++k) {
                distinctive = std::memcmp(bytes, bytes + static_cast<size_t>(k) * size, size) != 0;
            }
        }
        if (!distinctive) return module;
    }
    for (const onnx::AttributeProto& at : n.attribute()) key += "|" + at.SerializeAsString();
    const auto sameValues = [](const auto& a, const auto& b, auto&& tensorOf) {
        if (a.size() != b.size()) return false;
        for (size_t k = 0; k < a.size(); ++k) {
            const Tensor &x = tensorOf(a[k].second), &y = tensorOf(b[k].second);
            if (!x.defined() || !y.defined()) {
                if (x.defined() != y.defined() || a[k].first != b[k].first) return false;
                continue;
            }
            if (a[k].first != b[k].first || x.shape() != y.shape() || x.dtype() != y.dtype() ||
                x.layout() != y.layout() || !x.device().isCpu() || !y.device().isCpu() ||
                std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0) {
                return false;
            }
        }
        return true;
    };
    const auto unnamed = [](const Module& m) { // the blueprint less the name its node gave it
        Blueprint bp = m.blueprint();
        std::erase_if(bp.scheme, [](const auto& kv) { return kv.first == "name"; });
        return bp.toJson();
    };
    const std::string json = unnamed(*module);
    for (const ModulePtr& earlier : sharedLayers_[key]) {
        if (unnamed(*earlier) == json &&
            sameValues(earlier->namedParams(), module->namedParams(),
                       [](const VariablePtr& v) -> const Tensor& { return v->data; }) &&
            sameValues(earlier->namedAttrs(), module->namedAttrs(),
                       [](const Tensor& t) -> const Tensor& { return t; })) {
            return earlier;
        }
    }
    sharedLayers_[key].push_back(module);
    return module;
}

void Importer::define(const onnx::NodeProto& n, ModulePtr module, const Parents& parents,
                      const std::vector<std::string>& inputs) {
    module = sharedLayer(n, std::move(module));
    inferShapes(n, *module, parents, inputs);
    NodePtr nd = node(std::move(module), parents, nodeName(n.name().empty() ? n.output(0) : n.name()));
    for (int k = 0; k < n.output_size(); ++k) {
        if (!n.output(k).empty()) values_[n.output(k)] = {nd, k};
    }
}

// A node one of whose inputs comes from a node that was not imported is counted, not listed.
void Importer::requireInputsImported(const onnx::NodeProto& n) const {
    for (const std::string& in : n.input()) {
        if (missing_.count(in)) throw Unsupported{"input '" + in + "' comes from a node that was not imported", true};
    }
}

Parents Importer::dataInputs(const onnx::NodeProto& n, int count) {
    std::vector<int> inputs(static_cast<size_t>(std::max(count, 0)));
    for (int k = 0; k < count; ++k) inputs[static_cast<size_t>(k)] = k;
    return dataInputs(n, inputs);
}

Parents Importer::dataInputs(const onnx::NodeProto& n, const std::vector<int>& inputs) {
    requireInputsImported(n);
    Parents ps;
    for (int k : inputs) {
        Source s = value(n, k);
        ps.push_back(Parent(s.node, s.slot));
    }
    return ps;
}

bool Importer::isIntegerType(int32_t type) {
    return type == onnx::TensorProto::INT32 || type == onnx::TensorProto::INT64 || type == onnx::TensorProto::BOOL;
}

// The values `names` as data inputs (input k of a pattern's layer being names[k]).
Parents Importer::dataInputs(const std::vector<std::string>& names) {
    Parents ps;
    for (size_t k = 0; k < names.size(); ++k) {
        Source s = value(names[k], static_cast<int>(k));
        ps.push_back(Parent(s.node, s.slot));
    }
    return ps;
}

void Importer::onlyOutputs(const onnx::NodeProto& n, int count) const {
    for (int k = count; k < n.output_size(); ++k) {
        if (!n.output(k).empty()) throw Unsupported{"output " + std::to_string(k) + " is not supported"};
    }
}

bool Importer::isConstant(const std::string& name) const {
    return constants_.count(name) && !takenAsConstant_.count(name);
}

int32_t Importer::elemTypeOf(const std::string& name) const {
    auto it = elemTypes_.find(name);
    return it == elemTypes_.end() ? 0 : it->second;
}

std::string Importer::newSymbol() { return "?computed:" + std::to_string(symbolCount_++); }

// A Reshape to the shape ONNX infers for the node's output: known dims as they are, a
// dim not known at import kept (0) where the input has it at the same place, else
// inferred (-1, at most one).
ModulePtr Importer::reshapeTo(const onnx::NodeProto& n) {
    auto out = shapes_.find(n.output(0));
    if (out == shapes_.end())
        throw Unsupported{"the output's shape is not known at import (ONNX's shape inference found none)"};
    const auto in = shapes_.find(n.input(0));
    std::vector<int64_t> target;
    int inferred = 0;
    for (size_t d = 0; d < out->second.size(); ++d) {
        const Dim& dim = out->second[d];
        if (dim.value >= 0) {
            target.push_back(dim.value);
        } else if (in != shapes_.end() && d < in->second.size() && in->second[d].symbol == dim.symbol) {
            target.push_back(0);
        } else {
            target.push_back(-1);
            ++inferred;
        }
    }
    if (inferred > 1) throw Unsupported{"an output shape with more than one dim not known at import"};
    return std::make_shared<Reshape>(Shape(target));
}

} // namespace tessera::onnx_io

namespace tessera {

using namespace onnx_io;

bool isOnnxPath(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0; }

std::shared_ptr<Graph> importOnnx(const std::string& path, const OnnxImportOptions& options) {
    ModelFile file(path, true);
    return Importer(file.model, path, options, &file).run();
}

std::vector<std::string> onnxInputNames(const std::string& path) {
    const onnx::ModelProto model = readModelWithoutWeights(path);
    std::unordered_set<std::string> initializers;
    for (const onnx::TensorProto& t : model.graph().initializer()) initializers.insert(t.name());
    std::vector<std::string> names;
    for (const onnx::ValueInfoProto& v : model.graph().input()) {
        if (!initializers.count(v.name())) names.push_back(v.name());
    }
    return names;
}

std::map<std::string, int64_t> onnxDimSizes(const std::string& path, const Shapes& inputs) {
    const std::vector<std::vector<std::string>> names = sizedDimNames(readModelWithoutWeights(path).graph());
    std::map<std::string, int64_t> sizes;
    for (size_t i = 0; i < inputs.size() && i < names.size(); ++i) {
        for (size_t j = 0; j < names[i].size() && j < inputs[i].rank(); ++j) {
            const std::string& name = names[i][j];
            if (name.empty()) continue;
            const auto [at, fresh] = sizes.emplace(name, inputs[i][j]);
            if (!fresh && at->second != inputs[i][j]) {
                throw ShapeError(path + ": the inputs " + str(inputs) + " give the model's dim '" + name +
                                 "' two sizes, " + std::to_string(at->second) + " and " + std::to_string(inputs[i][j]));
            }
        }
    }
    return sizes;
}

std::vector<std::vector<int64_t>> onnxInputShapes(const std::string& path) {
    const onnx::ModelProto model = readModelWithoutWeights(path);
    std::unordered_set<std::string> initializers;
    for (const onnx::TensorProto& t : model.graph().initializer()) initializers.insert(t.name());
    std::vector<std::vector<int64_t>> shapes;
    for (const onnx::ValueInfoProto& v : model.graph().input()) {
        if (initializers.count(v.name())) continue;
        if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return {};
        std::vector<int64_t> dims;
        for (const auto& d : v.type().tensor_type().shape().dim())
            dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
        shapes.push_back(dims);
    }
    return shapes;
}

std::vector<std::string> onnxClassNames(const std::string& path) {
    const onnx::ModelProto model = readModelWithoutWeights(path);
    for (const onnx::StringStringEntryProto& meta : model.metadata_props()) {
        if (meta.key() != "classes") continue;
        try {
            return nlohmann::json::parse(meta.value()).get<std::vector<std::string>>();
        } catch (const nlohmann::json::exception& e) {
            throw IoError("ONNX model " + path + ": its class names (metadata 'classes') are malformed (" +
                          std::string(e.what()) + ")");
        }
    }
    return {};
}

std::string onnxTransforms(const std::string& path) {
    const onnx::ModelProto model = readModelWithoutWeights(path);
    for (const onnx::StringStringEntryProto& meta : model.metadata_props()) {
        if (meta.key() == "transforms") return meta.value();
    }
    return {};
}

Tensor readOnnxTensor(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw IoError("ONNX tensor " + path + ": cannot open the file");
    onnx::TensorProto t;
    if (!t.ParseFromIstream(&file) || t.data_type() == onnx::TensorProto::UNDEFINED) {
        throw IoError("ONNX tensor " + path + ": not a TensorProto file (a sequence, a map or an optional?)");
    }
    Constant c = constantOf(t, "ONNX tensor " + path);
    if (!c.tensor.defined()) throw IoError("ONNX tensor " + path + ": int64 values outside the int32 range");
    return c.tensor;
}

} // namespace tessera
