#include "io/onnx/Arrays.h"
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
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>

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

int64_t Importer::valuesOf(const std::string& name) const {
    const auto c = constants_.find(name);
    if (c == constants_.end() || c->second.zeros) return 0;
    if (c->second.isInt) return static_cast<int64_t>(c->second.ints.size());
    return c->second.tensor.defined() ? c->second.tensor.numel() : 0;
}

void Importer::requireFoldRoom(int64_t more, const onnx::NodeProto* dropOutputsOf) {
    if (!foldsStopped_ && more <= options_.foldLimit - folded_) return;
    foldsStopped_ = true;
    if (dropOutputsOf != nullptr)
        for (const std::string& out : dropOutputsOf->output()) constants_.erase(out);
    throw Unsupported{"computations on constants of over " + std::to_string(options_.foldLimit) +
                      " values in all (OnnxImportOptions::foldLimit; this one " + std::to_string(more) +
                      ", before it " + std::to_string(folded_) + ")"};
}

// A file's constant computations are bounded in all, not only each: each node's inputs
// and outputs count (a node reading a large constant many times is as slow as one making
// it), checked before a node whose inputs are all constants and after it.
bool Importer::fold(const onnx::NodeProto& n, const Attributes& a) {
    int64_t read = 0;
    bool constant = n.input_size() > 0;
    for (const std::string& in : n.input()) {
        constant = constant && (in.empty() || isConstant(in));
        read += in.empty() ? 0 : valuesOf(in);
    }
    if (constant) requireFoldRoom(read);
    if (!foldNode(n, a)) return false;
    int64_t written = 0;
    for (const std::string& out : n.output()) written += out.empty() ? 0 : valuesOf(out);
    requireFoldRoom(read + written, &n); // past it: no output made, and no more folds
    folded_ += read + written;
    return true;
}

bool Importer::foldNode(const onnx::NodeProto& n, const Attributes& a) {
    const std::string& op = n.op_type();
    if (op == "Shape") {
        a.only({"start", "end"});
        if (isConstant(n.input(0)) && !constants_.at(n.input(0)).zeros) { // a constant's dims
            const Constant& x = constants_.at(n.input(0));
            Constant c;
            c.isInt = true;
            c.ints = x.dims;
            const auto rank = static_cast<int64_t>(x.dims.size());
            auto clampIndex = [&](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
            const int64_t start = clampIndex(a.i("start", 0)), end = clampIndex(a.i("end", rank));
            c.ints = std::vector<int64_t>(x.dims.begin() + start, x.dims.begin() + end);
            c.dims = {static_cast<int64_t>(c.ints.size())};
            return setConstant(n.output(0), std::move(c));
        }
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
    // Every value known and no weight among them: any op evaluated here folds (a weight
    // keeps its computation as layers, so that it stays a parameter). Comparisons fold
    // weights too, their results holding no gradient (a causal mask from a model's buffer,
    // which the file cannot tell from its weights). So does a selection from a weight (a
    // Slice, a Gather by known indices, a Reshape: no layer takes a weight there), whose
    // result is a weight in turn: what reads it learns it (an Add of positional rows).
    bool known = true, weights = false;
    for (const std::string& in : n.input()) {
        if (in.empty()) continue;
        const Constant& c = constants_.at(in);
        const bool weight = !c.isInt && initializers_.count(in) && c.tensor.defined() && c.tensor.numel() > 1;
        known = known && !c.symbolic() && !c.zeros;
        weights = weights || weight;
    }
    const bool comparison = arrays::isComparison(op) || op == "Not";
    const bool selection = op == "Slice" || op == "Gather" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
                           op == "Transpose" || op == "Flatten" || op == "Identity";
    if (known && (!weights || comparison || selection) && evaluate(n, a)) {
        if (weights && selection) {
            initializers_.insert(n.output(0));
            selectedWeights_.insert(n.output(0));
        }
        return true;
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
            c = Constant{
                Tensor::fromVector(Shape(x.dims.empty() ? std::vector<int64_t>{1} : x.dims), v), {}, false, x.dims, {}};
        } else if (!toInt && to != onnx::TensorProto::FLOAT) {
            return false;
        }
        return setConstant(n.output(0), std::move(c));
    }
    if (x.zeros && op == "Slice") return foldZerosSlice(n, a, x);
    if (op == "Mul" && n.input_size() == 2) { // zeros of dims not known at import times a finite number
        for (int k = 0; k < 2; ++k) {
            const Constant &z = constants_.at(n.input(k)), &f = constants_.at(n.input(1 - k));
            const bool finite =
                !f.zeros && !f.symbolic() &&
                (f.isInt ? f.ints.size() == 1
                         : f.tensor.defined() && f.tensor.numel() == 1 && std::isfinite(f.tensor.toVector<float>()[0]));
            if (z.zeros && finite && f.dims.size() <= z.dims.size()) return setConstant(n.output(0), Constant(z));
        }
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
            // Each axis once, of the output's rank, inserted in ascending order (ONNX's meaning
            // of axes given in any order).
            const auto rank = static_cast<int64_t>(x.dims.size() + axes.size());
            for (int64_t& ax : axes) {
                ax = ax < 0 ? ax + rank : ax;
                if (ax < 0 || ax >= rank) throw Unsupported{"an axis out of range"};
            }
            std::sort(axes.begin(), axes.end());
            if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) throw Unsupported{"an axis given twice"};
            for (int64_t ax : axes) c.dims.insert(c.dims.begin() + ax, 1);
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
    if (op == "Reshape" && n.input_size() == 2) { // an integer tensor reshaped (PyTorch flattens shape vectors)
        const Constant& to = constants_.at(n.input(1));
        if (!to.isInt || to.symbolic()) return false;
        std::vector<int64_t> dims = to.ints;
        int64_t known = 1;
        int inferred = -1;
        for (size_t d = 0; d < dims.size(); ++d) {
            if (dims[d] == 0 && d < x.dims.size()) dims[d] = x.dims[d];
            if (dims[d] == -1) {
                if (inferred >= 0) return false;
                inferred = static_cast<int>(d);
            } else {
                known *= dims[d];
            }
        }
        const auto count = static_cast<int64_t>(x.ints.size());
        if (inferred >= 0 && known > 0) dims[static_cast<size_t>(inferred)] = count / known;
        int64_t total = 1;
        for (int64_t d : dims) total *= d;
        if (total != count) return false;
        Constant c = x;
        c.dims = dims;
        return setConstant(n.output(0), std::move(c));
    }
    if ((op == "Equal" || op == "Where") && x.dims.size() <= 1) {
        // shape vectors compared and chosen between (PyTorch's expand(n, -1, -1)): elementwise
        // over vectors of one length (or one element)
        std::vector<const Constant*> in;
        for (int k = 0; k < n.input_size(); ++k) {
            const Constant& c = constants_.at(n.input(k));
            if (!c.isInt || c.dims.size() > 1) return false;
            in.push_back(&c);
        }
        size_t len = 1;
        for (const Constant* c : in) len = std::max(len, c->ints.size());
        for (const Constant* c : in) {
            if (c->ints.size() != len && c->ints.size() != 1) return false;
        }
        auto at = [&](size_t k, size_t i) { return in[k]->ints.size() == 1 ? size_t{0} : i; };
        Constant c;
        c.isInt = true;
        c.dims = {static_cast<int64_t>(len)};
        for (size_t i = 0; i < len; ++i) {
            if (op == "Equal") {
                const std::string sx = in[0]->symbol(at(0, i)), sy = in[1]->symbol(at(1, i));
                const int64_t u = in[0]->ints[at(0, i)], v = in[1]->ints[at(1, i)];
                int64_t r = u == v;
                if (!sx.empty() || !sy.empty()) {
                    if (sx == sy) {
                        r = 1;
                    } else if ((!sx.empty() && sy.empty() && v < 1) || (sx.empty() && !sy.empty() && u < 1)) {
                        r = 0; // a size not known at import is still at least 1
                    } else {
                        return false;
                    }
                }
                c.ints.push_back(r);
                c.symbols.push_back({});
            } else {
                if (!in[0]->symbol(at(0, i)).empty()) return false;
                const size_t k = in[0]->ints[at(0, i)] != 0 ? 1 : 2;
                c.ints.push_back(in[k]->ints[at(k, i)]);
                c.symbols.push_back(in[k]->symbol(at(k, i)));
            }
        }
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
        if ((x.ints.size() != len && x.ints.size() != 1) || (y.ints.size() != len && y.ints.size() != 1)) return false;
        Constant c;
        c.isInt = true;
        c.dims = x.ints.size() == len ? x.dims : y.dims;
        for (size_t i = 0; i < len; ++i) {
            const size_t ix = x.ints.size() == 1 ? 0 : i, iy = y.ints.size() == 1 ? 0 : i;
            if (!x.symbol(ix).empty() || !y.symbol(iy).empty()) { // a dim computed from an unknown one
                // computed on the stand-ins: the same computation gives the same symbol
                const int64_t u = x.symbol(ix).empty() ? x.ints[ix] : standIn(x.symbol(ix));
                const int64_t v = y.symbol(iy).empty() ? y.ints[iy] : standIn(y.symbol(iy));
                const int64_t r = op == "Add"            ? u + v
                                  : op == "Sub"          ? u - v
                                  : op == "Mul"          ? u * v
                                  : v != 0 && u % v == 0 ? u / v
                                                         : -1;
                c.ints.push_back(-1);
                c.symbols.push_back(r >= kStandIn ? computedSymbol(r) : newSymbol());
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
bool Importer::foldFill(const onnx::NodeProto& n, const Attributes& a) {
    const bool expand = n.op_type() == "Expand";
    const Constant& shape = constants_.at(n.input(expand ? 1 : 0));
    if (!shape.isInt) return false;
    float value = 0.0f;
    std::vector<float> values;
    Shape from{1};
    if (expand) {
        const Constant& c = constants_.at(n.input(0));
        if (c.isInt || c.zeros || !c.tensor.defined()) return false;
        // A weight [1, ...] expanded over a batch not known at import (a class token) is
        // learned, even when it starts at zero: importExpand makes it a Parameter.
        if (initializers_.count(n.input(0)) && !shape.symbol(0).empty() && c.dims.size() >= 2 && c.dims[0] == 1)
            return false;
        values = c.tensor.toVector<float>();
        from = Shape(c.dims);
    } else {
        if (const onnx::AttributeProto* v = a.get("value")) {
            const Constant c = constantOf(v->t(), "ConstantOfShape's value");
            if (c.isInt && c.ints.size() == 1 && !shape.symbolic()) { // integers, as a shape computation's
                Constant out;
                out.isInt = true;
                out.dims = shape.ints;
                const int64_t count = arrays::count(shape.ints); // none negative
                if (count > arrays::kMaxElements) {
                    throw Unsupported{"a constant ConstantOfShape to " + Shape(shape.ints).str() +
                                      ", over 2^24 elements"};
                }
                out.ints.assign(static_cast<size_t>(count), c.ints[0]);
                return setConstant(n.output(0), std::move(out));
            }
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
        out.symbols = shape.symbols; // the batch's (a fill shaped like a value, for a Where)
        return constants_[n.output(0)] = out, true;
    }
    const Shape target = expand ? broadcastShapes(from, Shape(shape.ints)) : Shape(shape.ints);
    // At most 2^26 floats (256 MiB: the causal mask of 8192 positions); count: none negative.
    constexpr int64_t kMaxFill = int64_t{1} << 26;
    int64_t elements = 1;
    for (int64_t d : target.dims()) {
        if (d < 0) throw Unsupported{"a constant " + n.op_type() + " to " + target.str() + ", a negative dim"};
        elements = d == 0 ? 0 : (elements > kMaxFill / d ? kMaxFill + 1 : elements * d);
    }
    if (elements > kMaxFill) {
        throw Unsupported{"a constant " + n.op_type() + " to " + target.str() + ", over 2^26 elements"};
    }
    requireFoldRoom(elements);
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

bool Importer::zerosInto(const Constant& c, const std::vector<Dim>& to) const {
    if (c.isInt || (!c.zeros && !c.tensor.defined()) || c.dims.size() > to.size()) return false;
    if (!c.zeros) {
        const std::vector<float> v = c.tensor.toVector<float>();
        if (!std::all_of(v.begin(), v.end(), [](float e) { return e == 0.0f; })) return false;
    }
    const size_t lead = to.size() - c.dims.size();
    for (size_t j = 0; j < c.dims.size(); ++j) {
        const Dim& t = to[lead + j];
        const std::string symbol = c.symbol(j);
        if (symbol.empty() ? c.dims[j] != 1 && c.dims[j] != t.value : symbol != t.symbol) return false;
    }
    return true;
}

// A slice of zeros (of dims not known at import) is zeros of the slice's dims: PyTorch cuts
// each layer's initial states of a multi-layer LSTM out of one ConstantOfShape over the batch.
bool Importer::foldZerosSlice(const onnx::NodeProto& n, const Attributes& a, const Constant& x) {
    const auto rank = static_cast<int64_t>(x.dims.size());
    auto ints = [&](int k, const char* attr) -> std::optional<std::vector<int64_t>> {
        if (n.input_size() > k && !n.input(k).empty()) {
            const Constant& c = constants_.at(n.input(k));
            if (!c.isInt) return std::nullopt;
            return c.ints;
        }
        if (n.input_size() == 1 && a.has(attr)) return a.ints(attr); // opset < 10: attributes
        return std::vector<int64_t>{};
    };
    const auto starts = ints(1, "starts"), ends = ints(2, "ends"), axesGiven = ints(3, "axes"), steps = ints(4, "");
    if (!starts || !ends || !axesGiven || !steps || starts->size() != ends->size()) return false;
    std::vector<int64_t> axes = *axesGiven;
    if (axes.empty()) {
        for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (axes.size() != starts->size() || (!steps->empty() && steps->size() != starts->size())) return false;
    Constant out = x;
    for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t ax = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (ax < 0 || ax >= rank || (!steps->empty() && (*steps)[i] != 1)) return false;
        const int64_t dim = x.dims[static_cast<size_t>(ax)];
        auto at = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
        out.dims[static_cast<size_t>(ax)] = std::max<int64_t>(0, at((*ends)[i]) - at((*starts)[i]));
        if (static_cast<size_t>(ax) < out.symbols.size()) out.symbols[static_cast<size_t>(ax)].clear();
    }
    constants_[n.output(0)] = out;
    return true;
}

bool Importer::setConstant(const std::string& name, Constant c) {
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

} // namespace tessera::onnx_io
