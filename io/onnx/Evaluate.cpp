// Computations on constants of known dims, evaluated at import: the masks and index tables
// that exporters build from a model's static sizes (shifted windows' attention masks,
// relative positions), written as Range, ScatterND, Where, Equal, Mod, Expand and the like.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "io/onnx/Arrays.h"
#include "io/onnx/Importer.h"

namespace tessera::onnx_io {

namespace {

using namespace arrays;

std::vector<int64_t> strides(const std::vector<int64_t>& dims) {
    std::vector<int64_t> s(dims.size(), 1);
    for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
    return s;
}

int64_t normAxis(int64_t axis, size_t rank) {
    const int64_t a = axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
    if (a < 0 || a >= static_cast<int64_t>(rank)) {
        throw Unsupported{"axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank)};
    }
    return a;
}

// Every element of `dims` in row-major order, as its multi-index.
template <class F> void forEachIndex(const std::vector<int64_t>& dims, F f) {
    const int64_t n = count(dims);
    std::vector<int64_t> idx(dims.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
        f(idx);
        for (size_t d = dims.size(); d-- > 0;) {
            if (++idx[d] < dims[d]) break;
            idx[d] = 0;
        }
    }
}

// The binary ops, resolved from their names once a node (not once an element).
enum class Binary {
    add,
    sub,
    mul,
    div,
    pow,
    max,
    min,
    mod,
    equal,
    less,
    lessOrEqual,
    greater,
    greaterOrEqual,
    and_,
    or_,
    xor_
};

std::optional<Binary> binaryOf(const std::string& op) {
    static const std::pair<const char*, Binary> ops[] = {
        {"Add", Binary::add},         {"Sum", Binary::add},
        {"Sub", Binary::sub},         {"Mul", Binary::mul},
        {"Div", Binary::div},         {"Pow", Binary::pow},
        {"Max", Binary::max},         {"Min", Binary::min},
        {"Mod", Binary::mod},         {"Equal", Binary::equal},
        {"Less", Binary::less},       {"LessOrEqual", Binary::lessOrEqual},
        {"Greater", Binary::greater}, {"GreaterOrEqual", Binary::greaterOrEqual},
        {"And", Binary::and_},        {"Or", Binary::or_},
        {"Xor", Binary::xor_}};
    for (const auto& [name, b] : ops) {
        if (op == name) return b;
    }
    return std::nullopt;
}

double binary(Binary op, double x, double y, bool ints, bool fmod) {
    switch (op) {
    case Binary::add: return x + y;
    case Binary::sub: return x - y;
    case Binary::mul: return x * y;
    case Binary::div:
        if (!ints) return static_cast<double>(static_cast<float>(x) / static_cast<float>(y));
        if (y == 0) throw Unsupported{"an integer division by zero"};
        return std::trunc(x / y);
    case Binary::pow: return std::pow(x, y);
    case Binary::max: return std::max(x, y);
    case Binary::min: return std::min(x, y);
    case Binary::mod: {
        if (ints && y == 0) throw Unsupported{"an integer modulo by zero"};
        const double r = std::fmod(x, y);
        if (fmod || r == 0 || (r < 0) == (y < 0)) return r;
        return r + y; // the divisor's sign, as Python's %
    }
    case Binary::equal: return x == y;
    case Binary::less: return x < y;
    case Binary::lessOrEqual: return x <= y;
    case Binary::greater: return x > y;
    case Binary::greaterOrEqual: return x >= y;
    case Binary::and_: return (x != 0) && (y != 0);
    case Binary::or_: return (x != 0) || (y != 0);
    case Binary::xor_: return (x != 0) != (y != 0);
    }
    return std::nan("");
}

// The elementwise functions of one input, resolved once a node; null for other ops.
using Unary = double (*)(double);
Unary unaryOf(const std::string& op) {
    static const std::pair<const char*, Unary> ops[] = {
        {"Neg", [](double x) { return -x; }},
        {"Abs", [](double x) { return std::abs(x); }},
        {"Sqrt", [](double x) { return std::sqrt(x); }},
        {"Reciprocal", [](double x) { return 1.0 / x; }},
        {"Floor", [](double x) { return std::floor(x); }},
        {"Ceil", [](double x) { return std::ceil(x); }},
        {"Exp", [](double x) { return std::exp(x); }},
        {"Log", [](double x) { return std::log(x); }},
        {"Sign", [](double x) { return static_cast<double>((x > 0) - (x < 0)); }},
        {"Not", [](double x) { return x == 0 ? 1.0 : 0.0; }},
        // tables computed in the graph (sinusoidal positions, rotary angles, windows)
        {"Sin", [](double x) { return std::sin(x); }},
        {"Cos", [](double x) { return std::cos(x); }},
        {"Tan", [](double x) { return std::tan(x); }},
        {"Asin", [](double x) { return std::asin(x); }},
        {"Acos", [](double x) { return std::acos(x); }},
        {"Atan", [](double x) { return std::atan(x); }},
        {"Sinh", [](double x) { return std::sinh(x); }},
        {"Cosh", [](double x) { return std::cosh(x); }},
        {"Asinh", [](double x) { return std::asinh(x); }},
        {"Acosh", [](double x) { return std::acosh(x); }},
        {"Atanh", [](double x) { return std::atanh(x); }},
        {"Tanh", [](double x) { return std::tanh(x); }},
        {"Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
        {"Erf", [](double x) { return std::erf(x); }},
        {"Round", [](double x) { return std::nearbyint(x); }}, // halves to even (the default rounding mode)
        {"IsNaN", [](double x) { return std::isnan(x) ? 1.0 : 0.0; }}};
    for (const auto& [name, f] : ops) {
        if (op == name) return f;
    }
    return nullptr;
}

Array reshaped(Array x, std::vector<int64_t> to, bool allowZero) {
    int64_t known = 1;
    int inferred = -1;
    for (size_t d = 0; d < to.size(); ++d) {
        if (to[d] == 0 && !allowZero) {
            if (d >= x.dims.size()) throw Unsupported{"a reshape's 0 past the input's rank"};
            to[d] = x.dims[d];
        }
        if (to[d] == -1) {
            if (inferred >= 0) throw Unsupported{"a reshape with two -1 dims"};
            inferred = static_cast<int>(d);
        } else {
            known *= to[d];
        }
    }
    const auto n = static_cast<int64_t>(x.v.size());
    if (inferred >= 0) to[static_cast<size_t>(inferred)] = known > 0 ? n / known : 0;
    if (count(to) != n) throw Unsupported{"a reshape of " + std::to_string(n) + " constant values to other counts"};
    x.dims = to;
    return x;
}

Array transposed(const Array& x, std::vector<int64_t> perm) {
    const size_t rank = x.dims.size();
    if (perm.empty()) {
        for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    }
    if (perm.size() != rank) throw Unsupported{"a transpose's perm of another rank"};
    Array out;
    out.kind = x.kind;
    for (int64_t p : perm) out.dims.push_back(x.dims[static_cast<size_t>(normAxis(p, rank))]);
    const std::vector<int64_t> s = strides(x.dims);
    out.v.reserve(x.v.size());
    forEachIndex(out.dims, [&](const std::vector<int64_t>& idx) {
        int64_t at = 0;
        for (size_t d = 0; d < rank; ++d) at += idx[d] * s[static_cast<size_t>(normAxis(perm[d], rank))];
        out.v.push_back(x.v[static_cast<size_t>(at)]);
    });
    return out;
}

// An ONNX tensor type's kind of values.
Kind kindOfType(int32_t type) {
    using TP = onnx::TensorProto;
    if (type == TP::FLOAT || type == TP::DOUBLE || type == TP::FLOAT16 || type == TP::BFLOAT16) return Kind::floating;
    if (type == TP::BOOL) return Kind::boolean;
    return Kind::integer;
}

bool isReduction(const std::string& op) {
    static const char* ops[] = {"ReduceSum",  "ReduceProd", "ReduceMax",       "ReduceMin",
                                "ReduceMean", "ReduceL1",   "ReduceSumSquare", "ReduceL2"};
    return std::any_of(std::begin(ops), std::end(ops), [&](const char* o) { return op == o; });
}

// x reduced over `axes` (every axis when empty, unless noop_with_empty_axes), the reduced
// dims kept as 1s with keepdims (the default). Floats are rounded to float32 once, at the end.
Array reduced(const std::string& op, const Array& x, std::vector<int64_t> axes, const Attributes& a) {
    const size_t rank = x.dims.size();
    if (axes.empty()) {
        if (a.i("noop_with_empty_axes", 0) != 0) return x;
        for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    }
    std::vector<bool> over(rank, false);
    for (int64_t ax : axes) over[static_cast<size_t>(normAxis(ax, rank))] = true;
    const bool keep = a.i("keepdims", 1) != 0;
    std::vector<int64_t> kept(rank); // x's dims with the reduced ones as 1
    int64_t group = 1;
    Array out;
    out.kind = x.kind;
    for (size_t d = 0; d < rank; ++d) {
        kept[d] = over[d] ? 1 : x.dims[d];
        if (over[d]) group *= x.dims[d];
        if (!over[d] || keep) out.dims.push_back(kept[d]);
    }
    if (group == 0) throw Unsupported{op + " over an axis of size 0"};
    // the op resolved once (not once an element)
    enum class Step { max, min, prod, abs, square, sum };
    const Step step = op == "ReduceMax"                             ? Step::max
                      : op == "ReduceMin"                           ? Step::min
                      : op == "ReduceProd"                          ? Step::prod
                      : op == "ReduceL1"                            ? Step::abs
                      : op == "ReduceSumSquare" || op == "ReduceL2" ? Step::square
                                                                    : Step::sum;
    std::vector<double> acc(static_cast<size_t>(count(kept)), step == Step::prod ? 1.0 : 0.0);
    std::vector<bool> seen(acc.size(), false);
    const std::vector<int64_t> st = strides(kept);
    size_t i = 0;
    forEachIndex(x.dims, [&](const std::vector<int64_t>& idx) {
        size_t at = 0;
        for (size_t d = 0; d < rank; ++d) at += static_cast<size_t>((over[d] ? 0 : idx[d]) * st[d]);
        const double v = x.v[i++];
        double& r = acc[at];
        switch (step) {
        case Step::max:
        case Step::min: {
            const bool better = step == Step::max ? v > r : v < r;
            if (!seen[at] || better || std::isnan(v)) r = std::isnan(r) ? r : v; // NaN propagates
            seen[at] = true;
            break;
        }
        case Step::prod: r *= v; break;
        case Step::abs: r += std::abs(v); break;
        case Step::square: r += v * v; break;
        case Step::sum: r += v; break;
        }
    });
    const bool mean = op == "ReduceMean", l2 = op == "ReduceL2";
    for (double& r : acc) {
        if (mean) r = x.kind == Kind::floating ? r / static_cast<double>(group) : std::trunc(r / group);
        if (l2) r = x.kind == Kind::floating ? std::sqrt(r) : std::trunc(std::sqrt(r));
        if (x.kind == Kind::floating) r = static_cast<float>(r);
    }
    out.v = std::move(acc);
    return out;
}

} // namespace

// Evaluates node n, all of whose inputs are constants with every dim and value known.
// False when its op is not one evaluated here (the other folds and the layers then try).
bool Importer::evaluate(const onnx::NodeProto& n, const Attributes& a) {
    const std::string& op = n.op_type();
    std::vector<Array> in;
    for (int k = 0; k < n.input_size(); ++k) {
        in.push_back(n.input(k).empty() ? Array{} : arrayOf(constants_.at(n.input(k))));
    }
    auto present = [&](int k) { return n.input_size() > k && !n.input(k).empty(); };
    // Input k's integers (an error naming it when it holds floats).
    auto ints = [&](int k, const char* what) { return requireInts(n, k, what); };
    auto result = [&](Array out, int slot = 0) {
        if (count(out.dims) != static_cast<int64_t>(out.v.size())) {
            throw Unsupported{"an internal error: a constant of " + std::to_string(out.v.size()) + " values"};
        }
        return setConstant(n.output(slot), constantOf(std::move(out)));
    };
    if (const std::optional<Binary> b = binaryOf(op); b && n.input_size() >= 1) {
        if (n.input_size() > 2 && op != "Max" && op != "Min" && op != "Sum") return false;
        Kind kind = Kind::boolean;
        for (const Array& x : in) {
            if (x.kind == Kind::floating) kind = Kind::floating;
            if (x.kind == Kind::integer && kind == Kind::boolean) kind = Kind::integer;
        }
        const bool fmod = a.i("fmod", 0) != 0, integers = kind != Kind::floating;
        Array acc = in[0];
        for (size_t k = 1; k < in.size(); ++k) {
            const std::vector<double>&x = acc.v, &y = in[k].v;
            acc = elementwise(
                {&acc, &in[k]}, isComparison(op) ? Kind::boolean : kind, [&](const std::vector<int64_t>& at) {
                    return binary(*b, x[static_cast<size_t>(at[0])], y[static_cast<size_t>(at[1])], integers, fmod);
                });
        }
        if (op == "Pow" && kind != Kind::floating) acc.kind = in[0].kind;
        return result(std::move(acc));
    }
    if (const Unary f = unaryOf(op); f && n.input_size() == 1) {
        Array out = in[0];
        for (double& x : out.v) x = f(x);
        if (op == "Not" || op == "IsNaN") out.kind = Kind::boolean;
        if (out.kind == Kind::floating) {
            for (double& x : out.v) x = static_cast<float>(x);
        }
        return result(std::move(out));
    }
    if (op == "IsInf" && n.input_size() == 1) {
        const bool negative = a.i("detect_negative", 1) != 0, positive = a.i("detect_positive", 1) != 0;
        Array out = in[0];
        out.kind = Kind::boolean;
        for (double& x : out.v) x = std::isinf(x) && (x < 0 ? negative : positive) ? 1.0 : 0.0;
        return result(std::move(out));
    }
    if (op == "EyeLike" && n.input_size() == 1) { // ones on diagonal k of a 2-D shape; its values unread
        if (in[0].dims.size() != 2)
            throw Unsupported{"EyeLike of a constant of " + std::to_string(in[0].dims.size()) +
                              " dims (2 are required)"};
        const int64_t k = a.i("k", 0), rows = in[0].dims[0], cols = in[0].dims[1];
        Array out;
        out.dims = in[0].dims;
        out.kind = a.has("dtype") ? kindOfType(static_cast<int32_t>(a.i("dtype", 0))) : in[0].kind;
        out.v.assign(static_cast<size_t>(rows * cols), 0.0);
        for (int64_t i = 0; i < rows; ++i) {
            if (i + k >= 0 && i + k < cols) out.v[static_cast<size_t>(i * cols + i + k)] = 1.0;
        }
        return result(std::move(out));
    }
    if (isReduction(op)) {
        return result(reduced(op, in[0], present(1) ? ints(1, "the axes") : a.ints("axes"), a)); // an input from 13
    }
    if (op == "Cast") {
        const int64_t to = a.i("to", 0);
        Array out = in[0];
        using TP = onnx::TensorProto;
        if (to == TP::FLOAT || to == TP::DOUBLE) {
            out.kind = Kind::floating;
            for (double& x : out.v) x = static_cast<float>(x);
        } else if (to == TP::BOOL) {
            out.kind = Kind::boolean;
            for (double& x : out.v) x = x != 0;
        } else if (to == TP::INT64 || to == TP::INT32 || to == TP::INT16 || to == TP::INT8 || to == TP::UINT8) {
            out.kind = Kind::integer;
            for (double& x : out.v) x = std::trunc(x);
        } else {
            return false; // 16-bit floats: the other folds, or a layer
        }
        return result(std::move(out));
    }
    if (op == "Where" && n.input_size() == 3) {
        Kind kind = in[1].kind == Kind::floating || in[2].kind == Kind::floating ? Kind::floating : in[1].kind;
        return result(elementwise({&in[0], &in[1], &in[2]}, kind, [&](const std::vector<int64_t>& at) {
            return in[0].v[static_cast<size_t>(at[0])] != 0 ? in[1].v[static_cast<size_t>(at[1])]
                                                            : in[2].v[static_cast<size_t>(at[2])];
        }));
    }
    if (op == "Identity") return result(in[0]);
    if (op == "Size") {
        Array out;
        out.kind = Kind::integer;
        out.v = {static_cast<double>(in[0].v.size())};
        return result(std::move(out));
    }
    if (op == "Reshape" && n.input_size() == 2)
        return result(reshaped(in[0], ints(1, "the shape"), a.i("allowzero", 0) != 0));
    if (op == "Flatten") {
        const int64_t axis = a.i("axis", 1);
        const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(in[0].dims.size()) : axis;
        int64_t outer = 1;
        for (int64_t d = 0; d < ax; ++d) outer *= in[0].dims[static_cast<size_t>(d)];
        return result(reshaped(in[0], {outer, -1}, false));
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
        std::vector<int64_t> axes = present(1) ? ints(1, "the axes") : a.ints("axes");
        Array out = in[0];
        if (op == "Unsqueeze") {
            const size_t rank = out.dims.size() + axes.size();
            for (int64_t& ax : axes) ax = normAxis(ax, rank);
            std::sort(axes.begin(), axes.end());
            for (int64_t ax : axes) out.dims.insert(out.dims.begin() + ax, 1);
        } else {
            std::vector<int64_t> dims;
            for (int64_t& ax : axes) ax = normAxis(ax, out.dims.size());
            for (size_t d = 0; d < out.dims.size(); ++d) {
                const bool listed = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
                if (!(axes.empty() ? out.dims[d] == 1 : listed)) dims.push_back(out.dims[d]);
            }
            out.dims = dims;
        }
        return result(std::move(out));
    }
    if (op == "Trilu") { // the upper (or lower) triangle of the last two dims from diagonal k; zeros elsewhere
        Array out = in[0];
        const size_t rank = out.dims.size();
        if (rank < 2) throw Unsupported{"a Trilu of a constant of fewer than 2 dims"};
        int64_t k = 0;
        if (present(1)) {
            const std::vector<int64_t> ks = ints(1, "k");
            if (ks.size() != 1) throw Unsupported{"k must hold one value; it holds " + std::to_string(ks.size())};
            k = ks[0];
        }
        const bool upper = a.i("upper", 1) != 0;
        const int64_t rows = out.dims[rank - 2], cols = out.dims[rank - 1];
        for (size_t e = 0; rows > 0 && cols > 0 && e < out.v.size(); ++e) {
            const auto j = static_cast<int64_t>(e) % cols, i = static_cast<int64_t>(e) / cols % rows;
            if (upper ? j - i < k : j - i > k) out.v[e] = 0;
        }
        return result(std::move(out));
    }
    if (op == "Transpose") return result(transposed(in[0], a.ints("perm")));
    if (op == "Concat") {
        const size_t rank = in[0].dims.size();
        if (rank == 0) return false;
        const auto axis = static_cast<size_t>(normAxis(a.i("axis", 0), rank));
        Array out;
        out.kind = in[0].kind;
        out.dims = in[0].dims;
        out.dims[axis] = 0;
        for (const Array& x : in) {
            if (x.dims.size() != rank) throw Unsupported{"constants of different ranks concatenated"};
            if (x.kind == Kind::floating) out.kind = Kind::floating;
            out.dims[axis] += x.dims[axis];
        }
        int64_t outer = 1;
        for (size_t d = 0; d < axis; ++d) outer *= out.dims[d];
        for (int64_t o = 0; o < outer; ++o) {
            for (const Array& x : in) {
                const auto block = static_cast<int64_t>(x.v.size()) / std::max<int64_t>(outer, 1);
                out.v.insert(out.v.end(), x.v.begin() + o * block, x.v.begin() + (o + 1) * block);
            }
        }
        return result(std::move(out));
    }
    if (op == "Slice") {
        const Array& x = in[0];
        const size_t rank = x.dims.size();
        std::vector<int64_t> starts, ends, axes, steps;
        if (n.input_size() == 1) { // before opset 10: attributes
            starts = a.ints("starts"), ends = a.ints("ends"), axes = a.ints("axes");
        } else {
            starts = ints(1, "the starts"), ends = ints(2, "the ends");
            if (present(3)) axes = ints(3, "the axes");
            if (present(4)) steps = ints(4, "the steps");
        }
        if (axes.empty()) {
            for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
        }
        if (steps.empty()) steps.assign(starts.size(), 1);
        if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
            throw Unsupported{"starts, ends, axes and steps of different lengths"};
        }
        std::vector<int64_t> first(rank, 0), step(rank, 1), dims = x.dims;
        for (size_t i = 0; i < axes.size(); ++i) {
            const auto ax = static_cast<size_t>(normAxis(axes[i], rank));
            const int64_t dim = x.dims[ax], s = steps[i];
            if (s == 0) throw Unsupported{"a slice step of 0"};
            auto clampAt = [&](int64_t v) {
                if (v < 0) v += dim;
                return s > 0 ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1);
            };
            const int64_t b = clampAt(starts[i]), e = clampAt(ends[i]);
            first[ax] = b;
            step[ax] = s;
            dims[ax] = s > 0 ? std::max<int64_t>(0, (e - b + s - 1) / s) : std::max<int64_t>(0, (b - e - s - 1) / -s);
        }
        Array out;
        out.kind = x.kind;
        out.dims = dims;
        const std::vector<int64_t> st = strides(x.dims);
        forEachIndex(dims, [&](const std::vector<int64_t>& idx) {
            int64_t at = 0;
            for (size_t d = 0; d < rank; ++d) at += (first[d] + idx[d] * step[d]) * st[d];
            out.v.push_back(x.v[static_cast<size_t>(at)]);
        });
        return result(std::move(out));
    }
    if (op == "Gather") {
        const Array& x = in[0];
        if (x.dims.empty()) return false;
        const auto axis = static_cast<size_t>(normAxis(a.i("axis", 0), x.dims.size()));
        const std::vector<int64_t> idx = ints(1, "the indices");
        const int64_t dim = x.dims[axis];
        Array out;
        out.kind = x.kind;
        out.dims.assign(x.dims.begin(), x.dims.begin() + static_cast<std::ptrdiff_t>(axis));
        out.dims.insert(out.dims.end(), in[1].dims.begin(), in[1].dims.end());
        out.dims.insert(out.dims.end(), x.dims.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.dims.end());
        int64_t outer = 1, inner = 1;
        for (size_t d = 0; d < axis; ++d) outer *= x.dims[d];
        for (size_t d = axis + 1; d < x.dims.size(); ++d) inner *= x.dims[d];
        for (int64_t o = 0; o < outer; ++o) {
            for (int64_t i : idx) {
                const int64_t k = i < 0 ? i + dim : i;
                if (k < 0 || k >= dim) throw Unsupported{"an index out of range"};
                const auto from = x.v.begin() + (o * dim + k) * inner;
                out.v.insert(out.v.end(), from, from + inner);
            }
        }
        return result(std::move(out));
    }
    if (op == "Expand" && n.input_size() == 2) {
        Array shape;
        shape.dims = ints(1, "the shape");
        Array out;
        out.kind = in[0].kind;
        out.dims = broadcast({&in[0], &shape});
        if (count(out.dims) > kMaxElements) return false;
        forEachBroadcast(out.dims, {&in[0]},
                         [&](const std::vector<int64_t>& at) { out.v.push_back(in[0].v[static_cast<size_t>(at[0])]); });
        return result(std::move(out));
    }
    if (op == "Pad" && n.input_size() >= 2 && a.s("mode", "constant") == "constant") {
        if (n.input_size() > 3 && !n.input(3).empty()) return false; // the axes input (opset 18)
        const std::vector<int64_t> pads = ints(1, "the pads");
        const Array& x = in[0];
        const size_t rank = x.dims.size();
        if (pads.size() != 2 * rank) throw Unsupported{"pads for another rank"};
        const double fill = present(2) && !in[2].v.empty() ? in[2].v[0] : 0.0;
        Array out;
        out.kind = x.kind;
        for (size_t d = 0; d < rank; ++d) {
            if (pads[d] < 0 || pads[rank + d] < 0) return false; // cropping: the layers say so
            out.dims.push_back(x.dims[d] + pads[d] + pads[rank + d]);
        }
        const std::vector<int64_t> st = strides(x.dims);
        forEachIndex(out.dims, [&](const std::vector<int64_t>& idx) {
            int64_t at = 0;
            bool inside = true;
            for (size_t d = 0; d < rank && inside; ++d) {
                const int64_t i = idx[d] - pads[d];
                inside = i >= 0 && i < x.dims[d];
                at += i * st[d];
            }
            out.v.push_back(inside ? x.v[static_cast<size_t>(at)] : fill);
        });
        return result(std::move(out));
    }
    if (op == "Tile" && n.input_size() == 2) {
        const std::vector<int64_t> reps = ints(1, "the repeats");
        const Array& x = in[0];
        if (reps.size() != x.dims.size()) throw Unsupported{"Tile's repeats of another rank"};
        Array out;
        out.kind = x.kind;
        for (size_t d = 0; d < reps.size(); ++d) out.dims.push_back(x.dims[d] * reps[d]);
        const std::vector<int64_t> st = strides(x.dims);
        forEachIndex(out.dims, [&](const std::vector<int64_t>& idx) {
            int64_t at = 0;
            for (size_t d = 0; d < idx.size(); ++d) at += (idx[d] % x.dims[d]) * st[d];
            out.v.push_back(x.v[static_cast<size_t>(at)]);
        });
        return result(std::move(out));
    }
    if (op == "ConstantOfShape") {
        Array out;
        out.dims = ints(0, "the shape");
        double value = 0.0;
        if (const onnx::AttributeProto* v = a.get("value")) {
            const Array fill = arrayOf(onnx_io::constantOf(v->t(), "ConstantOfShape's value"));
            if (fill.v.size() != 1) return false;
            out.kind = fill.kind;
            value = fill.v[0];
        }
        if (count(out.dims) > kMaxElements) return false;
        out.v.assign(static_cast<size_t>(count(out.dims)), value);
        return result(std::move(out));
    }
    if (op == "Range" && n.input_size() == 3) {
        for (const Array& x : in) {
            if (x.v.size() != 1) throw Unsupported{"Range's start, limit and delta must be scalars"};
        }
        const double start = in[0].v[0], limit = in[1].v[0], delta = in[2].v[0];
        if (delta == 0) throw Unsupported{"a Range of delta 0"};
        const double steps = std::max(0.0, std::ceil((limit - start) / delta));
        if (steps > static_cast<double>(kMaxElements)) return false;
        Array out;
        out.kind = in[0].kind;
        out.dims = {static_cast<int64_t>(steps)};
        for (int64_t i = 0; i < out.dims[0]; ++i) out.v.push_back(start + static_cast<double>(i) * delta);
        return result(std::move(out));
    }
    if (op == "ScatterND" && n.input_size() == 3) {
        if (a.s("reduction", "none") != "none") return false;
        Array out = in[0];
        const Array& indices = in[1];
        const Array& updates = in[2];
        if (indices.dims.empty()) throw Unsupported{"ScatterND's indices must have a rank"};
        const auto q = static_cast<size_t>(indices.dims.back());
        if (q > out.dims.size()) throw Unsupported{"ScatterND's index tuples are longer than the data's rank"};
        const std::vector<int64_t> st = strides(out.dims);
        int64_t slice = 1;
        for (size_t d = q; d < out.dims.size(); ++d) slice *= out.dims[d];
        const size_t tuples = q == 0 ? 0 : indices.v.size() / q;
        if (updates.v.size() != tuples * static_cast<size_t>(slice)) {
            throw Unsupported{"ScatterND's updates do not fit its indices"};
        }
        for (size_t t = 0; t < tuples; ++t) {
            int64_t at = 0;
            for (size_t d = 0; d < q; ++d) {
                int64_t i = toInt(indices.v[t * q + d]);
                if (i < 0) i += out.dims[d];
                if (i < 0 || i >= out.dims[d]) throw Unsupported{"a ScatterND index out of range"};
                at += i * st[d];
            }
            std::copy_n(updates.v.begin() + static_cast<std::ptrdiff_t>(t) * slice, slice, out.v.begin() + at);
        }
        return result(std::move(out));
    }
    return false;
}

} // namespace tessera::onnx_io
