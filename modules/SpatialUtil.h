#pragma once
// Helpers shared by the spatial layers (convolution, pooling, padding): per-dim
// arguments given as one value or one per dim, and their text forms.
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/Backend.h"
#include "backend/Shape.h"

namespace tessera::spatial {

/// `v` expanded to `dims` entries (a single value repeats); throws ModuleError
/// naming `what` when the count is wrong or a value is below `min`.
inline std::vector<int64_t> expand(const std::vector<int64_t>& v, size_t dims, const char* cls, const char* what,
                                   int64_t min) {
    if (v.size() != 1 && v.size() != dims) {
        throw ModuleError(std::string(cls) + ": " + what + " needs 1 or " + std::to_string(dims) + " values, got " +
                          std::to_string(v.size()));
    }
    std::vector<int64_t> out = v.size() == 1 ? std::vector<int64_t>(dims, v[0]) : v;
    for (int64_t x : out) {
        if (x < min) {
            throw ModuleError(std::string(cls) + ": " + what + " must be at least " + std::to_string(min) + ", got " +
                              std::to_string(x));
        }
    }
    return out;
}

/// "[a, b, c]".
inline std::string str(const std::vector<int64_t>& v) { return Shape(v).str(); }

/// A 2-D pooling of `kind` over the size x size window centred on each element (stride 1,
/// padding size / 2: the output has the input's size), as the local normalisations use.
inline PoolParams centredWindow(PoolKind kind, int64_t size) {
    const int64_t p = size / 2;
    return {kind, {size, size}, {1, 1}, {p, p}, {p, p}};
}

} // namespace tessera::spatial
