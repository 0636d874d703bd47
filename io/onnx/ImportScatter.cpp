// ONNX import of ScatterND into data: the writes of PyTorch's slice assignments
// (`x[:, 0] = y`, `x[..., :2] = x[..., :2].sigmoid()`, `x[:, 1:3] = 0`), as Slices and Concats.
#include <algorithm>
#include <string>
#include <vector>

#include "containers/Graph.h"
#include "io/onnx/Importer.h"
#include "modules/Concat.h"
#include "modules/Identity.h"
#include "modules/MulAddConst.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"

namespace tessera::onnx_io {

namespace {
// The box of index tuples `ints` ([count, k], row-major) into `dims`: per indexed dim the
// range [lo, hi), when the tuples are exactly that box's, in row-major order; else empty.
std::vector<std::pair<int64_t, int64_t>> boxOf(const std::vector<int64_t>& ints, int64_t count, size_t k,
                                               const std::vector<int64_t>& dims) {
    std::vector<std::pair<int64_t, int64_t>> box(k);
    int64_t product = 1;
    for (size_t d = 0; d < k; ++d) {
        int64_t lo = dims[d], hi = -1;
        for (int64_t t = 0; t < count; ++t) {
            int64_t i = ints[static_cast<size_t>(t) * k + d];
            if (i < 0) i += dims[d];
            if (i < 0 || i >= dims[d]) return {};
            lo = std::min(lo, i);
            hi = std::max(hi, i + 1);
        }
        box[d] = {lo, hi};
        product *= hi - lo;
    }
    if (product != count) return {};
    // Tuple t must be the box's t-th coordinates in row-major order.
    for (int64_t t = 0; t < count; ++t) {
        int64_t rest = t;
        for (size_t d = k; d-- > 0;) {
            const int64_t len = box[d].second - box[d].first;
            int64_t i = ints[static_cast<size_t>(t) * k + d];
            if (i < 0) i += dims[d];
            if (i != box[d].first + rest % len) return {};
            rest /= len;
        }
    }
    return box;
}
} // namespace

// ScatterND of data by constant indices that write a box of whole ranges, one per indexed dim,
// the batch's whole (as PyTorch writes a slice assignment, exported at a fixed batch): the
// updates (data, reshaped to the box; or a constant the same for every sample, written over the
// box's slice of the data as MulAddConst(0, values), so the values it overwrites must be finite)
// placed between the data's slices before and after the box, one Concat per indexed dim whose
// range is not whole, innermost first. The gradient reaches the data outside the box and the
// updates inside it.
void Importer::importScatterND(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"reduction"});
    requireInputsImported(n);
    if (n.input_size() != 3) throw Unsupported{"expects 3 inputs, got " + std::to_string(n.input_size())};
    if (a.s("reduction", "none") != "none") throw Unsupported{"reduction '" + a.s("reduction", "none") + "'"};
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    const Constant* idx = isConstant(n.input(1)) ? &constants_.at(n.input(1)) : nullptr;
    if (!idx || !idx->isInt || idx->symbolic() || idx->dims.empty()) {
        throw Unsupported{"indices that are not a constant known at import (a slice assignment exported with a free "
                          "batch computes them from the batch size: export with a fixed batch)"};
    }
    const auto shape = shapes_.find(n.input(0));
    std::vector<int64_t> dims;
    if (shape != shapes_.end()) {
        for (const Dim& d : shape->second) dims.push_back(d.value);
    }
    if (dims.empty() || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 1; })) {
        throw Unsupported{"data whose dims are not all known at import"};
    }
    const size_t k = static_cast<size_t>(idx->dims.back());
    if (k < 1 || k > dims.size()) {
        throw Unsupported{"index tuples of " + std::to_string(k) + " for data of rank " + std::to_string(dims.size())};
    }
    const int64_t count = static_cast<int64_t>(idx->ints.size() / k);
    const auto box = boxOf(idx->ints, count, k, dims);
    if (box.empty()) throw Unsupported{"indices that do not write one box of whole ranges (a slice with steps)"};
    if (box[0] != std::pair<int64_t, int64_t>{0, dims[0]}) {
        throw Unsupported{"indices that write part of the batch (every sample is supported)"};
    }
    std::vector<int64_t> boxDims{0}; // the batch kept
    for (size_t d = 1; d < dims.size(); ++d) boxDims.push_back(d < k ? box[d].second - box[d].first : dims[d]);
    const Shape boxShape(boxDims);

    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    std::vector<NodePtr> ins{x};
    // The data sliced to the box along dims 1 .. last - 1 (whole from `last` on).
    auto boxSlice = [&](size_t last, const std::string& name) {
        std::vector<int> axes;
        std::vector<int64_t> starts, ends;
        for (size_t d = 1; d < last; ++d) {
            if (box[d].second - box[d].first == dims[d]) continue;
            axes.push_back(static_cast<int>(d));
            starts.push_back(box[d].first);
            ends.push_back(box[d].second);
        }
        return axes.empty() ? x : tessera::node(std::make_shared<Slice>(axes, starts, ends), {x}, name);
    };
    NodePtr inner;
    if (isConstant(n.input(2))) {
        const Constant& u = constants_.at(n.input(2));
        int64_t boxNumel = dims[0];
        for (size_t d = 1; d < boxDims.size(); ++d) boxNumel *= boxDims[d];
        if (u.isInt || !u.tensor.defined() || u.tensor.dtype() != DType::float32 || u.tensor.numel() != boxNumel) {
            throw Unsupported{"updates that are a constant of other than float values of the box's shape"};
        }
        // One sample's values, the same for every sample.
        const std::vector<float> values = u.tensor.toVector<float>();
        const size_t per = values.size() / static_cast<size_t>(dims[0]);
        for (size_t i = per; i < values.size(); ++i) {
            if (values[i] != values[i % per]) throw Unsupported{"constant updates that differ between samples"};
        }
        Shape one = boxShape;
        one[0] = 1;
        const Tensor b =
            Tensor::fromVector(one, std::vector<float>(values.begin(), values.begin() + static_cast<long>(per)));
        inner = tessera::node(std::make_shared<MulAddConst>(Tensor::fromVector({1}, std::vector<float>{0.0f}), b),
                              {boxSlice(k, "box")}, "values");
    } else {
        const auto updates = shapes_.find(n.input(2));
        if (updates == shapes_.end() || updates->second.empty() || updates->second[0].value != dims[0]) {
            throw Unsupported{"updates whose first dim is not the batch"};
        }
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, "updates"));
        inner = tessera::node(std::make_shared<Reshape>(boxShape), {ins.back()}, "updates_boxed");
    }
    // Innermost indexed dim first: the data before the range, what goes in it, the data after.
    for (size_t d = k; d-- > 1;) {
        const auto [lo, hi] = box[d];
        if (hi - lo == dims[d]) continue;
        const NodePtr around = boxSlice(d, "around_" + std::to_string(d));
        Parents parts;
        const int axis = static_cast<int>(d);
        if (lo > 0)
            parts.push_back(
                Parent(tessera::node(std::make_shared<Slice>(axis, 0, lo), {around}, "before_" + std::to_string(d))));
        parts.push_back(Parent(inner));
        if (hi < dims[d]) {
            parts.push_back(Parent(
                tessera::node(std::make_shared<Slice>(axis, hi, dims[d]), {around}, "after_" + std::to_string(d))));
        }
        inner = tessera::node(std::make_shared<Concat>(axis), parts, "placed_" + std::to_string(d));
    }
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{inner}),
                  dataInputs(n, ins.size() == 1 ? std::vector<int>{0} : std::vector<int>{0, 2}));
}

} // namespace tessera::onnx_io
