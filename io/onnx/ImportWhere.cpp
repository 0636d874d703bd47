// Where(cond, a, b) of a condition computed from data: a padding mask given as a bool or
// integer graph input (read as int32, 0 or 1), as PyTorch's export writes
// `scores.masked_fill(mask[:, None, None, :], float('-inf'))` and nn.MultiheadAttention's
// `key_padding_mask`. The condition becomes float (Cast), t = 1 where a constant operand is
// taken (tiled where a constant tensor enlarges the output), and the result is arithmetic on
// t, exact for the 0 and 1 it holds (constants are numbers or tensors):
// - two constants A (taken where cond) and B: A t + B (1 - t); an infinite A is B + log(1 - t)
//   (log 0 = -inf, log 1 = 0; B - log(1 - t) for +inf), an infinite B the same about t;
// - a constant A and data x: x (1 - t) + A t; an infinite A x + log(1 - t) (or minus it);
// - two data operands x, y: x t + y (1 - t).
// A finite constant over an infinite or NaN data value gives NaN there (0 times infinity),
// as the Where of a constant condition does.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "containers/Graph.h"
#include "io/onnx/Arrays.h"
#include "io/onnx/Importer.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Cast.h"
#include "modules/CumSum.h"
#include "modules/Identity.h"
#include "modules/MulAddConst.h"
#include "modules/Reshape.h"
#include "modules/Tile.h"

namespace tessera::onnx_io {

namespace {
bool isOne(const std::vector<int64_t>& dims, const std::vector<std::string>& symbols, size_t k) {
    return dims[k] == 1 && (k >= symbols.size() || symbols[k].empty());
}

bool scalar(const arrays::Array& a) { return a.dims.empty() && a.v.size() == 1; }

arrays::Array number(double v) { return arrays::Array{arrays::Kind::floating, {}, {v}}; }

// a * x + b, a and b numbers or tensors (broadcast to x without changing its dims)
NodePtr affineOf(const NodePtr& x, const arrays::Array& a, const arrays::Array& b, const char* name) {
    if (scalar(a) && scalar(b)) {
        return tessera::node(std::make_shared<MulAddConst>(static_cast<float>(a.v[0]), static_cast<float>(b.v[0])), {x},
                             name);
    }
    auto tensorOf = [](const arrays::Array& t) {
        std::vector<float> f(t.v.begin(), t.v.end());
        return Tensor::fromVector(t.dims.empty() ? Shape{1} : Shape(t.dims), f);
    };
    return tessera::node(std::make_shared<MulAddConst>(tensorOf(a), tensorOf(b)), {x}, name);
}

NodePtr clipped(const NodePtr& x, float lo, float hi, const char* name) {
    return tessera::node(std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = lo, .max = hi}),
                         {x}, name);
}

NodePtr scaled(const NodePtr& x, float a, const char* name) {
    return tessera::node(std::make_shared<MulAddConst>(a, 0.0f), {x}, name);
}

// 1 where `margin` is above 0, else 0, as the comparisons of float data take it: the margin
// scaled past 1 (by 2^127, then by 2^22 for a denormal margin on a device that keeps them)
// and clipped to [0, 1]. Its nodes are named scaled, rescaled and step, then `suffix`.
NodePtr stepOf(const NodePtr& margin, const std::string& suffix = {}) {
    auto named = [&](const char* what) {
        std::string s = what;
        s.append(suffix);
        return s;
    };
    return clipped(scaled(scaled(margin, 0x1p127f, named("scaled").c_str()), 0x1p22f, named("rescaled").c_str()), 0.0f,
                   1.0f, named("step").c_str());
}

// f of each value of a
template <typename F> arrays::Array mapped(const arrays::Array& a, F f) {
    arrays::Array out{arrays::Kind::floating, a.dims, {}};
    for (double v : a.v) out.v.push_back(f(v));
    return out;
}
} // namespace

void Importer::importWhereOfData(const onnx::NodeProto& n) {
    requireInputsImported(n);
    const int32_t condType = elemTypeOf(n.input(0));
    if (!isIntegerType(condType)) {
        throw Unsupported{"a " + typeName(condType) + " condition" +
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
    // Integer operands (int32 in Tessera: a floor division's quotient, `torch.where(c, q - 1, q)`)
    // are computed in float between Casts, exact below 2^24.
    int floats = 0, integers = 0;
    for (int k = 1; k < 3; ++k) {
        data[k] = !isConstant(n.input(k));
        const bool integer = data[k] ? isIntegerType(elemTypeOf(n.input(k))) : constants_.at(n.input(k)).isInt;
        (integer ? integers : floats) += 1;
        if (!data[k]) continue;
        const int32_t type = elemTypeOf(n.input(k));
        if (type != onnx::TensorProto::FLOAT && type != 0 && !isIntegerType(type)) {
            throw Unsupported{"input " + std::to_string(k) + " is " + typeName(type) + " data" +
                              " (float and integer data are supported)"};
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
    if (integers > 0 && floats > 0) throw Unsupported{"a float operand and an integer one"};
    const bool integral = integers > 0;
    // The constant operands: one value (a scalar, a tensor of one value repeated, or the zeros
    // of a computed shape) or a tensor of known dims, which may enlarge the output where the
    // condition and the data have a dim of 1 (an attention mask [L, S] filled where a key
    // padding mask [N H, 1, S] is set): the condition is tiled along such dims.
    const std::vector<Dim> unenlarged = out;
    std::optional<arrays::Array> values[3];
    for (int k = 1; k < 3; ++k) {
        if (data[k]) continue;
        const Constant& c = constants_.at(n.input(k));
        if (c.dims.size() > out.size()) {
            throw Unsupported{"a constant operand of more dims than the condition and the data"};
        }
        for (size_t j = 0; j < c.dims.size(); ++j) {
            Dim& o = out[out.size() - c.dims.size() + j];
            if (isOne(c.dims, c.symbols, j)) continue;
            const bool fits = c.symbol(j).empty() ? o.symbol.empty() && o.value == c.dims[j] : o.symbol == c.symbol(j);
            if (fits) continue;
            if (!one(o) || !c.symbol(j).empty()) throw Unsupported{"a constant operand that does not broadcast"};
            o = Dim{c.dims[j], {}};
        }
        if (c.zeros) {
            values[k] = arrays::Array{arrays::Kind::floating, {}, {0.0}};
            continue;
        }
        if (c.symbolic() || (!c.isInt && !c.tensor.defined())) {
            throw Unsupported{"input " + std::to_string(k) + " is a constant of a shape known only at run time"};
        }
        arrays::Array v = arrays::arrayOf(c);
        bool oneValue = true;
        for (double x : v.v) {
            if (std::isnan(x)) throw Unsupported{"a constant operand holding NaN"};
            if (integral && std::fabs(x) > (1 << 23)) throw Unsupported{"an integer constant beyond 2^23"};
            oneValue = oneValue && x == v.v[0];
        }
        if (oneValue) v = arrays::Array{arrays::Kind::floating, {}, {v.v.empty() ? 0.0 : v.v[0]}};
        values[k] = std::move(v);
    }
    // The dims the condition is tiled along (it has the output's rank there).
    std::vector<std::pair<int, int64_t>> tiles;
    const size_t condRank = dimsOf(0).size();
    for (size_t j = 0; j < out.size(); ++j) {
        if (same(out[j], unenlarged[j])) continue;
        if (condRank != out.size()) throw Unsupported{"a constant operand that enlarges a condition of lower rank"};
        tiles.emplace_back(static_cast<int>(j), out[j].value);
    }
    auto infinity = [](const arrays::Array& a, double sign) {
        for (double x : a.v) {
            if (std::isinf(x) && (x > 0) == (sign > 0)) return true;
        }
        return false;
    };
    auto finite = [&](const arrays::Array& a) { return !infinity(a, 1.0) && !infinity(a, -1.0); };
    // The graph: cond (int32) -> c (float, tiled); t where a constant is taken.
    auto cond = tessera::node(std::make_shared<Identity>(), {}, "condition");
    std::vector<NodePtr> inputs{cond};
    NodePtr c = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {cond}, "taken");
    for (const auto& [axis, times] : tiles) {
        c = tessera::node(std::make_shared<Tile>(axis, times), {c}, ("taken_tiled_" + std::to_string(axis)).c_str());
    }
    auto complement = [](const NodePtr& x, const char* name) {
        return tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {x}, name);
    };
    // a data operand: a graph input, in float
    auto operand = [&](const char* name, const char* inFloat) {
        inputs.push_back(tessera::node(std::make_shared<Identity>(), {}, name));
        if (!integral) return inputs.back();
        return tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {inputs.back()}, inFloat);
    };
    auto logOf = [](const NodePtr& x, const char* name) {
        return tessera::node(std::make_shared<Activation>(ActivationKind::log), {x}, name);
    };
    NodePtr y;
    if (data[1] && data[2]) {
        auto x1 = operand("a", "a_float");
        auto x2 = operand("b", "b_float");
        auto taken = tessera::node(std::make_shared<Mul>(), {x1, c}, "a_taken");
        auto other = tessera::node(std::make_shared<Mul>(), {x2, complement(c, "not_taken")}, "b_taken");
        y = tessera::node(std::make_shared<Add>(), {taken, other}, "where");
    } else if (!data[1] && !data[2]) {
        const arrays::Array &a = *values[1], &b = *values[2];
        if (finite(a) && finite(b)) { // (a - b) t + b
            const arrays::Array diff =
                arrays::elementwise({&a, &b}, arrays::Kind::floating, [&](const std::vector<int64_t>& at) {
                    return a.v[static_cast<size_t>(at[0])] - b.v[static_cast<size_t>(at[1])];
                });
            y = affineOf(c, diff, b, "where");
        } else if (scalar(a) && std::isinf(a.v[0]) && !infinity(b, -a.v[0])) { // b + log(1 - t), or minus it
            y = affineOf(logOf(complement(c, "not_taken"), "log"), number(a.v[0] < 0 ? 1.0 : -1.0), b, "where");
        } else if (scalar(b) && std::isinf(b.v[0]) && !infinity(a, -b.v[0])) { // a + log(t), or minus it
            y = affineOf(logOf(c, "log"), number(b.v[0] < 0 ? 1.0 : -1.0), a, "where");
        } else {
            throw Unsupported{"infinite values in both constant operands, or a constant of several values holding "
                              "infinities taken with a finite one"};
        }
    } else {
        const int k = data[1] ? 2 : 1; // the constant's input
        auto x = operand("x", "x_float");
        const NodePtr t = k == 1 ? c : complement(c, "not_taken"); // 1 where the constant is taken
        const arrays::Array& v = *values[k];
        if (scalar(v) && std::isinf(v.v[0])) { // x + log(1 - t), or minus it
            auto mask =
                affineOf(logOf(complement(t, "kept"), "log"), number(v.v[0] < 0 ? 1.0 : -1.0), number(0.0), "fill");
            y = tessera::node(std::make_shared<Add>(), {x, mask}, "where");
        } else if (finite(v)) { // x (1 - t) + v t
            auto kept = tessera::node(std::make_shared<Mul>(), {x, complement(t, "kept")}, "x_kept");
            const bool zero = scalar(v) && v.v[0] == 0.0;
            y = zero ? kept
                     : tessera::node(std::make_shared<Add>(), {kept, affineOf(t, v, number(0.0), "fill")}, "where");
        } else {
            throw Unsupported{"a constant operand of several values holding infinities, with data"};
        }
    }
    if (integral) y = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {y}, "integers");
    std::vector<int> dataIn;
    for (int k = 0; k < 3; ++k) {
        if (data[k]) dataIn.push_back(k);
    }
    return define(n, std::make_shared<Graph>(inputs, std::vector<NodePtr>{y}), dataInputs(n, dataIn));
}

// Comparisons and logic of integer data (bool data is int32 0 and 1 in Tessera), with each
// other or with an integer constant: the masks models make from ids and lengths (`ids == pad`,
// `arange(T)[None, :] >= lengths[:, None]`, `~pad`, `pad | other`). Computed in float, exact for
// integers below 2^24, the result cast to int32 0 and 1. With s a comparison's integer margin
// (x < y: s = y - x; x <= y: s = y - x + 1; x > y and x >= y the same with x and y swapped),
// the result is clip(s, 0, 1); x == y is relu(1 - |x - y|); not x = 1 - x; x and y = x y,
// x or y = clip(x + y, 0, 1), x xor y = |x - y| (with a constant c: c x, (1 - c) x + c,
// (1 - 2c) x + c). A constant tensor may enlarge the data along its dims of 1 ([1, T] against
// [N, 1]): the data is tiled first.
void Importer::importMaskOp(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    const std::string& op = n.op_type();
    const int count = op == "Not" ? 1 : 2;
    if (n.input_size() != count) {
        throw Unsupported{std::to_string(n.input_size()) + " inputs (" + std::to_string(count) + " expected)"};
    }
    const bool comparison =
        op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual";
    std::vector<int> dataIn;
    std::optional<arrays::Array> constant;
    bool floating = false; // float data compared
    for (int k = 0; k < count; ++k) {
        if (!isConstant(n.input(k))) {
            const int32_t type = elemTypeOf(n.input(k));
            const bool isFloat = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 ||
                                 type == onnx::TensorProto::BFLOAT16;
            if (!isIntegerType(type) && !(comparison && isFloat)) {
                throw Unsupported{"input " + std::to_string(k) + " is " + typeName(type) + " data" +
                                  (comparison ? " (bool, integer or float data is supported)"
                                              : " (bool or integer data is supported)")};
            }
            if (!dataIn.empty() && floating != isFloat) throw Unsupported{"float data beside integer data"};
            floating = isFloat;
            dataIn.push_back(k);
            continue;
        }
        const Constant& c = constants_.at(n.input(k));
        if (c.zeros || c.symbolic() || (!c.isInt && !c.tensor.defined())) {
            throw Unsupported{"input " + std::to_string(k) + " is a constant of a shape known only at run time"};
        }
        arrays::Array v = arrays::arrayOf(c);
        bool oneValue = !v.v.empty();
        for (double x : v.v) oneValue = oneValue && x == v.v[0];
        if (oneValue) v = number(v.v[0]);
        constant = std::move(v);
    }
    if (dataIn.empty()) throw Unsupported{"two constants whose values are not known at import"};
    for (double x : constant ? constant->v : std::vector<double>{}) {
        const bool fits = floating ? std::isfinite(x) : x == std::round(x) && std::fabs(x) <= (1 << 24);
        if (!fits) {
            throw Unsupported{"input " + std::to_string(1 - dataIn[0]) + " is a constant holding " +
                              (floating ? "infinities or NaN beside float data (finite values are supported)"
                                        : "other than integers below 2^24 (integer constants are supported)")};
        }
    }
    static const char *const inNames[] = {"x0", "x1"}, *const floatNames[] = {"float0", "float1"};
    std::vector<NodePtr> ins;
    NodePtr values[2];
    for (int k : dataIn) {
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, inNames[k]));
        values[k] =
            floating ? ins.back()
                     : tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {ins.back()}, floatNames[k]);
    }
    // The data tiled along its dims of 1 that a constant tensor enlarges.
    const int d = dataIn[0];
    if (constant && !constant->dims.empty()) {
        const auto it = shapes_.find(n.input(d));
        if (it == shapes_.end()) throw Unsupported{"data of a rank not known at import beside a constant tensor"};
        const std::vector<Dim>& dims = it->second;
        const std::vector<int64_t>& cd = constant->dims;
        if (cd.size() > dims.size()) {
            throw Unsupported{"a constant of " + std::to_string(cd.size()) + " dims beside data of " +
                              std::to_string(dims.size())};
        }
        for (size_t j = 0; j < cd.size(); ++j) {
            const size_t axis = dims.size() - cd.size() + j;
            const Dim& x = dims[axis];
            if (cd[j] == 1 || (x.symbol.empty() && x.value == cd[j])) continue;
            if (!x.symbol.empty() || x.value != 1) {
                throw Unsupported{"a constant of dim " + std::to_string(cd[j]) + " against the data's " +
                                  (x.symbol.empty() ? std::to_string(x.value) : x.symbol) + " at dim " +
                                  std::to_string(axis) + ", which do not broadcast"};
            }
            values[d] = tessera::node(std::make_shared<Tile>(static_cast<int>(axis), cd[j]), {values[d]}, "tiled");
        }
    }
    auto activation = [](const NodePtr& x, ActivationKind kind, const char* name) {
        return tessera::node(std::make_shared<Activation>(kind), {x}, name);
    };
    auto clip01 = [](const NodePtr& x) { return clipped(x, 0.0f, 1.0f, "clipped"); };
    NodePtr y;
    if (floating) {
        // x < y where y - x > 0 (x > y, x <= y as not x > y, x >= y as not x < y; x == y where
        // |x - y| is not above 0): the step of that margin, scaled past 1 (by 2^127, then by
        // 2^22 for a denormal margin on a device that keeps them) and clipped to [0, 1]. The
        // margin's sign is exact (gradual underflow; on the CPU, which flushes denormals,
        // values below 2^-126 compare as 0); infinities of one sign on both sides and NaN are
        // not compared as IEEE does.
        const bool yMinusX = op == "Less" || op == "GreaterOrEqual";
        const bool negated = op == "LessOrEqual" || op == "GreaterOrEqual" || op == "Equal";
        if (!constant) {
            y = tessera::node(std::make_shared<Sub>(), {values[yMinusX ? 1 : 0], values[yMinusX ? 0 : 1]},
                              "difference");
        } else {
            const double dataSign = (d == 1) == yMinusX ? 1.0 : -1.0;
            y = affineOf(values[d], number(dataSign), mapped(*constant, [&](double v) { return -dataSign * v; }),
                         "difference");
        }
        if (op == "Equal") y = activation(y, ActivationKind::abs, "distance");
        y = stepOf(y);
        if (negated) y = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {y}, "not");
    } else if (op == "Not") {
        y = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {values[0]}, "not");
    } else if (op == "And" || op == "Or" || op == "Xor") {
        if (!constant) {
            y = op == "And"  ? tessera::node(std::make_shared<Mul>(), {values[0], values[1]}, "and")
                : op == "Or" ? clip01(tessera::node(std::make_shared<Add>(), {values[0], values[1]}, "sum"))
                             : activation(tessera::node(std::make_shared<Sub>(), {values[0], values[1]}, "difference"),
                                          ActivationKind::abs, "xor");
        } else {
            const arrays::Array& c = *constant;
            const double twice = op == "Xor" ? 2.0 : 1.0;
            y = op == "And" ? affineOf(values[d], c, number(0.0), "and")
                            : affineOf(values[d], mapped(c, [twice](double v) { return 1.0 - twice * v; }), c, "logic");
        }
    } else {
        // s = sign[0] x0 + sign[1] x1 + offset
        const bool less = op == "Less" || op == "LessOrEqual", orEqual = op == "LessOrEqual" || op == "GreaterOrEqual";
        const double sign[2] = {less ? -1.0 : 1.0, less ? 1.0 : -1.0}, offset = orEqual ? 1.0 : 0.0;
        if (!constant) {
            const int plus = less ? 1 : 0;
            y = tessera::node(std::make_shared<Sub>(), {values[plus], values[1 - plus]}, "difference");
            if (offset != 0.0) y = tessera::node(std::make_shared<MulAddConst>(1.0f, 1.0f), {y}, "margin");
        } else {
            const double cs = sign[1 - d];
            y = affineOf(values[d], number(sign[d]), mapped(*constant, [&](double v) { return cs * v + offset; }),
                         "margin");
        }
        if (op == "Equal") {
            y = activation(y, ActivationKind::abs, "distance");
            y = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {y}, "closeness");
            y = activation(y, ActivationKind::relu, "equal");
        } else if (op == "Less" || op == "Greater" || orEqual) {
            y = clip01(y);
        } else {
            throw Unsupported{"op " + op + " of data"};
        }
    }
    y = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {y}, "mask");
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{y}), dataInputs(n, dataIn));
}

// Max and Min of data (any number of inputs, float data or integer data, the latter between
// Casts to float and back, exact below 2^24; finite constants, numbers or tensors that
// broadcast to the data), folded from the first data input on. With t the step of the margin
// by which the next operand v wins (v - m for Max, m - v for Min; 1 where it is above 0,
// taken as the comparisons of float data take it), the result is v t + m (1 - t): exact, t
// holding 0 and 1 (ties keep m, and its gradient). A constant c: m (1 - t) + c t. NaN data
// gives NaN; an infinite data value beside another operand gives NaN (0 times infinity),
// as the Where of data does.
void Importer::importMaxMin(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    const bool isMax = n.op_type() == "Max";
    std::vector<int> dataIn;
    std::vector<arrays::Array> constants;
    bool integers = false;
    for (int k = 0; k < n.input_size(); ++k) {
        if (!isConstant(n.input(k))) {
            const int32_t type = elemTypeOf(n.input(k));
            const bool isFloat = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 ||
                                 type == onnx::TensorProto::BFLOAT16;
            if (!isFloat && !isIntegerType(type)) {
                throw Unsupported{"input " + std::to_string(k) + " is " + typeName(type) +
                                  " data (float or integer data is supported)"};
            }
            if (!dataIn.empty() && integers == isFloat) throw Unsupported{"float data beside integer data"};
            integers = !isFloat;
            dataIn.push_back(k);
            continue;
        }
        const Constant& c = constants_.at(n.input(k));
        if (c.zeros || c.symbolic() || (!c.isInt && !c.tensor.defined())) {
            throw Unsupported{"input " + std::to_string(k) + " is a constant of a shape known only at run time"};
        }
        arrays::Array v = arrays::arrayOf(c);
        for (double x : v.v) {
            if (!std::isfinite(x)) {
                throw Unsupported{"input " + std::to_string(k) + " is a constant holding infinities or NaN"};
            }
        }
        constants.push_back(std::move(v));
    }
    if (dataIn.empty()) throw Unsupported{"constants whose values are not known at import"};
    // A constant tensor must not enlarge the data (the first data input's dims, aligned at the end).
    const auto shape = shapes_.find(n.input(dataIn[0]));
    for (const arrays::Array& c : constants) {
        if (c.v.size() <= 1) continue;
        if (shape == shapes_.end()) throw Unsupported{"data of a rank not known at import beside a constant tensor"};
        const std::vector<Dim>& dims = shape->second;
        bool fits = c.dims.size() <= dims.size();
        for (size_t j = 0; fits && j < c.dims.size(); ++j) {
            const Dim& d = dims[dims.size() - c.dims.size() + j];
            fits = c.dims[j] == 1 || (d.symbol.empty() && d.value == c.dims[j]);
        }
        if (!fits)
            throw Unsupported{"a constant tensor that enlarges the data (one that broadcasts to it is supported)"};
    }
    std::vector<NodePtr> ins;
    NodePtr m;
    int step = 0;
    auto named = [](const char* what, int k) {
        std::string s = what;
        s.append(std::to_string(k));
        return s;
    };
    auto name = [&](const char* what) { return named(what, step); };
    auto keptPart = [&](const NodePtr& t) { // m (1 - t)
        const NodePtr notT = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {t}, name("not"));
        return tessera::node(std::make_shared<Mul>(), {m, notT}, name("kept"));
    };
    for (int k : dataIn) {
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, named("x", k)));
        NodePtr v = ins.back();
        if (integers) {
            v = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {v}, named("float", k));
        }
        if (!m) {
            m = v;
            continue;
        }
        ++step;
        const NodePtr margin = tessera::node(std::make_shared<Sub>(), {isMax ? v : m, isMax ? m : v}, name("margin"));
        const NodePtr t = stepOf(margin, std::to_string(step));
        const NodePtr taken = tessera::node(std::make_shared<Mul>(), {v, t}, name("taken"));
        m = tessera::node(std::make_shared<Add>(), {taken, keptPart(t)}, name("max"));
    }
    for (const arrays::Array& c : constants) {
        ++step;
        const NodePtr margin =
            isMax ? affineOf(m, number(-1.0), c, name("margin").c_str())
                  : affineOf(m, number(1.0), mapped(c, [](double x) { return -x; }), name("margin").c_str());
        const NodePtr t = stepOf(margin, std::to_string(step));
        const NodePtr taken = affineOf(t, c, number(0.0), name("taken").c_str());
        m = tessera::node(std::make_shared<Add>(), {taken, keptPart(t)}, name("max"));
    }
    if (ins.size() == 1 && constants.empty()) return define(n, std::make_shared<Identity>(), dataInputs(n, dataIn));
    if (integers) m = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {m}, "int");
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{m}), dataInputs(n, dataIn));
}

// ThresholdedRelu: x where x > alpha, else 0: x t with t the step of the margin x - alpha,
// as the comparisons of float data take it (scaled past 1 and clipped to [0, 1]).
void Importer::importThresholdedRelu(const onnx::NodeProto& n, const Attributes& a) {
    if (n.op_type() == "Shrink") return importShrink(n, a);
    a.only({"alpha"});
    requireInputsImported(n);
    const float alpha = a.f("alpha", 1.0f);
    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    auto margin = affineOf(x, number(1.0), number(-static_cast<double>(alpha)), "margin");
    auto t = stepOf(margin);
    auto y = tessera::node(std::make_shared<Mul>(), {x, t}, "kept");
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}), dataInputs(n, 1));
}

// Shrink(x; lambd, bias): x - bias above lambd, x + bias below -lambd, else 0 (nn.Hardshrink
// at bias 0, nn.Softshrink at bias lambd): relu(x - lambd) - relu(-x - lambd), plus (lambd -
// bias) (step(x - lambd) - step(-x - lambd)) where bias is not lambd, the steps as the
// comparisons of float data take them (no product of x: infinities stay infinite).
void Importer::importShrink(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"lambd", "bias"});
    requireInputsImported(n);
    const double lambd = a.f("lambd", 0.5f), bias = a.f("bias", 0.0f);
    if (!(lambd >= 0.0)) throw Unsupported{"Shrink's lambd " + std::to_string(lambd) + " (0 or more is supported)"};
    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    auto over = affineOf(x, number(1.0), number(-lambd), "over"),
         under = affineOf(x, number(-1.0), number(-lambd), "under");
    auto relu = [](const NodePtr& v, const char* name) {
        return tessera::node(std::make_shared<Activation>(ActivationKind::relu), {v}, name);
    };
    NodePtr y = tessera::node(std::make_shared<Sub>(), {relu(over, "above"), relu(under, "below")}, "shrunk");
    if (lambd != bias) {
        auto jump = tessera::node(std::make_shared<Sub>(), {stepOf(over, "_over"), stepOf(under, "_under")}, "jump");
        y = tessera::node(std::make_shared<Add>(), {y, scaled(jump, static_cast<float>(lambd - bias), "jumped")}, "y");
    }
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}), dataInputs(n, 1));
}

// OneHot(indices, depth, values [off, on]) of indices that are data: with i the index as a
// float (a float index truncated toward zero, as ONNX casts it), plus depth where it is
// negative, and c the position along the new axis (a constant), off + (on - off) relu(1 -
// |i - c|): on at c = i, off elsewhere, exactly, and off at every position for an index
// outside [-depth, depth). The indices get a dim of 1 at the axis, tiled depth times. Integer
// values come back as int32.
void Importer::importOneHot(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    requireInputsImported(n);
    if (isConstant(n.input(0))) throw Unsupported{"the indices are a constant (indices that are data are supported)"};
    const int32_t type = elemTypeOf(n.input(0));
    const bool floating =
        type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16;
    if (!floating && !isIntegerType(type)) {
        throw Unsupported{"indices that are " + typeName(type) + " data (integer or float data is supported)"};
    }
    const float depthValue = requireScalar(n, 1, "the depth");
    const auto depth = static_cast<int64_t>(depthValue);
    if (depth < 1 || depth > (int64_t{1} << 24)) {
        throw Unsupported{"a depth of " + std::to_string(depthValue) + " (1 to 2^24 is supported)"};
    }
    const Constant& values = requireConstant(n, 2, "the values");
    const arrays::Array v = arrays::arrayOf(values);
    if (v.v.size() != 2) throw Unsupported{"values holding " + std::to_string(v.v.size()) + " numbers (2: off, on)"};
    const int64_t rank = rankOf(n, 0);
    if (rank < 0) throw Unsupported{"indices whose rank is not known at import"};
    int64_t axis = a.i("axis", -1);
    axis = axis < 0 ? axis + rank + 1 : axis;
    if (axis < 0 || axis > rank) throw Unsupported{"axis " + std::to_string(a.i("axis", -1)) + " out of range"};
    // [..., 1 at the axis, ...]: the dims before it kept, those after it as known at import.
    std::vector<int64_t> withAxis;
    int unknown = 0;
    for (int64_t d = 0; d < rank; ++d) {
        if (d == axis) withAxis.push_back(1);
        const int64_t size = dimOf(n, 0, d);
        withAxis.push_back(d < axis ? 0 : size >= 0 ? size : (++unknown, -1));
    }
    if (axis == rank) withAxis.push_back(1);
    if (unknown > 1) throw Unsupported{"more than one dim of the indices after the axis not known at import"};
    std::vector<int64_t> positionDims(static_cast<size_t>(rank + 1 - axis), 1);
    positionDims[0] = depth;
    std::vector<double> minusPosition(static_cast<size_t>(depth));
    for (int64_t c = 0; c < depth; ++c) minusPosition[static_cast<size_t>(c)] = -static_cast<double>(c);
    auto x = tessera::node(std::make_shared<Identity>(), {}, "indices");
    NodePtr i = x;
    if (floating) i = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {i}, "truncated");
    i = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {i}, "index");
    auto negative = clipped(scaled(i, -1.0f, "minus"), 0.0f, 1.0f, "negative");
    i = tessera::node(std::make_shared<Add>(), {i, scaled(negative, static_cast<float>(depth), "wrap")}, "wrapped");
    i = tessera::node(std::make_shared<Reshape>(Shape(withAxis)), {i}, "with_axis");
    i = tessera::node(std::make_shared<Tile>(static_cast<int>(axis), depth), {i}, "tiled");
    auto offset =
        affineOf(i, number(1.0), arrays::Array{arrays::Kind::floating, positionDims, minusPosition}, "offset");
    auto distance = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {offset}, "distance");
    auto hot =
        tessera::node(std::make_shared<Activation>(ActivationKind::relu),
                      {tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {distance}, "closeness")}, "hot");
    NodePtr y = affineOf(hot, number(v.v[1] - v.v[0]), number(v.v[0]), "one_hot");
    if (values.isInt) y = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {y}, "integers");
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}), dataInputs(n, 1),
                  {n.input(0)});
}

// Floor, Ceil and Round (half to even) of float data, exactly, as a graph (their gradient is
// 0, as PyTorch's is). floor(x) for |x| < 2^23: t - step(t - x) with t = x truncated toward
// zero (Casts to int32 and back); from 2^23 on every float is a whole number, so x itself
// (the input clipped to +-2^23 for the truncation, the two parts joined by the step of |x| -
// 2^23). ceil(x) = -floor(-x). round(x) = f + step(r - 1/2) + [r == 1/2] odd(f) with f =
// floor(x) and r = x - f (exact: x and f are within a factor of 2 beyond 1), odd(f) = f - 2
// floor(f / 2). The steps are those of the comparisons of float data. NaN gives an
// unspecified value (the clip takes it to a bound on some backends).
void Importer::importRounding(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    const int32_t type = elemTypeOf(n.input(0));
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::FLOAT16 && type != onnx::TensorProto::BFLOAT16) {
        throw Unsupported{"input 0 is " + typeName(type) + " data (float data is supported)"};
    }
    const std::string& op = n.op_type();
    int part = 0;
    auto name = [&](const char* what) {
        std::string s = what;
        s.append(std::to_string(part));
        return s;
    };
    int steps = 0;
    auto step = [&](const NodePtr& margin) { // 1 where margin > 0, else 0
        std::string suffix = "_";
        suffix.append(std::to_string(++steps));
        return stepOf(margin, suffix);
    };
    auto floorOf = [&](const NodePtr& v) {
        ++part;
        const float whole = 0x1p23f;
        auto bounded = clipped(v, -whole, whole, name("bounded").c_str());
        auto truncated = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {bounded}, name("int"));
        auto t = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {truncated}, name("truncated"));
        auto above = step(tessera::node(std::make_shared<Sub>(), {t, bounded}, name("excess")));
        auto small = tessera::node(std::make_shared<Sub>(), {t, above}, name("small_floor"));
        auto magnitude = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {v}, name("magnitude"));
        auto large = step(tessera::node(std::make_shared<MulAddConst>(1.0f, -whole), {magnitude}, name("beyond")));
        auto small_part = tessera::node(
            std::make_shared<Mul>(),
            {small, tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {large}, name("not_large"))},
            name("small_part"));
        auto large_part = tessera::node(std::make_shared<Mul>(), {v, large}, name("large_part"));
        return tessera::node(std::make_shared<Add>(), {small_part, large_part}, name("floor"));
    };
    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    NodePtr y;
    if (op == "Floor") {
        y = floorOf(x);
    } else if (op == "Ceil") {
        y = scaled(floorOf(scaled(x, -1.0f, "negated")), -1.0f, "ceil");
    } else {
        auto f = floorOf(x);
        auto r = tessera::node(std::make_shared<Sub>(), {x, f}, "fraction");
        auto pastHalf = step(tessera::node(std::make_shared<MulAddConst>(1.0f, -0.5f), {r}, "past_half"));
        auto fromHalf =
            tessera::node(std::make_shared<Activation>(ActivationKind::abs),
                          {tessera::node(std::make_shared<MulAddConst>(1.0f, -0.5f), {r}, "from_half")}, "distance");
        auto tie = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {step(fromHalf)}, "tie");
        auto half = floorOf(scaled(f, 0.5f, "half"));
        auto odd = tessera::node(std::make_shared<Sub>(), {f, scaled(half, 2.0f, "even")}, "odd");
        auto up = tessera::node(std::make_shared<Add>(),
                                {pastHalf, tessera::node(std::make_shared<Mul>(), {tie, odd}, "tie_to_even")}, "up");
        y = tessera::node(std::make_shared<Add>(), {f, up}, "round");
    }
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{y}), dataInputs(n, 1));
}

// Mean (element-wise) of data inputs: their Add (NumPy broadcasting, as Sum) times 1 / count.
void Importer::importMean(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    for (int k = 0; k < n.input_size(); ++k) {
        if (isConstant(n.input(k)))
            throw Unsupported{"input " + std::to_string(k) + " is a constant (data is supported)"};
    }
    if (n.input_size() == 1) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    std::vector<NodePtr> ins;
    Parents terms;
    for (int k = 0; k < n.input_size(); ++k) {
        std::string name = "x";
        name.append(std::to_string(k));
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, name));
        terms.push_back(Parent(ins.back()));
    }
    auto sum = tessera::node(std::make_shared<Add>(), terms, "sum");
    auto y = scaled(sum, 1.0f / static_cast<float>(n.input_size()), "mean");
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{y}), dataInputs(n, n.input_size()));
}

bool Importer::isIntegerData(const std::string& name) const {
    const int32_t t = elemTypeOf(name);
    return !isConstant(name) && (t == onnx::TensorProto::INT32 || t == onnx::TensorProto::INT64);
}

// Arithmetic on integer data (int32 in Tessera: lengths summed from a mask, `T - lengths`): the
// float layer between a Cast of each input to float and one of the result back to int32, exact
// while the values stay below 2^24.
void Importer::defineOverIntegers(const onnx::NodeProto& n, ModulePtr m, const std::vector<int>& inputs) {
    static const char *const inNames[] = {"x0", "x1"}, *const floatNames[] = {"float0", "float1"};
    const auto count = static_cast<int>(inputs.size());
    if (count < 1 || count > 2) throw Unsupported{"integer arithmetic of more than two inputs"};
    std::vector<NodePtr> ins;
    Parents floats;
    for (int k = 0; k < count; ++k) {
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, inNames[k]));
        floats.push_back(
            Parent(tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {ins.back()}, floatNames[k])));
    }
    auto y = tessera::node(std::move(m), floats, "in_float");
    auto out = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {y}, "integers");
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{out}), dataInputs(n, inputs));
}

// Integer data x divided by an integer constant or integer data (Div: the quotient truncated
// toward zero, as ONNX's integer Div is; Mod: the remainder of the floor division, of the
// divisor's sign, or with fmod 1 of the truncated one, of x's): `(lengths - 3) // 2 + 1`, and
// `torch.div(..., rounding_mode="floor")`, which PyTorch writes as Div, Mod, comparisons and
// a Where. In float: the quotient of the magnitudes is floor((|x| + 1/2) / |d|) (the half
// keeps a whole quotient whole whatever the rounding), then the signs: times clip(x, -1, 1),
// which is x's sign wherever the quotient is not 0, and d's (clip(d, -1, 1)). The remainder
// r = x - d q is exact; the floor division's adds d where r is not 0 and its sign is not d's:
// r + d clip(-sign(d) r, 0, 1). Exact for |x| below 2^20 (the result of a divisor of 0 in
// data is not defined, as ONNX leaves it).
void Importer::importIntegerDivision(const onnx::NodeProto& n, std::optional<int64_t> c, bool remainder, bool fmod) {
    if (c && *c == 0) throw Unsupported{"an integer division by the constant 0"};
    if (c && std::llabs(*c) > (1 << 20)) throw Unsupported{"a division by an integer beyond 2^20"};
    static const char *const inNames[] = {"x", "divisor"}, *const floatNames[] = {"x_float", "divisor_float"};
    std::vector<NodePtr> ins;
    NodePtr f[2];
    for (int k = 0; k < (c ? 1 : 2); ++k) {
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, inNames[k]));
        f[k] = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {ins.back()}, floatNames[k]);
    }
    const NodePtr& xf = f[0];
    const float cf = c ? static_cast<float>(*c) : 0.0f, m = std::fabs(cf);
    // d times a (a constant divisor, or the data's)
    auto times = [&](const NodePtr& a, const char* name) {
        return c ? scaled(a, cf, name) : tessera::node(std::make_shared<Mul>(), {f[1], a}, name);
    };
    auto magnitude = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {xf}, "magnitude");
    NodePtr ratio;
    if (c) {
        ratio = tessera::node(std::make_shared<MulAddConst>(1.0f / m, 0.5f / m), {magnitude}, "ratio");
    } else {
        auto shifted = tessera::node(std::make_shared<MulAddConst>(1.0f, 0.5f), {magnitude}, "shifted");
        auto divisor = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {f[1]}, "divisor_magnitude");
        ratio = tessera::node(std::make_shared<Div>(), {shifted, divisor}, "ratio");
    }
    auto whole = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {ratio}, "truncated");
    auto quotient = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {whole}, "quotient");
    NodePtr sign = clipped(xf, -1.0f, 1.0f, "sign");
    NodePtr divisorSign;
    if (!c) {
        divisorSign = clipped(f[1], -1.0f, 1.0f, "divisor_sign");
        sign = tessera::node(std::make_shared<Mul>(), {sign, divisorSign}, "signs");
    }
    NodePtr y = tessera::node(std::make_shared<Mul>(), {quotient, sign}, "signed");
    if (c && *c < 0) y = scaled(y, -1.0f, "negated");
    if (remainder) {
        y = tessera::node(std::make_shared<Sub>(), {xf, times(y, "multiple")}, "remainder");
        if (!fmod) {
            NodePtr opposite =
                c ? scaled(y, *c > 0 ? -1.0f : 1.0f, "opposite")
                  : scaled(tessera::node(std::make_shared<Mul>(), {y, divisorSign}, "aligned"), -1.0f, "opposite");
            auto wraps = clipped(opposite, 0.0f, 1.0f, "wraps");
            y = tessera::node(std::make_shared<Add>(), {y, times(wraps, "shift")}, "floor_remainder");
        }
    }
    y = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {y}, "integers");
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{y}),
                  dataInputs(n, c ? std::vector<int>{0} : std::vector<int>{0, 1}));
}

// fmod of float data x by a float constant c (one nonzero number) or float data y (c
// nullopt): r = x - y t with t = x / y truncated toward zero (Casts to int32 and back), then
// the quotient's rounding undone: where x / y rounded up to a whole number, r's sign is not
// x's, and r + |y| sign(x) is the remainder; where it rounded down past one, |r| >= |y|, and
// r - |y| sign(x) is. x - y t is computed exactly, as (x - p) - e with p = y t rounded and e
// its rounding error (Dekker's product: y and t split into halves of 12 bits by 4097), so the
// sign tests see its true sign and the result is fmod's where |x / y| < 2^23 (the steps are
// those of the comparisons of float data, so the CPU's flushed denormals count as 0); beyond
// that, where a product leaves float's range (|y| beyond 2^115) and where y is 0 (NaN in
// fmod) it is not. A zero remainder is +0 (fmod gives x's sign).
void Importer::importFloatMod(const onnx::NodeProto& n, std::optional<float> c) {
    const NodePtr x = tessera::node(std::make_shared<Identity>(), {}, "x");
    const NodePtr divisor = c ? NodePtr() : tessera::node(std::make_shared<Identity>(), {}, "divisor");
    const std::vector<NodePtr> ins = c ? std::vector<NodePtr>{x} : std::vector<NodePtr>{x, divisor};
    auto op = [](ModulePtr m, const NodePtr& a, const NodePtr& b, const std::string& name) {
        return tessera::node(std::move(m), {a, b}, name);
    };
    auto sub = [&](const NodePtr& a, const NodePtr& b, const std::string& name) {
        return op(std::make_shared<Sub>(), a, b, name);
    };
    auto mul = [&](const NodePtr& a, const NodePtr& b, const std::string& name) {
        return op(std::make_shared<Mul>(), a, b, name);
    };
    // Dekker's split: v = hi + lo exactly, each of at most 12 significant bits.
    auto split = [&](const NodePtr& v, const std::string& name) {
        auto big = scaled(v, 4097.0f, (name + "_big").c_str());
        auto hi = sub(big, sub(big, v, name + "_gap"), name + "_hi");
        return std::pair{hi, sub(v, hi, name + "_lo")};
    };
    const NodePtr q = c ? scaled(x, 1.0f / *c, "quotient") : op(std::make_shared<Div>(), x, divisor, "quotient");
    auto truncated = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32),
                                   {clipped(q, -0x1p23f, 0x1p23f, "bounded")}, "int");
    auto t = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {truncated}, "truncated");
    const auto [th, tl] = split(t, "t");
    NodePtr p, error;
    if (c) {
        volatile float big = *c * 4097.0f; // the same split of the constant, in float
        const float hi = big - (big - *c), lo = *c - hi;
        p = scaled(t, *c, "multiple");
        auto e = sub(scaled(th, hi, "hh"), p, "e_hh");
        e = op(std::make_shared<Add>(), e, scaled(tl, hi, "hl"), "e_hl");
        e = op(std::make_shared<Add>(), e, scaled(th, lo, "lh"), "e_lh");
        error = op(std::make_shared<Add>(), e, scaled(tl, lo, "ll"), "error");
    } else {
        const auto [yh, yl] = split(divisor, "y");
        p = mul(t, divisor, "multiple");
        auto e = sub(mul(yh, th, "hh"), p, "e_hh");
        e = op(std::make_shared<Add>(), e, mul(yh, tl, "hl"), "e_hl");
        e = op(std::make_shared<Add>(), e, mul(yl, th, "lh"), "e_lh");
        error = op(std::make_shared<Add>(), e, mul(yl, tl, "ll"), "error");
    }
    auto r = sub(sub(x, p, "rounded_remainder"), error, "remainder");
    auto sign = clipped(scaled(scaled(x, 0x1p127f, "x_scaled"), 0x1p22f, "x_rescaled"), -1.0f, 1.0f, "sign");
    auto along = mul(r, sign, "along"); // r in x's direction: in [0, |y|) when t is right
    auto under = stepOf(scaled(along, -1.0f, "behind"), "_under");
    NodePtr magnitude, room;
    if (c) {
        room = tessera::node(std::make_shared<MulAddConst>(-1.0f, std::fabs(*c)), {along}, "room");
    } else {
        magnitude = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {divisor}, "magnitude");
        room = sub(magnitude, along, "room");
    }
    auto over = tessera::node(std::make_shared<MulAddConst>(-1.0f, 1.0f), {stepOf(room, "_room")}, "over");
    auto turns = mul(sub(under, over, "turns"), sign, "signed_turns");
    auto fix = c ? scaled(turns, std::fabs(*c), "fix") : mul(turns, magnitude, "fix");
    auto y = op(std::make_shared<Add>(), r, fix, "fmod");
    return define(n, std::make_shared<Graph>(ins, std::vector<NodePtr>{y}),
                  dataInputs(n, c ? std::vector<int>{0} : std::vector<int>{0, 1}));
}

// Mod of integer data by an integer constant (one number) or integer data; fmod of float
// data by a float constant (one number) or float data.
void Importer::importMod(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"fmod"});
    requireInputsImported(n);
    if (n.input_size() != 2) throw Unsupported{"expects 2 inputs, got " + std::to_string(n.input_size())};
    const bool fmod = a.i("fmod", 0) != 0;
    const int32_t type = elemTypeOf(n.input(0));
    const bool floats =
        type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16;
    if (!isConstant(n.input(0)) && floats) {
        if (!fmod) throw Unsupported{"a Mod of float data with fmod 0 (ONNX requires fmod 1 for floats)"};
        if (!isConstant(n.input(1))) {
            const int32_t t1 = elemTypeOf(n.input(1));
            if (t1 != type)
                throw Unsupported{"a Mod of float data by " + typeName(t1) + " data (float data is supported)"};
            return importFloatMod(n, std::nullopt);
        }
        const float d = requireScalar(n, 1, "a Mod of float data's divisor");
        if (d == 0.0f || !std::isfinite(d)) {
            char text[32];
            std::snprintf(text, sizeof text, "%g", static_cast<double>(d));
            throw Unsupported{"a Mod of float data by the constant " + std::string(text) +
                              " (a finite nonzero number is supported)"};
        }
        return importFloatMod(n, d);
    }
    if (isConstant(n.input(0)) || !isIntegerData(n.input(0))) {
        throw Unsupported{"input 0 is not integer or float data (integer data by an integer constant or data, float "
                          "data by a float constant or data are supported)"};
    }
    if (isIntegerData(n.input(1))) return importIntegerDivision(n, std::nullopt, true, fmod);
    const Constant* c = isConstant(n.input(1)) ? &constants_.at(n.input(1)) : nullptr;
    if (!c || !c->isInt || c->ints.size() != 1 || c->symbolic()) {
        throw Unsupported{"input 1 is not one integer constant or integer data (integer data by an integer constant "
                          "or data is supported)"};
    }
    return importIntegerDivision(n, c->ints[0], true, fmod);
}

bool Importer::importSymbolicRange(const onnx::NodeProto& n, const Attributes& a) {
    const std::string& op = n.op_type();
    if (op == "Range") {
        if (n.input_size() != 3) return false;
        for (const std::string& in : n.input()) {
            if (!isConstant(in)) return false;
        }
        const Constant &start = constants_.at(n.input(0)), &limit = constants_.at(n.input(1)),
                       &delta = constants_.at(n.input(2));
        const std::string symbol = limit.symbol(0);
        if (symbol.empty() || limit.ints.size() != 1) return false; // known: folded
        if (!start.isInt || !delta.isInt || start.symbolic() || delta.symbolic() ||
            start.ints != std::vector<int64_t>{0} || delta.ints != std::vector<int64_t>{1}) {
            throw Unsupported{"a Range up to a dim not known at import ('" + symbol +
                              "') other than from 0 by 1 (torch.arange(N) over a free dim is supported)"};
        }
        symbolicRanges_[n.output(0)] = SymbolicRange{0, 1, symbol};
        return true;
    }
    int k = -1; // the input that is a SymbolicRange
    for (int i = 0; i < n.input_size(); ++i) {
        if (symbolicRanges_.count(n.input(i))) k = i;
    }
    if (k < 0) return false;
    const SymbolicRange r = symbolicRanges_.at(n.input(k));
    const int64_t to = op == "Cast" ? a.i("to", 0) : 0;
    if (op == "Cast" && (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32)) {
        symbolicRanges_[n.output(0)] = r;
        return true;
    }
    if (op == "Neg") {
        symbolicRanges_[n.output(0)] = SymbolicRange{-r.start, -r.delta, r.symbol};
        return true;
    }
    const bool affine = (op == "Add" || op == "Sub" || op == "Mul") && n.input_size() == 2;
    const std::string other = affine ? n.input(1 - k) : std::string();
    const Constant* c = affine && isConstant(other) ? &constants_.at(other) : nullptr;
    if (c && c->isInt && c->ints.size() == 1 && !c->symbolic()) { // r op c, c op r
        const int64_t v = c->ints[0];
        SymbolicRange out = r;
        if (op == "Mul") {
            out.start *= v;
            out.delta *= v;
        } else if (op == "Add" || k == 0) {
            out.start += op == "Add" ? v : -v;
        } else { // c - r
            out.start = v - r.start;
            out.delta = -r.delta;
        }
        symbolicRanges_[n.output(0)] = out;
        return true;
    }
    const auto data = affine ? shapes_.find(other) : shapes_.end();
    if (op != "Mul" && !symbolicRanges_.count(other) && isIntegerData(other) && data != shapes_.end() &&
        data->second.size() == 1 && data->second[0].symbol == r.symbol) {
        // x + sign (start + i delta): a step of sign delta at every position, summed along x
        // (CumSum), shifted to start at sign start; x negated for r - x.
        const auto sign = op == "Sub" && k == 1 ? -1.0f : 1.0f;
        const auto start = static_cast<float>(r.start), delta = static_cast<float>(r.delta);
        if (std::fabs(start) + std::fabs(delta) >= static_cast<float>(1 << 22)) {
            throw Unsupported{"a Range over a dim not known at import beyond 2^22"};
        }
        auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
        auto steps = tessera::node(std::make_shared<MulAddConst>(0.0f, sign * delta), {x}, "steps");
        auto sums = tessera::node(std::make_shared<CumSum>(0), {steps}, "sums");
        auto offsets = tessera::node(std::make_shared<MulAddConst>(1.0f, sign * (start - delta)), {sums}, "offsets");
        NodePtr term = x;
        if (op == "Sub" && k == 0) term = tessera::node(std::make_shared<MulAddConst>(-1.0f, 0.0f), {x}, "negated");
        auto sum = tessera::node(std::make_shared<Add>(), {term, offsets}, "sum");
        defineOverIntegers(n, std::make_shared<Graph>(std::vector<NodePtr>{x}, std::vector<NodePtr>{sum}), {1 - k});
        return true;
    }
    throw Unsupported{"a Range up to a dim not known at import ('" + r.symbol + "') read by " + op +
                      " (such a Range is supported where integer constants scale or shift it and integer data of "
                      "that length adds it, as x[torch.arange(N), index] exports)"};
}

} // namespace tessera::onnx_io
