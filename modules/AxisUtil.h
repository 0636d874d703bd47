#pragma once
/// \file Helpers of the modules that cut or join tensors along an axis. Internal.

#include "backend/Backend.h"

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

/// t viewed as [outer, dim(axis), inner] (the form the backend's gathers and scatters take).
inline Tensor lines(const Tensor& t, int axis) {
    const Shape& s = t.shape();
    return t.reshape({outer(s, axis), s[axis], inner(s, axis)});
}

/// The gradient of values taken along `axis` at `positions` (int32, dy's shape) from an
/// input of `shape`: dy added back at the positions (where they repeat, the sum), zeros
/// elsewhere. KMaxPool's, TopK's and GatherElements' dx.
inline Tensor routedBack(const Tensor& dy, const Tensor& positions, const Shape& shape, int axis) {
    Tensor dx = Tensor::zeros(shape, DType::float32, dy.device());
    backendOf(dx).scatterAddAxis(lines(dy, axis), lines(positions, axis), lines(dx, axis));
    return dx;
}

/// int32 `positions` along a dim of `along` values with the negative ones counted from the
/// end (NumPy's and ONNX's rule: -1 is the last), as a new tensor: p + along where p < 0,
/// computed in float32 (exact below 2^24). Positions outside [-along, along) stay outside.
inline Tensor fromEnd(const Tensor& positions, int64_t along) {
    Backend& be = backendOf(positions);
    Tensor p = Tensor::empty(positions.shape(), DType::float32, positions.device());
    be.cast(positions, p);
    Tensor negative = Tensor::empty(p.shape(), DType::float32, p.device());
    be.affine(p, -1.0f, 0.0f, negative);
    be.activationForward(ActivationParams{ActivationKind::clip, 0.0f, 1.0f}, negative, negative);
    be.axpby(static_cast<float>(along), negative, 1.0f, p);
    Tensor out = Tensor::empty(positions.shape(), DType::int32, positions.device());
    be.cast(p, out);
    return out;
}

/// Copy `count` positions along `axis` from `src` (from position srcBegin) into `dst` (from
/// dstBegin). All dims but `axis` agree between src and dst.
inline void copyAlong(int axis, const Tensor& src, int64_t srcBegin, const Tensor& dst, int64_t dstBegin,
                      int64_t count) {
    const int64_t in = inner(src.shape(), axis);
    backendOf(src).copyStrided(src, srcBegin * in, src.shape()[axis] * in, dst, dstBegin * in, dst.shape()[axis] * in,
                               outer(src.shape(), axis), count * in);
}

/// [A, B, C] -> [B, A, C] (a copy on x's device): time-major <-> batch-major sequences,
/// groups-first <-> batch-first data.
inline Tensor swap01(const Tensor& x) {
    const Shape& s = x.shape();
    Tensor y = Tensor::empty({s[1], s[0], s[2]}, x.dtype(), x.device());
    backendOf(x).permute(x, {1, 0, 2}, y);
    return y;
}

} // namespace tessera::axis
