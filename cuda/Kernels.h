#pragma once
/// \file Tessera's own CUDA kernels, as host functions that launch them on a stream.
/// Pointers are device pointers; sizes are element counts. Every launcher checks the launch
/// through the one status checker (cuda/Check.h). The CudaBackend validates shapes first.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/ElementMath.h"

namespace tessera::cudak {

// ---- fills, random, copies ----------------------------------------------------------
void fill(float* p, int64_t n, float value, cudaStream_t s);
void fillInt(int32_t* p, int64_t n, int32_t value, cudaStream_t s);
/// Element i draws counter `first + i` (uniform) or `first + 2i`, `first + 2i + 1`
/// (normal, Box-Muller), as the CPU backend does.
void uniform(float* p, int64_t n, float lo, float hi, uint64_t seed, uint64_t first, cudaStream_t s);
void normal(float* p, int64_t n, float mean, float stddev, uint64_t seed, uint64_t first, cudaStream_t s);
void dropout(const float* x, float* mask, float* y, int64_t n, float p, uint64_t seed, uint64_t first, cudaStream_t s);
/// y[i] <- x[i] * (0 or 1 / (1 - p)) by counter `first + i`, as `dropout` draws its mask;
/// x and y of any floating DTypes (`xt`, `yt`: their values).
void dropoutApply(const void* x, int xt, void* y, int yt, int64_t n, float p, uint64_t seed, uint64_t first,
                  cudaStream_t s);
/// [N, C, S] between layouts with channel blocks of `srcBlock` / `dstBlock` (1: plain).
void reorder(const float* src, int64_t srcBlock, float* dst, int64_t dstBlock, int64_t n, int64_t c, int64_t spatial,
             cudaStream_t s);
/// The same between any floating DTypes (`st`, `dt`: their values; through float, exact
/// when they are one type). A block of `c` is channels-last: [N, S, C].
void reorderAny(const void* src, int st, int64_t srcBlock, void* dst, int dt, int64_t dstBlock, int64_t n, int64_t c,
                int64_t spatial, cudaStream_t s);

// ---- rows, element-wise -------------------------------------------------------------
void broadcastRows(const float* row, float* y, int64_t rows, int64_t cols, cudaStream_t s);
void sumRows(const float* x, float alpha, float beta, float* y, int64_t rows, int64_t cols, cudaStream_t s);
/// partial[c, j] <- the sum over rows [c * rowsPerChunk, (c + 1) * rowsPerChunk) of x[r, j],
/// x [rows, cols] of DType `xt`, in float32, for c < chunks (at most 65535).
void columnPartialsAny(const void* x, int xt, float* partial, int64_t rows, int64_t cols, int64_t rowsPerChunk,
                       int64_t chunks, cudaStream_t s);
void axpby(float alpha, const float* x, float beta, float* y, int64_t n, cudaStream_t s);
/// z = alpha * x + beta * y (y unread when beta is 0); z may be y. With `relu`, max(0, that).
void axpbyz(float alpha, const float* x, float beta, const float* y, float* z, int64_t n, cudaStream_t s,
            bool relu = false);
void mul(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);
/// y = a op b over the broadcast geometry g (y's numel n).
void binaryBroadcast(BinaryOp op, const float* a, const float* b, float* y, const element::BroadcastGeometry& g,
                     int64_t n, cudaStream_t s);
/// y[j] = alpha * the sum of x over the elements falling on j (n = y's numel).
void sumTo(const float* x, float alpha, float* y, const element::ReduceGeometry& g, int64_t n, cudaStream_t s);
void affine(const float* x, float a, float b, float* y, int64_t n, cudaStream_t s);
void power(const float* x, float p, float* y, int64_t n, cudaStream_t s);
/// y[p, i] = x[p, i] * m[p] over `planes` planes of `inner` elements.
void mulChannels(const float* x, const float* m, float* y, int64_t planes, int64_t inner, cudaStream_t s);
void castToInt(const float* x, int32_t* y, int64_t n, cudaStream_t s);
void castToFloat(const int32_t* x, float* y, int64_t n, cudaStream_t s);
/// Between any two DTypes (their enum values), through float; to the 16-bit floats rounds
/// to nearest even.
void cast(const void* x, int from, void* y, int to, int64_t n, cudaStream_t s);
/// y[i] = float(x[i]) + bias[(i / inner) % channels] over n elements of [N, channels,
/// inner] (`from` a DType value; bias may be null).
void castAddChannels(const void* x, int from, const float* bias, float* y, int64_t channels, int64_t inner, int64_t n,
                     cudaStream_t s);
/// y = alpha * float(x) + beta * y (y unread when beta is 0; `from` a DType value).
void castAxpby(float alpha, const void* x, int from, float beta, float* y, int64_t n, cudaStream_t s);
/// A float32 filter w [K, C, S] (S the spatial size) into y [K, S, C] of DType `to` (one
/// pass: permuted and converted, rounding to nearest even).
void filterToChannelsLast(const float* w, void* y, int to, int64_t K, int64_t C, int64_t S, cudaStream_t s);
/// dw [K, C, S] = alpha * float(g) + beta * dw from g [K, S, C] of DType `from` (dw unread
/// when beta is 0).
void filterGradFromChannelsLast(float alpha, const void* g, int from, float beta, float* dw, int64_t K, int64_t C,
                                int64_t S, cudaStream_t s);
/// `kind` is ActivationKind's value.
void activationForward(int kind, float alpha, float beta, const float* x, float* y, int64_t n, cudaStream_t s);
void activationBackward(int kind, float alpha, float beta, const float* x, const float* y, const float* dy, float* dx,
                        int64_t n, cudaStream_t s);
/// The same on operands of any floating DType each (`xt`, `yt`, ... their DType values),
/// computed in float: the 16-bit activations of setCuda16BitActivations. Pointers the map
/// does not read may be null (y unread when beta is 0; activationBackwardAny reads x or y
/// as activationBackward does).
void axpbyzAny(float alpha, const void* x, int xt, float beta, const void* y, int yt, void* z, int zt, int64_t n,
               cudaStream_t s, bool relu = false);
void activationForwardAny(int kind, float alpha, float beta, const void* x, int xt, void* y, int yt, int64_t n,
                          cudaStream_t s);
void activationBackwardAny(int kind, float alpha, float beta, const void* x, int xt, const void* y, int yt,
                           const void* dy, int dyt, void* dx, int dxt, int64_t n, cudaStream_t s);
/// y[i] += bias[(i / inner) % channels] over n elements of [N, channels, inner] in y's
/// DType `yt`.
void addChannelsAny(void* y, int yt, const float* bias, int64_t channels, int64_t inner, int64_t n, cudaStream_t s);

// ---- pooling, LRN, resampling, padding, prelu ---------------------------------------
using element::Window3;
/// Max pooling: y and idx (the flat in-plane index of each window's first maximum; either
/// may be null).
void maxPoolForward(const float* x, float* y, int32_t* idx, const Window3& w, int64_t planes, cudaStream_t s);
/// maxPoolForward on x and y of DType `dtype` (16-bit activations).
void maxPoolForwardAny(const void* x, void* y, int dtype, int32_t* idx, const Window3& w, int64_t planes,
                       cudaStream_t s);
/// maxPoolForwardAny on channels-last x and y ([N, *spatial, C]; `channels` = C,
/// `planes` = N * C); idx as maxPoolForward's (the in-plane index of the window's maximum),
/// laid out as y.
void maxPoolForwardChannelsLast(const void* x, void* y, int dtype, int32_t* idx, const Window3& w, int64_t planes,
                                int64_t channels, cudaStream_t s);
/// maxPoolBackward on channels-last dy and dx.
void maxPoolBackwardChannelsLast(const float* dy, const int32_t* idx, float* dx, int64_t planes, int64_t channels,
                                 int64_t inPlane, int64_t outPlane, cudaStream_t s);
/// dx (zeroed here) += dy at the recorded indices.
void maxPoolBackward(const float* dy, const int32_t* idx, float* dx, int64_t planes, int64_t inPlane, int64_t outPlane,
                     cudaStream_t s);
/// LRN over [N, C, H, W] (3-D inputs use W = 1): scale <- k + alpha / n sum x^2, y <- x scale^-beta.
void lrnForward(bool across, int64_t size, float alpha, float beta, float k, const float* x, float* y, float* scale,
                int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t s);
void lrnBackward(bool across, int64_t size, float alpha, float beta, const float* x, const float* dy,
                 const float* scale, float* dx, int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t s);
/// Resampling of [planes, *in] to [planes, *out] as `p` says (element::resampleTaps).
void resampleForward(ResampleParams p, const float* x, float* y, const int64_t in[3], const int64_t out[3],
                     int64_t planes, cudaStream_t s);
/// dx (zeroed here) <- the adjoint of resampleForward applied to dy.
void resampleBackward(ResampleParams p, const float* dy, float* dx, const int64_t in[3], const int64_t out[3],
                      int64_t planes, cudaStream_t s);
void padForward(PadMode mode, float value, const float* x, float* y, const int64_t in[3], const int64_t out[3],
                const int64_t lo[3], int64_t planes, cudaStream_t s);
/// padForward on x and y of the DType `t` (the value rounded to it).
void padForwardAny(PadMode mode, float value, const void* x, void* y, int t, const int64_t in[3], const int64_t out[3],
                   const int64_t lo[3], int64_t planes, cudaStream_t s);
/// The adjoint of constant padding on 16-bit dy and dx (zeroed here): each value moved as it is.
void padBackwardMove(const void* dy, void* dx, const int64_t in[3], const int64_t out[3], const int64_t lo[3],
                     int64_t planes, cudaStream_t s);
/// dx (zeroed here) <- the adjoint of padForward applied to dy.
void padBackward(PadMode mode, const float* dy, float* dx, const int64_t in[3], const int64_t out[3],
                 const int64_t lo[3], int64_t planes, cudaStream_t s);
/// x: [N, C, inner]; slopes: [C] (or [1] when `shared`).
void preluForward(const float* x, const float* slopes, float* y, int64_t n, int64_t c, int64_t inner, bool shared,
                  cudaStream_t s);
/// dx, and dslopes (zeroed here) <- dL/dslopes.
void preluBackward(const float* x, const float* slopes, const float* dy, float* dx, float* dslopes, int64_t n,
                   int64_t c, int64_t inner, bool shared, cudaStream_t s);

// ---- gathers and scatters -----------------------------------------------------------
/// `bad` receives the smallest position whose index is outside [0, limit) (left unchanged
/// when every index is valid); callers initialise it to a large value.
void checkIndices(const int32_t* idx, int64_t n, int64_t limit, unsigned long long* bad, cudaStream_t s);
void gatherAxis(const float* x, const int32_t* idx, float* y, int64_t outer, int64_t along, int64_t j, int64_t inner,
                cudaStream_t s);
void scatterAddAxis(const float* src, const int32_t* idx, float* dst, int64_t outer, int64_t along, int64_t j,
                    int64_t inner, cudaStream_t s);
void topKIndices(const float* x, int32_t* idx, int64_t outer, int64_t along, int64_t inner, int64_t k, cudaStream_t s);
void gatherRows(const float* table, const int32_t* idx, float* y, int64_t m, int64_t d, cudaStream_t s);
void scatterAddRows(const float* src, const int32_t* idx, float scale, float* table, int64_t m, int64_t d,
                    cudaStream_t s);
/// y <- x permuted; `ydims` are y's dims and `xstride[i]` the stride in x of y's dim i.
struct PermuteDims {
    int rank;
    int64_t ydims[8];
    int64_t xstride[8];
};
void permute(const float* x, float* y, const PermuteDims& p, int64_t n, cudaStream_t s);

// ---- batch norm helpers ---------------------------------------------------------------
/// var <- 1 / invstd^2 - eps (cuDNN saves the inverse standard deviation).
void varianceFromInvStd(const float* invstd, float eps, float* var, int64_t c, cudaStream_t s);
/// invstd <- 1 / sqrt(var + eps).
void invStdFromVariance(const float* var, float eps, float* invstd, int64_t c, cudaStream_t s);

// ---- row normalisation (Backend::rowNormForward) ----------------------------------------
/// x, y: [rows, D] of the DTypes xt, yt; gamma, beta: [channels] or null; mean, rstd: [rows].
void rowNormForward(const void* x, int xt, const float* gamma, const float* beta, void* y, int yt, float* mean,
                    float* rstd, int64_t rows, int64_t D, int64_t groups, int64_t inner, float eps, bool subtractMean,
                    cudaStream_t s);
/// LayerNorm's parameter gradients (groups 1, inner 1) in parts: rows in chunks of
/// `chunkRows`, chunk i's sums of dy * xhat and of dy over its rows in partial[i, 0:D] and
/// partial[i, D:2D] (partial: [ceil(rows / chunkRows), 2D]); the caller sums the chunks.
void rowNormColumnPartials(const void* x, int xt, const void* dy, int dyt, const float* mean, const float* rstd,
                           float* partial, int64_t rows, int64_t D, int64_t chunkRows, cudaStream_t s);
/// dx from dy (each of its own DType); dgamma, dbeta ([channels] or null) overwritten with
/// the parameter gradients.
void rowNormBackward(const void* x, int xt, const void* dy, int dyt, const float* gamma, const float* mean,
                     const float* rstd, void* dx, int dxt, float* dgamma, float* dbeta, int64_t rows, int64_t D,
                     int64_t groups, int64_t inner, bool subtractMean, cudaStream_t s);

// ---- costs ------------------------------------------------------------------------------
/// Sums land in `error` (double) and `hits`; both are zeroed by the caller.
void crossEntropy(const float* scores, const int32_t* labels, const float* weights, float* grad, int64_t n, int64_t c,
                  int64_t inner, float smoothing, double* error, unsigned long long* hits, cudaStream_t s);
/// CTC (Backend::ctc) with scratch lse [T, N], alpha and beta [N, T, 2 S + 1] (float64);
/// losses [N] (float64) on the device; grad may be null.
void ctc(const float* scores, const int32_t* labels, const int32_t* labelLen, const int32_t* inputLen, int32_t blank,
         const float* scale, float* grad, int64_t T, int64_t N, int64_t V, int64_t S, double* lse, double* alpha,
         double* beta, double* losses, cudaStream_t s);
/// t *= factor; *bad (zeroed by the caller) <- 1 when an element is not finite.
void scaleCheckFinite(float* t, float factor, int64_t n, int* bad, cudaStream_t s);
/// *sum (zeroed by the caller) += the sum of t's squares.
void sumSquares(const float* t, int64_t n, double* sum, cudaStream_t s);
/// The spatial transformer (Backend::spatialTfForward/Backward); dx and dtheta are zeroed
/// by the caller (the backward adds into them).
void spatialTfForward(const float* x, const float* theta, float* y, int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t Ho, int64_t Wo, cudaStream_t s);
void spatialTfBackward(const float* x, const float* theta, const float* dy, float* dx, float* dtheta, int64_t N,
                       int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo, cudaStream_t s);
/// `kind` is CostKind's value; `sum` zeroed by the caller.
void pointwiseCost(int kind, const float* pred, const float* target, float* grad, int64_t total, int64_t n, int64_t c,
                   double* sum, cudaStream_t s);
void svmCost(const float* scores, const int32_t* labels, bool l2, float* grad, int64_t n, int64_t c, double* sum,
             cudaStream_t s);

// ---- optimizers -----------------------------------------------------------------------
void optimizerUpdate(UpdateRule rule, const element::UpdateScalars& k, float* w, const float* g, float* a, float* b,
                     float* c, int64_t n, cudaStream_t s);

} // namespace tessera::cudak
