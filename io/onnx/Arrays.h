// Constants of known dims as arrays of doubles, and NumPy's broadcasting over them: what the
// import evaluates on constants (io/onnx/Evaluate.cpp) and what builds a layer's constant
// operands from them (a masked fill's keep and fill, io/onnx/ImportTensorOps.cpp). Private
// to the ONNX import.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "io/onnx/Importer.h"

namespace tessera::onnx_io::arrays {

enum class Kind { floating, integer, boolean };

// A constant as values of one kind (doubles hold float32 and int64 shape values exactly,
// the int64 sentinels of Slice saturating).
struct Array {
    Kind kind = Kind::floating;
    std::vector<int64_t> dims;
    std::vector<double> v;
};

constexpr int64_t kMaxElements = int64_t{1} << 24; // larger computations stay layers

inline int64_t count(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) {
        if (d < 0) throw Unsupported{"a negative dim in a constant computation"};
        n = d == 0 ? 0 : (n > kMaxElements / d ? kMaxElements + 1 : n * d);
    }
    return n;
}

inline int64_t toInt(double x) {
    if (x >= 9.2e18) return std::numeric_limits<int64_t>::max();
    if (x <= -9.2e18) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(x);
}

inline Array arrayOf(const Constant& c) {
    Array a;
    a.dims = c.dims;
    if (c.isInt) {
        a.kind = c.isBool ? Kind::boolean : Kind::integer;
        a.v.assign(c.ints.begin(), c.ints.end());
    } else {
        if (!c.tensor.defined()) return a; // no elements
        const std::vector<float> f = c.tensor.toVector<float>();
        a.v.assign(f.begin(), f.end());
    }
    return a;
}

inline Constant constantOf(Array a) {
    Constant c;
    c.dims = a.dims;
    if (a.kind == Kind::floating) {
        std::vector<float> f(a.v.begin(), a.v.end());
        c.tensor = Tensor::fromVector(a.dims.empty() ? Shape{1} : Shape(a.dims), f);
        if (f.empty()) c.tensor = Tensor(); // a tensor of no elements has no storage here
        return c;
    }
    c.isInt = true;
    c.isBool = a.kind == Kind::boolean;
    for (double x : a.v) c.ints.push_back(toInt(x));
    return c;
}

// NumPy's broadcast of several dims lists.
inline std::vector<int64_t> broadcast(const std::vector<const Array*>& in) {
    size_t rank = 0;
    for (const Array* a : in) rank = std::max(rank, a->dims.size());
    std::vector<int64_t> out(rank, 1);
    for (const Array* a : in) {
        const size_t off = rank - a->dims.size();
        for (size_t d = 0; d < a->dims.size(); ++d) {
            const int64_t x = a->dims[d];
            int64_t& o = out[off + d];
            if (x == o || x == 1) continue;
            if (o != 1) throw Unsupported{"constants whose dims do not broadcast"};
            o = x;
        }
    }
    return out;
}

// For each element of `out` (row-major), its element in each input, broadcast.
template <class F> void forEachBroadcast(const std::vector<int64_t>& out, const std::vector<const Array*>& in, F f) {
    const size_t rank = out.size();
    std::vector<std::vector<int64_t>> strides(in.size(), std::vector<int64_t>(rank, 0));
    for (size_t k = 0; k < in.size(); ++k) {
        const auto& dims = in[k]->dims;
        const size_t off = rank - dims.size();
        int64_t s = 1;
        for (size_t d = dims.size(); d-- > 0;) {
            strides[k][off + d] = dims[d] == 1 ? 0 : s;
            s *= dims[d];
        }
    }
    const int64_t n = count(out);
    std::vector<int64_t> idx(rank, 0), at(in.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
        f(at);
        for (size_t d = rank; d-- > 0;) { // next index, carrying
            ++idx[d];
            for (size_t k = 0; k < in.size(); ++k) at[k] += strides[k][d];
            if (idx[d] < out[d]) break;
            for (size_t k = 0; k < in.size(); ++k) at[k] -= strides[k][d] * out[d];
            idx[d] = 0;
        }
    }
}

template <class F> Array elementwise(const std::vector<const Array*>& in, Kind kind, F f) {
    Array out;
    out.kind = kind;
    out.dims = broadcast(in);
    if (count(out.dims) > kMaxElements) throw Unsupported{"a constant computation of over 2^24 elements"};
    out.v.reserve(static_cast<size_t>(count(out.dims)));
    forEachBroadcast(out.dims, in, [&](const std::vector<int64_t>& at) { out.v.push_back(f(at)); });
    return out;
}

// The ops whose result is a truth value (a boolean array), Not aside (unary).
inline bool isComparison(const std::string& op) {
    return op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual" ||
           op == "And" || op == "Or" || op == "Xor";
}

} // namespace tessera::onnx_io::arrays
