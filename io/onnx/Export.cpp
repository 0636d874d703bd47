#include "io/onnx/Exporter.h"

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

#include "backend/ElementMath.h"
#include "backend/Errors.h"
#include "backend/Files.h"
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

#include <nlohmann/json.hpp>

namespace tessera::onnx_io {

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

// The output value names of `m` run on `inputs` (value names) of shapes `in`; `path`
// names its nodes and parameters.
std::vector<std::string> Exporter::emit(Module& m, const std::vector<std::string>& inputs, const Shapes& in,
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
            for (const std::string& o : emit(*child, {inputs.at(k)}, {in.at(k)}, join(path, name))) outs.push_back(o);
            ++k;
        }
        return outs;
    }
    const Shapes out = m.inferDataShape(in);
    std::vector<DType> inTypes;
    for (const std::string& i : inputs) inTypes.push_back(intValues.count(i) ? DType::int32 : DType::float32);
    const std::vector<DType> outTypes = m.outputDTypes(in, inTypes, Device::cpu());
    std::vector<std::string> outs;
    for (size_t k = 0; k < out.size(); ++k) {
        outs.push_back(out.size() == 1 ? valueName(path) : valueName(path + ":" + std::to_string(k)));
        const DType type = k < outTypes.size() && outTypes[k] == DType::int32 ? DType::int32 : DType::float32;
        if (type == DType::int32) intValues.insert(outs.back());
        onnx::ValueInfoProto* v = g_.add_value_info();
        declare(v, out[k], type, path, k);
        v->set_name(outs.back());
    }
    try {
        emitLayer(m, inputs, in, outs, path);
    } catch (const Unsupported& u) {
        errors.push_back("layer " + (path.empty() ? m.classname() : path) + " (" + m.classname() + "): " + u.why);
    } catch (const std::exception& e) { // a layer whose own state breaks the export: reported with the rest
        errors.push_back("layer " + (path.empty() ? m.classname() : path) + " (" + m.classname() + "): " + e.what());
    }
    return outs;
}

void Exporter::probeBatch(Module& m, const Shapes& in, int64_t batch, int64_t otherBatch) {
    otherShapes_.clear();
    batch_ = otherBatch_ = -1;
    probe(m, in, "");
    batch_ = batch;
    otherBatch_ = otherBatch;
}

// emit's walk, shapes only.
void Exporter::probe(Module& m, const Shapes& in, const std::string& path) {
    if (auto* graph = dynamic_cast<Graph*>(&m)) {
        graph->dataShapeFrom(in);
        for (Node* n : graph->order()) probe(n->module(), n->inShapes(), join(path, n->name()));
        return;
    }
    if (auto* seq = dynamic_cast<Sequential*>(&m)) {
        Shapes shapes = in;
        for (const auto& [name, child] : seq->namedChildren()) {
            const Shapes out = child->inferDataShape(shapes);
            probe(*child, shapes, join(path, name));
            shapes = out;
        }
        return;
    }
    if (auto* par = dynamic_cast<Parallel*>(&m)) {
        size_t k = 0;
        for (const auto& [name, child] : par->namedChildren()) probe(*child, {in.at(k++)}, join(path, name));
        return;
    }
    otherShapes_[path] = m.inferDataShape(in);
}

// A dim the same at both batch sizes is that size; one that is c times the batch at both is
// "batch" (c = 1) or "batch*c" (a batch folded with the heads, or with the positions of a
// sequence); any other that changes (or where the model took no other batch) is unknown.
void Exporter::declare(onnx::ValueInfoProto* v, const Shape& shape, DType dtype, const std::string& path,
                       size_t output) {
    setType(v, shape, dtype);
    auto* dims = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    if (batch_ < 1) { // the rank alone: the sizes are left to the reader's inference
        for (onnx::TensorShapeProto::Dimension& d : *dims->mutable_dim()) d.clear_dim_value();
        return;
    }
    auto it = otherShapes_.find(path);
    const Shape* other = it != otherShapes_.end() && output < it->second.size() ? &it->second[output] : nullptr;
    for (size_t d = 0; d < shape.rank(); ++d) {
        const int64_t a = shape[static_cast<int64_t>(d)];
        if (other && other->rank() == shape.rank() && (*other)[static_cast<int64_t>(d)] == a) continue;
        onnx::TensorShapeProto::Dimension* dim = dims->mutable_dim(static_cast<int>(d));
        dim->clear_dim_value();
        if (!other || other->rank() != shape.rank()) continue;
        const int64_t b = (*other)[static_cast<int64_t>(d)];
        if (a % batch_ == 0 && b % otherBatch_ == 0 && a / batch_ == b / otherBatch_) {
            dim->set_dim_param(a == batch_ ? std::string("batch") : "batch*" + std::to_string(a / batch_));
        }
    }
}

std::string Exporter::valueName(const std::string& base) {
    std::string name = base.empty() ? "value" : base;
    for (int k = 1; used_.count(name); ++k) name = base + "_" + std::to_string(k);
    used_.insert(name);
    return name;
}

std::vector<std::string> Exporter::emitGraph(Graph& graph, const std::vector<std::string>& inputs, const Shapes& in,
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

std::string Exporter::init(const std::string& name, const Tensor& t, std::optional<Shape> shape) {
    const Shape s = shape ? *shape : t.shape();
    std::vector<Written>& same = written_[t.raw()];
    for (const Written& w : same) {
        if (w.tensor.shape() == t.shape() && w.tensor.dtype() == t.dtype() && w.tensor.layout() == t.layout() &&
            w.tensor.device() == t.device() && w.shape == s) {
            return w.name;
        }
    }
    onnx::TensorProto* p = g_.add_initializer();
    const std::string n = valueName(name);
    same.push_back({t, s, n});
    p->set_name(n);
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : s.dims()) p->add_dims(d);
    const std::vector<float> v = t.toHost().plain().toVector<float>();
    p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return n;
}

std::string Exporter::constantNode(const std::string& name, const Tensor& t) {
    const std::string n = valueName(name);
    onnx::NodeProto* c = node("Constant", {}, {n}, n);
    onnx::AttributeProto* at = c->add_attribute();
    at->set_name("value");
    at->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto* p = at->mutable_t();
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t.shape().dims()) p->add_dims(d);
    const std::vector<float> v = t.toHost().plain().toVector<float>();
    p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return n;
}

std::string Exporter::initScalar(const std::string& name, float x) {
    onnx::TensorProto* p = g_.add_initializer();
    const std::string n = valueName(name);
    p->set_name(n);
    p->set_data_type(onnx::TensorProto::FLOAT);
    p->add_float_data(x);
    return n;
}

std::string Exporter::initInts(const std::string& name, const std::vector<int64_t>& v) {
    onnx::TensorProto* p = g_.add_initializer();
    const std::string n = valueName(name);
    p->set_name(n);
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) p->add_int64_data(x);
    return n;
}

onnx::NodeProto* Exporter::node(const std::string& op, const std::vector<std::string>& ins,
                                const std::vector<std::string>& outs, const std::string& name) {
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const std::string& i : ins) n->add_input(i);
    for (const std::string& o : outs) n->add_output(o);
    return n;
}

} // namespace tessera::onnx_io

namespace tessera {

using namespace onnx_io;

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
    if (!options.transforms.empty()) {
        onnx::StringStringEntryProto* meta = proto.add_metadata_props();
        meta->set_key("transforms");
        meta->set_value(options.transforms);
    }
    auto* op = proto.add_opset_import();
    op->set_domain("");
    op->set_version(options.opset);
    onnx::GraphProto* g = proto.mutable_graph();
    g->set_name(model.name().empty() ? model.classname() : model.name());
    // Each input's type: float, or int32 where the model takes only ids there (an Embedder's).
    std::vector<DType> inTypes;
    for (size_t k = 0; k < inputShapes.size(); ++k) {
        DType type = DType::float32;
        for (const DType t : {DType::float32, DType::int32}) {
            std::vector<DType> probe = inTypes;
            probe.push_back(t);
            try {
                model.checkDataType(probe);
                type = t;
                break;
            } catch (const Error&) {}
        }
        inTypes.push_back(type);
    }
    Exporter ex(*g, options.opset);
    // The batch: the first input's dim 0, and that of every input whose dim 0 has its size.
    // It is free (a dim_param) where the model also takes one more or twice as many.
    const int64_t batch = !inputShapes.empty() && inputShapes[0].rank() > 0 ? inputShapes[0][0] : -1;
    bool free = false;
    for (const int64_t other : {batch + 1, 2 * batch}) {
        if (batch < 1 || free) break;
        Shapes probe = inputShapes;
        for (Shape& s : probe) {
            if (s.rank() > 0 && s[0] == batch) s[0] = other;
        }
        try {
            ex.probeBatch(model, probe, batch, other);
            free = true;
        } catch (const Error&) {}
    }
    model.inferDataShape(inputShapes); // the shapes of the export again
    std::vector<std::string> inputs;
    for (size_t k = 0; k < inputShapes.size(); ++k) {
        inputs.push_back(inputShapes.size() == 1 ? "input" : "input" + std::to_string(k));
        onnx::ValueInfoProto* v = g->add_input();
        v->set_name(inputs.back());
        setType(v, inputShapes[k], inTypes[k]);
        if (inputShapes[k].rank() > 0 && (free ? inputShapes[k][0] == batch : true)) {
            v->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
        }
        if (inTypes[k] == DType::int32) ex.intValues.insert(inputs.back());
    }
    const std::vector<std::string> outs = ex.emit(model, inputs, inputShapes, "");
    if (!ex.errors.empty()) {
        std::string s = "ONNX export of " + model.str() + ": " + std::to_string(ex.errors.size()) +
                        " layer(s) have no ONNX counterpart here:";
        for (const std::string& e : ex.errors) s += "\n  " + e;
        throw IoError(s);
    }
    if (!ex.paddingIdx.empty()) {
        onnx::StringStringEntryProto* meta = proto.add_metadata_props();
        meta->set_key("padding_idx");
        meta->set_value(nlohmann::json(ex.paddingIdx).dump());
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
