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
#include <set>
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
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/CumSum.h"
#include "modules/Deconv.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/GatherElements.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/Pow.h"
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

// Data gathered by a constant list of indices along an axis (x[:, [2, 1, 0]], a channel
// swap): the axis keeps its place with one element per index. A run that steps evenly (+1
// or -1 and the like) is one Slice with that step; any other list, a Concat of one-element
// Slices.
void Importer::importGatherList(const onnx::NodeProto& n, const Attributes& a, const Constant& idx) {
    const int64_t axis = resolveAxis(n, 0, a.i("axis", 0)), dim = dimOf(n, 0, axis);
    if (dim < 0) throw Unsupported{"a Gather of data by a list of indices along a dim not known at import"};
    std::vector<int64_t> at;
    for (int64_t i : idx.ints) {
        if (i < -dim || i >= dim) {
            throw Unsupported{"index " + std::to_string(i) + " out of range for a dim of " + std::to_string(dim)};
        }
        at.push_back(i < 0 ? i + dim : i);
    }
    const int ax = static_cast<int>(axis);
    const Source s = value(n, 0);
    // indices of several dims: gathered as one list, then the axis reshaped to their dims (the
    // dims before it kept, those after it as the input has them)
    std::shared_ptr<Reshape> unflatten;
    if (idx.dims.size() > 1) {
        const auto in = shapes_.find(n.input(0));
        if (in == shapes_.end())
            throw Unsupported{"indices of several dims on an input of a shape not known at import"};
        std::vector<int64_t> target(static_cast<size_t>(axis), 0);
        target.insert(target.end(), idx.dims.begin(), idx.dims.end());
        int unknown = 0;
        for (size_t d = static_cast<size_t>(axis) + 1; d < in->second.size(); ++d) {
            const int64_t v = in->second[d].value;
            target.push_back(v >= 0 ? v : (++unknown, -1));
        }
        if (unknown > 1) throw Unsupported{"indices of several dims before two dims not known at import"};
        unflatten = std::make_shared<Reshape>(Shape(target));
    }
    auto finish = [&](ModulePtr gather) {
        if (unflatten) {
            auto seq = std::make_shared<Sequential>();
            seq->append(gather).append(unflatten);
            gather = seq;
        }
        return define(n, gather, Parents{Parent(s.node, s.slot)});
    };
    const int64_t step = at.size() > 1 ? at[1] - at[0] : 1;
    bool even = step != 0;
    for (size_t k = 1; even && k < at.size(); ++k) even = at[k] - at[k - 1] == step;
    if (even) {
        // end, exclusive, just past the last index: 0 where nothing lies beyond it (to the
        // end; for a negative step, through index 0); -dim stops before index 0.
        const int64_t last = at.back();
        int64_t end = 0;
        if (step > 0 && last + 1 < dim) end = last + 1;
        if (step < 0 && last + step >= 0) end = last - 1 == 0 ? -dim : last - 1;
        return finish(std::make_shared<Slice>(std::vector<int>{ax}, std::vector<int64_t>{at[0]},
                                              std::vector<int64_t>{end}, SliceOptions{.steps = {step}}));
    }
    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    Parents cat;
    for (size_t k = 0; k < at.size(); ++k) {
        cat.push_back(Parent(tessera::node(std::make_shared<Slice>(ax, at[k], at[k] + 1 == dim ? 0 : at[k] + 1), x,
                                           "index" + std::to_string(k))));
    }
    auto y = tessera::node(std::make_shared<Concat>(ax), cat, "gathered");
    return finish(std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}));
}

// GatherElements of float data by positions that are data (torch.gather(x, dim, idx), the
// positions int64 in the file, int32 in Tessera): Tessera's GatherElements.
void Importer::importGatherElements(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    requireInputsImported(n);
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    if (isConstant(n.input(1)))
        throw Unsupported{"the positions are a constant (positions that are data are supported)"};
    const int32_t type = elemTypeOf(n.input(0));
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::FLOAT16 && type != onnx::TensorProto::BFLOAT16) {
        throw Unsupported{"input 0 is " + typeName(type) + " data (float data is supported)"};
    }
    return define(n, std::make_shared<GatherElements>(static_cast<int>(a.i("axis", 0))), dataInputs(n, {0, 1}));
}

// DepthToSpace (DCR: the block's rows, then its columns, then the channels; CRD: the
// channels first, PyTorch's PixelShuffle at opset 11 on) and SpaceToDepth of [N, C, H, W]: a
// Reshape to six dims, a Transpose and a Reshape back to four, as ONNX defines them. The
// channels and the map known at import.
void Importer::importDepthToSpace(const onnx::NodeProto& n, const Attributes& a) {
    const bool toSpace = n.op_type() == "DepthToSpace";
    if (toSpace) {
        a.only({"blocksize", "mode"});
    } else {
        a.only({"blocksize"});
    }
    requireInputsImported(n);
    if (rankOf(n, 0) != 4) throw Unsupported{"an input whose rank is not 4 ([N, C, H, W] is supported)"};
    const int64_t b = a.i("blocksize", 0), c = dimOf(n, 0, 1), h = dimOf(n, 0, 2), w = dimOf(n, 0, 3);
    if (b < 1) throw Unsupported{"blocksize " + std::to_string(b)};
    if (c < 1 || h < 1 || w < 1) throw Unsupported{"channels and a map not known at import"};
    const std::string mode = a.s("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") throw Unsupported{"mode " + mode + " (DCR and CRD are ONNX's)"};
    std::vector<int64_t> split, perm, joined;
    if (toSpace) {
        if (c % (b * b) != 0) {
            throw Unsupported{std::to_string(c) + " channels for blocksize " + std::to_string(b) + " (a multiple of " +
                              std::to_string(b * b) + " is expected)"};
        }
        const int64_t out = c / (b * b);
        split = mode == "DCR" ? std::vector<int64_t>{0, b, b, out, h, w} : std::vector<int64_t>{0, out, b, b, h, w};
        perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3};
        joined = {0, out, h * b, w * b};
    } else {
        if (h % b != 0 || w % b != 0) {
            throw Unsupported{"a map of " + std::to_string(h) + " x " + std::to_string(w) + " for blocksize " +
                              std::to_string(b) + " (multiples of it are expected)"};
        }
        split = {0, c, h / b, b, w / b, b};
        perm = {0, 3, 5, 1, 2, 4};
        joined = {0, c * b * b, h / b, w / b};
    }
    auto seq = std::make_shared<Sequential>();
    seq->append(std::make_shared<Reshape>(Shape(split)))
        .append(std::make_shared<Transpose>(perm))
        .append(std::make_shared<Reshape>(Shape(joined)));
    return define(n, seq, dataInputs(n, 1));
}

void Importer::importCumSum(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"exclusive", "reverse"});
    requireInputsImported(n);
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    const Constant& axis = requireConstant(n, 1, "the axis");
    if (!axis.isInt || axis.ints.size() != 1) throw Unsupported{"an axis that is not one integer"};
    auto m =
        std::make_shared<CumSum>(static_cast<int>(axis.ints[0]), CumSumOptions{.exclusive = a.i("exclusive", 0) != 0,
                                                                               .reverse = a.i("reverse", 0) != 0});
    if (isIntegerData(n.input(0))) return defineOverIntegers(n, m, {0});
    const int32_t type = elemTypeOf(n.input(0));
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::FLOAT16 && type != onnx::TensorProto::BFLOAT16) {
        throw Unsupported{"input 0 is " + typeName(type) + " data (float and integer data are supported)"};
    }
    return define(n, m, dataInputs(n, std::vector<int>{0}), {n.input(0)});
}

void Importer::importScatterElements(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis", "reduction"});
    requireInputsImported(n);
    for (int k : {0, 1, 2}) {
        if (k >= n.input_size() || isConstant(n.input(k))) {
            throw Unsupported{"input " + std::to_string(k) +
                              " is a constant (data, positions and updates that are "
                              "data are supported)"};
        }
    }
    for (int k : {0, 2}) {
        const int32_t type = elemTypeOf(n.input(k));
        if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::FLOAT16 &&
            type != onnx::TensorProto::BFLOAT16) {
            throw Unsupported{"input " + std::to_string(k) + " is " + typeName(type) +
                              " data (float data is supported)"};
        }
    }
    const std::string reduction = a.s("reduction", "none");
    if (reduction != "none" && reduction != "add") {
        throw Unsupported{"reduction '" + reduction + "' (none and add are supported)"};
    }
    return define(n, std::make_shared<ScatterElements>(static_cast<int>(a.i("axis", 0)), reduction == "add"),
                  dataInputs(n, {0, 1, 2}));
}

// Gather from a constant table [V, E] by data ids [N, L] along axis 0: an Embedder.
void Importer::importGather(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    requireInputsImported(n);
    // Float data (not a constant) by a constant list of indices (of any rank but 0) along a dim
    // after the batch.
    {
        const auto type = elemTypes_.find(n.input(0));
        const bool floating = type != elemTypes_.end() && type->second == onnx::TensorProto::FLOAT;
        // the indices a constant, or a graph input given a value (ONNX's test cases)
        const bool known = isConstant(n.input(1))
                               ? constants_.at(n.input(1)).isInt
                               : options_.inputValues.count(n.input(1)) && isIntegerType(elemTypeOf(n.input(1)));
        const bool listed = !isConstant(n.input(0)) && floating && known && resolveAxis(n, 0, a.i("axis", 0)) > 0;
        const Constant* idx = listed ? constant(n.input(1)) : nullptr;
        if (idx && idx->isInt && !idx->dims.empty() && !idx->ints.empty()) return importGatherList(n, a, *idx);
    }
    // Rows of float data [R, E] picked by integer data [K] (x[rows, index] flattened, as
    // x[torch.arange(N), last] exports at a fixed N): the ids as a column, tiled to [K, E], and a
    // GatherElements along the rows; its gradient adds dy into the rows picked.
    {
        const auto table = shapes_.find(n.input(0)), ids = shapes_.find(n.input(1));
        const auto type = elemTypes_.find(n.input(0));
        if (!isConstant(n.input(0)) && !isConstant(n.input(1)) && isIntegerData(n.input(1)) &&
            type != elemTypes_.end() && type->second == onnx::TensorProto::FLOAT && table != shapes_.end() &&
            ids != shapes_.end() && table->second.size() == 2 && ids->second.size() == 1 &&
            table->second[1].value > 0 && resolveAxis(n, 0, a.i("axis", 0)) == 0) {
            auto rows = tessera::node(std::make_shared<Identity>(), {}, "rows");
            auto index = tessera::node(std::make_shared<Identity>(), {}, "index");
            auto column = tessera::node(std::make_shared<Reshape>(Shape{0, 1}), {index}, "column");
            auto tiled = tessera::node(std::make_shared<Tile>(1, table->second[1].value), {column}, "tiled");
            auto picked = tessera::node(std::make_shared<GatherElements>(0), {rows, tiled}, "picked");
            return define(n, std::make_shared<Graph>(std::vector<NodePtr>{rows, index}, std::vector<NodePtr>{picked}),
                          dataInputs(n, {0, 1}));
        }
    }
    if (!isConstant(n.input(0)) && !options_.inputValues.count(n.input(0))) {
        // One constant index of data (x[-1], as exporters write a sequence's last step): a
        // Slice of that index, then a Reshape without the axis.
        const Constant* idx = isConstant(n.input(1)) ? &constants_.at(n.input(1)) : nullptr;
        if (!idx || !idx->isInt || idx->ints.size() != 1 || !idx->dims.empty())
            throw Unsupported{"a Gather of data by other than constant indices (one, or a list along a dim after "
                              "the batch), or than integer data picking rows of a matrix (Gathers from a constant "
                              "table, and of shape values, are supported)"};
        const int64_t axis = resolveAxis(n, 0, a.i("axis", 0)), i = idx->ints[0];
        // then the axis dropped: the dims before it kept, those after it as the input has them
        ModulePtr drop;
        const auto in = shapes_.find(n.input(0));
        if (in != shapes_.end() && axis >= 0 && axis < static_cast<int64_t>(in->second.size())) {
            std::vector<int64_t> target;
            int unknown = 0;
            for (int64_t d = 0; d < static_cast<int64_t>(in->second.size()); ++d) {
                const int64_t v = in->second[static_cast<size_t>(d)].value;
                if (d < axis) target.push_back(0);
                if (d > axis) target.push_back(v >= 0 ? v : (++unknown, -1));
            }
            if (unknown <= 1) drop = std::make_shared<Reshape>(Shape(target));
        }
        auto seq = std::make_shared<Sequential>();
        seq->append(std::make_shared<Slice>(static_cast<int>(axis), i, i == -1 ? 0 : i + 1))
            .append(drop ? drop : reshapeTo(n));
        Source s = value(n, 0);
        return define(n, seq, Parents{Parent(s.node, s.slot)});
    }
    if (a.i("axis", 0) != 0) throw Unsupported{"axis " + std::to_string(a.i("axis", 0)) + " (0 is supported)"};
    if (isIntegerData(n.input(1))) {
        const Constant* c = constant(n.input(0));
        if (c && !c->isInt && !c->zeros && !c->symbolic() && c->tensor.defined() && c->dims.size() == 1) {
            return importGatherFromVector(n, *c);
        }
    }
    const Constant& table = requireConstant(n, 0, "the table");
    if (table.isInt || table.tensor.shape().rank() != 2)
        throw Unsupported{"a table of shape " + Shape(table.dims).str() + " (a float [V, E] is supported)"};
    auto ids = shapes_.find(n.input(1));
    if (ids == shapes_.end() || ids->second.size() != 2 || ids->second[1].value < 0)
        throw Unsupported{"ids whose shape the model does not declare as [N, L]"};
    const int64_t vocabulary = table.tensor.shape()[0], embsize = table.tensor.shape()[1];
    const auto pad = paddingIdx_.find(n.input(0));
    auto m = std::make_shared<Embedder>(
        vocabulary, ids->second[1].value, embsize,
        EmbedderOptions{.initscheme = InitScheme::none,
                        .paddingIdx = pad == paddingIdx_.end() ? std::nullopt : std::optional<int64_t>(pad->second)});
    m->getVar("W")->data.copyFrom(table.tensor);
    Source s = value(n, 1);
    define(n, m, Parents{Parent(s.node, s.slot)});
    embedders_.push_back(values_.at(n.output(0)).node->modulePtr()); // m, or an earlier one it is (sharedLayer)
}

// Gather from a constant vector w [V] by integer data t of any shape S (a class weight per
// label, w[labels]): t as [S..., 1] indexes, along the last dim, w laid over [S..., V] (ones
// of t's shape tiled V times, times w), by a GatherElements; then the dim of 1 goes. A
// negative index counts from the end, as ONNX says: t + V clip(-t, 0, 1), in float (exact
// for indices below 2^24). One outside [-V, V) fails when the layer runs, naming it.
void Importer::importGatherFromVector(const onnx::NodeProto& n, const Constant& table) {
    const int64_t rank = rankOf(n, 1);
    if (rank < 1) throw Unsupported{"indices whose rank is not known at import, or scalar indices"};
    const int64_t size = table.dims[0];
    std::vector<int64_t> withOne(static_cast<size_t>(rank), 0), same(static_cast<size_t>(rank), 0);
    withOne.push_back(1); // 0 keeps the input's dim at that position
    const int last = static_cast<int>(rank);
    auto ids = tessera::node(std::make_shared<Identity>(), {}, "ids");
    auto floats = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {ids}, "float_ids");
    auto minus = tessera::node(std::make_shared<MulAddConst>(-1.0f, 0.0f), {floats}, "minus");
    auto negative =
        tessera::node(std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = 0.0f, .max = 1.0f}),
                      {minus}, "negative");
    auto wrap = tessera::node(std::make_shared<MulAddConst>(static_cast<float>(size), 0.0f), {negative}, "wrap");
    auto wrapped = tessera::node(std::make_shared<Add>(), {floats, wrap}, "wrapped");
    auto positions = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {wrapped}, "positions");
    auto index = tessera::node(std::make_shared<Reshape>(Shape(withOne)), {positions}, "index");
    auto ones = tessera::node(std::make_shared<MulAddConst>(0.0f, 1.0f), {floats}, "ones");
    auto column = tessera::node(std::make_shared<Reshape>(Shape(withOne)), {ones}, "ones_column");
    auto tiled = tessera::node(std::make_shared<Tile>(last, size), {column}, "ones_per_entry");
    auto laid =
        tessera::node(std::make_shared<MulAddConst>(table.tensor.convertedTo(DType::float32), Tensor::zeros(Shape{1})),
                      {tiled}, "table");
    auto picked = tessera::node(std::make_shared<GatherElements>(last), {laid, index}, "picked");
    auto y = tessera::node(std::make_shared<Reshape>(Shape(same)), {picked}, "entries");
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{ids}, std::vector<NodePtr>{y}),
                  dataInputs(n, std::vector<int>{1}), {n.input(1)});
}

void Importer::importExpand(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    const Constant* c = isConstant(n.input(0)) ? &constants_.at(n.input(0)) : nullptr;
    const auto type = elemTypes_.find(n.input(0));
    // Float data, or a bool or integer mask (int32 in Tessera)
    const bool expandable =
        type != elemTypes_.end() && (type->second == onnx::TensorProto::FLOAT || isIntegerType(type->second));
    if (!c && expandable) {
        requireInputsImported(n);
        return importExpandOfData(n);
    }
    const Constant& shape = requireConstant(n, 1, "the shape");
    // An integer constant expanded along its dims of 1 and read only by ops that broadcast
    // (`arange(T).expand(N, T) < lengths[:, None]`): the constant itself, which their
    // broadcasting expands the same way.
    if (c && c->isInt && !c->symbolic() && shape.isInt && shape.ints.size() >= c->dims.size()) {
        Constant same = *c; // of the shape's rank: dims of 1 in front
        same.dims.insert(same.dims.begin(), shape.ints.size() - c->dims.size(), 1);
        static const std::set<std::string> broadcasting = {"Equal",          "Less", "LessOrEqual", "Greater",
                                                           "GreaterOrEqual", "And",  "Or",          "Xor"};
        bool alongOnes = true;
        for (size_t k = 0; k < same.dims.size(); ++k) {
            const bool known = shape.symbol(k).empty();
            alongOnes = alongOnes && (!known || shape.ints[k] >= 1) &&
                        (same.dims[k] == 1 || (known && (shape.ints[k] == same.dims[k] || shape.ints[k] == 1)));
        }
        bool broadcastReaders = true;
        for (const onnx::NodeProto& r : model_.graph().node()) {
            for (const std::string& in : r.input()) {
                if (in == n.output(0)) broadcastReaders = broadcastReaders && broadcasting.count(r.op_type()) > 0;
            }
        }
        if (alongOnes && broadcastReaders) {
            constants_[n.output(0)] = std::move(same);
            return;
        }
    }
    if (!c || c->isInt || !c->tensor.defined()) {
        throw Unsupported{"an Expand of an integer constant, or of data not float32, bool or integer (data, a float "
                          "constant expanded over the batch such as a class token, and an integer constant read "
                          "only by comparisons, are supported)"};
    }
    const std::vector<int64_t>& from = c->dims;
    bool fits = shape.isInt && from.size() == shape.ints.size() && !from.empty() && from[0] == 1;
    for (size_t k = 1; fits && k < from.size(); ++k) {
        fits = shape.symbol(k).empty() && (shape.ints[k] == from[k] || shape.ints[k] == 1);
    }
    if (!fits) {
        throw Unsupported{"an Expand of a constant " + Shape(from).str() +
                          " to other than its own shape over the batch (a constant [1, ...] to [batch, ...] is "
                          "supported)"};
    }
    // the graph input whose first dim is that batch
    std::string batchOf;
    for (const onnx::ValueInfoProto& in : model_.graph().input()) {
        auto it = shapes_.find(in.name());
        if (isConstant(in.name()) || it == shapes_.end() || it->second.empty() || !values_.count(in.name())) continue;
        const Dim& d = it->second[0];
        if (shape.symbol(0).empty() ? d.symbol.empty() && d.value == shape.ints[0] : d.symbol == shape.symbol(0)) {
            batchOf = in.name();
            break;
        }
    }
    if (batchOf.empty()) {
        throw Unsupported{"an Expand over a first dim that is no graph input's batch (" +
                          (shape.symbol(0).empty() ? std::to_string(shape.ints[0]) : shape.symbol(0)) + ")"};
    }
    const std::vector<int64_t> rest(from.begin() + 1, from.end());
    auto m = std::make_shared<Parameter>(rest);
    m->getVar("weight")->data.copyFrom(c->tensor.reshape(Shape(rest)));
    Source s = value(batchOf, 0);
    return define(n, m, Parents{Parent(s.node, s.slot)}, {batchOf});
}

// Float data broadcast to a shape of its own rank (x.expand(...), expand_as): each dim of 1
// the shape makes larger is a Tile along it; the first dim (the batch) and the others stay
// (a shape's 1 keeps the input's dim, as ONNX's broadcasting reads it).
void Importer::importExpandOfData(const onnx::NodeProto& n) {
    const Constant& shape = requireConstant(n, 1, "the shape");
    const auto in = shapes_.find(n.input(0));
    if (!shape.isInt || in == shapes_.end() || shape.ints.size() != in->second.size()) {
        throw Unsupported{"an Expand of data to a shape of " + std::to_string(shape.ints.size()) +
                          " dims from an input of " +
                          (in == shapes_.end() ? std::string("a rank not known at import")
                                               : std::to_string(in->second.size()) + " dims") +
                          " (data to a shape of its own rank is supported)"};
    }
    std::vector<ModulePtr> tiles;
    for (size_t k = 0; k < shape.ints.size(); ++k) {
        const Dim& d = in->second[k];
        const std::string& symbol = shape.symbol(k);
        const int64_t target = shape.ints[k];
        const bool same = symbol.empty() ? target == 1 || (d.symbol.empty() && d.value == target) : symbol == d.symbol;
        if (same) continue;
        const std::string to = symbol.empty() ? std::to_string(target) : symbol;
        if (k == 0) throw Unsupported{"an Expand of data along its first dim (the batch) to " + to};
        if (!symbol.empty() || d.value != 1) {
            throw Unsupported{"an Expand of data along dim " + std::to_string(k) + " of " +
                              (d.symbol.empty()
                                   ? (d.value < 0 ? std::string("a size not known at import") : std::to_string(d.value))
                                   : d.symbol) +
                              " to " + to + " (a dim of 1 to a size known at import is supported)"};
        }
        tiles.push_back(std::make_shared<Tile>(static_cast<int>(k), target));
    }
    if (tiles.empty()) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    if (tiles.size() == 1) return define(n, tiles[0], dataInputs(n, 1));
    auto seq = std::make_shared<Sequential>();
    for (const ModulePtr& t : tiles) seq->append(t);
    return define(n, seq, dataInputs(n, 1));
}

// Slice on data: any sliced axes, any steps but 0 (Tessera's Slice).
void Importer::importSlice(const onnx::NodeProto& n, const Attributes& a) {
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
    std::vector<int> sliced;
    if (!steps.empty() && steps.size() != axes.size()) throw Unsupported{"steps and axes differ in length"};
    std::vector<int64_t> sliceStarts, sliceEnds, sliceSteps;
    for (size_t k = 0; k < axes.size(); ++k) {
        const int64_t step = steps.empty() ? 1 : steps[k];
        if (step == 0) throw Unsupported{"a step of 0"};
        const int64_t axis = resolveAxis(n, 0, axes[k]);
        int64_t dim = -1;
        if (in != shapes_.end() && axis < static_cast<int64_t>(in->second.size()))
            dim = in->second[static_cast<size_t>(axis)].value;
        if (step < 0) {
            // ONNX clamps a backward start to [0, D - 1] and end to [-1, D - 1] (negative ones
            // plus D first): an end below -D reaches index 0, Tessera's end 0; ONNX's end 0
            // stops before index 0, Tessera's -D.
            if (std::find(sliced.begin(), sliced.end(), static_cast<int>(axis)) != sliced.end())
                throw Unsupported{"axis " + std::to_string(axis) + " is sliced twice"};
            const int64_t e = ends[k], s = starts[k];
            const bool throughZero = dim >= 0 ? e < -dim : e <= std::numeric_limits<int32_t>::min();
            if (!throughZero && e == 0 && dim < 0)
                throw Unsupported{"a backward slice ending at index 0 of an axis of unknown size"};
            sliced.push_back(static_cast<int>(axis));
            sliceStarts.push_back(dim >= 0 && s < -dim ? 0 : s);
            sliceEnds.push_back(throughZero ? 0 : e == 0 ? -dim : e);
            sliceSteps.push_back(step);
            continue;
        }
        int64_t e = ends[k];
        const bool toEnd = e >= std::numeric_limits<int32_t>::max() || (dim >= 0 && e >= dim);
        if (starts[k] == 0 && toEnd && step == 1) continue; // the whole axis
        if (std::find(sliced.begin(), sliced.end(), static_cast<int>(axis)) != sliced.end())
            throw Unsupported{"axis " + std::to_string(axis) + " is sliced twice"};
        const int64_t end = toEnd ? 0 : e;
        if (end == 0 && !toEnd) throw Unsupported{"an empty slice"};
        sliced.push_back(static_cast<int>(axis));
        sliceStarts.push_back(starts[k]);
        sliceEnds.push_back(end);
        sliceSteps.push_back(step);
    }
    if (sliced.empty()) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    return define(n, std::make_shared<Slice>(sliced, sliceStarts, sliceEnds, SliceOptions{.steps = sliceSteps}),
                  dataInputs(n, 1));
}

// The axes of a Reduce* node (its attribute, or from opset 13/18 its constant input 1; none:
// every dim), after checking its attributes and inputs.
std::vector<int64_t> Importer::reduceAxes(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axes", "keepdims", "noop_with_empty_axes"});
    requireInputsImported(n);
    if (a.i("noop_with_empty_axes", 0) != 0) throw Unsupported{"noop_with_empty_axes 1 is not supported"};
    if (n.input_size() > 1 && !n.input(1).empty()) return requireInts(n, 1, "the axes");
    return a.ints("axes");
}

// ReduceMean: over every spatial dim of [N, C, ...] a global average pool (flattened to
// [N, C] without keepdims); over other dims Tessera's ReduceMean.
void Importer::importReduceMean(const onnx::NodeProto& n, const Attributes& a) {
    const std::vector<int64_t> axes = reduceAxes(n, a);
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

// ReduceSum, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum: Tessera's ReduceSum, after a
// Pow(2) for the squares or an Abs for L1, with a Pow(0.5) after it for L2 and a Log for
// LogSum; over any axes, the batch and dims whose size is known only at run time included.
void Importer::importReduceSum(const onnx::NodeProto& n, const Attributes& a) {
    const std::vector<int64_t> axes = reduceAxes(n, a);
    const bool keep = a.i("keepdims", 1) != 0;
    const std::string& op = n.op_type();
    auto seq = std::make_shared<Sequential>();
    if (op == "ReduceSumSquare" || op == "ReduceL2") seq->append(std::make_shared<Pow>(2.0f));
    if (op == "ReduceL1") seq->append(std::make_shared<Activation>(ActivationKind::abs));
    seq->append(std::make_shared<ReduceSum>(axes, keep));
    if (op == "ReduceL2") seq->append(std::make_shared<Pow>(0.5f));
    if (op == "ReduceLogSum") seq->append(std::make_shared<Activation>(ActivationKind::log));
    if (op == "ReduceSum" && isIntegerData(n.input(0))) return defineOverIntegers(n, seq, {0}); // mask.sum(1)
    if (seq->size() == 1) return define(n, seq->childPtr(0), dataInputs(n, 1));
    return define(n, seq, dataInputs(n, 1));
}

// Trilu of data (torch.triu, torch.tril): the data times a constant mask of its last two dims
// (known at import), 1 on and above diagonal k (upper) or on and below it, 0 elsewhere
// (MulAddConst); integer data between Casts to float and back. An infinite or NaN value
// outside the triangle gives NaN (0 times it), not 0.
void Importer::importTrilu(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"upper"});
    requireInputsImported(n);
    int64_t k = 0;
    if (n.input_size() > 1 && !n.input(1).empty()) {
        const std::vector<int64_t> ks = requireInts(n, 1, "k");
        if (ks.size() != 1) throw Unsupported{"k must hold one value; it holds " + std::to_string(ks.size())};
        k = ks[0];
    }
    const int64_t rank = rankOf(n, 0);
    if (rank < 2) throw Unsupported{"an input of fewer than 2 dims, or of a rank not known at import"};
    const int64_t rows = dimOf(n, 0, rank - 2), cols = dimOf(n, 0, rank - 1);
    if (rows <= 0 || cols <= 0) throw Unsupported{"the last two dims must be known at import and not 0"};
    const bool upper = a.i("upper", 1) != 0;
    std::vector<float> mask(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) mask[static_cast<size_t>(i * cols + j)] = (upper ? j - i >= k : j - i <= k);
    }
    auto m = std::make_shared<MulAddConst>(Tensor::fromVector({rows, cols}, mask), Tensor::zeros({1}));
    if (isIntegerData(n.input(0))) return defineOverIntegers(n, m, {0});
    return define(n, m, dataInputs(n, 1));
}

// Where(cond, x, y) with a condition known at import and one data operand, the other a
// float constant: a masked fill (PyTorch's masked_fill, as a causal mask's -inf is
// written), d * keep + fill (MulAddConst), keep being 1 where the data is taken and 0
// elsewhere, fill the constant where it is taken and 0 elsewhere. The condition and the
// constant broadcast to the data's shape without changing it. An infinite constant is
// added instead (keep 1 there): -inf stays -inf over data that is already -inf (a second
// mask over a first), where a product by 0 would make NaN; the gradient there is then
// passed on, which whatever reads an infinite fill zeroes (a softmax, an exp, a max).
// Elsewhere a NaN or infinite data value where the constant is taken gives NaN.
void Importer::importWhere(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    if (n.input_size() != 3) throw Unsupported{"expects 3 inputs, got " + std::to_string(n.input_size())};
    if (!isConstant(n.input(0))) return importWhereOfData(n);
    if (isConstant(n.input(1)) == isConstant(n.input(2))) {
        throw Unsupported{"two data operands (one data operand and one constant are supported)"};
    }
    requireInputsImported(n);
    const bool dataFirst = !isConstant(n.input(1)); // Where(cond, data, c); else Where(cond, c, data)
    const int k = dataFirst ? 2 : 1, d = 3 - k;
    const Constant& cond = constants_.at(n.input(0));
    const Constant& c = requireConstant(n, k, "the constant operand");
    if (cond.symbolic() || cond.zeros || (!cond.isInt && !cond.tensor.defined())) {
        throw Unsupported{"a condition whose shape is not known at import"};
    }
    if (c.isInt || !c.tensor.defined()) {
        throw Unsupported{"input " + std::to_string(k) + " is a constant of " +
                          (c.isInt ? "integers" : "a shape known only at run time") +
                          " (float constants are supported)"};
    }
    const auto data = shapes_.find(n.input(d));
    if (data == shapes_.end()) throw Unsupported{"a data operand whose rank the model does not declare"};
    const std::vector<Dim>& to = data->second;
    // The constants' common shape, aligned from the right with the data's.
    const arrays::Array condValues = arrays::arrayOf(cond), fillValues = arrays::arrayOf(c);
    const std::vector<int64_t> dims = arrays::broadcast({&condValues, &fillValues});
    const size_t rank = dims.size();
    bool fits = rank <= to.size();
    for (size_t j = 0; fits && j < rank; ++j) {
        const Dim& t = to[to.size() - rank + j];
        fits = dims[j] == 1 || (t.symbol.empty() && t.value == dims[j]);
    }
    if (!fits) {
        throw Unsupported{"a condition or constant of shape " + Shape(dims).str() +
                          " that would change the data's shape (one that broadcasts to it is supported)"};
    }
    // keep, or fill, at each element of the common shape (at: the element in cond, in c)
    auto constant = [&](bool keep) {
        auto element = [&](const std::vector<int64_t>& at) {
            const bool taken = (condValues.v[static_cast<size_t>(at[0])] != 0) == dataFirst; // data taken
            const double v = fillValues.v[static_cast<size_t>(at[1])];
            if (keep) return taken || std::isinf(v) ? 1.0 : 0.0;
            return taken ? 0.0 : v;
        };
        return arrays::constantOf(arrays::elementwise({&condValues, &fillValues}, arrays::Kind::floating, element))
            .tensor;
    };
    const Source s = value(n, d);
    return define(n, std::make_shared<MulAddConst>(constant(true), constant(false)), Parents{Parent(s.node, s.slot)});
}

// Pad: spatial dims only (Tessera's PadND), constant, reflect or edge.
void Importer::importPad(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"mode", "pads", "value"});
    const std::string mode = a.s("mode", "constant");
    PadMode padMode = PadMode::constant;
    try {
        padMode = padModeFromString(mode);
    } catch (const ModuleError&) {
        throw Unsupported{"mode " + mode + " (constant, reflect and edge are supported)"};
    }
    std::vector<int64_t> pads = a.ints("pads");
    float value = a.f("value", 0.0f);
    if (n.input_size() > 1 && !n.input(1).empty()) pads = requireInts(n, 1, "the pads");
    if (n.input_size() > 2 && !n.input(2).empty()) value = requireScalar(n, 2, "the constant value");
    if (n.input_size() > 3 && !n.input(3).empty()) throw Unsupported{"the axes input is not supported"};
    const size_t rank = pads.size() / 2;
    if (pads.size() % 2) throw Unsupported{"an odd number of pads (" + std::to_string(pads.size()) + ")"};
    for (int64_t p : pads) {
        if (p < 0) throw Unsupported{"negative pads (cropping) are not supported"};
    }
    if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
        return define(n, std::make_shared<Identity>(), dataInputs(n, 1)); // nothing padded (sizes already multiples)
    }
    if (pads[0] || pads[rank]) throw Unsupported{"padding the batch dim is not supported"};
    // The padded dims, and the one other dim that stays (the channels, first or last).
    std::vector<int64_t> padded, kept;
    for (size_t d = 1; d < rank; ++d) (pads[d] || pads[rank + d] ? padded : kept).push_back(static_cast<int64_t>(d));
    if (kept.size() != 1 || padded.size() > 2) {
        throw Unsupported{"pads for rank " + std::to_string(rank) + " on " + std::to_string(padded.size()) +
                          " dims (one or two spatial dims of [N, C, ...] or [N, ..., C] are supported)"};
    }
    std::vector<int64_t> loHi; // (lo, hi) per padded dim
    for (int64_t d : padded) {
        loHi.push_back(pads[static_cast<size_t>(d)]);
        loHi.push_back(pads[rank + static_cast<size_t>(d)]);
    }
    const PadOptions o{.mode = padMode, .fillValue = value};
    ModulePtr pad;
    if (padded.size() == 1) pad = std::make_shared<Pad1D>(loHi, o);
    if (padded.size() == 2) pad = std::make_shared<Pad2D>(loHi, o);
    // integer data (int32 in Tessera) padded as float between Casts, exact below 2^24
    auto emit = [&](ModulePtr m) {
        return isIntegerData(n.input(0)) ? defineOverIntegers(n, std::move(m), {0}) : define(n, m, dataInputs(n, 1));
    };
    if (kept[0] == 1) return emit(pad); // [N, C, ...]
    // Channels elsewhere ([N, H, W, C]): moved to dim 1 around the pad.
    std::vector<int64_t> there = {0, kept[0]}, back(rank);
    there.insert(there.end(), padded.begin(), padded.end());
    for (size_t d = 0; d < rank; ++d) back[static_cast<size_t>(there[d])] = static_cast<int64_t>(d);
    auto seq = std::make_shared<Sequential>();
    seq->append(std::make_shared<Transpose>(there)).append(pad).append(std::make_shared<Transpose>(back));
    return emit(seq);
}

// Upsample (opset 7 to 9) and Resize: nearest or linear with one integer scale over the
// spatial dims; nearest with an integer scale per dim.
// Resize's sizes as the scales from the input's shape: the batch and channel dims kept
// (the same size or symbol), each spatial one a whole multiple of the input's (PyTorch's
// F.interpolate(x, size=...) to a multiple, as segmentation heads upsample to the image).
// The scales (or sizes) of a Resize or Upsample: the scale per dim, and the output's
// spatial dims where the input's are known (from scales only where each gives a whole size:
// ONNX samples with the scale given, which is out / in only then).
Importer::ResizeTarget Importer::resizeTarget(const onnx::NodeProto& n, const Attributes& a, bool resize) {
    ResizeTarget t;
    const auto in = shapes_.find(n.input(0));
    if (resize && n.input_size() > 3 && !n.input(3).empty()) {
        const Constant& sizes = requireConstant(n, 3, "the sizes");
        if (!sizes.isInt || in == shapes_.end() || in->second.size() != sizes.ints.size()) {
            throw Unsupported{"sizes for an input whose shape is not known at import"};
        }
        for (size_t d = 0; d < sizes.ints.size(); ++d) {
            const Dim& dim = in->second[d];
            const bool same =
                sizes.symbol(d).empty() ? dim.value >= 0 && dim.value == sizes.ints[d] : dim.symbol == sizes.symbol(d);
            if (d < 2) {
                if (!same) throw Unsupported{"sizes of the batch or channel dim"};
                t.scales.push_back(1.0f);
                continue;
            }
            if (!sizes.symbol(d).empty() || sizes.ints[d] < 1 || dim.value < 1) {
                throw Unsupported{"a size of spatial dim " + std::to_string(d) + " not known at import"};
            }
            t.spatial.push_back(sizes.ints[d]);
            t.scales.push_back(sizes.ints[d] % dim.value == 0 ? static_cast<float>(sizes.ints[d] / dim.value) : 0.0f);
        }
        return t;
    }
    if (!resize && a.has("scales")) {
        const onnx::AttributeProto* sc = a.get("scales");
        t.scales.assign(sc->floats().begin(), sc->floats().end());
    } else {
        t.scales = requireConstant(n, resize ? 2 : 1, "the scales").tensor.toVector<float>();
    }
    if (t.scales.size() < 3 || t.scales[0] != 1 || t.scales[1] != 1) {
        throw Unsupported{"scales of the batch or channel dim"};
    }
    if (in == shapes_.end() || in->second.size() != t.scales.size()) {
        t.unknown = "the input's spatial dims are not known at import";
        return t;
    }
    for (size_t d = 2; d < t.scales.size(); ++d) {
        const int64_t v = in->second[d].value;
        const double out = static_cast<double>(v) * t.scales[d];
        const double whole = std::round(out);
        if (v < 1 || whole < 1 || std::abs(out - whole) > 1e-4) {
            t.unknown = v < 1
                            ? "the input's spatial dims are not known at import"
                            : "a scale of " + std::to_string(t.scales[d]) + " gives a size of " + std::to_string(out) +
                                  " for dim " + std::to_string(d) + " (scales that give whole sizes are supported)";
            t.spatial.clear();
            return t;
        }
        t.spatial.push_back(static_cast<int64_t>(whole));
    }
    return t;
}

void Importer::importResize(const onnx::NodeProto& n, const Attributes& a) {
    const bool resize = n.op_type() == "Resize";
    if (resize) {
        a.only({"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                "extrapolation_value"});
    } else {
        a.only({"mode", "scales"});
    }
    const std::string mode = a.s("mode", "nearest");
    const bool cubic = mode == "cubic" && resize;
    if (mode != "nearest" && mode != "linear" && !cubic && !(mode == "bilinear" && !resize))
        throw Unsupported{"mode " + mode + " (nearest, linear and cubic are supported)"};
    if (cubic && (a.f("cubic_coeff_a", -0.75f) != -0.75f || a.i("exclude_outside", 0) != 0)) {
        throw Unsupported{"cubic with cubic_coeff_a " + std::to_string(a.f("cubic_coeff_a", -0.75f)) +
                          " and exclude_outside " + std::to_string(a.i("exclude_outside", 0)) +
                          " (-0.75 and 0, PyTorch's bicubic, are supported)"};
    }
    const bool linear = mode != "nearest"; // or cubic: interpolated
    const std::string ctm = a.s("coordinate_transformation_mode", resize ? "half_pixel" : "asymmetric");
    bool align = false, anyRatio = true; // anyRatio: nearest's rule is floor(o * in / out)
    bool centred = false;                // half-pixel centres rounded: nearest-exact's rule
    std::string nm;
    if (linear && resize) { // half-pixel centres, or the corners aligned
        align = ctm == "align_corners";
        if (ctm != "half_pixel" && ctm != "pytorch_half_pixel" && !align)
            throw Unsupported{mode + " with coordinate_transformation_mode " + ctm +
                              " (half_pixel, pytorch_half_pixel and align_corners are supported)"};
    } else if (linear) {
        throw Unsupported{"Upsample's linear mode (asymmetric coordinates) is not supported"};
    } else if (resize) {
        nm = a.s("nearest_mode", "round_prefer_floor");
        // Asymmetric with floor is floor(o * in / out) (PyTorch's export); half-pixel centres
        // rounded pick the same inputs at whole upscales, and are nearest-exact's
        // floor((o + 0.5) * in / out) at any ratio with round_prefer_ceil (and with
        // round_prefer_floor where no output centre falls halfway between two inputs).
        anyRatio = ctm == "asymmetric" && nm == "floor";
        centred = ctm == "half_pixel" && (nm == "round_prefer_ceil" || nm == "round_prefer_floor");
        if (!anyRatio && !(ctm == "half_pixel" && nm != "ceil")) {
            throw Unsupported{"coordinate_transformation_mode " + ctm + " with nearest_mode " + nm};
        }
    }
    const ResizeTarget t = resizeTarget(n, a, resize);
    const std::vector<float>& scales = t.scales;
    const UpsampleOptions o{.mode =
                                cubic ? ResampleMode::cubic : (linear ? ResampleMode::linear : ResampleMode::nearest),
                            .alignCorners = align};
    bool whole = true, equal = true;
    for (size_t d = 2; d < scales.size(); ++d) {
        whole = whole && scales[d] >= 1 && scales[d] == std::floor(scales[d]);
        equal = equal && scales[d] == scales[2];
    }
    if (scales.size() != 4 && scales.size() != 5) {
        throw Unsupported{"rank " + std::to_string(scales.size()) + " (4 and 5 are supported)"};
    }
    if (whole && equal) {
        const auto s = static_cast<int64_t>(scales[2]);
        if (scales.size() == 4) return define(n, std::make_shared<Upsample2D>(s, o), dataInputs(n, 1));
        return define(n, std::make_shared<Upsample3D>(s, o), dataInputs(n, 1));
    }
    if (whole && !linear && t.spatial.empty()) return importNearestPerDim(n, scales);
    if (!whole && centred && !t.spatial.empty() && (nm == "round_prefer_ceil" || noHalfwayCentres(n, t.spatial))) {
        const UpsampleOptions exact{.mode = ResampleMode::nearestExact};
        if (scales.size() == 4) return define(n, std::make_shared<Resize2D>(t.spatial, exact), dataInputs(n, 1));
        return define(n, std::make_shared<Resize3D>(t.spatial, exact), dataInputs(n, 1));
    }
    if (!whole && centred && !t.spatial.empty()) {
        throw Unsupported{"half_pixel with round_prefer_floor where an output centre falls halfway between two inputs "
                          "(round_prefer_ceil, nearest-exact's rounding, takes any ratio)"};
    }
    if (!whole && !anyRatio) {
        throw Unsupported{"coordinate_transformation_mode " + ctm + " with nearest_mode " +
                          a.s("nearest_mode", "round_prefer_floor") +
                          " at a ratio that is not a whole upscale (asymmetric with floor, PyTorch's export, takes "
                          "any)"};
    }
    if (t.spatial.empty()) throw Unsupported{t.unknown};
    if (linear && ctm == "pytorch_half_pixel" && std::count(t.spatial.begin(), t.spatial.end(), 1) > 0) {
        throw Unsupported{"pytorch_half_pixel to a size of 1 (it samples input 0 there, not the centre)"};
    }
    if (scales.size() == 4) return define(n, std::make_shared<Resize2D>(t.spatial, o), dataInputs(n, 1));
    return define(n, std::make_shared<Resize3D>(t.spatial, o), dataInputs(n, 1));
}

// Whether no output centre (o + 0.5) * in / out along a spatial dim of node n's input lands
// exactly halfway between two input positions (where round_prefer_floor and nearest-exact
// part); false where an input size is not known at import.
bool Importer::noHalfwayCentres(const onnx::NodeProto& n, const std::vector<int64_t>& spatial) const {
    const auto in = shapes_.find(n.input(0));
    if (in == shapes_.end() || in->second.size() != spatial.size() + 2) return false;
    for (size_t d = 0; d < spatial.size(); ++d) {
        const int64_t size = in->second[d + 2].value, out = spatial[d];
        if (size < 1) return false;
        for (int64_t o = 0; o < out; ++o) {
            if ((2 * o + 1) * size % (2 * out) == 0) return false;
        }
    }
    return true;
}

// Nearest with an integer scale per spatial dim: each element repeated s_d times along dim
// d, as Reshape (a unit dim after d) -> Tile (s_d copies of it) -> Reshape (merged into d)
// per dim scaled. The dims after each scaled one must be known at import.
void Importer::importNearestPerDim(const onnx::NodeProto& n, const std::vector<float>& scales) {
    const size_t rank = scales.size();
    const auto in = shapes_.find(n.input(0));
    if (in == shapes_.end() || in->second.size() != rank) {
        throw Unsupported{"different scales per dim on an input whose rank is not known at import"};
    }
    std::vector<int64_t> dims;
    for (const Dim& d : in->second) dims.push_back(d.value);
    auto seq = std::make_shared<Sequential>();
    for (size_t d = 2; d < rank; ++d) {
        const auto times = static_cast<int64_t>(scales[d]);
        if (times == 1) continue;
        std::vector<int64_t> split(d + 1, 0), merged(d, 0); // 0: the input's dim at that place
        split.push_back(1);
        split.push_back(-1);
        merged.push_back(-1);
        for (size_t e = d + 1; e < rank; ++e) {
            if (dims[e] < 0) throw Unsupported{"different scales per dim on spatial dims not known at import"};
            merged.push_back(dims[e]);
        }
        seq->append(std::make_shared<Reshape>(Shape(split)))
            .append(std::make_shared<Tile>(static_cast<int>(d + 1), times))
            .append(std::make_shared<Reshape>(Shape(merged)));
        if (dims[d] >= 0) dims[d] *= times;
    }
    return define(n, seq, dataInputs(n, 1));
}

void Importer::importDropout(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"ratio", "seed", "is_test"});
    // The mask (output 1) only where nothing takes it: a model exported with its dropouts
    // written out in full (training_mode given) that never reads the mask.
    if (n.output_size() > 1 && !n.output(1).empty() && usedValues_.count(n.output(1))) {
        throw Unsupported{"output 1 (the mask) is used; only the output is supported"};
    }
    onlyOutputs(n, n.output_size() > 1 && !usedValues_.count(n.output(1)) ? 2 : 1);
    float ratio = a.f("ratio", 0.5f);
    if (n.input_size() > 1 && !n.input(1).empty()) {
        ratio = requireScalar(n, 1, "the ratio");
    }
    // A constant training_mode (true or false) is the exporting model's mode: Tessera's
    // own mode decides, as for every Dropout.
    if (n.input_size() > 2 && !n.input(2).empty() && !isConstant(n.input(2))) {
        throw Unsupported{"a training_mode given as data (a constant one is Tessera's mode)"};
    }
    return define(n, std::make_shared<Dropout>(DropoutOptions{.p = ratio}), dataInputs(n, 1));
}

void Importer::importClip(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"min", "max"});
    float lo = a.f("min", -std::numeric_limits<float>::max());
    float hi = a.f("max", std::numeric_limits<float>::max());
    if (n.input_size() > 1 && !n.input(1).empty()) lo = requireScalar(n, 1, "min");
    if (n.input_size() > 2 && !n.input(2).empty()) hi = requireScalar(n, 2, "max");
    auto clip = std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = lo, .max = hi});
    // Integer data (positions clamped, `idx.clamp(max=T - 1)`): between Casts to float and back.
    if (isIntegerData(n.input(0))) return defineOverIntegers(n, clip, {0});
    return define(n, clip, dataInputs(n, 1));
}

} // namespace tessera::onnx_io
