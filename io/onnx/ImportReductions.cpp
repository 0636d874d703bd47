// The maxima and the reductions made of them: GlobalMaxPool, ReduceMax, ReduceMin, Hardmax and
// ReduceLogSumExp of data, as Tessera's pools, KMaxPool, ArgMax and small graphs.
#include <algorithm>
#include <vector>

#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "io/onnx/Importer.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Cast.h"
#include "modules/Identity.h"
#include "modules/KMaxPool.h"
#include "modules/MulAddConst.h"
#include "modules/Pool.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/Tile.h"

namespace tessera::onnx_io {

// GlobalMaxPool; ReduceMax and ReduceMin (appendMaxOver). ReduceMin is the maximum of -x,
// negated.
void Importer::importMaxOver(const onnx::NodeProto& n, const Attributes& a) {
    const std::string& op = n.op_type();
    const bool global = op == "GlobalMaxPool";
    if (global) {
        a.only({});
        requireInputsImported(n);
    }
    std::vector<int64_t> axes = global ? std::vector<int64_t>{} : reduceAxes(n, a);
    const int64_t rank = rankOf(n, 0);
    if (rank < (global ? 2 : 1)) throw Unsupported{"an input whose rank is not known at import"};
    if (global) {
        for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
    } else {
        axes = resolvedAxes(axes, rank);
    }
    auto seq = std::make_shared<Sequential>();
    const bool negate = op == "ReduceMin";
    if (negate) seq->append(std::make_shared<MulAddConst>(-1.0f, 0.0f));
    appendMaxOver(*seq, n, axes, global || a.i("keepdims", 1) != 0);
    if (negate) seq->append(std::make_shared<MulAddConst>(-1.0f, 0.0f));
    if (seq->size() == 1) return define(n, seq->childPtr(0), dataInputs(n, 1));
    return define(n, seq, dataInputs(n, 1));
}

std::vector<int64_t> Importer::resolvedAxes(std::vector<int64_t> axes, int64_t rank) {
    if (axes.empty()) { // every dim
        for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    for (int64_t& ax : axes) ax = ax < 0 ? ax + rank : ax;
    std::sort(axes.begin(), axes.end());
    return axes;
}

// The maximum of node n's input 0 over `axes` (resolved, sorted). Over a run of adjacent dims
// after the batch, all known at import: over every spatial dim of [N, C, ...] (kept) a
// MaxPool1D/2D/3D of the whole map; otherwise the input seen as [N, P, R, Q] (P the dims
// before the run, R the run's, Q those after), a MaxPool2D of R x 1, and the output's shape.
// Over one dim otherwise (the batch, or a length free at import: max over time) a KMaxPool of
// 1 along it (and a Reshape without it); over every dim the input seen as [1, numel], a
// KMaxPool of 1, and ones.
void Importer::appendMaxOver(Sequential& seq, const onnx::NodeProto& n, const std::vector<int64_t>& axes, bool keep) {
    const int64_t rank = rankOf(n, 0);
    bool run = !axes.empty() && axes.front() >= 1;
    for (size_t k = 1; run && k < axes.size(); ++k) run = axes[k] == axes[k - 1] + 1;
    std::vector<int64_t> dims = {0};
    bool known = true;
    for (int64_t d = 1; d < rank; ++d) {
        dims.push_back(dimOf(n, 0, d));
        known = known && dims.back() >= 0;
    }
    const bool every = static_cast<int64_t>(axes.size()) == rank;
    if (!(run && known) && axes.size() != 1 && !every) {
        throw Unsupported{run ? "a reduction over several dims whose sizes are not all known at import"
                              : "a reduction over several dims that are not one run of adjacent dims after the batch"};
    }
    const int64_t first = axes.front(), last = axes.back();
    const auto whole = static_cast<int64_t>(axes.size());
    if (!(run && known) && !every) { // one dim: the batch, or one of a size free at import
        seq.append(std::make_shared<KMaxPool>(1, static_cast<int>(first)));
        if (!keep) seq.append(reshapeTo(n));
    } else if (!(run && known)) { // every dim, the batch included
        seq.append(std::make_shared<Reshape>(Shape{1, -1})).append(std::make_shared<KMaxPool>(1, 1));
        seq.append(std::make_shared<Reshape>(Shape(std::vector<int64_t>(keep ? static_cast<size_t>(rank) : 1, 1))));
    } else if (keep && first == 2 && last == rank - 1 && whole <= 3) { // every spatial dim: one pool of the map
        const std::vector<int64_t> size(dims.begin() + 2, dims.end());
        if (whole == 1) seq.append(std::make_shared<MaxPool1D>(size));
        if (whole == 2) seq.append(std::make_shared<MaxPool2D>(size));
        if (whole == 3) seq.append(std::make_shared<MaxPool3D>(size));
    } else {
        int64_t P = 1, R = 1, Q = 1;
        for (int64_t d = 1; d < rank; ++d) (d < first ? P : d <= last ? R : Q) *= dims[static_cast<size_t>(d)];
        std::vector<int64_t> out = {0};
        for (int64_t d = 1; d < rank; ++d) {
            if (d < first || d > last) out.push_back(dims[static_cast<size_t>(d)]);
            if (d >= first && d <= last && keep) out.push_back(1);
        }
        if (out.size() == 1) out = {-1};
        seq.append(std::make_shared<Reshape>(Shape{0, P, R, Q}))
            .append(std::make_shared<MaxPool2D>(std::vector<int64_t>{R, 1}))
            .append(std::make_shared<Reshape>(Shape(out)));
    }
}

// Hardmax (opset 13: along one axis; before it, an axis that is the last dim): the one-hot
// of the first maximum along the axis. ArgMax (kept) gives the index i, as float, tiled along
// the axis; with c the position along it (a constant), relu(1 - |i - c|) is 1 at c = i and 0
// elsewhere, exactly. No gradient reaches x (the index is an integer), as none does in ONNX.
void Importer::importHardmax(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    requireInputsImported(n);
    const int64_t rank = rankOf(n, 0);
    if (rank < 1) throw Unsupported{"an input whose rank is not known at import"};
    int64_t axis = a.i("axis", opset_ < 13 ? 1 : -1);
    axis = axis < 0 ? axis + rank : axis;
    if (axis < 0 || axis >= rank) throw Unsupported{"axis " + std::to_string(a.i("axis", -1)) + " out of range"};
    if (opset_ < 13 && axis != rank - 1) {
        throw Unsupported{"before opset 13, an axis that is not the last dim (the input is seen as 2-D then)"};
    }
    const int64_t size = dimOf(n, 0, axis);
    if (size < 1) throw Unsupported{"the size of the axis is not known at import"};
    std::vector<int64_t> dims(static_cast<size_t>(rank - axis), 1);
    dims[0] = size;
    std::vector<float> minusPosition(static_cast<size_t>(size));
    for (int64_t c = 0; c < size; ++c) minusPosition[static_cast<size_t>(c)] = -static_cast<float>(c);
    auto seq = std::make_shared<Sequential>();
    seq->append(std::make_shared<ArgMax>(static_cast<int>(axis), true))
        .append(std::make_shared<Cast>(DType::int32, DType::float32))
        .append(std::make_shared<Tile>(static_cast<int>(axis), size))
        .append(std::make_shared<MulAddConst>(Tensor::ones({1}), Tensor::fromVector(Shape(dims), minusPosition)))
        .append(std::make_shared<Activation>(ActivationKind::abs))
        .append(std::make_shared<MulAddConst>(-1.0f, 1.0f))
        .append(std::make_shared<Activation>(ActivationKind::relu));
    return define(n, seq, dataInputs(n, 1));
}

// ReduceLogSumExp: m + log(sum(exp(x - m))) with m the maximum over the axes (kept;
// appendMaxOver), so that no exp overflows; a graph of the maximum, Sub, Exp, ReduceSum,
// Log and Add (and a Reshape without the dims). The gradient reaching m cancels (to rounding).
void Importer::importReduceLogSumExp(const onnx::NodeProto& n, const Attributes& a) {
    const int64_t rank = rankOf(n, 0);
    if (rank < 1) throw Unsupported{"an input whose rank is not known at import"};
    const std::vector<int64_t> axes = resolvedAxes(reduceAxes(n, a), rank);
    auto maxOf = std::make_shared<Sequential>();
    appendMaxOver(*maxOf, n, axes, true);
    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    auto m = tessera::node(maxOf->size() == 1 ? maxOf->childPtr(0) : maxOf, x, "max");
    auto centred = tessera::node(std::make_shared<Sub>(), {x, m}, "centred");
    auto e = tessera::node(std::make_shared<Activation>(ActivationKind::exp), centred, "exp");
    auto sum = tessera::node(std::make_shared<ReduceSum>(axes, true), e, "sum");
    auto log = tessera::node(std::make_shared<Activation>(ActivationKind::log), sum, "log");
    NodePtr y = tessera::node(std::make_shared<Add>(), {log, m}, "lse");
    if (a.i("keepdims", 1) == 0) y = tessera::node(reshapeTo(n), y, "dropped");
    const Source s = value(n, 0);
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}),
                  Parents{Parent(s.node, s.slot)});
}

} // namespace tessera::onnx_io
