// Where(cond, a, b) of a condition computed from data: a padding mask given as a bool or
// integer graph input (read as int32, 0 or 1), as PyTorch's export writes
// `scores.masked_fill(mask[:, None, None, :], float('-inf'))` and nn.MultiheadAttention's
// `key_padding_mask`. The condition becomes float (Cast), t = 1 where a constant operand is
// taken, and the result is arithmetic on t, exact for the 0 and 1 it holds:
// - two constants A (taken where cond) and B: A t + B (1 - t); an infinite A is B + log(1 - t)
//   (log 0 = -inf, log 1 = 0; B - log(1 - t) for +inf), an infinite B the same about t;
// - a constant A and data x: x (1 - t) + A t; an infinite A x + log(1 - t) (or minus it);
// - two data operands x, y: x t + y (1 - t).
// A finite constant over an infinite or NaN data value gives NaN there (0 times infinity),
// as the Where of a constant condition does.
#include <cmath>

#include "containers/Graph.h"
#include "io/onnx/Arrays.h"
#include "io/onnx/Importer.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Cast.h"
#include "modules/Identity.h"
#include "modules/MulAddConst.h"

namespace tessera::onnx_io {

namespace {
bool isOne(const std::vector<int64_t>& dims, const std::vector<std::string>& symbols, size_t k) {
    return dims[k] == 1 && (k >= symbols.size() || symbols[k].empty());
}
} // namespace

void Importer::importWhereOfData(const onnx::NodeProto& n) {
    requireInputsImported(n);
    const int32_t condType = elemTypeOf(n.input(0));
    if (condType != onnx::TensorProto::BOOL && condType != onnx::TensorProto::INT32 &&
        condType != onnx::TensorProto::INT64) {
        throw Unsupported{"a condition of type " + std::to_string(condType) +
                          " computed from data (bool or integer data, read as int32, is supported)"};
    }
    // The output's dims: the condition's and the data operands', broadcast.
    auto dimsOf = [&](int k) -> const std::vector<Dim>& {
        const auto it = shapes_.find(n.input(k));
        if (it == shapes_.end()) {
            throw Unsupported{"input " + std::to_string(k) + " has a rank not known at import"};
        }
        return it->second;
    };
    auto same = [](const Dim& a, const Dim& b) { return a.value == b.value && a.symbol == b.symbol; };
    auto one = [](const Dim& d) { return d.symbol.empty() && d.value == 1; };
    std::vector<Dim> out = dimsOf(0);
    bool data[3] = {true, false, false};
    for (int k = 1; k < 3; ++k) {
        data[k] = !isConstant(n.input(k));
        if (!data[k]) continue;
        const int32_t type = elemTypeOf(n.input(k));
        if (type != onnx::TensorProto::FLOAT && type != 0) {
            throw Unsupported{"input " + std::to_string(k) + " is data of type " + std::to_string(type) +
                              " (float data is supported)"};
        }
        const std::vector<Dim>& d = dimsOf(k);
        std::vector<Dim> wide(std::max(out.size(), d.size()), Dim{1, {}});
        for (size_t j = 0; j < wide.size(); ++j) {
            const Dim* a = j < out.size() ? &out[out.size() - 1 - j] : nullptr;
            const Dim* b = j < d.size() ? &d[d.size() - 1 - j] : nullptr;
            Dim& w = wide[wide.size() - 1 - j];
            if (!a || one(*a)) {
                w = *b;
            } else if (!b || one(*b) || same(*a, *b)) {
                w = *a;
            } else {
                throw Unsupported{"inputs whose shapes do not broadcast"};
            }
        }
        out = std::move(wide);
    }
    // A constant operand: one value (a scalar, a tensor of one value repeated, or the zeros of
    // a computed shape), whose dims fit in the output's without enlarging it.
    float fill[3] = {0.0f, 0.0f, 0.0f};
    for (int k = 1; k < 3; ++k) {
        if (data[k]) continue;
        const Constant& c = constants_.at(n.input(k));
        if (c.dims.size() > out.size()) throw Unsupported{"a constant operand of more dims than the output"};
        for (size_t j = 0; j < c.dims.size(); ++j) {
            const Dim& o = out[out.size() - c.dims.size() + j];
            const bool fits =
                isOne(c.dims, c.symbols, j) ||
                (c.symbol(j).empty() ? o.symbol.empty() && o.value == c.dims[j] : o.symbol == c.symbol(j));
            if (!fits) throw Unsupported{"a constant operand that would enlarge the output"};
        }
        if (c.zeros) continue;
        if (c.isInt || !c.tensor.defined()) {
            throw Unsupported{"input " + std::to_string(k) +
                              " is a constant of integers (float constants are supported)"};
        }
        const std::vector<float> v = c.tensor.toVector<float>();
        for (float x : v) {
            if (!(x == v[0] || (std::isnan(x) && std::isnan(v[0])))) {
                throw Unsupported{"input " + std::to_string(k) +
                                  " is a constant of several values with a condition computed from data (one value "
                                  "is supported)"};
            }
        }
        fill[k] = v.empty() ? 0.0f : v[0];
        if (std::isnan(fill[k])) throw Unsupported{"a NaN constant operand"};
    }
    if (!data[1] && !data[2] && std::isinf(fill[1]) && std::isinf(fill[2])) {
        throw Unsupported{"two infinite constant operands"};
    }
    // The graph: cond (int32) -> c (float); t where a constant is taken.
    auto cond = tessera::node(std::make_shared<Identity>(), {}, "condition");
    std::vector<NodePtr> inputs{cond};
    auto c = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {cond}, "taken");
    auto complement = [](const NodePtr& x, const char* name) {
        return tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {x}, name);
    };
    auto affine = [](const NodePtr& x, float a, float b, const char* name) {
        return tessera::node(std::make_shared<MulAddConst>(a, b), {x}, name);
    };
    auto logOf = [](const NodePtr& x, const char* name) {
        return tessera::node(std::make_shared<Activation>(ActivationKind::log), {x}, name);
    };
    NodePtr y;
    if (data[1] && data[2]) {
        auto x1 = tessera::node(std::make_shared<Identity>(), {}, "a");
        auto x2 = tessera::node(std::make_shared<Identity>(), {}, "b");
        inputs.push_back(x1);
        inputs.push_back(x2);
        auto taken = tessera::node(std::make_shared<Mul>(), {x1, c}, "a_taken");
        auto other = tessera::node(std::make_shared<Mul>(), {x2, complement(c, "not_taken")}, "b_taken");
        y = tessera::node(std::make_shared<Add>(), {taken, other}, "where");
    } else if (!data[1] && !data[2]) {
        const float a = fill[1], b = fill[2];
        if (std::isinf(a)) { // b + log(1 - c), or minus it for +inf
            y = affine(logOf(complement(c, "not_taken"), "log"), a < 0 ? 1.0f : -1.0f, b, "where");
        } else if (std::isinf(b)) { // a + log(c), or minus it
            y = affine(logOf(c, "log"), b < 0 ? 1.0f : -1.0f, a, "where");
        } else {
            y = affine(c, a - b, b, "where");
        }
    } else {
        const int k = data[1] ? 2 : 1; // the constant's input
        auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
        inputs.push_back(x);
        const NodePtr t = k == 1 ? c : complement(c, "not_taken"); // 1 where the constant is taken
        const float v = fill[k];
        if (std::isinf(v)) {
            auto mask = affine(logOf(complement(t, "kept"), "log"), v < 0 ? 1.0f : -1.0f, 0.0f, "fill");
            y = tessera::node(std::make_shared<Add>(), {x, mask}, "where");
        } else {
            auto kept = tessera::node(std::make_shared<Mul>(), {x, complement(t, "kept")}, "x_kept");
            y = v == 0.0f ? kept : tessera::node(std::make_shared<Add>(), {kept, affine(t, v, 0.0f, "fill")}, "where");
        }
    }
    Parents parents;
    for (int k = 0; k < 3; ++k) {
        if (!data[k]) continue;
        const Source s = value(n, k);
        parents.push_back(Parent(s.node, s.slot));
    }
    return define(n, std::make_shared<Graph>(inputs, std::vector<NodePtr>{y}), parents);
}

// Equal of integer data and one integer constant, Not of bool data: a mask made from the
// data (`ids == pad`, `~mask`), int32 0 and 1 as Tessera holds bool values, computed in
// float: equal = relu(1 - |x - c|) (exact for integers below 2^24), not = 1 - x.
void Importer::importMaskOp(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    const bool equal = n.op_type() == "Equal";
    const int data = equal && isConstant(n.input(0)) ? 1 : 0;
    if (equal && !isConstant(n.input(1 - data))) {
        throw Unsupported{"two data inputs (data and one constant are supported)"};
    }
    const int32_t type = elemTypeOf(n.input(data));
    if (type != onnx::TensorProto::BOOL && type != onnx::TensorProto::INT32 && type != onnx::TensorProto::INT64) {
        throw Unsupported{"data of type " + std::to_string(type) + " (bool or integer data is supported)"};
    }
    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    NodePtr y = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {x}, "values");
    if (equal) {
        const Constant& c = constants_.at(n.input(1 - data));
        std::vector<double> v;
        if (c.isInt) {
            v.assign(c.ints.begin(), c.ints.end());
        } else if (c.tensor.defined()) {
            for (float f : c.tensor.toVector<float>()) v.push_back(f);
        }
        if (v.size() != 1 || v[0] != std::round(v[0]) || std::fabs(v[0]) > (1 << 24)) {
            throw Unsupported{"a constant that is not one integer (one integer is supported)"};
        }
        y = tessera::node(std::make_shared<MulAddConst>(1.0f, static_cast<float>(-v[0])), {y}, "difference");
        y = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {y}, "distance");
        y = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {y}, "closeness");
        y = tessera::node(std::make_shared<Activation>(ActivationKind::relu), {y}, "equal");
    } else {
        y = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {y}, "not");
    }
    y = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {y}, "mask");
    const Source s = value(n, data);
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}),
                  Parents{Parent(s.node, s.slot)});
}

} // namespace tessera::onnx_io
