#include "io/onnx/Importer.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "backend/ElementMath.h"
#include "backend/Errors.h"
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

namespace tessera::onnx_io {

namespace {

// How long ONNX's shape inference may take on a model before it is taken to hang:
// TESSERA_ONNX_SHAPE_TIMEOUT seconds (a decimal number), else 30 s.
double shapeInferenceSeconds() {
    static const double seconds = [] {
        const char* env = std::getenv("TESSERA_ONNX_SHAPE_TIMEOUT");
        const double v = env ? std::atof(env) : 0.0;
        return v > 0.0 && v < 1e6 ? v : 30.0;
    }();
    return seconds;
}

} // namespace

// ONNX's shape inference on the model, run in the inference process (io_detail::onnxShapeInference):
// adds the value_info it finds and refines the outputs'. Throws IoError when inference
// crashes or takes over shapeInferenceSeconds() on the model. Its exceptions are not errors
// here: the import then uses the declared shapes.
void Importer::inferShapes() {
    // Never destroyed: imports during static destruction work.
    static auto* child = new io_detail::ChildServer("onnx-shape-inference");
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
    const io_detail::ChildServer::Result r =
        child->call(request, std::chrono::milliseconds(static_cast<int64_t>(shapeInferenceSeconds() * 1000.0)));
    using Failure = io_detail::ChildServer::Result::Failure;
    switch (r.failure) {
    case Failure::none: break;
    case Failure::cannotStart: throw IoError(path_ + ": cannot check the model's shapes: " + r.detail);
    case Failure::timedOut: {
        std::ostringstream limit;
        limit << shapeInferenceSeconds();
        throw IoError(path_ + ": ONNX's shape inference did not finish in " + limit.str() +
                      " s on this model (TESSERA_ONNX_SHAPE_TIMEOUT)");
    }
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

bool Importer::known(const std::vector<Dim>& dims) {
    for (const Dim& d : dims) {
        if (d.value < 0 && d.symbol.rfind('?', 0) == 0) return false; // not even a named symbol
    }
    return true;
}

// Shapes ONNX's inference leaves open (after a Reshape to a computed shape, say) come
// from the module's own shape inference: each named dim (the batch) stands in as a
// distinct large size and is read back as its symbol.
void Importer::inferShapes(const onnx::NodeProto& n, Module& m, const Parents& parents,
                           const std::vector<std::string>& inputs) {
    bool open = false;
    for (int k = 0; k < n.output_size(); ++k) {
        auto it = shapes_.find(n.output(k));
        open = open || it == shapes_.end() || !known(it->second);
    }
    if (!open) return;
    Shapes in;
    for (const Parent& p : parents) {
        const std::vector<Dim>* dims = nullptr;
        for (const std::string& name : inputs) {
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
        m.checkDataShape(in); // what dataShapeFrom may take for granted (ranks, counts)
        const Shapes out = m.dataShapeFrom(in);
        for (int k = 0; k < n.output_size() && k < static_cast<int>(out.size()); ++k) {
            std::vector<Dim> dims;
            for (size_t d = 0; d < out[k].rank(); ++d) {
                const int64_t v = out[k][static_cast<int64_t>(d)];
                auto sym = standInSymbols_.find(v);
                if (sym != standInSymbols_.end()) {
                    dims.push_back({-1, sym->second});
                } else if (v >= kStandIn) { // a size computed from named ones: its own symbol
                    dims.push_back({-1, computedSymbol(v)});
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

std::string Importer::computedSymbol(int64_t v) {
    auto it = standInSymbols_.find(v);
    if (it != standInSymbols_.end()) return it->second;
    std::string symbol = "="; // not "?": a size known in terms of named ones
    symbol += std::to_string(v);
    standIns_[symbol] = v;
    standInSymbols_[v] = symbol;
    return symbol;
}

std::optional<int64_t> Importer::reshapeRest(const std::string& input, const Constant& shape) {
    const auto in = shapes_.find(input);
    if (in == shapes_.end()) return std::nullopt;
    auto size = [&](const Dim& d) { return d.value >= 0 ? d.value : d.symbol.empty() ? -1 : standIn(d.symbol); };
    int64_t total = 1, product = 1, rests = 0;
    for (const Dim& d : in->second) {
        const int64_t s = size(d);
        if (s < 0 || __builtin_mul_overflow(total, s, &total)) return std::nullopt;
    }
    for (size_t j = 0; j < shape.ints.size(); ++j) {
        int64_t s = shape.symbol(j).empty() ? shape.ints[j] : standIn(shape.symbol(j));
        if (s == -1) { // the one to compute
            ++rests;
            continue;
        }
        if (s == 0) s = j < in->second.size() ? size(in->second[j]) : -1; // the input's size there
        if (s <= 0 || __builtin_mul_overflow(product, s, &product)) return std::nullopt;
    }
    if (rests != 1 || total % product != 0 || total / product >= kStandIn) return std::nullopt;
    return total / product;
}

int64_t Importer::standIn(const std::string& symbol) {
    auto it = standIns_.find(symbol);
    if (it != standIns_.end()) return it->second;
    // far apart, so that a stand-in plus a small size is no other stand-in
    const int64_t v = kStandIn + 1009 * static_cast<int64_t>(standIns_.size());
    standIns_[symbol] = v;
    standInSymbols_[v] = symbol;
    return v;
}

} // namespace tessera::onnx_io

namespace tessera {

// ONNX's shape inference, in the process that serves Importer::inferShapes (an
// io_detail::ChildServer): libonnx reads out of bounds on some malformed nodes (a Conv
// whose weights' rank differs from its input's), and such a crash must be an error about
// the file, not the end of the importing process. A request is a serialized model; the
// answer is '\0' and a GraphProto of the inferred value_info and outputs, or '\1' when
// inference threw or the model does not parse (the declared shapes serve then).
io_detail::Answer io_detail::onnxShapeInference(const std::string& request) {
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
    std::string reply(1, '\0');
    reply += out.SerializeAsString();
    return reply;
}

} // namespace tessera
