#pragma once
/// \file The op interface every backend implements. Modules call these ops and never
/// know which library runs them; a tensor's device picks the backend (`backendFor`).
///
/// Conventions: every tensor argument is contiguous; outputs are allocated by the
/// caller with the shape given in the comment above each op; shapes are checked by the
/// modules before the call, so the ops only assert what they rely on.

#include <cstddef>
#include <memory>

#include "backend/Tensor.h"

namespace tessera {

class Generator;

/// Bytes of tensor storage a backend has handed out and not yet got back.
struct MemoryStats {
    size_t current = 0; ///< live now
    size_t peak = 0;    ///< most live at once since the last resetPeak
};

/// Element-wise activation functions.
enum class ActivationKind { sigmoid, tanh, relu, leakyRelu, elu, softPlus, clip };

/// An activation and its constants: leakyRelu slope in `alpha`; elu alpha in `alpha`;
/// clip bounds in `alpha` (min) and `beta` (max).
struct ActivationParams {
    ActivationKind kind = ActivationKind::relu;
    float alpha = 0.0f;
    float beta = 0.0f;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;

    // ---- memory ---------------------------------------------------------------------
    /// `bytes` of device memory (CPU: 64-byte aligned).
    virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;
    /// dst <- src, same numel and dtype; at least one of them is on this backend's device.
    virtual void copy(const Tensor& src, const Tensor& dst) = 0;
    /// Block copy between tensors of the same dtype, in elements: for r in [0, rows),
    /// dst[dstOffset + r * dstStride + i] <- src[srcOffset + r * srcStride + i], i < width.
    /// (Concat, Split and Slice along any axis are such copies.)
    virtual void copyStrided(const Tensor& src, int64_t srcOffset, int64_t srcStride, const Tensor& dst,
                             int64_t dstOffset, int64_t dstStride, int64_t rows, int64_t width) = 0;
    /// Live and peak bytes of storage from this backend.
    virtual MemoryStats memoryStats() const = 0;
    /// Start a new peak measurement from the current live bytes.
    virtual void resetPeak() = 0;

    // ---- fills and random ------------------------------------------------------------
    /// Every element of `t` <- value (converted to its dtype).
    virtual void fill(const Tensor& t, float value) = 0;
    /// t ~ U[lo, hi), counters taken from `gen`.
    virtual void fillUniform(const Tensor& t, float lo, float hi, Generator& gen) = 0;
    /// t ~ N(mean, stddev^2), counters taken from `gen`.
    virtual void fillNormal(const Tensor& t, float mean, float stddev, Generator& gen) = 0;

    // ---- BLAS -------------------------------------------------------------------------
    /// A: [M, K] ([K, M] if transA), B: [K, N] ([N, K] if transB), C: [M, N]
    /// C <- alpha * op(A) op(B) + beta * C.
    virtual void gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B,
                      float beta, const Tensor& C) = 0;
    /// row: [M], y: [N, M] -> y[n, :] <- row for every n.
    virtual void broadcastRows(const Tensor& row, const Tensor& y) = 0;
    /// x: [N, M], y: [M] -> y <- alpha * sum_n x[n, :] + beta * y.
    virtual void sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) = 0;

    // ---- element-wise -----------------------------------------------------------------
    /// x, y: same numel -> y <- alpha * x + beta * y.
    virtual void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) = 0;
    /// a, b, y: same numel -> y <- a * b.
    virtual void mul(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
    /// x, y: same numel -> y <- f(x).
    virtual void activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) = 0;
    /// x (input), y (output of forward), dy, dx: same numel -> dx <- f'(x) * dy.
    virtual void activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y,
                                    const Tensor& dy, const Tensor& dx) = 0;

    // ---- softmax ----------------------------------------------------------------------
    /// x, y: [N, C, ...] -> y <- softmax over dim 1.
    virtual void softmaxForward(const Tensor& x, const Tensor& y) = 0;
    /// y (forward output), dy, dx: [N, C, ...] -> dx <- y * (dy - sum_c(dy * y)).
    virtual void softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;

    // ---- dropout ----------------------------------------------------------------------
    /// x, mask, y: same numel. mask <- 0 with probability p, else 1 / (1 - p);
    /// y <- x * mask. Counters taken from `gen`.
    virtual void dropoutForward(const Tensor& x, float p, Generator& gen, const Tensor& mask,
                                const Tensor& y) = 0;
};

/// The backend that runs ops on tensors of `device`. Throws BackendError when Tessera was
/// built without support for that device kind.
Backend& backendFor(Device device);
/// The backend of `t`'s device.
inline Backend& backendOf(const Tensor& t) { return backendFor(t.device()); }

} // namespace tessera
