#pragma once
/// \file Helpers of the modules that cut or join tensors along an axis. Internal.

#include "backend/Shape.h"

namespace tessera::axis {

/// `axis` made non-negative for `rank` dims; -1 when out of range.
inline int normalize(int axis, size_t rank) {
    const int r = static_cast<int>(rank);
    const int a = axis < 0 ? axis + r : axis;
    return a >= 0 && a < r ? a : -1;
}

/// Product of the dims before `axis`.
inline int64_t outer(const Shape& s, int axis) {
    int64_t n = 1;
    for (int i = 0; i < axis; ++i) n *= s[i];
    return n;
}

/// Product of the dims after `axis`.
inline int64_t inner(const Shape& s, int axis) {
    int64_t n = 1;
    for (int i = axis + 1; i < static_cast<int>(s.rank()); ++i) n *= s[i];
    return n;
}

} // namespace tessera::axis
