#include "io/Onnx.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <nlohmann/json.hpp>

#include "backend/ElementMath.h"
#include "backend/Files.h"
#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "io/ChildProcess.h"
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

namespace tessera {

namespace {

// A constant: a float tensor (weights) and, for int64 data, its values (shapes, axes).
// Shape values computed from the model (Shape -> Gather -> Concat, as exporters write a
// flatten) may hold dims not known at import, such as the batch: `symbols` then names
// each entry's symbol ("" for a known value, whose value is in `ints`).
struct Constant {
    Tensor tensor;
    std::vector<int64_t> ints;
    bool isInt = false;
    std::vector<int64_t> dims; // the ONNX shape (a scalar has none)
    std::vector<std::string> symbols;
    // All zeros, of a shape with dims not known at import (an Expand or ConstantOfShape of 0
    // to a computed shape, as exporters write zero initial states): no tensor.
    bool zeros = false;

    bool symbolic() const {
        for (const std::string& x : symbols) {
            if (!x.empty()) return true;
        }
        return false;
    }
    std::string symbol(size_t i) const { return i < symbols.size() ? symbols[i] : std::string(); }
};

Shape shapeOf(const onnx::TensorProto& t) {
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    return Shape(dims);
}

// Integer values as an int32 tensor of `shape` (a scalar as [1]); undefined when one is
// outside int32's range.
Tensor int32Tensor(const std::vector<int64_t>& ints, const Shape& shape) {
    std::vector<int32_t> v;
    for (int64_t x : ints) {
        if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) return Tensor();
        v.push_back(static_cast<int32_t>(x));
    }
    return Tensor::fromVector(shape.rank() ? shape : Shape{1}, v);
}

// ONNX's recurrent gate j is PyTorch's (and Tessera's) gate order[j]: LSTM i o f c <- i f g o;
// GRU z r h <- r z n; one gate for vanilla cells.
std::vector<int64_t> onnxGateOrder(RnnMode mode) {
    if (mode == RnnMode::lstm) return {0, 3, 1, 2};
    if (mode == RnnMode::gru) return {1, 0, 2};
    return {0};
}

// Raw or typed data of a TensorProto (`what` names it in errors).
Constant constantOf(const onnx::TensorProto& t, const std::string& what) {
    Constant c;
    const Shape shape = shapeOf(t);
    c.dims.assign(t.dims().begin(), t.dims().end());
    const int32_t type = t.data_type();
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32) {
        throw IoError(what + ": tensor data type " + std::to_string(type) +
                      " is not supported (float32, int32 and int64 are)");
    }
    int64_t n = 0;
    try {
        for (int64_t d : shape.dims()) {
            if (d < 0) throw ShapeError("a negative dim");
        }
        n = shape.numel();
    } catch (const ShapeError& e) {
        throw IoError(what + ": dims " + shape.str() + " describe no tensor (" + e.what() + ")");
    }
    auto sized = [&](size_t got) {
        if (static_cast<int64_t>(got) != n) {
            throw IoError(what + ": " + std::to_string(got) + " values for shape " + shape.str());
        }
    };
    // Raw data holds whole values only: n of them, `width` bytes each.
    auto rawSized = [&](size_t width) {
        const size_t bytes = t.raw_data().size();
        if (bytes % width != 0) {
            throw IoError(what + ": " + std::to_string(bytes) + " bytes of raw data are not whole " +
                          std::to_string(width) + "-byte values");
        }
        sized(bytes / width);
    };
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        throw IoError(what + ": data in an external file is not supported");
    }
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
        std::vector<float> v;
        if (!t.raw_data().empty()) {
            rawSized(sizeof(float));
            v.resize(static_cast<size_t>(n));
            if (n > 0) std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
        } else {
            sized(static_cast<size_t>(t.float_data_size()));
            v.assign(t.float_data().begin(), t.float_data().end());
        }
        c.tensor = Tensor::fromVector(shape.rank() ? shape : Shape{1}, v); // a scalar as [1]
        return c;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32: {
        const bool is64 = t.data_type() == onnx::TensorProto::INT64;
        if (!t.raw_data().empty()) {
            rawSized(is64 ? 8 : 4);
            for (int64_t i = 0; i < n; ++i) {
                if (is64) {
                    int64_t x;
                    std::memcpy(&x, t.raw_data().data() + i * 8, 8);
                    c.ints.push_back(x);
                } else {
                    int32_t x;
                    std::memcpy(&x, t.raw_data().data() + i * 4, 4);
                    c.ints.push_back(x);
                }
            }
        } else if (is64) {
            sized(static_cast<size_t>(t.int64_data_size()));
            c.ints.assign(t.int64_data().begin(), t.int64_data().end());
        } else {
            sized(static_cast<size_t>(t.int32_data_size()));
            c.ints.assign(t.int32_data().begin(), t.int32_data().end());
        }
        c.isInt = true;
        if (n > 0) c.tensor = int32Tensor(c.ints, shape);
        return c;
    }
    default:
        throw IoError(what + ": tensor data type " + std::to_string(t.data_type()) +
                      " is not supported (float32, int32 and int64 are)");
    }
}

// An unsupported node: what to say about it.
struct Unsupported {
    std::string why;
    bool dependent = false; // only an input is missing, from a node that was not imported
};

// The attributes of a node, by name.
class Attributes {
public:
    explicit Attributes(const onnx::NodeProto& n) {
        for (const onnx::AttributeProto& a : n.attribute()) byName_[a.name()] = &a;
    }
    bool has(const std::string& name) const { return byName_.count(name) > 0; }
    int64_t i(const std::string& name, int64_t fallback) const {
        auto it = byName_.find(name);
        return it == byName_.end() ? fallback : it->second->i();
    }
    float f(const std::string& name, float fallback) const {
        auto it = byName_.find(name);
        return it == byName_.end() ? fallback : it->second->f();
    }
    std::string s(const std::string& name, const std::string& fallback) const {
        auto it = byName_.find(name);
        return it == byName_.end() ? fallback : it->second->s();
    }
    std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> fallback = {}) const {
        auto it = byName_.find(name);
        if (it == byName_.end()) return fallback;
        return {it->second->ints().begin(), it->second->ints().end()};
    }
    const onnx::AttributeProto* get(const std::string& name) const {
        auto it = byName_.find(name);
        return it == byName_.end() ? nullptr : it->second;
    }
    // Every attribute not in `known`, as the first unsupported one.
    void only(std::initializer_list<const char*> known) const {
        for (const auto& [name, a] : byName_) {
            bool ok = false;
            for (const char* k : known) ok = ok || name == k;
            if (!ok) throw Unsupported{"attribute '" + name + "' is not supported"};
        }
    }

private:
    std::unordered_map<std::string, const onnx::AttributeProto*> byName_;
};

// pads [b1, b2, ..., e1, e2, ...] as one symmetric pad per dim.
std::vector<int64_t> symmetricPads(const std::vector<int64_t>& pads, size_t dims) {
    if (pads.empty()) return std::vector<int64_t>(dims, 0);
    if (pads.size() != 2 * dims) throw Unsupported{"pads has " + std::to_string(pads.size()) + " values"};
    std::vector<int64_t> p(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(dims));
    for (size_t d = 0; d < dims; ++d) {
        if (pads[d] != pads[d + dims]) throw Unsupported{"asymmetric pads are not supported"};
    }
    return p;
}

void autoPadNotSet(const Attributes& a) {
    const std::string ap = a.s("auto_pad", "NOTSET");
    if (ap != "NOTSET" && ap != "VALID") throw Unsupported{"auto_pad " + ap + " is not supported (NOTSET, VALID are)"};
}

// ONNX's shape inference, in the process that serves Importer::inferShapes (an
// io_detail::ChildServer): libonnx reads out of bounds on some malformed nodes (a Conv
// whose weights' rank differs from its input's), and such a crash must be an error about
// the file, not the end of the importing process. A request is a serialized model; the
// answer is '\0' and a GraphProto of the inferred value_info and outputs, or '\1' when
// inference threw or the model does not parse (the declared shapes serve then).
std::string inferInChild(const std::string& request) {
    onnx::ModelProto m;
    if (!m.ParseFromString(request)) return std::string(1, '\1');
    try {
        onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                           onnx::ShapeInferenceOptions(false, 0, /*data_prop=*/true));
    } catch (const std::exception&) {
        return std::string(1, '\1');
    }
    onnx::GraphProto out;
    *out.mutable_value_info() = std::move(*m.mutable_graph()->mutable_value_info());
    *out.mutable_output() = std::move(*m.mutable_graph()->mutable_output());
    return std::string(1, '\0') + out.SerializeAsString();
}

// A floating initializer of over 1024 elements (dims as declared; none negative).
bool largeFloating(const onnx::TensorProto& t) {
    using TP = onnx::TensorProto;
    const int type = t.data_type();
    if (type != TP::FLOAT && type != TP::DOUBLE && type != TP::FLOAT16 && type != TP::BFLOAT16) return false;
    int64_t n = 1;
    for (int64_t d : t.dims()) {
        if (d < 0) return false;
        n = d > 0 && n > 1024 / d ? 1025 : n * d; // saturates above the threshold
    }
    return n > 1024;
}

// Where a value comes from: a node and its output slot.
struct Source {
    NodePtr node;
    int slot = 0;
};

class Importer {
public:
    Importer(onnx::ModelProto& model, std::string path, const OnnxImportOptions& options)
        : model_(model), path_(std::move(path)), options_(options) {}

    // ONNX's shape inference on the model, run in the inference process (inferInChild):
    // adds the value_info it finds and refines the outputs'. Throws IoError when inference
    // crashes or takes over 30 s on the model. Its exceptions are not errors here: the
    // import then uses the declared shapes.
    void inferShapes() {
        // Never destroyed: imports during static destruction work.
        static auto* child = new io_detail::ChildServer(inferInChild);
        std::string request;
        bool serialized = false;
        {
            // Large floating initializers' data stay here: inference reads their dims (shape
            // computations read small integer tensors and scales, which travel).
            struct Held {
                onnx::TensorProto* tensor;
                std::string raw;
                google::protobuf::RepeatedField<float> floats;
                void swap() {
                    raw.swap(*tensor->mutable_raw_data());
                    floats.Swap(tensor->mutable_float_data());
                }
            };
            std::vector<Held> held;
            for (onnx::TensorProto& t : *model_.mutable_graph()->mutable_initializer()) {
                if (largeFloating(t)) held.push_back({&t, {}, {}});
            }
            for (Held& h : held) h.swap();                   // out
            serialized = model_.SerializeToString(&request); // false past protobuf's 2 GB
            for (Held& h : held) h.swap();                   // back
        }
        if (!serialized) return; // the declared shapes, then
        const io_detail::ChildServer::Result r = child->call(request, std::chrono::seconds(30));
        using Failure = io_detail::ChildServer::Result::Failure;
        switch (r.failure) {
        case Failure::none: break;
        case Failure::cannotStart: throw IoError(path_ + ": cannot check the model's shapes: " + r.detail);
        case Failure::timedOut: throw IoError(path_ + ": ONNX's shape inference did not finish in 30 s on this model");
        case Failure::crashed:
        case Failure::exited:
            throw IoError(path_ + ": malformed model: ONNX's shape inference crashes on it (" + r.detail +
                          "; ran in a separate process)");
        }
        onnx::GraphProto inferred;
        if (r.answer->empty() || (*r.answer)[0] != '\0' || !inferred.ParseFromString(r.answer->substr(1)) ||
            inferred.output_size() != model_.graph().output_size()) {
            return;
        }
        *model_.mutable_graph()->mutable_value_info() = std::move(*inferred.mutable_value_info());
        *model_.mutable_graph()->mutable_output() = std::move(*inferred.mutable_output());
    }

    std::shared_ptr<Graph> run() {
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
        // The shapes of the values, as declared and as ONNX's shape inference finds them:
        // negative axes resolve by their ranks, shape computations fold by their dims.
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
                        dims.push_back({-1, d.has_dim_param() && !d.dim_param().empty()
                                                ? d.dim_param()
                                                : "?" + v.name() + ":" + std::to_string(dims.size())});
                    }
                }
                ranks_[v.name()] = static_cast<int64_t>(dims.size());
                shapes_[v.name()] = std::move(dims);
            }
        }
        for (const onnx::TensorProto& t : g.initializer()) {
            constants_[t.name()] = constantOf(t, path_ + ": initializer '" + t.name() + "'");
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
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& n = g.node(i);
            const std::string where =
                "node '" + (n.name().empty() ? n.output(0) : n.name()) + "' (" + n.op_type() + ")";
            try {
                if (!n.domain().empty() && n.domain() != "ai.onnx") {
                    throw Unsupported{"domain '" + n.domain() + "' is not supported"};
                }
                if (auto gelu = gelus_.find(i); gelu != gelus_.end()) {
                    auto x = values_.find(gelu->second);
                    if (x == values_.end() && missing_.count(gelu->second))
                        throw Unsupported{"input '" + gelu->second + "' comes from a node that was not imported", true};
                    if (x == values_.end()) throw Unsupported{"the GELU of a constant"};
                    define(n, std::make_shared<Gelu>(), Parents{Parent(x->second.node, x->second.slot)});
                    continue;
                }
                if (auto st = spatialTfs_.find(i); st != spatialTfs_.end()) {
                    define(n,
                           std::make_shared<SpatialTf>(
                               SpatialTfOptions{.height = st->second.height, .width = st->second.width}),
                           dataInputs(st->second.inputs));
                    continue;
                }
                if (absorbed_.count(i)) continue;
                importNode(n);
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
        }
        if (!errors.empty()) {
            std::string s = path_ + ": " + std::to_string(errors.size()) + " node(s) cannot be imported:";
            for (const std::string& e : errors) s += "\n  " + e;
            if (dependents) {
                s += "\n  (" + std::to_string(dependents) +
                     " node(s) after these take their outputs and were not imported)";
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

private:
    // A dim of a value's shape: its size, or the symbol of a size not known at import.
    struct Dim {
        int64_t value = -1;
        std::string symbol;
    };

    onnx::ModelProto& model_;
    std::unordered_map<std::string, std::vector<Dim>> shapes_;
    std::unordered_map<std::string, int32_t> elemTypes_; // declared or inferred element types
    int symbolCount_ = 0;
    std::string path_;
    const OnnxImportOptions& options_;
    std::unordered_set<std::string> takenAsConstant_; // graph inputs an op took as a constant
    std::unordered_set<std::string> usedAsData_;
    int64_t opset_ = 0;
    std::unordered_map<std::string, Constant> constants_;
    std::unordered_map<std::string, Source> values_;
    std::unordered_set<std::string> missing_;
    std::unordered_set<std::string> names_;
    std::unordered_map<std::string, int64_t> ranks_;

    // `axis` of input `k`, negative ones counted from the end when its rank is declared.
    int64_t resolveAxis(const onnx::NodeProto& n, int k, int64_t axis) const {
        if (axis >= 0) return axis;
        auto r = ranks_.find(n.input(k));
        if (r == ranks_.end()) throw Unsupported{"a negative axis on an input whose rank the model does not declare"};
        return axis + r->second;
    }
    int64_t rankOf(const onnx::NodeProto& n, int k) const {
        auto r = ranks_.find(n.input(k));
        return r == ranks_.end() ? -1 : r->second;
    }

    static bool isInput(const NodePtr& n, const std::vector<NodePtr>& inputs) {
        for (const NodePtr& i : inputs) {
            if (i == n) return true;
        }
        return false;
    }

    // A unique node name without dots (dots separate dotted parameter names).
    std::string nodeName(std::string base) {
        for (char& c : base) {
            if (c == '.' || c == ':' || c == '/') c = '_';
        }
        if (base.empty()) base = "node";
        std::string name = base;
        for (int k = 1; names_.count(name); ++k) name = base + "_" + std::to_string(k);
        names_.insert(name);
        return name;
    }

    const Constant* constant(const std::string& name) {
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

    Source value(const onnx::NodeProto& n, int k) { return value(n.input(k), k); }
    Source value(const std::string& name, int k) {
        auto it = values_.find(name);
        if (it != values_.end()) {
            usedAsData_.insert(name);
            return it->second;
        }
        if (missing_.count(name))
            throw Unsupported{"input '" + name + "' comes from a node that was not imported", true};
        if (constants_.count(name)) throw Unsupported{"input " + std::to_string(k) + " ('" + name + "') is a constant"};
        throw Unsupported{"input '" + name + "' is not computed by any node"};
    }

    const Constant& requireConstant(const onnx::NodeProto& n, int k, const char* what) {
        if (k >= n.input_size() || n.input(k).empty()) throw Unsupported{std::string(what) + " is missing"};
        const Constant* c = constant(n.input(k));
        if (!c && missing_.count(n.input(k))) {
            throw Unsupported{std::string(what) + " comes from a node that was not imported", true};
        }
        if (!c) throw Unsupported{std::string(what) + " must be a constant (an initializer or a Constant node)"};
        return *c;
    }

    // The values of input k, a constant of integers.
    const std::vector<int64_t>& requireInts(const onnx::NodeProto& n, int k, const char* what) {
        const Constant& c = requireConstant(n, k, what);
        if (!c.isInt)
            throw Unsupported{std::string(what) + " must be integers; input " + std::to_string(k) + " is not"};
        return c.ints;
    }

    // The one value of input k, a constant holding exactly one number (a scalar or a
    // one-element tensor, integer or floating).
    float requireScalar(const onnx::NodeProto& n, int k, const char* what) {
        const Constant& c = requireConstant(n, k, what);
        if (c.isInt && c.ints.size() == 1) return static_cast<float>(c.ints[0]);
        if (!c.isInt && c.tensor.defined() && c.tensor.numel() == 1) return c.tensor.toVector<float>()[0];
        const int64_t count = c.isInt              ? static_cast<int64_t>(c.ints.size())
                              : c.tensor.defined() ? c.tensor.numel()
                                                   : -1;
        throw Unsupported{
            std::string(what) + " must hold one value; it holds " +
            (count < 0 ? std::string("values of a shape known only at run time") : std::to_string(count))};
    }

    void define(const onnx::NodeProto& n, ModulePtr module, const Parents& parents) {
        inferShapes(n, *module, parents);
        NodePtr nd = node(std::move(module), parents, nodeName(n.name().empty() ? n.output(0) : n.name()));
        for (int k = 0; k < n.output_size(); ++k) {
            if (!n.output(k).empty()) values_[n.output(k)] = {nd, k};
        }
    }

    static bool known(const std::vector<Dim>& dims) {
        for (const Dim& d : dims) {
            if (d.value < 0 && d.symbol.rfind('?', 0) == 0) return false; // not even a named symbol
        }
        return true;
    }

    // Shapes ONNX's inference leaves open (after a Reshape to a computed shape, say) come
    // from the module's own shape inference: each named dim (the batch) stands in as a
    // distinct large size and is read back as its symbol.
    void inferShapes(const onnx::NodeProto& n, Module& m, const Parents& parents) {
        bool open = false;
        for (int k = 0; k < n.output_size(); ++k) {
            auto it = shapes_.find(n.output(k));
            open = open || it == shapes_.end() || !known(it->second);
        }
        if (!open) return;
        Shapes in;
        for (const Parent& p : parents) {
            const std::vector<Dim>* dims = nullptr;
            for (const std::string& name : n.input()) {
                auto v = values_.find(name);
                if (v != values_.end() && v->second.node == p.node &&
                    v->second.slot == (p.slots.empty() ? 0 : p.slots[0])) {
                    auto sh = shapes_.find(name);
                    if (sh != shapes_.end() && known(sh->second)) dims = &sh->second;
                }
            }
            if (!dims) return;
            std::vector<int64_t> d;
            for (const Dim& x : *dims) d.push_back(x.value >= 0 ? x.value : standIn(x.symbol));
            in.push_back(Shape(d));
        }
        try {
            const Shapes out = m.dataShapeFrom(in);
            for (int k = 0; k < n.output_size() && k < static_cast<int>(out.size()); ++k) {
                std::vector<Dim> dims;
                for (size_t d = 0; d < out[k].rank(); ++d) {
                    const int64_t v = out[k][static_cast<int64_t>(d)];
                    auto sym = standInSymbols_.find(v);
                    if (sym != standInSymbols_.end()) {
                        dims.push_back({-1, sym->second});
                    } else if (v >= kStandIn) { // a size computed from a named one: unknown
                        dims.push_back({-1, newSymbol()});
                    } else {
                        dims.push_back({v, {}});
                    }
                }
                ranks_[n.output(k)] = static_cast<int64_t>(dims.size());
                shapes_[n.output(k)] = std::move(dims);
            }
        } catch (const Error&) {
            // the whole-graph check reports it, with the node's path
        }
    }

    static constexpr int64_t kStandIn = 1000003; // above any real dim of an imported model
    std::unordered_map<std::string, int64_t> standIns_;
    std::unordered_map<int64_t, std::string> standInSymbols_;

    int64_t standIn(const std::string& symbol) {
        auto it = standIns_.find(symbol);
        if (it != standIns_.end()) return it->second;
        const int64_t v = kStandIn + 2 * static_cast<int64_t>(standIns_.size());
        standIns_[symbol] = v;
        standInSymbols_[v] = symbol;
        return v;
    }

    // A node one of whose inputs comes from a node that was not imported is counted, not listed.
    void requireInputsImported(const onnx::NodeProto& n) const {
        for (const std::string& in : n.input()) {
            if (missing_.count(in))
                throw Unsupported{"input '" + in + "' comes from a node that was not imported", true};
        }
    }

    Parents dataInputs(const onnx::NodeProto& n, int count) {
        requireInputsImported(n);
        Parents ps;
        for (int k = 0; k < count; ++k) {
            Source s = value(n, k);
            ps.push_back(Parent(s.node, s.slot));
        }
        return ps;
    }

    // The values `names` as data inputs (input k of a pattern's layer being names[k]).
    Parents dataInputs(const std::vector<std::string>& names) {
        Parents ps;
        for (size_t k = 0; k < names.size(); ++k) {
            Source s = value(names[k], static_cast<int>(k));
            ps.push_back(Parent(s.node, s.slot));
        }
        return ps;
    }

    void onlyOutputs(const onnx::NodeProto& n, int count) const {
        for (int k = count; k < n.output_size(); ++k) {
            if (!n.output(k).empty()) throw Unsupported{"output " + std::to_string(k) + " is not supported"};
        }
    }

    void importNode(const onnx::NodeProto& n) {
        const std::string& op = n.op_type();
        const Attributes a(n);
        if (op == "Constant") {
            const onnx::AttributeProto* v = a.get("value");
            if (!v) throw Unsupported{"only the 'value' attribute is supported"};
            constants_[n.output(0)] = constantOf(v->t(), "Constant '" + n.output(0) + "'");
            return;
        }
        if (fold(n, a)) return;
        if (op == "Cast") {
            a.only({"to"});
            requireInputsImported(n);
            if (a.i("to", 0) != onnx::TensorProto::FLOAT)
                throw Unsupported{"a cast of data to type " + std::to_string(a.i("to", 0)) +
                                  " (to float is supported)"};
            if (rankOf(n, 0) >= 0 && elemTypeOf(n.input(0)) != onnx::TensorProto::FLOAT && elemTypeOf(n.input(0)) != 0)
                throw Unsupported{"a cast of non-float data"};
            return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
        }
        if (op == "Unsqueeze" || op == "Squeeze") {
            a.only({"axes"});
            if (n.input_size() > 1 && !n.input(1).empty()) requireConstant(n, 1, "the axes");
            return define(n, reshapeTo(n), dataInputs(n, 1));
        }
        if (op == "Slice") return importSlice(n, a);
        if (op == "LSTM" || op == "GRU" || op == "RNN") return importRnn(n, a);
        if (op == "Gather") return importGather(n, a);
        if (op == "ReduceMean") return importReduceMean(n, a);
        if (op == "HardSigmoid") {
            a.only({"alpha", "beta"});
            return define(n,
                          std::make_shared<Activation>(
                              ActivationKind::hardSigmoid,
                              ActivationOptions{.hardSlope = a.f("alpha", 0.2f), .hardOffset = a.f("beta", 0.5f)}),
                          dataInputs(n, 1));
        }
        if (op == "HardSwish") {
            a.only({});
            return define(n, std::make_shared<Activation>(ActivationKind::hardSwish), dataInputs(n, 1));
        }
        if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && n.input_size() == 2 &&
            (isConstant(n.input(0)) || isConstant(n.input(1))))
            return importScalarArithmetic(n, a);
        if (op == "Sub" || op == "Div") {
            a.only({});
            if (op == "Sub") return define(n, std::make_shared<Sub>(), dataInputs(n, 2));
            return define(n, std::make_shared<Div>(), dataInputs(n, 2));
        }
        if (op == "Identity") return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
        if (op == "Dropout") return importDropout(n, a);
        if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "Softplus") {
            a.only({});
            const ActivationKind kind = op == "Relu"      ? ActivationKind::relu
                                        : op == "Sigmoid" ? ActivationKind::sigmoid
                                        : op == "Tanh"    ? ActivationKind::tanh
                                                          : ActivationKind::softPlus;
            return define(n, std::make_shared<Activation>(kind), dataInputs(n, 1));
        }
        if (op == "LeakyRelu") {
            a.only({"alpha"});
            return define(n,
                          std::make_shared<Activation>(ActivationKind::leakyRelu,
                                                       ActivationOptions{.slope = a.f("alpha", 0.01f)}),
                          dataInputs(n, 1));
        }
        if (op == "Elu") {
            a.only({"alpha"});
            return define(
                n, std::make_shared<Activation>(ActivationKind::elu, ActivationOptions{.alpha = a.f("alpha", 1.0f)}),
                dataInputs(n, 1));
        }
        if (op == "Clip") return importClip(n, a);
        if (op == "Conv" || op == "ConvTranspose") return importConv(n, a);
        if (op == "Gemm") return importGemm(n, a);
        if (op == "MatMul") return importMatMul(n, a);
        if (op == "MaxPool" || op == "AveragePool") return importPool(n, a);
        if (op == "GlobalAveragePool") {
            a.only({});
            return define(n, std::make_shared<GlobalAvgPool>(), dataInputs(n, 1));
        }
        if (op == "BatchNormalization") return importBatchNorm(n, a);
        if (op == "LRN") {
            a.only({"size", "alpha", "beta", "bias"});
            if (!a.has("size")) throw Unsupported{"the size attribute is missing"};
            LRNOptions o{
                .N = a.i("size", 5), .alpha = a.f("alpha", 1e-4f), .beta = a.f("beta", 0.75f), .K = a.f("bias", 1.0f)};
            if (o.N % 2 == 0)
                throw Unsupported{"an even size " + std::to_string(o.N) + " (Tessera's window is centred)"};
            return define(n, std::make_shared<CrossMapLRN>(o), dataInputs(n, 1));
        }
        if (op == "PRelu") {
            a.only({});
            const Constant& slope = requireConstant(n, 1, "the slope");
            // One slope, or one per channel ([C], [C, 1, 1] or [1, C, 1, 1]).
            int64_t maps = 0;
            const Shape& ss = slope.tensor.shape();
            int64_t nontrivial = 0;
            for (size_t d = 0; d < ss.rank(); ++d) {
                if (ss[static_cast<int64_t>(d)] != 1) {
                    ++nontrivial;
                    maps = ss[static_cast<int64_t>(d)];
                }
            }
            if (nontrivial > 1) throw Unsupported{"a slope of shape " + ss.str() + " (one per channel is supported)"};
            if (maps > 1 && !(opset_ < 7 && ss.rank() == 1)) { // before opset 7 a [C] slope is per channel
                // numpy broadcasting: the slope's dims align with the input's last ones
                const int64_t rank = rankOf(n, 0);
                if (rank < 0)
                    throw Unsupported{"a per-channel slope on an input whose rank the model does not declare"};
                int64_t at = -1; // the input dim the slope's one non-1 dim falls on
                for (size_t d = 0; d < ss.rank(); ++d) {
                    if (ss[static_cast<int64_t>(d)] != 1) {
                        at = rank - static_cast<int64_t>(ss.rank()) + static_cast<int64_t>(d);
                    }
                }
                if (at != 1) {
                    throw Unsupported{"a slope of shape " + ss.str() + " varies along dim " + std::to_string(at) +
                                      ", not the channels (dim 1)"};
                }
            }
            auto m = std::make_shared<PRelu>(maps > 1 ? maps : 1, PReluOptions{.sharedMaps = maps <= 1});
            m->getVar("slopes")->data.copyFrom(slope.tensor.reshape({maps > 1 ? maps : 1}));
            return define(n, m, dataInputs(n, 1));
        }
        if (op == "InstanceNormalization") {
            a.only({"epsilon"});
            const Constant& scale = requireConstant(n, 1, "scale");
            const Constant& bias = requireConstant(n, 2, "B");
            const int64_t maps = scale.tensor.numel();
            auto m = std::make_shared<InstanceNorm2D>(maps, InstanceNormOptions{.epsilon = a.f("epsilon", 1e-5f)});
            m->getVar("scale")->data.copyFrom(scale.tensor.reshape({maps}));
            m->getVar("bias")->data.copyFrom(bias.tensor.reshape({maps}));
            return define(n, m, dataInputs(n, 1));
        }
        if (op == "Pad") return importPad(n, a);
        if (op == "Split") {
            a.only({"axis", "split"});
            std::vector<int64_t> sizes = a.ints("split");
            if (n.input_size() > 1 && !n.input(1).empty()) sizes = requireInts(n, 1, "the split sizes");
            if (sizes.empty()) throw Unsupported{"equal splits without sizes are not supported (give split)"};
            if (static_cast<int>(sizes.size()) != n.output_size())
                throw Unsupported{"split sizes do not match the outputs"};
            const int64_t axis = resolveAxis(n, 0, a.i("axis", 0));
            return define(n, std::make_shared<Split>(static_cast<int>(axis), sizes), dataInputs(n, 1));
        }
        if (op == "Tile") {
            a.only({});
            const Constant& reps = requireConstant(n, 1, "the repeats");
            int64_t axis = -1, times = 1;
            for (size_t d = 0; d < reps.ints.size(); ++d) {
                if (reps.ints[d] == 1) continue;
                if (axis >= 0) throw Unsupported{"repeats along more than one dim are not supported"};
                axis = static_cast<int64_t>(d);
                times = reps.ints[d];
            }
            if (axis < 0) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
            return define(n, std::make_shared<Tile>(static_cast<int>(axis), times), dataInputs(n, 1));
        }
        if (op == "Upsample" || op == "Resize") return importResize(n, a);
        if (op == "GridSample") {
            throw Unsupported{
                "op GridSample is not supported on its own, only as a spatial transformer: bilinear, zeros padding, "
                "align_corners 1, its grid the affine grid Tessera exports (Transpose(theta, perm 0 2 1) "
                "-> MatMul(base grid [Ho Wo, 3], that) -> Reshape to [N, Ho, Wo, 2])"};
        }
        if (op == "Transpose") {
            a.only({"perm"});
            std::vector<int64_t> perm = a.ints("perm");
            const Constant* c = constants_.count(n.input(0)) ? &constants_.at(n.input(0)) : nullptr;
            if (c && !c->isInt && c->tensor.shape().rank() == 2 &&
                (perm.empty() || perm == std::vector<int64_t>{1, 0})) {
                // A transposed constant (PyTorch exports a Linear's weight so): folded.
                const Shape& cs = c->tensor.shape();
                const std::vector<float> v = c->tensor.toVector<float>();
                std::vector<float> t(v.size());
                for (int64_t i = 0; i < cs[0]; ++i) {
                    for (int64_t j = 0; j < cs[1]; ++j) {
                        t[static_cast<size_t>(j * cs[0] + i)] = v[static_cast<size_t>(i * cs[1] + j)];
                    }
                }
                constants_[n.output(0)] =
                    Constant{Tensor::fromVector({cs[1], cs[0]}, t), {}, false, {cs[1], cs[0]}, {}};
                return;
            }
            if (perm.empty()) { // the default reverses the dims
                const int64_t rank = rankOf(n, 0);
                if (rank < 0) throw Unsupported{"no perm, on an input whose rank the model does not declare"};
                for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
            }
            return define(n, std::make_shared<Transpose>(perm), dataInputs(n, 1));
        }
        if (op == "Flatten") {
            a.only({"axis"});
            if (a.i("axis", 1) != 1) { // another axis: a reshape to the inferred [a, b]
                if (!shapes_.count(n.output(0)))
                    throw Unsupported{"axis " + std::to_string(a.i("axis", 1)) +
                                      " on an input whose shape the model does not declare (axis 1 is supported)"};
                return define(n, reshapeTo(n), dataInputs(n, 1));
            }
            return define(n, std::make_shared<Flatten>(), dataInputs(n, 1));
        }
        if (op == "Reshape") {
            a.only({"allowzero"});
            if (a.i("allowzero", 0) != 0) throw Unsupported{"allowzero 1 is not supported"};
            const Constant& shape = requireConstant(n, 1, "the shape");
            if (!shape.isInt) throw Unsupported{"the shape must be int64"};
            std::vector<int64_t> target = shape.ints;
            if (shape.symbolic()) { // dims computed from the input's shape: kept (0) or inferred (-1)
                const auto in = shapes_.find(n.input(0));
                int64_t inferred = 0;
                for (size_t d = 0; d < target.size(); ++d) {
                    if (shape.symbol(d).empty()) continue;
                    const bool kept =
                        in != shapes_.end() && d < in->second.size() && in->second[d].symbol == shape.symbol(d);
                    target[d] = kept ? 0 : -1;
                    if (!kept) ++inferred;
                }
                for (size_t d = 0; d < shape.ints.size(); ++d)
                    inferred += shape.symbol(d).empty() && shape.ints[d] == -1;
                if (inferred > 1)
                    throw Unsupported{"a shape with " + std::to_string(inferred) + " dims not known at import"};
            }
            return define(n, std::make_shared<Reshape>(Shape(target)), dataInputs(n, 1));
        }
        if (op == "Concat") {
            a.only({"axis"});
            const int64_t axis = resolveAxis(n, 0, a.i("axis", 1));
            return define(n, std::make_shared<Concat>(static_cast<int>(axis)), dataInputs(n, n.input_size()));
        }
        if (op == "Add" || op == "Sum" || op == "Mul") {
            a.only({});
            for (int k = 0; k < n.input_size(); ++k) {
                if (constants_.count(n.input(k)) && !takenAsConstant_.count(n.input(k))) {
                    throw Unsupported{"input " + std::to_string(k) + " is a constant (broadcasting " + op +
                                      " with a constant is not supported)"};
                }
            }
            if (op == "Mul") return define(n, std::make_shared<Mul>(), dataInputs(n, n.input_size()));
            return define(n, std::make_shared<Add>(), dataInputs(n, n.input_size()));
        }
        if (op == "Softmax") {
            a.only({"axis"});
            const int64_t given = a.i("axis", opset_ >= 13 ? -1 : 1);
            const int64_t axis = resolveAxis(n, 0, given);
            if (axis != 1) {
                throw Unsupported{"axis " + std::to_string(given) +
                                  " (Tessera's SoftMax runs over axis 1 of its input)"};
            }
            if (opset_ < 13 && rankOf(n, 0) != 2) {
                // Before opset 13 Softmax flattens from the axis on: Tessera's only for 2-D inputs.
                throw Unsupported{"opset " + std::to_string(opset_) +
                                  " Softmax on an input not declared 2-D (it flattens from the axis on)"};
            }
            return define(n, std::make_shared<SoftMax>(), dataInputs(n, 1));
        }
        throw Unsupported{"op " + op + " is not supported"};
    }

    // A constant of the model (an initializer, a Constant node or a folded value), not a
    // graph input given a value, which stays data unless an op needs it as a constant.
    // The erf form of GELU as exporters write it, 0.5 x (1 + erf(x / sqrt(2))):
    //   Div(x, sqrt 2) or Mul(x, 1 / sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5), or with
    //   the 0.5 taken first: Mul(x, 0.5) -> Mul(that, 1 + erf). Each becomes one Gelu at the
    //   last node of the pattern (gelus_: its index -> x); the others are skipped (absorbed_).
    std::unordered_set<std::string> usedValues_; // every value some node or the graph's outputs take
    std::unordered_map<int, std::string> gelus_;
    std::unordered_set<int> absorbed_; // nodes of a pattern imported as one layer at its last node

    void findGelus() {
        const onnx::GraphProto& g = model_.graph();
        std::unordered_map<std::string, float> scalars; // float scalar constants by name
        auto note = [&](const std::string& name, const onnx::TensorProto& t) {
            if (t.data_type() != onnx::TensorProto::FLOAT) return;
            try {
                const Constant c = constantOf(t, name);
                if (c.tensor.numel() == 1) scalars[name] = c.tensor.toVector<float>()[0];
            } catch (const Error&) {}
        };
        for (const onnx::TensorProto& t : g.initializer()) {
            if (shapeOf(t).numel() == 1) note(t.name(), t);
        }
        std::unordered_map<std::string, int> producer;
        std::unordered_map<std::string, std::vector<int>> consumers;
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& n = g.node(i);
            if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value")
                note(n.output(0), n.attribute(0).t());
            for (const std::string& o : n.output()) producer[o] = i;
            for (const std::string& in : n.input()) consumers[in].push_back(i);
        }
        auto near = [](float a, float b) { return std::fabs(a - b) <= 1e-3f * std::fabs(b); };
        // The one consumer of `value`, when it is a binary `op` with `value` and another input.
        auto only = [&](const std::string& value, const char* op, std::string* other) -> int {
            auto c = consumers.find(value);
            if (c == consumers.end() || c->second.size() != 1) return -1;
            const onnx::NodeProto& n = g.node(c->second[0]);
            if (n.op_type() != op || n.input_size() != 2) return -1;
            *other = n.input(0) == value ? n.input(1) : n.input(0);
            return c->second[0];
        };
        auto scalar = [&](const std::string& name, float want) {
            auto it = scalars.find(name);
            return it != scalars.end() && near(it->second, want);
        };
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& erf = g.node(i);
            if (erf.op_type() != "Erf" || erf.input_size() != 1) continue;
            auto p = producer.find(erf.input(0));
            if (p == producer.end()) continue;
            const onnx::NodeProto& scale = g.node(p->second);
            if (scale.input_size() != 2 || consumers[scale.output(0)].size() != 1) continue;
            std::string x;
            if (scale.op_type() == "Div" && scalar(scale.input(1), 1.41421356f)) x = scale.input(0);
            if (scale.op_type() == "Mul" && scalar(scale.input(1), 0.70710678f)) x = scale.input(0);
            if (scale.op_type() == "Mul" && scalar(scale.input(0), 0.70710678f)) x = scale.input(1);
            if (x.empty()) continue;
            std::string one, other, half;
            const int add = only(erf.output(0), "Add", &one);
            if (add < 0 || !scalar(one, 1.0f)) continue;
            const int mul = only(g.node(add).output(0), "Mul", &other);
            if (mul < 0) continue;
            std::vector<int> nodes{p->second, i, add, mul};
            int last = mul;
            if (other == x) { // x (1 + erf), then times 0.5
                const int m2 = only(g.node(mul).output(0), "Mul", &half);
                if (m2 < 0 || !scalar(half, 0.5f)) continue;
                nodes.push_back(m2);
                last = m2;
            } else { // (0.5 x) (1 + erf)
                auto h = producer.find(other);
                if (h == producer.end()) continue;
                const onnx::NodeProto& hn = g.node(h->second);
                if (hn.op_type() != "Mul" || hn.input_size() != 2 || consumers[other].size() != 1) continue;
                const bool ok =
                    (hn.input(0) == x && scalar(hn.input(1), 0.5f)) || (hn.input(1) == x && scalar(hn.input(0), 0.5f));
                if (!ok) continue;
                nodes.push_back(h->second);
            }
            for (int k : nodes) {
                if (k != last) absorbed_.insert(k);
            }
            gelus_[last] = x;
        }
    }

    // A spatial transformer as Tessera exports it (GridSample has no affine grid before
    // opset 20's AffineGrid): Transpose(theta, perm 0 2 1) -> MatMul(base, that) ->
    // Reshape to [N, Ho, Wo, 2] -> GridSample(x, grid; bilinear, zeros, align_corners 1),
    // base being the constant [Ho Wo, 3] (or [1, Ho Wo, 3]) of rows (x_t, y_t, 1). Each
    // becomes one SpatialTf at the GridSample (spatialTfs_); the others are absorbed_.
    struct SpatialTfMatch {
        std::vector<std::string> inputs; // x, theta
        int64_t height = 0, width = 0;
    };
    std::unordered_map<int, SpatialTfMatch> spatialTfs_;

    void findSpatialTfs() {
        const onnx::GraphProto& g = model_.graph();
        std::unordered_map<std::string, int> producer;
        std::unordered_map<std::string, int> uses;
        std::unordered_map<std::string, const onnx::TensorProto*> constantNodes;
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& n = g.node(i);
            for (const std::string& o : n.output()) producer[o] = i;
            for (const std::string& in : n.input()) ++uses[in];
            if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value")
                constantNodes[n.output(0)] = &n.attribute(0).t();
        }
        for (const onnx::ValueInfoProto& v : g.output()) ++uses[v.name()];
        auto constant = [&](const std::string& name) -> std::optional<Constant> {
            if (auto c = constants_.find(name); c != constants_.end()) return c->second;
            if (auto c = constantNodes.find(name); c != constantNodes.end()) return constantOf(*c->second, name);
            return std::nullopt;
        };
        // The node producing `value` when it has op `op` and `value` has no other use.
        auto from = [&](const std::string& value, const char* op) -> const onnx::NodeProto* {
            auto p = producer.find(value);
            if (p == producer.end() || uses[value] != 1 || g.node(p->second).op_type() != op) return nullptr;
            return &g.node(p->second);
        };
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& gs = g.node(i);
            if (gs.op_type() != "GridSample" || gs.input_size() != 2) continue;
            const Attributes a(gs);
            const std::string mode = a.s("mode", "bilinear");
            if ((mode != "bilinear" && mode != "linear") || a.s("padding_mode", "zeros") != "zeros" ||
                a.i("align_corners", 0) != 1)
                continue;
            const onnx::NodeProto* reshape = from(gs.input(1), "Reshape");
            if (!reshape || reshape->input_size() != 2) continue;
            const std::optional<Constant> to = constant(reshape->input(1));
            if (!to || !to->isInt || to->ints.size() != 4 || to->ints[3] != 2) continue;
            const int64_t Ho = to->ints[1], Wo = to->ints[2];
            if (Ho < 1 || Wo < 1) continue;
            const onnx::NodeProto* matmul = from(reshape->input(0), "MatMul");
            if (!matmul || matmul->input_size() != 2) continue;
            const onnx::NodeProto* transpose = from(matmul->input(1), "Transpose");
            if (!transpose || Attributes(*transpose).ints("perm") != std::vector<int64_t>{0, 2, 1}) continue;
            const std::optional<Constant> base = constant(matmul->input(0));
            if (!base || base->isInt || base->tensor.numel() != Ho * Wo * 3 || base->dims.size() < 2 ||
                base->dims.back() != 3)
                continue;
            const std::vector<float> b = base->tensor.toVector<float>();
            bool grid = true;
            for (int64_t r = 0; r < Ho && grid; ++r) {
                for (int64_t c = 0; c < Wo && grid; ++c) {
                    const float* row = &b[static_cast<size_t>((r * Wo + c) * 3)];
                    grid = std::fabs(row[0] - element::gridCoord(c, Wo)) <= 1e-6f &&
                           std::fabs(row[1] - element::gridCoord(r, Ho)) <= 1e-6f && row[2] == 1.0f;
                }
            }
            if (!grid) continue;
            spatialTfs_[i] = {{gs.input(0), transpose->input(0)}, Ho, Wo};
            for (const onnx::NodeProto* n : {reshape, matmul, transpose}) absorbed_.insert(producer[n->output(0)]);
        }
    }

    bool isConstant(const std::string& name) const { return constants_.count(name) && !takenAsConstant_.count(name); }

    int32_t elemTypeOf(const std::string& name) const {
        auto it = elemTypes_.find(name);
        return it == elemTypes_.end() ? 0 : it->second;
    }

    std::string newSymbol() { return "?computed:" + std::to_string(symbolCount_++); }

    // Folds a node whose inputs are all constants, or a Shape of a value whose rank is
    // known, into a constant. False when it does not fold (the node is imported as a layer).
    bool fold(const onnx::NodeProto& n, const Attributes& a) {
        const std::string& op = n.op_type();
        if (op == "Shape") {
            a.only({"start", "end"});
            auto it = shapes_.find(n.input(0));
            if (it == shapes_.end()) throw Unsupported{"the shape of an input whose rank the model does not declare"};
            const auto rank = static_cast<int64_t>(it->second.size());
            auto clampIndex = [&](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
            const int64_t start = clampIndex(a.i("start", 0)), end = clampIndex(a.i("end", rank));
            Constant c;
            c.isInt = true;
            for (int64_t d = start; d < end; ++d) {
                const Dim& dim = it->second[static_cast<size_t>(d)];
                c.ints.push_back(dim.value);
                c.symbols.push_back(dim.symbol);
            }
            c.dims = {static_cast<int64_t>(c.ints.size())};
            return setConstant(n.output(0), std::move(c));
        }
        if (n.input_size() == 0) return false;
        // A left-out input (an empty name) is one only the optional inputs of Slice and
        // (Un)squeeze may be here, which they handle; any other node with one is imported as
        // a layer, whose checks name it.
        const bool optionalInputs = op == "Slice" || op == "Unsqueeze" || op == "Squeeze";
        for (int k = 0; k < n.input_size(); ++k) {
            const std::string& in = n.input(k);
            if (in.empty() ? k == 0 || !optionalInputs : !isConstant(in)) return false;
        }
        if (op == "Expand" || op == "ConstantOfShape") return foldFill(n, a);
        const Constant& x = constants_.at(n.input(0));
        if (op == "Identity") return setConstant(n.output(0), Constant(x));
        if (op == "Cast") {
            const int64_t to = a.i("to", 0);
            const bool toInt = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
            Constant c = x;
            if (toInt && !x.isInt) {
                c.isInt = true;
                for (float v : x.tensor.toVector<float>()) c.ints.push_back(static_cast<int64_t>(v));
            } else if (to == onnx::TensorProto::FLOAT && x.isInt) {
                if (x.symbolic()) return false;
                std::vector<float> v(x.ints.begin(), x.ints.end());
                c = Constant{Tensor::fromVector(Shape(x.dims.empty() ? std::vector<int64_t>{1} : x.dims), v),
                             {},
                             false,
                             x.dims,
                             {}};
            } else if (!toInt && to != onnx::TensorProto::FLOAT) {
                return false;
            }
            return setConstant(n.output(0), std::move(c));
        }
        if (!x.isInt) return false; // only integer (shape) computations fold
        if (op == "Gather") {
            const Constant& idx = constants_.at(n.input(1));
            if (a.i("axis", 0) != 0 || x.dims.size() != 1 || !idx.isInt) return false;
            Constant c;
            c.isInt = true;
            c.dims = idx.dims;
            for (int64_t i : idx.ints) {
                const int64_t k = i < 0 ? i + static_cast<int64_t>(x.ints.size()) : i;
                if (k < 0 || k >= static_cast<int64_t>(x.ints.size())) throw Unsupported{"an index out of range"};
                c.ints.push_back(x.ints[static_cast<size_t>(k)]);
                c.symbols.push_back(x.symbol(static_cast<size_t>(k)));
            }
            return setConstant(n.output(0), std::move(c));
        }
        if (op == "Unsqueeze" || op == "Squeeze") {
            std::vector<int64_t> axes = a.ints("axes");
            if (n.input_size() > 1 && !n.input(1).empty()) {
                const Constant& given = constants_.at(n.input(1));
                if (!given.isInt) return false;
                axes = given.ints;
            }
            Constant c = x;
            if (op == "Unsqueeze") {
                const auto rank = static_cast<int64_t>(x.dims.size() + axes.size());
                for (int64_t ax : axes) c.dims.insert(c.dims.begin() + (ax < 0 ? ax + rank : ax), 1);
            } else {
                std::vector<int64_t> dims;
                for (size_t d = 0; d < x.dims.size(); ++d) {
                    bool squeezed = axes.empty() ? x.dims[d] == 1 : false;
                    for (int64_t ax : axes) {
                        squeezed = squeezed || ax == static_cast<int64_t>(d) ||
                                   ax + static_cast<int64_t>(x.dims.size()) == static_cast<int64_t>(d);
                    }
                    if (!squeezed) dims.push_back(x.dims[d]);
                }
                c.dims = dims;
            }
            return setConstant(n.output(0), std::move(c));
        }
        if (op == "Concat") {
            Constant c;
            c.isInt = true;
            for (const std::string& in : n.input()) {
                const Constant& part = constants_.at(in);
                if (!part.isInt || part.dims.size() > 1) return false;
                for (size_t i = 0; i < part.ints.size(); ++i) {
                    c.ints.push_back(part.ints[i]);
                    c.symbols.push_back(part.symbol(i));
                }
            }
            c.dims = {static_cast<int64_t>(c.ints.size())};
            return setConstant(n.output(0), std::move(c));
        }
        if (op == "Slice" && x.isInt && x.dims.size() == 1 && n.input_size() >= 3) {
            const auto len = static_cast<int64_t>(x.ints.size());
            // Each of starts, ends, axes and steps must be one integer here (else not folded).
            for (int k = 1; k < std::min(n.input_size(), 5); ++k) {
                if (n.input(k).empty()) continue;
                const Constant& v = constants_.at(n.input(k));
                if (!v.isInt || v.ints.size() != 1) return false;
            }
            auto at = [&](int k, int64_t fallback) {
                return n.input_size() > k && !n.input(k).empty() ? constants_.at(n.input(k)).ints[0] : fallback;
            };
            if (at(4, 1) != 1 || (n.input_size() > 3 && !n.input(3).empty() && at(3, 0) != 0)) return false;
            auto clampIndex = [&](int64_t i) { return std::clamp(i < 0 ? i + len : i, int64_t{0}, len); };
            const int64_t start = clampIndex(at(1, 0)), end = clampIndex(at(2, len));
            Constant c;
            c.isInt = true;
            for (int64_t i = start; i < end; ++i) {
                c.ints.push_back(x.ints[static_cast<size_t>(i)]);
                c.symbols.push_back(x.symbol(static_cast<size_t>(i)));
            }
            c.dims = {static_cast<int64_t>(c.ints.size())};
            return setConstant(n.output(0), std::move(c));
        }
        if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && n.input_size() == 2) {
            const Constant& y = constants_.at(n.input(1));
            if (!y.isInt) return false;
            const size_t len = std::max(x.ints.size(), y.ints.size());
            if ((x.ints.size() != len && x.ints.size() != 1) || (y.ints.size() != len && y.ints.size() != 1))
                return false;
            Constant c;
            c.isInt = true;
            c.dims = x.ints.size() == len ? x.dims : y.dims;
            for (size_t i = 0; i < len; ++i) {
                const size_t ix = x.ints.size() == 1 ? 0 : i, iy = y.ints.size() == 1 ? 0 : i;
                if (!x.symbol(ix).empty() || !y.symbol(iy).empty()) { // a dim computed from an unknown one
                    c.ints.push_back(-1);
                    c.symbols.push_back(newSymbol());
                    continue;
                }
                const int64_t u = x.ints[ix], v = y.ints[iy];
                if (op == "Div" && v == 0) throw Unsupported{"an integer division by zero"};
                c.ints.push_back(op == "Add" ? u + v : op == "Sub" ? u - v : op == "Mul" ? u * v : u / v);
                c.symbols.push_back({});
            }
            return setConstant(n.output(0), std::move(c));
        }
        return false;
    }

    // Expand(c, shape) and ConstantOfShape(shape): a constant tensor when the shape is known,
    // a zeros marker when it holds symbols and the value is 0.
    bool foldFill(const onnx::NodeProto& n, const Attributes& a) {
        const bool expand = n.op_type() == "Expand";
        const Constant& shape = constants_.at(n.input(expand ? 1 : 0));
        if (!shape.isInt) return false;
        float value = 0.0f;
        std::vector<float> values;
        Shape from{1};
        if (expand) {
            const Constant& c = constants_.at(n.input(0));
            if (c.isInt || c.zeros || !c.tensor.defined()) return false;
            values = c.tensor.toVector<float>();
            from = Shape(c.dims);
        } else {
            if (const onnx::AttributeProto* v = a.get("value")) {
                const Constant c = constantOf(v->t(), "ConstantOfShape's value");
                if (c.isInt || !c.tensor.defined()) return false;
                values = c.tensor.toVector<float>();
                if (values.size() != 1) {
                    throw Unsupported{"ConstantOfShape's value must hold one value; it holds " +
                                      std::to_string(values.size())};
                }
            } else {
                values = {0.0f};
            }
            value = values[0];
        }
        bool allZero = true;
        for (float v : values) allZero = allZero && v == 0.0f;
        Constant out;
        if (shape.symbolic()) {
            if (!allZero) return false;
            out.zeros = true;
            out.dims = shape.ints;
            return constants_[n.output(0)] = out, true;
        }
        const Shape target = expand ? broadcastShapes(from, Shape(shape.ints)) : Shape(shape.ints);
        std::vector<float> v(static_cast<size_t>(target.numel()), value);
        if (expand && !allZero) {
            const Tensor src = Tensor::fromVector(from.rank() ? from : Shape{1}, values);
            Tensor dst = Tensor::empty(target.rank() ? target : Shape{1});
            backendOf(dst).binaryBroadcast(BinaryOp::add, src, Tensor::zeros({1}), dst);
            v = dst.toVector<float>();
        }
        out.tensor = Tensor::fromVector(target.rank() ? target : Shape{1}, v);
        out.dims = target.dims();
        constants_[n.output(0)] = out;
        return true;
    }

    bool setConstant(const std::string& name, Constant c) {
        if (!c.symbolic()) {
            c.symbols.clear();
            if (c.isInt) { // an int32 tensor of the values, as constantOf makes
                c.tensor = c.ints.empty() ? Tensor() : int32Tensor(c.ints, Shape(c.dims));
            }
        } else {
            c.tensor = Tensor();
        }
        constants_[name] = std::move(c);
        return true;
    }

    // A Reshape to the shape ONNX infers for the node's output: known dims as they are, a
    // dim not known at import kept (0) where the input has it at the same place, else
    // inferred (-1, at most one).
    ModulePtr reshapeTo(const onnx::NodeProto& n) {
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

    // LSTM, GRU (linear before reset) and RNN (relu or tanh), forward or bidirectional,
    // either layout: one Tessera RNN layer (weights back in PyTorch's gate order) that
    // returns every step, reshaped (and for layout 0 transposed) to ONNX's Y [T, D, N, H]
    // or [N, T, D, H]. Initial states and sequence_lens given as data are its extra inputs,
    // and the final states Y_h, Y_c its extra outputs (layout 1 transposes them from and to
    // [N, D, H]); zero initial states are its default.
    void importRnn(const onnx::NodeProto& n, const Attributes& a) {
        const std::string& op = n.op_type();
        a.only({"hidden_size", "direction", "activations", "linear_before_reset", "layout", "clip", "input_forget",
                "activation_alpha", "activation_beta"});
        if (a.has("clip")) throw Unsupported{"clip is not supported"};
        if (a.i("input_forget", 0) != 0) throw Unsupported{"input_forget 1 is not supported"};
        const int64_t layout = a.i("layout", 0);
        if (layout != 0 && layout != 1) throw Unsupported{"layout " + std::to_string(layout)};
        const bool batchFirst = layout == 1;
        if (a.has("activation_alpha") || a.has("activation_beta"))
            throw Unsupported{"activation_alpha/beta are not supported"};
        const std::string direction = a.s("direction", "forward");
        if (direction != "forward" && direction != "bidirectional")
            throw Unsupported{"direction " + direction + " (forward and bidirectional are supported)"};
        const bool bi = direction == "bidirectional";
        RnnMode mode = op == "LSTM" ? RnnMode::lstm : op == "GRU" ? RnnMode::gru : RnnMode::tanh;
        std::vector<std::string> acts;
        if (const onnx::AttributeProto* at = a.get("activations"))
            acts.assign(at->strings().begin(), at->strings().end());
        if (op == "RNN") {
            const std::string first = acts.empty() ? "Tanh" : acts[0];
            if (first != "Tanh" && first != "Relu") throw Unsupported{"activation " + first + " (Tanh and Relu are)"};
            for (const std::string& act : acts) {
                if (act != first) throw Unsupported{"different activations per direction"};
            }
            mode = first == "Relu" ? RnnMode::relu : RnnMode::tanh;
        } else if (!acts.empty()) {
            throw Unsupported{"activations other than the defaults are not supported"};
        }
        if (op == "GRU" && a.i("linear_before_reset", 0) != 1)
            throw Unsupported{"linear_before_reset 0 (Tessera's GRU applies the reset after the linear map, as "
                              "cuDNN and PyTorch do)"};
        auto given = [&](int k) { return n.input_size() > k && !n.input(k).empty(); };
        if (given(7)) throw Unsupported{"peepholes are not supported"};
        if (given(4) && isConstant(n.input(4))) throw Unsupported{"a constant sequence_lens (data is supported)"};
        const bool lengths = given(4);
        bool stateData[2] = {false, false}; // initial_h, initial_c given as data
        for (int k : {5, 6}) {
            if (!given(k)) continue;
            if (!isConstant(n.input(k))) {
                stateData[k - 5] = true;
                continue;
            }
            const Constant& c = constants_.at(n.input(k));
            if (c.zeros) continue;
            for (float v : c.tensor.defined() ? c.tensor.toVector<float>() : std::vector<float>{1.0f}) {
                if (v != 0.0f) throw Unsupported{"constant initial states other than zeros are not supported"};
            }
        }
        const bool lstm = op == "LSTM";
        if (lstm ? stateData[0] != stateData[1] : stateData[1])
            throw Unsupported{"initial_h and initial_c given one as data, the other not"};
        const bool initialStates = stateData[0];
        bool finalStates = false;
        for (int k = 1; k < n.output_size(); ++k) {
            finalStates = finalStates || (!n.output(k).empty() && usedValues_.count(n.output(k)));
        }
        const Constant& w = requireConstant(n, 1, "W");
        const Constant& r = requireConstant(n, 2, "R");
        const int64_t D = bi ? 2 : 1, G = rnnGates(mode), H = a.i("hidden_size", r.tensor.shape()[2]);
        if (w.tensor.shape().rank() != 3 || w.tensor.shape()[0] != D || w.tensor.shape()[1] != G * H)
            throw Unsupported{"W of shape " + w.tensor.shape().str()};
        const int64_t I = w.tensor.shape()[2];
        std::vector<float> b(static_cast<size_t>(D * 2 * G * H), 0.0f);
        if (n.input_size() > 3 && !n.input(3).empty()) b = requireConstant(n, 3, "B").tensor.toVector<float>();
        auto rnn = std::make_shared<RNN>(I, H,
                                         RNNOptions{.layers = 1,
                                                    .mode = mode,
                                                    .bidirectional = bi,
                                                    .getSequences = true,
                                                    .batchFirst = batchFirst,
                                                    .initialStates = initialStates,
                                                    .finalStates = finalStates,
                                                    .lengths = lengths});
        const std::vector<int64_t> order = onnxGateOrder(mode);
        const std::vector<float> wv = w.tensor.toVector<float>(), rv = r.tensor.toVector<float>();
        for (int64_t dir = 0; dir < D; ++dir) {
            const std::string sfx = std::string("_l0") + (dir ? "_reverse" : "");
            auto fill = [&](const std::string& name, const float* src, int64_t cols) {
                std::vector<float> v(static_cast<size_t>(G * H * cols));
                for (int64_t j = 0; j < G; ++j) {
                    std::copy(src + j * H * cols, src + (j + 1) * H * cols, v.begin() + order[j] * H * cols);
                }
                rnn->getVar(name + sfx)
                    ->data.copyFrom(Tensor::fromVector(cols == 1 ? Shape{G * H} : Shape{G * H, cols}, v));
            };
            fill("weight_ih", wv.data() + dir * G * H * I, I);
            fill("weight_hh", rv.data() + dir * G * H * H, H);
            fill("bias_ih", b.data() + dir * 2 * G * H, 1);
            fill("bias_hh", b.data() + dir * 2 * G * H + G * H, 1);
        }
        Parents parents = dataInputs(n, 1);
        if (!initialStates && !finalStates && !lengths && !batchFirst) {
            auto seq = std::make_shared<Sequential>();
            seq->append(rnn)
                .append(std::make_shared<Reshape>(Shape{0, 0, D, H}))
                .append(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1, 3}));
            return define(n, seq, parents);
        }
        // A graph of its own: x, [initial_h, initial_c], [sequence_lens] -> Y, [Y_h, Y_c].
        auto swapND = [] { return std::make_shared<Transpose>(std::vector<int64_t>{1, 0, 2}); };
        std::vector<NodePtr> ins{tessera::node(std::make_shared<Identity>(), {}, "X")};
        Parents rnnParents{ins[0]};
        for (int k = 5; k < (lstm ? 7 : 6) && initialStates; ++k) {
            Source src = value(n, k);
            parents.push_back(Parent(src.node, src.slot));
            ins.push_back(tessera::node(std::make_shared<Identity>(), {}, k == 5 ? "initial_h" : "initial_c"));
            // layout 1 states are [N, D, H]; Tessera's [D, N, H]
            rnnParents.push_back(batchFirst ? tessera::node(swapND(), ins.back(), ins.back()->name() + "_dnh")
                                            : ins.back());
        }
        if (lengths) {
            Source src = value(n, 4);
            parents.push_back(Parent(src.node, src.slot));
            ins.push_back(tessera::node(std::make_shared<Identity>(), {}, "sequence_lens"));
            rnnParents.push_back(ins.back());
        }
        NodePtr cell = tessera::node(rnn, rnnParents, "rnn");
        auto y = std::make_shared<Sequential>();
        y->append(std::make_shared<Reshape>(Shape{0, 0, D, H}));
        if (!batchFirst) y->append(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1, 3}));
        std::vector<NodePtr> outs{tessera::node(y, Parent(cell, 0), "Y")};
        for (int k = 1; k <= (lstm ? 2 : 1) && finalStates; ++k) {
            outs.push_back(tessera::node(batchFirst ? ModulePtr(swapND()) : ModulePtr(std::make_shared<Identity>()),
                                         Parent(cell, k), k == 1 ? "Y_h" : "Y_c"));
        }
        return define(n, std::make_shared<Graph>(ins, outs), parents);
    }

    // Gather from a constant table [V, E] by data ids [N, L] along axis 0: an Embedder.
    void importGather(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"axis"});
        requireInputsImported(n);
        if (!isConstant(n.input(0)) && !options_.inputValues.count(n.input(0))) {
            // One constant index of data (x[-1], as exporters write a sequence's last step): a
            // Slice of that index, then a Reshape without the axis.
            const Constant* idx = isConstant(n.input(1)) ? &constants_.at(n.input(1)) : nullptr;
            if (!idx || !idx->isInt || idx->ints.size() != 1 || !idx->dims.empty())
                throw Unsupported{"a Gather of data by other than one constant index (Gathers from a constant "
                                  "table, and of shape values, are supported)"};
            const int64_t axis = resolveAxis(n, 0, a.i("axis", 0)), i = idx->ints[0];
            auto seq = std::make_shared<Sequential>();
            seq->append(std::make_shared<Slice>(static_cast<int>(axis), i, i == -1 ? 0 : i + 1)).append(reshapeTo(n));
            Source s = value(n, 0);
            return define(n, seq, Parents{Parent(s.node, s.slot)});
        }
        if (a.i("axis", 0) != 0) throw Unsupported{"axis " + std::to_string(a.i("axis", 0)) + " (0 is supported)"};
        const Constant& table = requireConstant(n, 0, "the table");
        if (table.isInt || table.tensor.shape().rank() != 2)
            throw Unsupported{"a table of shape " + Shape(table.dims).str() + " (a float [V, E] is supported)"};
        auto ids = shapes_.find(n.input(1));
        if (ids == shapes_.end() || ids->second.size() != 2 || ids->second[1].value < 0)
            throw Unsupported{"ids whose shape the model does not declare as [N, L]"};
        const int64_t vocabulary = table.tensor.shape()[0], embsize = table.tensor.shape()[1];
        auto m = std::make_shared<Embedder>(vocabulary, ids->second[1].value, embsize,
                                            EmbedderOptions{.initscheme = InitScheme::none});
        m->getVar("W")->data.copyFrom(table.tensor);
        Source s = value(n, 1);
        return define(n, m, Parents{Parent(s.node, s.slot)});
    }

    // Slice on data: one sliced axis, step 1 (Tessera's Slice).
    void importSlice(const onnx::NodeProto& n, const Attributes& a) {
        std::vector<int64_t> starts, ends, axes, steps;
        if (opset_ < 10) {
            a.only({"starts", "ends", "axes"});
            starts = a.ints("starts");
            ends = a.ints("ends");
            axes = a.ints("axes");
        } else {
            a.only({});
            starts = requireInts(n, 1, "the starts");
            ends = requireInts(n, 2, "the ends");
            if (n.input_size() > 3 && !n.input(3).empty()) axes = requireInts(n, 3, "the axes");
            if (n.input_size() > 4 && !n.input(4).empty()) steps = requireInts(n, 4, "the steps");
        }
        if (axes.empty()) {
            for (size_t d = 0; d < starts.size(); ++d) axes.push_back(static_cast<int64_t>(d));
        }
        if (starts.size() != axes.size() || ends.size() != axes.size())
            throw Unsupported{"starts, ends and axes differ in length"};
        const auto in = shapes_.find(n.input(0));
        int sliced = -1;
        int64_t start = 0, end = 0;
        for (size_t k = 0; k < axes.size(); ++k) {
            if (!steps.empty() && steps[k] != 1) throw Unsupported{"steps other than 1 are not supported"};
            const int64_t axis = resolveAxis(n, 0, axes[k]);
            int64_t dim = -1;
            if (in != shapes_.end() && axis < static_cast<int64_t>(in->second.size()))
                dim = in->second[static_cast<size_t>(axis)].value;
            int64_t e = ends[k];
            const bool toEnd = e >= std::numeric_limits<int32_t>::max() || (dim >= 0 && e >= dim);
            if (starts[k] == 0 && toEnd) continue; // the whole axis
            if (sliced >= 0) throw Unsupported{"slicing more than one axis is not supported"};
            sliced = static_cast<int>(axis);
            start = starts[k];
            end = toEnd ? 0 : e;
            if (end == 0 && !toEnd) throw Unsupported{"an empty slice"};
            if (start < 0 && end == 0 && !toEnd) throw Unsupported{"an empty slice"};
        }
        if (sliced < 0) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
        return define(n, std::make_shared<Slice>(sliced, start, end), dataInputs(n, 1));
    }

    // ReduceMean: over every spatial dim of [N, C, ...] a global average pool (flattened to
    // [N, C] without keepdims); over other dims Tessera's ReduceMean.
    void importReduceMean(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"axes", "keepdims", "noop_with_empty_axes"});
        requireInputsImported(n);
        if (a.i("noop_with_empty_axes", 0) != 0) throw Unsupported{"noop_with_empty_axes 1 is not supported"};
        std::vector<int64_t> axes = a.ints("axes");
        if (n.input_size() > 1 && !n.input(1).empty()) axes = requireInts(n, 1, "the axes");
        const bool keep = a.i("keepdims", 1) != 0;
        const int64_t rank = rankOf(n, 0);
        std::vector<int64_t> resolved;
        for (int64_t ax : axes) resolved.push_back(ax < 0 && rank >= 0 ? ax + rank : ax);
        std::sort(resolved.begin(), resolved.end());
        std::vector<int64_t> spatial;
        for (int64_t d = 2; d < rank; ++d) spatial.push_back(d);
        if (rank >= 3 && rank <= 5 && resolved == spatial) {
            if (keep) return define(n, std::make_shared<GlobalAvgPool>(), dataInputs(n, 1));
            auto seq = std::make_shared<Sequential>();
            seq->append(std::make_shared<GlobalAvgPool>()).append(std::make_shared<Flatten>());
            return define(n, seq, dataInputs(n, 1));
        }
        return define(n, std::make_shared<ReduceMean>(axes, keep), dataInputs(n, 1));
    }

    // x op c or c op x with a scalar constant c: an affine map (MulAddConst).
    void importScalarArithmetic(const onnx::NodeProto& n, const Attributes& a) {
        a.only({});
        requireInputsImported(n);
        const std::string& op = n.op_type();
        const int k = isConstant(n.input(1)) ? 1 : 0;
        if (isConstant(n.input(1 - k))) throw Unsupported{"both inputs are constants"};
        const Constant& c = requireConstant(n, k, "the constant operand");
        if (c.isInt || !c.tensor.defined())
            throw Unsupported{"input " + std::to_string(k) + " is a constant of " +
                              (c.isInt ? "integers" : "a shape known only at run time") +
                              " (float constants are supported)"};
        Source s = value(n, 1 - k);
        if (c.tensor.numel() != 1) return importTensorArithmetic(n, c, k, Parent(s.node, s.slot));
        const float v = c.tensor.toVector<float>()[0];
        float scale = 1.0f, shift = 0.0f;
        if (op == "Add") shift = v;
        if (op == "Mul") scale = v;
        if (op == "Sub") {
            scale = k == 1 ? 1.0f : -1.0f;
            shift = k == 1 ? -v : v;
        }
        if (op == "Div") {
            if (k == 0) throw Unsupported{"a constant divided by data (1 / x) is not supported"};
            if (v == 0.0f) throw Unsupported{"a division by the constant 0"};
            scale = 1.0f / v;
        }
        return define(n, std::make_shared<MulAddConst>(scale, shift), Parents{Parent(s.node, s.slot)});
    }

    // x op C or C op x with a constant tensor C that broadcasts to x without changing its
    // shape (a per-channel [1, C, 1, 1] mean or scale): MulAddConst with tensor constants.
    void importTensorArithmetic(const onnx::NodeProto& n, const Constant& c, int k, const Parent& x) {
        const std::string& op = n.op_type();
        std::vector<float> v = c.tensor.toVector<float>();
        const Shape shape = Shape(c.dims);
        Tensor a, b;
        if (op == "Add") b = Tensor::fromVector(shape, v);
        if (op == "Mul") a = Tensor::fromVector(shape, v);
        if (op == "Sub") {
            if (k == 1) { // x - C
                for (float& e : v) e = -e;
                b = Tensor::fromVector(shape, v);
            } else { // C - x
                a = Tensor::full({1}, -1.0f);
                b = Tensor::fromVector(shape, v);
            }
        }
        if (op == "Div") {
            if (k == 0) throw Unsupported{"a constant divided by data (1 / x) is not supported"};
            for (float& e : v) {
                if (e == 0.0f) throw Unsupported{"a division by a constant holding 0"};
                e = 1.0f / e;
            }
            a = Tensor::fromVector(shape, v);
        }
        return define(n, std::make_shared<MulAddConst>(a, b), Parents{x});
    }

    // Pad: spatial dims only (Tessera's PadND), constant or reflect.
    void importPad(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"mode", "pads", "value"});
        const std::string mode = a.s("mode", "constant");
        if (mode != "constant" && mode != "reflect")
            throw Unsupported{"mode " + mode + " (constant and reflect are supported)"};
        std::vector<int64_t> pads = a.ints("pads");
        float value = a.f("value", 0.0f);
        if (n.input_size() > 1 && !n.input(1).empty()) pads = requireInts(n, 1, "the pads");
        if (n.input_size() > 2 && !n.input(2).empty()) value = requireScalar(n, 2, "the constant value");
        if (n.input_size() > 3 && !n.input(3).empty()) throw Unsupported{"the axes input is not supported"};
        const size_t rank = pads.size() / 2;
        if (rank < 3 || rank > 4 || pads.size() % 2)
            throw Unsupported{"pads for rank " + std::to_string(rank) + " (3 and 4 are supported)"};
        if (pads[0] || pads[1] || pads[rank] || pads[rank + 1])
            throw Unsupported{"padding the batch or channel dim is not supported"};
        std::vector<int64_t> loHi; // (lo, hi) per spatial dim
        for (size_t d = 2; d < rank; ++d) {
            loHi.push_back(pads[d]);
            loHi.push_back(pads[rank + d]);
        }
        for (int64_t p : loHi) {
            if (p < 0) throw Unsupported{"negative pads (cropping) are not supported"};
        }
        const PadOptions o{.mode = mode == "reflect" ? PadMode::reflect : PadMode::constant, .fillValue = value};
        ModulePtr m;
        if (rank == 3) m = std::make_shared<Pad1D>(loHi, o);
        if (rank == 4) m = std::make_shared<Pad2D>(loHi, o);
        return define(n, m, dataInputs(n, 1));
    }

    // Upsample (opset 7 to 9) and Resize: nearest with one integer scale over the spatial dims.
    void importResize(const onnx::NodeProto& n, const Attributes& a) {
        const bool resize = n.op_type() == "Resize";
        if (resize) {
            a.only({"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                    "extrapolation_value"});
        } else {
            a.only({"mode", "scales"});
        }
        const std::string mode = a.s("mode", "nearest");
        if (mode != "nearest" && mode != "linear" && !(mode == "bilinear" && !resize))
            throw Unsupported{"mode " + mode + " (nearest and linear are supported)"};
        const bool linear = mode != "nearest";
        if (linear && resize) { // Tessera's linear upsampling samples at half-pixel centres
            const std::string ctm = a.s("coordinate_transformation_mode", "half_pixel");
            if (ctm != "half_pixel" && ctm != "pytorch_half_pixel")
                throw Unsupported{"linear with coordinate_transformation_mode " + ctm +
                                  " (half_pixel and pytorch_half_pixel are supported)"};
        } else if (linear) {
            throw Unsupported{"Upsample's linear mode (asymmetric coordinates) is not supported"};
        } else if (resize) {
            const std::string ctm = a.s("coordinate_transformation_mode", "half_pixel");
            const std::string nm = a.s("nearest_mode", "round_prefer_floor");
            // With an integer scale, nearest picks input index floor(out / scale) under these rules.
            if (!(ctm == "asymmetric" && nm == "floor") && !(ctm == "half_pixel" && nm != "ceil")) {
                throw Unsupported{"coordinate_transformation_mode " + ctm + " with nearest_mode " + nm};
            }
        }
        std::vector<float> scales;
        if (!resize && a.has("scales")) {
            const onnx::AttributeProto* sc = a.get("scales");
            scales.assign(sc->floats().begin(), sc->floats().end());
        } else {
            const int k = resize ? 2 : 1;
            if (resize && n.input_size() > 3 && !n.input(3).empty()) throw Unsupported{"sizes instead of scales"};
            scales = requireConstant(n, k, "the scales").tensor.toVector<float>();
        }
        if (scales.size() < 3 || scales[0] != 1 || scales[1] != 1)
            throw Unsupported{"scales of the batch or channel dim"};
        const float s = scales[2];
        for (size_t d = 2; d < scales.size(); ++d) {
            if (scales[d] != s) throw Unsupported{"different scales per dim"};
        }
        if (s != std::floor(s) || s < 1)
            throw Unsupported{"a scale of " + std::to_string(s) + " (integer scales are supported)"};
        ModulePtr m;
        const UpsampleOptions o{.mode = linear ? ResampleMode::linear : ResampleMode::nearest};
        if (scales.size() == 4) m = std::make_shared<Upsample2D>(static_cast<int64_t>(s), o);
        if (scales.size() == 5) m = std::make_shared<Upsample3D>(static_cast<int64_t>(s), o);
        if (!m) throw Unsupported{"rank " + std::to_string(scales.size()) + " (4 and 5 are supported)"};
        return define(n, m, dataInputs(n, 1));
    }

    void importDropout(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"ratio", "seed", "is_test"});
        onlyOutputs(n, 1);
        float ratio = a.f("ratio", 0.5f);
        if (n.input_size() > 1 && !n.input(1).empty()) {
            ratio = requireScalar(n, 1, "the ratio");
        }
        if (n.input_size() > 2 && !n.input(2).empty()) {
            throw Unsupported{"the training_mode input is not supported (Tessera's mode decides)"};
        }
        return define(n, std::make_shared<Dropout>(DropoutOptions{.p = ratio}), dataInputs(n, 1));
    }

    void importClip(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"min", "max"});
        float lo = a.f("min", -std::numeric_limits<float>::max());
        float hi = a.f("max", std::numeric_limits<float>::max());
        if (n.input_size() > 1 && !n.input(1).empty()) lo = requireScalar(n, 1, "min");
        if (n.input_size() > 2 && !n.input(2).empty()) hi = requireScalar(n, 2, "max");
        return define(n, std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = lo, .max = hi}),
                      dataInputs(n, 1));
    }

    void importConv(const onnx::NodeProto& n, const Attributes& a) {
        const bool transposed = n.op_type() == "ConvTranspose";
        if (transposed) {
            a.only({"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad", "output_padding"});
            for (int64_t p : a.ints("output_padding")) {
                if (p != 0) throw Unsupported{"output_padding other than 0 is not supported"};
            }
        } else {
            a.only({"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"});
        }
        autoPadNotSet(a);
        const Constant& w = requireConstant(n, 1, "the weight");
        const Shape& ws = w.tensor.shape();
        if (ws.rank() < 3 || ws.rank() > 5) throw Unsupported{"a weight of rank " + std::to_string(ws.rank())};
        const size_t dims = ws.rank() - 2;
        std::vector<int64_t> kernel(ws.dims().begin() + 2, ws.dims().end());
        if (a.has("kernel_shape") && a.ints("kernel_shape") != kernel) throw Unsupported{"kernel_shape differs from W"};
        const int64_t groups = a.i("group", 1);
        ConvOptions o;
        o.stride = a.ints("strides", std::vector<int64_t>(dims, 1));
        o.pad = symmetricPads(a.ints("pads"), dims);
        o.dilation = a.ints("dilations", std::vector<int64_t>(dims, 1));
        o.groups = groups;
        const bool bias = n.input_size() > 2 && !n.input(2).empty();
        o.useBias = bias;
        o.initscheme = InitScheme::none;
        // W: [out, in / g, k...] for Conv, [in, out / g, k...] for ConvTranspose, as in Tessera.
        const int64_t outmaps = transposed ? ws[1] * groups : ws[0];
        const int64_t inmaps = transposed ? ws[0] : ws[1] * groups;
        ModulePtr m;
        if (transposed) {
            if (dims == 1) m = std::make_shared<Deconv1D>(inmaps, outmaps, kernel, o);
            if (dims == 2) m = std::make_shared<Deconv2D>(inmaps, outmaps, kernel, o);
            if (dims == 3) m = std::make_shared<Deconv3D>(inmaps, outmaps, kernel, o);
        } else {
            if (dims == 1) m = std::make_shared<Conv1D>(inmaps, outmaps, kernel, o);
            if (dims == 2) m = std::make_shared<Conv2D>(inmaps, outmaps, kernel, o);
            if (dims == 3) m = std::make_shared<Conv3D>(inmaps, outmaps, kernel, o);
        }
        m->getVar("W")->data.copyFrom(w.tensor);
        if (bias) m->getVar("b")->data.copyFrom(requireConstant(n, 2, "the bias").tensor.reshape({outmaps}));
        return define(n, m, dataInputs(n, 1));
    }

    // Y = alpha op(A) op(B) + beta C: a Linear with W = alpha op(B) (as [in, out]) and b = beta C.
    void importGemm(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"alpha", "beta", "transA", "transB", "broadcast"});
        if (a.i("transA", 0) != 0) throw Unsupported{"transA 1 is not supported"};
        const Constant& b = requireConstant(n, 1, "B");
        if (b.tensor.shape().rank() != 2) throw Unsupported{"B of rank " + std::to_string(b.tensor.shape().rank())};
        const bool transB = a.i("transB", 0) != 0;
        const int64_t in = transB ? b.tensor.shape()[1] : b.tensor.shape()[0];
        const int64_t out = transB ? b.tensor.shape()[0] : b.tensor.shape()[1];
        const float alpha = a.f("alpha", 1.0f), beta = a.f("beta", 1.0f);
        const bool bias = n.input_size() > 2 && !n.input(2).empty();
        auto lin = std::make_shared<Linear>(in, out, LinearOptions{.useBias = bias, .initscheme = InitScheme::none});
        // W [in, out] = alpha B, or alpha B^T: written in place, transposed in 64 x 64 tiles.
        Tensor& W = lin->getVar("W")->data;
        const float* bv = b.tensor.data<float>();
        float* w = W.data<float>();
        constexpr int64_t kTile = 64;
        for (int64_t i0 = 0; i0 < in; i0 += kTile) {
            for (int64_t o0 = 0; o0 < out; o0 += kTile) {
                for (int64_t i = i0; i < std::min(in, i0 + kTile); ++i) {
                    for (int64_t o = o0; o < std::min(out, o0 + kTile); ++o) {
                        w[i * out + o] = alpha * bv[transB ? o * in + i : i * out + o];
                    }
                }
            }
        }
        if (bias) {
            const Constant& c = requireConstant(n, 2, "C");
            std::vector<float> cv = c.tensor.toVector<float>();
            if (static_cast<int64_t>(cv.size()) == 1) cv.assign(static_cast<size_t>(out), cv[0]);
            if (static_cast<int64_t>(cv.size()) != out) {
                throw Unsupported{"C of shape " + c.tensor.shape().str() + " (a row of " + std::to_string(out) +
                                  " is supported)"};
            }
            for (float& x : cv) x *= beta;
            lin->getVar("b")->data.copyFrom(Tensor::fromVector({out}, cv));
        }
        return define(n, lin, dataInputs(n, 1));
    }

    void importMatMul(const onnx::NodeProto& n, const Attributes& a) {
        a.only({});
        const Constant& b = requireConstant(n, 1, "the second input (a weight)");
        if (b.tensor.shape().rank() != 2)
            throw Unsupported{"a weight of rank " + std::to_string(b.tensor.shape().rank())};
        const int64_t in = b.tensor.shape()[0], out = b.tensor.shape()[1];
        auto lin = std::make_shared<Linear>(in, out, LinearOptions{.useBias = false, .initscheme = InitScheme::none});
        lin->getVar("W")->data.copyFrom(b.tensor);
        return define(n, lin, dataInputs(n, 1));
    }

    void importPool(const onnx::NodeProto& n, const Attributes& a) {
        const bool isMax = n.op_type() == "MaxPool";
        if (isMax) {
            a.only({"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations", "storage_order"});
        } else {
            a.only({"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad"});
        }
        onlyOutputs(n, 1);
        autoPadNotSet(a);
        const bool ceil = a.i("ceil_mode", 0) != 0;
        if (ceil && !isMax) throw Unsupported{"ceil_mode 1 is not supported for AveragePool"};
        const std::vector<int64_t> kernel = a.ints("kernel_shape");
        const size_t dims = kernel.size();
        if (dims < 1 || dims > 3) throw Unsupported{"kernel_shape of " + std::to_string(dims) + " dims"};
        const std::vector<int64_t> dil = a.ints("dilations", std::vector<int64_t>(dims, 1));
        for (int64_t d : dil) {
            if (d != 1) throw Unsupported{"dilations other than 1 are not supported"};
        }
        PoolOptions o;
        o.stride = a.ints("strides", std::vector<int64_t>(dims, 1));
        o.pad = symmetricPads(a.ints("pads"), dims);
        for (size_t d = 0; d < dims; ++d) {
            if (o.pad[d] >= kernel[d]) throw Unsupported{"a pad as large as the kernel is not supported"};
        }
        o.includePad = a.i("count_include_pad", 0) != 0;
        if (ceil) return importCeilMaxPool(n, kernel, o);
        ModulePtr m;
        if (isMax) {
            if (dims == 1) m = std::make_shared<MaxPool1D>(kernel, o);
            if (dims == 2) m = std::make_shared<MaxPool2D>(kernel, o);
            if (dims == 3) m = std::make_shared<MaxPool3D>(kernel, o);
        } else {
            if (dims == 1) m = std::make_shared<AvgPool1D>(kernel, o);
            if (dims == 2) m = std::make_shared<AvgPool2D>(kernel, o);
            if (dims == 3) m = std::make_shared<AvgPool3D>(kernel, o);
        }
        return define(n, m, dataInputs(n, 1));
    }

    // MaxPool with ceil_mode 1: the windows the ceiling adds reach past the high edge, so
    // the input is padded there with -FLT_MAX (never the max of a window that holds a real
    // element, as every window does) and pooled without padding: Pad1D/2D then MaxPool.
    void importCeilMaxPool(const onnx::NodeProto& n, const std::vector<int64_t>& kernel, PoolOptions o) {
        const size_t dims = kernel.size();
        if (dims > 2) throw Unsupported{"ceil_mode 1 on a 3-D pool is not supported"};
        auto in = shapes_.find(n.input(0));
        if (in == shapes_.end() || in->second.size() != dims + 2)
            throw Unsupported{"ceil_mode 1 on an input whose shape is not known at import"};
        std::vector<int64_t> loHi;
        bool extra = false;
        for (size_t d = 0; d < dims; ++d) {
            const int64_t size = in->second[2 + d].value, k = kernel[d], st = o.stride[d], p = o.pad[d];
            if (size < 0) throw Unsupported{"ceil_mode 1 on a spatial dim not known at import"};
            int64_t out = (size + 2 * p - k + st - 1) / st + 1;
            if ((out - 1) * st >= size + p) --out; // the last window must start inside the input or its left pad
            const int64_t high = std::max<int64_t>(0, (out - 1) * st + k - (size + 2 * p));
            extra = extra || high > 0;
            loHi.push_back(p);
            loHi.push_back(p + high);
        }
        ModulePtr pool;
        if (!extra) { // the ceiling adds no window here: a plain pool
            if (dims == 1) pool = std::make_shared<MaxPool1D>(kernel, o);
            if (dims == 2) pool = std::make_shared<MaxPool2D>(kernel, o);
            return define(n, pool, dataInputs(n, 1));
        }
        const PadOptions padOptions{.mode = PadMode::constant, .fillValue = -std::numeric_limits<float>::max()};
        o.pad.assign(dims, 0);
        auto seq = std::make_shared<Sequential>();
        if (dims == 1)
            seq->append(std::make_shared<Pad1D>(loHi, padOptions)).append(std::make_shared<MaxPool1D>(kernel, o));
        if (dims == 2)
            seq->append(std::make_shared<Pad2D>(loHi, padOptions)).append(std::make_shared<MaxPool2D>(kernel, o));
        return define(n, seq, dataInputs(n, 1));
    }

    void importBatchNorm(const onnx::NodeProto& n, const Attributes& a) {
        a.only({"epsilon", "momentum", "spatial", "training_mode", "is_test"});
        onlyOutputs(n, 1);
        if (a.i("spatial", 1) != 1) throw Unsupported{"spatial 0 is not supported"};
        if (a.i("training_mode", 0) != 0)
            throw Unsupported{"training_mode 1 is not supported (Tessera's mode decides)"};
        const Constant& scale = requireConstant(n, 1, "scale");
        const Constant& bias = requireConstant(n, 2, "B");
        const Constant& mean = requireConstant(n, 3, "the mean");
        const Constant& var = requireConstant(n, 4, "the variance");
        const int64_t maps = scale.tensor.numel();
        const float momentum = a.f("momentum", 0.9f);
        BatchNormOptions o{
            .epsilon = a.f("epsilon", 1e-5f), .initFactor = 1.0f - momentum, .minFactor = 1.0f - momentum};
        // The module by the input's declared rank: [N, C] or [N, C, L], [N, C, H, W], [N, C, D, H, W].
        const int64_t rank = rankOf(n, 0);
        std::shared_ptr<BatchNormND> bn;
        if (rank == 2 || rank == 3) {
            bn = std::make_shared<BatchNorm1D>(maps, o);
        } else if (rank == 5) {
            bn = std::make_shared<BatchNorm3D>(maps, o);
        } else {
            bn = std::make_shared<BatchNorm2D>(maps, o);
        }
        bn->getVar("scale")->data.copyFrom(scale.tensor.reshape({maps}));
        bn->getVar("bias")->data.copyFrom(bias.tensor.reshape({maps}));
        bn->setAttr("mean", mean.tensor.reshape({maps}).clone());
        bn->setAttr("var", var.tensor.reshape({maps}).clone());
        return define(n, bn, dataInputs(n, 1));
    }
};

} // namespace

bool isOnnxPath(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0; }

namespace {
onnx::ModelProto readModel(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw IoError("ONNX model " + path + ": cannot open the file");
    onnx::ModelProto model;
    if (!model.ParseFromIstream(&file)) throw IoError("ONNX model " + path + ": not a valid ONNX (protobuf) file");
    return model;
}
} // namespace

std::shared_ptr<Graph> importOnnx(const std::string& path, const OnnxImportOptions& options) {
    onnx::ModelProto model = readModel(path);
    return Importer(model, path, options).run();
}

std::vector<std::string> onnxInputNames(const std::string& path) {
    const onnx::ModelProto model = readModel(path);
    std::unordered_set<std::string> initializers;
    for (const onnx::TensorProto& t : model.graph().initializer()) initializers.insert(t.name());
    std::vector<std::string> names;
    for (const onnx::ValueInfoProto& v : model.graph().input()) {
        if (!initializers.count(v.name())) names.push_back(v.name());
    }
    return names;
}

std::vector<std::vector<int64_t>> onnxInputShapes(const std::string& path) {
    const onnx::ModelProto model = readModel(path);
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
    const onnx::ModelProto model = readModel(path);
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

// ---- export -------------------------------------------------------------------------------

namespace tessera {

namespace {

const BlueprintValue* schemeValue(const Blueprint& bp, const std::string& key) {
    for (const auto& [k, v] : bp.scheme) {
        if (k == key) return &v;
    }
    return nullptr;
}
int64_t schemeInt(const Blueprint& bp, const std::string& key, int64_t fallback) {
    const BlueprintValue* v = schemeValue(bp, key);
    if (!v) return fallback;
    if (const auto* i = std::get_if<int64_t>(v)) return *i;
    if (const auto* b = std::get_if<bool>(v)) return *b ? 1 : 0;
    return fallback;
}
float schemeFloat(const Blueprint& bp, const std::string& key, float fallback) {
    const BlueprintValue* v = schemeValue(bp, key);
    if (!v) return fallback;
    if (const auto* d = std::get_if<double>(v)) return static_cast<float>(*d);
    if (const auto* i = std::get_if<int64_t>(v)) return static_cast<float>(*i);
    return fallback;
}
std::vector<int64_t> schemeInts(const Blueprint& bp, const std::string& key) {
    const BlueprintValue* v = schemeValue(bp, key);
    if (!v) return {};
    if (const auto* i = std::get_if<std::vector<int64_t>>(v)) return *i;
    if (const auto* one = std::get_if<int64_t>(v)) return {*one};
    return {};
}
bool schemeBool(const Blueprint& bp, const std::string& key) {
    const BlueprintValue* v = schemeValue(bp, key);
    const auto* b = v ? std::get_if<bool>(v) : nullptr;
    return b && *b;
}

std::string schemeString(const Blueprint& bp, const std::string& key) {
    const BlueprintValue* v = schemeValue(bp, key);
    if (const auto* s = v ? std::get_if<std::string>(v) : nullptr) return *s;
    return {};
}

void setType(onnx::ValueInfoProto* v, const Shape& shape) {
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    auto* s = t->mutable_shape();
    for (size_t d = 0; d < shape.rank(); ++d) {
        auto* dim = s->add_dim();
        if (d == 0) {
            dim->set_dim_param("batch"); // any batch size
        } else {
            dim->set_dim_value(shape[static_cast<int64_t>(d)]);
        }
    }
}

class Exporter {
public:
    Exporter(onnx::GraphProto& g, int64_t opset) : g_(g), opset_(opset) {}

    std::vector<std::string> errors;

    // The output value names of `m` run on `inputs` (value names) of shapes `in`; `path`
    // names its nodes and parameters.
    std::vector<std::string> emit(Module& m, const std::vector<std::string>& inputs, const Shapes& in,
                                  const std::string& path) {
        if (auto* graph = dynamic_cast<Graph*>(&m)) return emitGraph(*graph, inputs, in, path);
        if (auto* seq = dynamic_cast<Sequential*>(&m)) {
            std::vector<std::string> cur = inputs;
            Shapes shapes = in;
            for (const auto& [name, child] : seq->namedChildren()) {
                const Shapes out = child->inferDataShape(shapes);
                cur = emit(*child, cur, shapes, join(path, name));
                shapes = out;
            }
            return cur;
        }
        if (auto* par = dynamic_cast<Parallel*>(&m)) {
            std::vector<std::string> outs;
            size_t k = 0;
            for (const auto& [name, child] : par->namedChildren()) {
                for (const std::string& o : emit(*child, {inputs.at(k)}, {in.at(k)}, join(path, name)))
                    outs.push_back(o);
                ++k;
            }
            return outs;
        }
        const Shapes out = m.inferDataShape(in);
        std::vector<std::string> outs;
        for (size_t k = 0; k < out.size(); ++k) {
            outs.push_back(out.size() == 1 ? valueName(path) : valueName(path + ":" + std::to_string(k)));
            setType(g_.add_value_info(), out[k]);
            g_.mutable_value_info(g_.value_info_size() - 1)->set_name(outs.back());
        }
        try {
            emitLayer(m, inputs, in, outs, path);
        } catch (const Unsupported& u) {
            errors.push_back("layer " + (path.empty() ? m.classname() : path) + " (" + m.classname() + "): " + u.why);
        }
        return outs;
    }

private:
    onnx::GraphProto& g_;
    int64_t opset_;
    std::unordered_set<std::string> used_;

    static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

    std::string valueName(const std::string& base) {
        std::string name = base.empty() ? "value" : base;
        for (int k = 1; used_.count(name); ++k) name = base + "_" + std::to_string(k);
        used_.insert(name);
        return name;
    }

    std::vector<std::string> emitGraph(Graph& graph, const std::vector<std::string>& inputs, const Shapes& in,
                                       const std::string& path) {
        graph.dataShapeFrom(in); // every node's shapes for these inputs
        std::unordered_map<const Node*, std::vector<std::string>> values;
        size_t k = 0;
        for (Node* n : graph.order()) {
            std::vector<std::string> ins;
            if (n->bwds().empty()) {
                ins.push_back(inputs.at(k++));
            } else {
                for (const Edge& e : n->bwds()) {
                    for (int s : e.slots) ins.push_back(values.at(e.node).at(static_cast<size_t>(s)));
                }
            }
            values[n] = emit(n->module(), ins, n->inShapes(), join(path, n->name()));
        }
        std::vector<std::string> outs;
        for (const NodePtr& o : graph.outputs()) {
            for (const std::string& v : values.at(o.get())) outs.push_back(v);
        }
        return outs;
    }

    std::string init(const std::string& name, const Tensor& t, std::optional<Shape> shape = std::nullopt) {
        onnx::TensorProto* p = g_.add_initializer();
        const std::string n = valueName(name);
        p->set_name(n);
        p->set_data_type(onnx::TensorProto::FLOAT);
        const Shape s = shape ? *shape : t.shape();
        for (int64_t d : s.dims()) p->add_dims(d);
        const std::vector<float> v = t.toHost().plain().toVector<float>();
        p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
        return n;
    }
    std::string initScalar(const std::string& name, float x) {
        onnx::TensorProto* p = g_.add_initializer();
        const std::string n = valueName(name);
        p->set_name(n);
        p->set_data_type(onnx::TensorProto::FLOAT);
        p->add_float_data(x);
        return n;
    }
    std::string initInts(const std::string& name, const std::vector<int64_t>& v) {
        onnx::TensorProto* p = g_.add_initializer();
        const std::string n = valueName(name);
        p->set_name(n);
        p->set_data_type(onnx::TensorProto::INT64);
        p->add_dims(static_cast<int64_t>(v.size()));
        for (int64_t x : v) p->add_int64_data(x);
        return n;
    }

    onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs, const std::string& name) {
        onnx::NodeProto* n = g_.add_node();
        n->set_op_type(op);
        n->set_name(name);
        for (const std::string& i : ins) n->add_input(i);
        for (const std::string& o : outs) n->add_output(o);
        return n;
    }
    static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, float v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRINGS);
        for (const std::string& x : v) a->add_strings(x);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : v) a->add_ints(x);
    }
    static std::vector<int64_t> pads(const std::vector<int64_t>& pad) { // [b..., e...]
        std::vector<int64_t> p = pad;
        p.insert(p.end(), pad.begin(), pad.end());
        return p;
    }

    // No Gelu op before opset 20: its erf form, which the import reads back as one Gelu.
    void emitGelu(const std::vector<std::string>& in, const std::vector<std::string>& out, const std::string& path) {
        const std::string d = valueName(path + "_scaled"), e = valueName(path + "_erf"), a = valueName(path + "_erf1"),
                          m2 = valueName(path + "_xerf1");
        node("Div", {in[0], initScalar(path + ".sqrt2", 1.41421356f)}, {d}, path + "_div");
        node("Erf", {d}, {e}, path + "_erf");
        node("Add", {e, initScalar(path + ".one", 1.0f)}, {a}, path + "_add");
        node("Mul", {in[0], a}, {m2}, path + "_mul");
        node("Mul", {m2, initScalar(path + ".half", 0.5f)}, out, path);
    }

    // No AffineGrid before opset 20: the grid as a product with a constant base grid, rows
    // (x_t, y_t, 1) of the output's pixels, Transpose(theta) -> MatMul(base) -> Reshape to
    // [N, Ho, Wo, 2], then GridSample (opset 16) with Tessera's sampling: bilinear, zero
    // outside, -1 and 1 at the corner pixels' centres (align_corners 1). Read back as one
    // SpatialTf.
    void emitSpatialTf(const Blueprint& bp, const std::vector<std::string>& in, const Shapes& inShapes,
                       const std::vector<std::string>& out, const std::string& path) {
        if (opset_ < 16) {
            throw Unsupported{"SpatialTf needs GridSample, in opsets 16 and later (this export writes opset " +
                              std::to_string(opset_) + ")"};
        }
        const int64_t Ho = schemeInt(bp, "height", 0) ? schemeInt(bp, "height", 0) : inShapes[0][2];
        const int64_t Wo = schemeInt(bp, "width", 0) ? schemeInt(bp, "width", 0) : inShapes[0][3];
        std::vector<float> base;
        for (int64_t i = 0; i < Ho; ++i) {
            for (int64_t j = 0; j < Wo; ++j)
                base.insert(base.end(), {element::gridCoord(j, Wo), element::gridCoord(i, Ho), 1.0f});
        }
        const std::string t = valueName(path + "_thetaT"), g = valueName(path + "_grid2"),
                          grid = valueName(path + "_grid");
        attr(node("Transpose", {in[1]}, {t}, path + "_transpose"), "perm", std::vector<int64_t>{0, 2, 1});
        node("MatMul", {init(path + ".base", Tensor::fromVector({Ho * Wo, 3}, base)), t}, {g}, path + "_grid");
        node("Reshape", {g, initInts(path + ".shape", {0, Ho, Wo, 2})}, {grid}, path + "_reshape");
        onnx::NodeProto* n = node("GridSample", {in[0], grid}, out, path);
        attr(n, "align_corners", int64_t{1});
        attr(n, "mode", std::string("bilinear"));
        attr(n, "padding_mode", std::string("zeros"));
    }

    // An RNN as one ONNX LSTM / GRU / RNN node per layer (weights in ONNX's gate order,
    // biases as [Wb, Rb]), each output Y [T, D, N, H] transposed and reshaped back to
    // Tessera's [T, N, D H]; batch-first data transposed around them; the last step sliced
    // out unless getSequences.
    void emitRnn(RNN& m, const Blueprint& bp, const std::vector<std::string>& in, const Shapes& inShapes,
                 const std::vector<std::string>& out, const std::string& path) {
        const RnnMode mode = rnnModeFromString(schemeString(bp, "mode"));
        const bool bi = schemeBool(bp, "bidirectional"), batchFirst = schemeBool(bp, "batchFirst");
        const bool sequences = schemeBool(bp, "getSequences");
        const int64_t H = schemeInt(bp, "hsize", 1), layers = schemeInt(bp, "layers", 1), D = bi ? 2 : 1;
        const int64_t G = rnnGates(mode);
        const std::vector<int64_t> order = onnxGateOrder(mode);
        (void)inShapes;
        if (schemeBool(bp, "lengths"))
            throw Unsupported{"an RNN with a lengths input is not exported (the export declares float inputs; "
                              "ONNX's sequence_lens is int32)"};
        const bool initial = schemeBool(bp, "initialStates"), final = schemeBool(bp, "finalStates");
        const bool lstm = mode == RnnMode::lstm;
        // Layer k's rows [k D, (k + 1) D) of a state input [layers D, N, H] (the input itself
        // for one layer).
        auto stateOf = [&](size_t input, int64_t k, const std::string& lp) {
            if (layers == 1) return in[input];
            const std::string v = valueName(lp + (input == 1 ? "_h0" : "_c0"));
            node("Slice",
                 {in[input], initInts(v + ".starts", {k * D}), initInts(v + ".ends", {(k + 1) * D}),
                  initInts(v + ".axes", {0})},
                 {v}, v);
            return v;
        };
        std::vector<std::string> finals[2]; // each layer's Y_h, Y_c
        std::string x = in[0];
        if (batchFirst) {
            const std::string t = valueName(path + "_time_major");
            attr(node("Transpose", {x}, {t}, path + "_time_major"), "perm", std::vector<int64_t>{1, 0, 2});
            x = t;
        }
        auto gates = [&](const Tensor& t, int64_t cols) { // [G H, cols] in ONNX's gate order
            const std::vector<float> v = t.toHost().toVector<float>();
            std::vector<float> r(v.size());
            for (int64_t j = 0; j < G; ++j) {
                std::copy(v.begin() + order[j] * H * cols, v.begin() + (order[j] + 1) * H * cols,
                          r.begin() + j * H * cols);
            }
            return r;
        };
        for (int64_t k = 0; k < layers; ++k) {
            std::vector<float> w, r, b;
            int64_t inSize = 0;
            for (int64_t dir = 0; dir < D; ++dir) {
                const std::string sfx = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
                const Tensor& wih = m.getVar("weight_ih" + sfx)->data;
                inSize = wih.shape()[1];
                const auto wv = gates(wih, inSize), rv = gates(m.getVar("weight_hh" + sfx)->data, H);
                w.insert(w.end(), wv.begin(), wv.end());
                r.insert(r.end(), rv.begin(), rv.end());
                const auto bi_ = gates(m.getVar("bias_ih" + sfx)->data, 1),
                           bh = gates(m.getVar("bias_hh" + sfx)->data, 1);
                b.insert(b.end(), bi_.begin(), bi_.end());
                b.insert(b.end(), bh.begin(), bh.end());
            }
            const std::string lp = path + "_l" + std::to_string(k);
            const std::string y = valueName(lp + "_Y");
            std::vector<std::string> states; // initial_h (, initial_c), sliced before the node that reads them
            for (size_t i = 1; i <= (lstm ? 2u : 1u) && initial; ++i) states.push_back(stateOf(i, k, lp));
            onnx::NodeProto* n = node(mode == RnnMode::lstm  ? "LSTM"
                                      : mode == RnnMode::gru ? "GRU"
                                                             : "RNN",
                                      {x, init(lp + ".W", Tensor::fromVector({D, G * H, inSize}, w)),
                                       init(lp + ".R", Tensor::fromVector({D, G * H, H}, r)),
                                       init(lp + ".B", Tensor::fromVector({D, 2 * G * H}, b))},
                                      {y}, lp);
            if (initial) n->add_input(""); // no sequence_lens
            for (const std::string& v : states) n->add_input(v);
            for (int s = 0; s < (lstm ? 2 : 1) && final; ++s) {
                const std::string v =
                    layers == 1 ? out[static_cast<size_t>(1 + s)] : valueName(lp + (s == 0 ? "_Y_h" : "_Y_c"));
                n->add_output(v);
                finals[s].push_back(v);
            }
            attr(n, "hidden_size", H);
            attr(n, "direction", std::string(bi ? "bidirectional" : "forward"));
            if (mode == RnnMode::gru) attr(n, "linear_before_reset", int64_t{1});
            if (mode == RnnMode::relu || mode == RnnMode::tanh) {
                attr(n, "activations",
                     std::vector<std::string>(static_cast<size_t>(D), mode == RnnMode::relu ? "Relu" : "Tanh"));
            }
            const std::string t = valueName(lp + "_TNDH");
            attr(node("Transpose", {y}, {t}, lp + "_TNDH"), "perm", std::vector<int64_t>{0, 2, 1, 3});
            const bool lastOut = k == layers - 1 && sequences && !batchFirst;
            x = lastOut ? out[0] : valueName(lp + "_out");
            node("Reshape", {t, initInts(lp + ".shape", {0, 0, D * H})}, {x}, lp + "_out");
        }
        for (int s = 0; s < 2 && final && layers > 1; ++s) { // the layers' states, layer after layer
            if (!finals[s].empty())
                attr(node("Concat", finals[s], {out[static_cast<size_t>(1 + s)]}, path + (s ? "_cN" : "_hN")), "axis",
                     int64_t{0});
        }
        if (sequences) {
            if (batchFirst)
                attr(node("Transpose", {x}, {out[0]}, path + "_batch_major"), "perm", std::vector<int64_t>{1, 0, 2});
            return;
        }
        const std::string last = valueName(path + "_last");
        node("Slice",
             {x, initInts(path + ".starts", {-1}), initInts(path + ".ends", {std::numeric_limits<int64_t>::max()}),
              initInts(path + ".axes", {0})},
             {last}, path + "_last");
        node("Squeeze", {last, initInts(path + ".axes0", {0})}, {out[0]}, path);
    }

    void emitLayer(Module& m, const std::vector<std::string>& in, const Shapes& inShapes,
                   const std::vector<std::string>& out, const std::string& path) {
        const std::string cls = m.classname();
        const Blueprint bp = m.blueprint();
        auto var = [&](const char* name) { return m.getVar(name)->data; };
        if (cls == "Identity") return void(node("Identity", in, out, path));
        if (cls == "Linear") {
            std::vector<std::string> ins = {in[0], init(path + ".W", var("W"))};
            if (m.hasVar("b")) ins.push_back(init(path + ".b", var("b")));
            node("Gemm", ins, out, path);
            return;
        }
        if (cls.rfind("Conv", 0) == 0 || cls.rfind("Deconv", 0) == 0) {
            if (cls == "Conv" || cls == "Deconv") throw Unsupported{"not exportable"};
            std::vector<std::string> ins = {in[0], init(path + ".W", var("W"))};
            if (m.hasVar("b")) ins.push_back(init(path + ".b", var("b")));
            onnx::NodeProto* n = node(cls.rfind("Deconv", 0) == 0 ? "ConvTranspose" : "Conv", ins, out, path);
            attr(n, "kernel_shape", schemeInts(bp, "size"));
            attr(n, "strides", schemeInts(bp, "stride"));
            attr(n, "pads", pads(schemeInts(bp, "pad")));
            attr(n, "dilations", schemeInts(bp, "dilation"));
            attr(n, "group", schemeInt(bp, "groups", 1));
            return;
        }
        if (cls.rfind("MaxPool", 0) == 0 || cls.rfind("AvgPool", 0) == 0) {
            const bool isMax = cls.rfind("MaxPool", 0) == 0;
            onnx::NodeProto* n = node(isMax ? "MaxPool" : "AveragePool", {in[0]}, out, path);
            attr(n, "kernel_shape", schemeInts(bp, "size"));
            attr(n, "strides", schemeInts(bp, "stride"));
            attr(n, "pads", pads(schemeInts(bp, "pad")));
            if (!isMax) attr(n, "count_include_pad", schemeInt(bp, "includePad", 1));
            return;
        }
        if (cls == "GlobalAvgPool") return void(node("GlobalAveragePool", in, out, path));
        if (cls.rfind("BatchNorm", 0) == 0) {
            const int64_t maps = var("scale").numel();
            onnx::NodeProto* n = node("BatchNormalization",
                                      {in[0], init(path + ".scale", var("scale")), init(path + ".bias", var("bias")),
                                       init(path + ".mean", m.getAttr("mean"), Shape{maps}),
                                       init(path + ".var", m.getAttr("var"), Shape{maps})},
                                      out, path);
            attr(n, "epsilon", schemeFloat(bp, "epsilon", 1e-5f));
            attr(n, "momentum", 1.0f - schemeFloat(bp, "minFactor", 0.1f));
            return;
        }
        if (cls == "InstanceNorm2D") {
            onnx::NodeProto* n =
                node("InstanceNormalization",
                     {in[0], init(path + ".scale", var("scale")), init(path + ".bias", var("bias"))}, out, path);
            attr(n, "epsilon", schemeFloat(bp, "epsilon", 1e-5f));
            return;
        }
        if (cls == "CrossMapLRN") {
            onnx::NodeProto* n = node("LRN", in, out, path);
            attr(n, "size", schemeInt(bp, "N", 5));
            attr(n, "alpha", schemeFloat(bp, "alpha", 1e-4f));
            attr(n, "beta", schemeFloat(bp, "beta", 0.75f));
            attr(n, "bias", schemeFloat(bp, "K", 2.0f));
            return;
        }
        if (cls == "Activation") {
            const std::string kind = schemeString(bp, "activation");
            if (kind == "relu") return void(node("Relu", in, out, path));
            if (kind == "sigmoid") return void(node("Sigmoid", in, out, path));
            if (kind == "tanh") return void(node("Tanh", in, out, path));
            if (kind == "softPlus") return void(node("Softplus", in, out, path));
            if (kind == "leakyRelu")
                return attr(node("LeakyRelu", in, out, path), "alpha", schemeFloat(bp, "slope", 0.01f));
            if (kind == "elu") return attr(node("Elu", in, out, path), "alpha", schemeFloat(bp, "alpha", 1.0f));
            if (kind == "clip") {
                node("Clip",
                     {in[0], initScalar(path + ".min", schemeFloat(bp, "min", 0.0f)),
                      initScalar(path + ".max", schemeFloat(bp, "max", 6.0f))},
                     out, path);
                return;
            }
            if (kind == "hardSigmoid") {
                onnx::NodeProto* n = node("HardSigmoid", in, out, path);
                attr(n, "alpha", schemeFloat(bp, "hardSlope", 1.0f / 6.0f));
                attr(n, "beta", schemeFloat(bp, "hardOffset", 0.5f));
                return;
            }
            if (kind == "hardSwish" && opset_ >= 14) return void(node("HardSwish", in, out, path));
            if (kind == "hardSwish") { // before opset 14: x * HardSigmoid(x) with PyTorch's constants
                const std::string gate = valueName(path + "_gate");
                onnx::NodeProto* h = node("HardSigmoid", in, {gate}, path + "_gate");
                attr(h, "alpha", 1.0f / 6.0f);
                attr(h, "beta", 0.5f);
                return void(node("Mul", {in[0], gate}, out, path));
            }
            if (kind == "gelu") return emitGelu(in, out, path);
            throw Unsupported{"activation " + kind + " has no ONNX op at this opset"};
        }
        if (cls == "PRelu") {
            Shape s{var("slopes").numel()};
            if (var("slopes").numel() > 1) { // per channel: [C, 1, ...] against [N, C, ...]
                std::vector<int64_t> d{var("slopes").numel()};
                for (size_t r = 2; r < inShapes[0].rank(); ++r) d.push_back(1);
                s = Shape(d);
            }
            node("PRelu", {in[0], init(path + ".slopes", var("slopes"), s)}, out, path);
            return;
        }
        if (cls == "SoftMax") return attr(node("Softmax", in, out, path), "axis", int64_t{1});
        if (cls == "Flatten") return attr(node("Flatten", in, out, path), "axis", int64_t{1});
        if (cls == "Reshape") {
            node("Reshape", {in[0], initInts(path + ".shape", schemeInts(bp, "shape"))}, out, path);
            return;
        }
        if (cls == "Concat") return attr(node("Concat", in, out, path), "axis", schemeInt(bp, "axis", 1));
        if (cls == "Add") {
            if (const BlueprintValue* c = schemeValue(bp, "coefficients")) {
                const auto* w = std::get_if<std::vector<double>>(c);
                if (!w || *w != std::vector<double>{1.0, -1.0})
                    throw Unsupported{"weighted sums are not exported (a difference, coefficients [1, -1], is)"};
                return void(node("Sub", in, out, path));
            }
            node(in.size() == 2 ? "Add" : "Sum", in, out, path);
            return;
        }
        if (cls == "MulAddConst") { // a x + b: Mul, then Add, each left out when it is the identity
            const auto& mac = dynamic_cast<const MulAddConst&>(m);
            const float a = schemeFloat(bp, "a", 1.0f), b = schemeFloat(bp, "b", 0.0f);
            // The constants: scalar initializers, or the module's tensors (NumPy broadcasting, as ONNX's).
            auto scale = [&] {
                return mac.tensorScale() ? init(path + ".a", m.getAttr("a")) : initScalar(path + ".a", a);
            };
            auto shift = [&] {
                return mac.tensorShift() ? init(path + ".b", m.getAttr("b")) : initScalar(path + ".b", b);
            };
            const bool mul = mac.tensorScale() || a != 1.0f, add = mac.tensorShift() || b != 0.0f;
            if (!add) return void(node("Mul", {in[0], scale()}, out, path));
            std::string x = in[0];
            if (mul) {
                const std::string scaled = valueName(path + "_scaled");
                node("Mul", {x, scale()}, {scaled}, path + "_mul");
                x = scaled;
            }
            node("Add", {x, shift()}, out, path);
            return;
        }
        if (cls == "Slice") {
            const int64_t end = schemeInt(bp, "end", 0);
            node("Slice",
                 {in[0], initInts(path + ".starts", {schemeInt(bp, "start", 0)}),
                  initInts(path + ".ends", {end == 0 ? std::numeric_limits<int64_t>::max() : end}),
                  initInts(path + ".axes", {schemeInt(bp, "axis", 0)})},
                 out, path);
            return;
        }
        if (cls == "Gelu") return emitGelu(in, out, path);
        if (cls == "SpatialTf") return emitSpatialTf(bp, in, inShapes, out, path);
        if (cls == "Mul") {
            if (in.size() != 2) throw Unsupported{"products of more than two inputs are not exported"};
            node("Mul", in, out, path);
            return;
        }
        if (cls == "Sub" || cls == "Div") return void(node(cls, in, out, path));
        if (auto* rnn = dynamic_cast<RNN*>(&m)) return emitRnn(*rnn, bp, in, inShapes, out, path);
        if (cls == "ReduceMean") {
            onnx::NodeProto* n = node("ReduceMean", in, out, path);
            std::vector<int64_t> axes = schemeInts(bp, "axes");
            if (axes.empty()) { // every dim, written out
                for (size_t d = 0; d < inShapes[0].rank(); ++d) axes.push_back(static_cast<int64_t>(d));
            }
            attr(n, "axes", axes);
            const BlueprintValue* keep = schemeValue(bp, "keepDims");
            attr(n, "keepdims", int64_t{keep && std::get_if<bool>(keep) && !*std::get_if<bool>(keep) ? 0 : 1});
            return;
        }
        if (cls == "Dropout") {
            node("Dropout", {in[0], initScalar(path + ".ratio", schemeFloat(bp, "p", 0.5f))}, out, path);
            return;
        }
        if (auto* perm = dynamic_cast<AxisPermutation*>(&m)) { // Transpose, SwapAxes, MoveAxis
            return attr(node("Transpose", in, out, path), "perm", perm->permutation(inShapes[0].rank()));
        }
        if (cls == "Replicate") { // one Identity per copy
            for (size_t k = 0; k < out.size(); ++k) node("Identity", in, {out[k]}, path + "_" + std::to_string(k));
            return;
        }
        // Train-time noise: the inference form, written as Identity (read back as Identity).
        if (cls == "NoiseInjector" || cls == "Dropout2D") return void(node("Identity", in, out, path));

        if (cls == "Pad1D" || cls == "Pad2D") {
            const std::vector<int64_t> loHi = schemeInts(bp, "pad"); // (lo, hi) per spatial dim
            const size_t rank = inShapes[0].rank();
            std::vector<int64_t> pads(2 * rank, 0); // ONNX: every dim's begin, then every dim's end
            for (size_t d = 2; d < rank; ++d) {
                pads[d] = loHi.at(2 * (d - 2));
                pads[rank + d] = loHi.at(2 * (d - 2) + 1);
            }
            const std::string mode = schemeString(bp, "mode");
            onnx::NodeProto* n = node("Pad",
                                      {in[0], initInts(path + ".pads", pads),
                                       initScalar(path + ".value", schemeFloat(bp, "fillValue", 0.0f))},
                                      out, path);
            auto* a = n->add_attribute();
            a->set_name("mode");
            a->set_type(onnx::AttributeProto::STRING);
            a->set_s(mode.empty() ? "constant" : mode);
            return;
        }
        if (cls == "Split") {
            onnx::NodeProto* n =
                node("Split", {in[0], initInts(path + ".split", schemeInts(bp, "sections"))}, out, path);
            attr(n, "axis", schemeInt(bp, "axis", 1));
            return;
        }
        if (cls == "Tile") {
            const size_t rank = inShapes[0].rank();
            int64_t axis = schemeInt(bp, "axis", 0);
            if (axis < 0) axis += static_cast<int64_t>(rank);
            std::vector<int64_t> reps(rank, 1);
            reps.at(static_cast<size_t>(axis)) = schemeInt(bp, "times", 1);
            node("Tile", {in[0], initInts(path + ".repeats", reps)}, out, path);
            return;
        }
        if (cls == "Upsample2D" || cls == "Upsample3D") {
            const bool linear = schemeString(bp, "mode") == "linear";
            const float sc = static_cast<float>(schemeInt(bp, "scale", 2));
            std::vector<float> scales(inShapes[0].rank(), sc);
            scales[0] = scales[1] = 1.0f;
            onnx::NodeProto* n = node(
                "Resize",
                {in[0], "", init(path + ".scales", Tensor::fromVector({static_cast<int64_t>(scales.size())}, scales))},
                out, path);
            std::vector<std::pair<const char*, const char*>> attrs = {
                {"mode", "nearest"}, {"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", "floor"}};
            if (linear) attrs = {{"mode", "linear"}, {"coordinate_transformation_mode", "half_pixel"}};
            for (const auto& [k, v] : attrs) {
                auto* a = n->add_attribute();
                a->set_name(k);
                a->set_type(onnx::AttributeProto::STRING);
                a->set_s(v);
            }
            return;
        }
        throw Unsupported{"no ONNX counterpart is exported for " + cls};
    }
};

} // namespace

void exportOnnx(Module& model, const Shapes& inputShapes, const std::string& path, const OnnxExportOptions& options) {
    if (options.opset < 13 || options.opset > 17) {
        throw IoError("ONNX export: opset " + std::to_string(options.opset) + " (13 to 17 are written)");
    }
    model.inferDataShape(inputShapes); // the model's own ShapeError first
    onnx::ModelProto proto;
    proto.set_ir_version(8);
    proto.set_producer_name("tessera");
    if (!options.classes.empty()) {
        onnx::StringStringEntryProto* meta = proto.add_metadata_props();
        meta->set_key("classes");
        meta->set_value(nlohmann::json(options.classes).dump());
    }
    auto* op = proto.add_opset_import();
    op->set_domain("");
    op->set_version(options.opset);
    onnx::GraphProto* g = proto.mutable_graph();
    g->set_name(model.name().empty() ? model.classname() : model.name());
    std::vector<std::string> inputs;
    for (size_t k = 0; k < inputShapes.size(); ++k) {
        inputs.push_back(inputShapes.size() == 1 ? "input" : "input" + std::to_string(k));
        onnx::ValueInfoProto* v = g->add_input();
        v->set_name(inputs.back());
        setType(v, inputShapes[k]);
    }
    Exporter ex(*g, options.opset);
    const std::vector<std::string> outs = ex.emit(model, inputs, inputShapes, "");
    if (!ex.errors.empty()) {
        std::string s = "ONNX export of " + model.str() + ": " + std::to_string(ex.errors.size()) +
                        " layer(s) have no ONNX counterpart here:";
        for (const std::string& e : ex.errors) s += "\n  " + e;
        throw IoError(s);
    }
    // The outputs' declared types, taken from value_info.
    for (const std::string& o : outs) {
        onnx::ValueInfoProto* v = g->add_output();
        bool typed = false;
        for (const onnx::ValueInfoProto& vi : g->value_info()) {
            if (vi.name() == o) {
                *v = vi;
                typed = true;
            }
        }
        if (!typed) v->set_name(o);
    }
    std::string bytes;
    if (!proto.SerializeToString(&bytes)) throw IoError("ONNX export: cannot serialise the model for " + path);
    writeFileAtomically(path, "ONNX file", bytes);
}

} // namespace tessera
