#pragma once
/// \file The batch dims of matrix products (MatMul, ScaledDotProductAttention): tensors
/// [..., R, C] seen as their matrices, and NumPy's broadcasting of the leading dims. Internal.

#include <algorithm>
#include <string>
#include <vector>

#include "backend/Tensor.h"

namespace tessera::batch {

/// The broadcast batch dims of two shapes (all but their last two dims, aligned from the
/// right), and for each batch of the result the batch of a and of b it reads.
struct Batches {
    std::vector<int64_t> dims;
    std::vector<int64_t> ofA, ofB;
};

/// `why` is left empty when the batch dims broadcast, else says what does not fit. Without
/// `indices`, only `dims` (a shape check: its batch may be a large stand-in size).
inline Batches of(const Shape& a, const Shape& b, std::string& why, bool indices = true) {
    const std::vector<int64_t> da(a.dims().begin(), a.dims().end() - 2), db(b.dims().begin(), b.dims().end() - 2);
    const size_t rank = std::max(da.size(), db.size());
    auto dimOf = [rank](const std::vector<int64_t>& d, size_t i) {
        return i < rank - d.size() ? 1 : d[i - (rank - d.size())];
    };
    Batches out;
    out.dims.assign(rank, 1);
    for (size_t i = 0; i < rank; ++i) {
        const int64_t x = dimOf(da, i), y = dimOf(db, i);
        if (x != y && x != 1 && y != 1) {
            why = "batch dims of " + a.str() + " and " + b.str() + " do not broadcast";
            return out;
        }
        out.dims[i] = std::max(x, y);
    }
    if (!indices) return out;
    int64_t count = 1;
    for (int64_t d : out.dims) count *= d;
    out.ofA.resize(static_cast<size_t>(count));
    out.ofB.resize(static_cast<size_t>(count));
    for (int64_t n = 0; n < count; ++n) {
        int64_t rest = n, ia = 0, ib = 0, strideA = 1, strideB = 1;
        for (size_t i = rank; i-- > 0;) { // the last batch dim varies fastest
            const int64_t pos = rest % out.dims[i];
            rest /= out.dims[i];
            const int64_t x = dimOf(da, i), y = dimOf(db, i);
            ia += (x == 1 ? 0 : pos) * strideA;
            ib += (y == 1 ? 0 : pos) * strideB;
            strideA *= x;
            strideB *= y;
        }
        out.ofA[static_cast<size_t>(n)] = ia;
        out.ofB[static_cast<size_t>(n)] = ib;
    }
    return out;
}

/// t [..., R, C] as its matrices [count, R, C].
inline Tensor matrices(const Tensor& t) {
    const Shape& s = t.shape();
    const int64_t r = s[s.rank() - 2], c = s[s.rank() - 1];
    return t.reshape({t.numel() / (r * c), r, c});
}

/// Matrix i of matrices(t).
inline Tensor matrix(const Tensor& m3, int64_t i) { return m3.slice(i, i + 1).reshape({m3.shape()[1], m3.shape()[2]}); }

} // namespace tessera::batch
