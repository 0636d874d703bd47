#pragma once
/// \file What the ONNX importer and exporter share: constants read from TensorProtos, a node's
/// attributes, the Unsupported report, small proto helpers. Private to io/onnx/.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/ActivationParams.h"
#include "backend/Tensor.h"
#include "modules/RNN.h"

namespace tessera::onnx_io {

// A constant: a float tensor (weights) and, for integer and bool data, its values (shapes,
// axes, masks).
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
    bool isBool = false; // integer values (0 or 1) of an ONNX bool tensor

    bool symbolic() const {
        for (const std::string& x : symbols) {
            if (!x.empty()) return true;
        }
        return false;
    }
    std::string symbol(size_t i) const { return i < symbols.size() ? symbols[i] : std::string(); }
};

Shape shapeOf(const onnx::TensorProto& t);
// Integer values as an int32 tensor of `shape` (a scalar as [1]); undefined when one is
// outside int32's range.
Tensor int32Tensor(const std::vector<int64_t>& ints, const Shape& shape);
// ONNX's recurrent gate j is PyTorch's (and Tessera's) gate order[j]: LSTM i o f c <- i f g o;
// GRU z r h <- r z n; one gate for vanilla cells.
std::vector<int64_t> onnxGateOrder(RnnMode mode);

// The activations that are one ONNX op of one input and no attributes, each way.
struct PlainActivationOp {
    ActivationKind kind;
    const char* op;
};
inline constexpr PlainActivationOp kPlainActivationOps[] = {
    {ActivationKind::relu, "Relu"},         {ActivationKind::sigmoid, "Sigmoid"}, {ActivationKind::tanh, "Tanh"},
    {ActivationKind::softPlus, "Softplus"}, {ActivationKind::exp, "Exp"},         {ActivationKind::log, "Log"},
    {ActivationKind::abs, "Abs"},           {ActivationKind::sin, "Sin"},         {ActivationKind::cos, "Cos"},
    {ActivationKind::tan, "Tan"},           {ActivationKind::asin, "Asin"},       {ActivationKind::acos, "Acos"},
    {ActivationKind::atan, "Atan"},         {ActivationKind::sinh, "Sinh"},       {ActivationKind::cosh, "Cosh"},
    {ActivationKind::asinh, "Asinh"},       {ActivationKind::acosh, "Acosh"},     {ActivationKind::atanh, "Atanh"},
    {ActivationKind::erf, "Erf"},           {ActivationKind::sign, "Sign"}};
// Raw or typed data of a TensorProto (`what` names it in errors).
// `mapped`, when not empty, is t's raw data, held outside it (ModelFile::rawData).
Constant constantOf(const onnx::TensorProto& t, const std::string& what, std::string_view mapped = {});
// An ONNX element type's name for messages ("float", "int64", "bool"; "type N" for one ONNX
// does not name).
std::string typeName(int32_t type);

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
std::vector<int64_t> symmetricPads(const std::vector<int64_t>& pads, size_t dims);
void autoPadNotSet(const Attributes& a);

// A window op's padding per spatial dim: the `pads` attribute ([b1, ..., e1, ...]), none
// for auto_pad VALID, or for SAME_UPPER / SAME_LOWER what makes the output ceil(in /
// stride), the odd one at the end (UPPER) or the start (LOWER). `in`: the input's
// spatial dims (-1 where not known at import; SAME needs them).
struct WindowPads {
    std::vector<int64_t> lo, hi;
    // The part both sides share, and what one side adds beyond it (for a Pad layer in
    // front: [lo1 - s1, hi1 - s1, lo2 - s2, ...]; all zeros when symmetric).
    std::vector<int64_t> symmetric() const;
    std::vector<int64_t> extra() const;
    bool asymmetric() const { return lo != hi; }
};
WindowPads windowPads(const Attributes& a, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                      const std::vector<int64_t>& dilation, const std::vector<int64_t>& in);

// A floating initializer of over 1024 elements (dims as declared; none negative).
bool largeFloating(const onnx::TensorProto& t);

// The model in `path` (IoError naming the file when it cannot be read or parsed).
onnx::ModelProto readModel(const std::string& path);
// The same without the initializers' values (their names, types and dims kept): what
// reading a model's inputs or metadata needs, at a fraction of the time and memory.
onnx::ModelProto readModelWithoutWeights(const std::string& path);

class MappedFile;

// An ONNX file mapped into memory and parsed in place. Without `weights` its initializers
// come without their values (names, types and dims kept); with them, the raw data of large
// floating initializers (largeFloating) stays in the mapping, where rawData(i) finds
// initializer i's, to be copied once, into its tensor, by constantOf. IoError naming the
// file when it cannot be read or parsed.
class ModelFile {
public:
    ModelFile(const std::string& path, bool weights);
    ~ModelFile();
    ModelFile(const ModelFile&) = delete;
    ModelFile& operator=(const ModelFile&) = delete;

    onnx::ModelProto model;
    // Initializer i's raw data in the mapping; empty when the TensorProto holds its data.
    std::string_view rawData(int initializer) const;
    // Initializer i's raw data is read (copied into its tensor): its pages leave resident
    // memory (read again, they come back from the file).
    void release(int initializer) const;

private:
    std::shared_ptr<MappedFile> file_;
    std::vector<std::string_view> raw_;
};

// `v`'s type: a tensor of `shape`, every dim its size (the exporter names the ones that
// follow the batch), float, or int32 for int32.
void setType(onnx::ValueInfoProto* v, const Shape& shape, DType dtype = DType::float32);

} // namespace tessera::onnx_io
