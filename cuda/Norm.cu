// The CUDA backend's own kernels for local response normalisation and the batch-norm statistics' conversions, and their
// launchers (declared in cuda/Kernels.h). Each kernel mirrors the loop of the CPU backend that computes the same op, so
// that the two agree to rounding (tests/cuda checks it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "cuda/KernelUtil.cuh"
#include "cuda/Kernels.h"

namespace tessera::cudak {

namespace {

// The window of positions [lo, hi) around `i` along a dim of `n` (as oneDNN centres it).
__device__ void lrnWindow(int64_t i, int64_t size, int64_t n, int64_t& lo, int64_t& hi) {
    const int64_t half = (size - 1) / 2;
    lo = i - half < 0 ? 0 : i - half;
    hi = i + half + 1 > n ? n : i + half + 1;
}

__global__ void lrnForwardKernel(bool across, int64_t size, float alpha, float beta, float k, const float* x, float* y,
                                 float* scale, int64_t n, int64_t c, int64_t h, int64_t w) {
    const float an = alpha / static_cast<float>(across ? size : size * size);
    TESSERA_FOR_EACH(i, n * c * h * w) {
        const int64_t col = i % w, row = i / w % h, ch = i / (w * h) % c, b = i / (w * h * c);
        float sum = 0;
        if (across) {
            int64_t lo, hi;
            lrnWindow(ch, size, c, lo, hi);
            for (int64_t j = lo; j < hi; ++j) {
                const float v = x[((b * c + j) * h + row) * w + col];
                sum += v * v;
            }
        } else {
            int64_t r0, r1, c0, c1;
            lrnWindow(row, size, h, r0, r1);
            lrnWindow(col, size, w, c0, c1);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t q = c0; q < c1; ++q) {
                    const float v = x[((b * c + ch) * h + r) * w + q];
                    sum += v * v;
                }
        }
        const float s = k + an * sum;
        scale[i] = s;
        y[i] = x[i] * powf(s, -beta);
    }
}

// dx_i = dy_i s_i^-beta - 2 alpha beta / n x_i sum_{j: i in window(j)} dy_j x_j s_j^(-beta-1);
// the windows are symmetric, so j runs over the window around i.
__global__ void lrnBackwardKernel(bool across, int64_t size, float alpha, float beta, const float* x, const float* dy,
                                  const float* scale, float* dx, int64_t n, int64_t c, int64_t h, int64_t w) {
    const float coef = 2.0f * alpha * beta / static_cast<float>(across ? size : size * size);
    TESSERA_FOR_EACH(i, n * c * h * w) {
        const int64_t col = i % w, row = i / w % h, ch = i / (w * h) % c, b = i / (w * h * c);
        float acc = 0;
        auto term = [&](int64_t j) { return dy[j] * x[j] * powf(scale[j], -beta - 1.0f); };
        if (across) {
            int64_t lo, hi;
            lrnWindow(ch, size, c, lo, hi);
            for (int64_t j = lo; j < hi; ++j) acc += term(((b * c + j) * h + row) * w + col);
        } else {
            int64_t r0, r1, c0, c1;
            lrnWindow(row, size, h, r0, r1);
            lrnWindow(col, size, w, c0, c1);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t q = c0; q < c1; ++q) acc += term(((b * c + ch) * h + r) * w + q);
        }
        dx[i] = dy[i] * powf(scale[i], -beta) - coef * x[i] * acc;
    }
}

__global__ void varianceFromInvStdKernel(const float* invstd, float eps, float* var, int64_t c) {
    TESSERA_FOR_EACH(i, c) var[i] = 1.0f / (invstd[i] * invstd[i]) - eps;
}

__global__ void invStdFromVarianceKernel(const float* var, float eps, float* invstd, int64_t c) {
    TESSERA_FOR_EACH(i, c) invstd[i] = rsqrtf(var[i] + eps);
}

} // namespace

void lrnForward(bool across, int64_t size, float alpha, float beta, float k, const float* x, float* y, float* scale,
                int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t s) {
    TESSERA_LAUNCH(lrnForwardKernel, n * c * h * w, s, across, size, alpha, beta, k, x, y, scale, n, c, h, w);
}

void lrnBackward(bool across, int64_t size, float alpha, float beta, const float* x, const float* dy,
                 const float* scale, float* dx, int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t s) {
    TESSERA_LAUNCH(lrnBackwardKernel, n * c * h * w, s, across, size, alpha, beta, x, dy, scale, dx, n, c, h, w);
}

void varianceFromInvStd(const float* invstd, float eps, float* var, int64_t c, cudaStream_t s) {
    TESSERA_LAUNCH(varianceFromInvStdKernel, c, s, invstd, eps, var, c);
}

void invStdFromVariance(const float* var, float eps, float* invstd, int64_t c, cudaStream_t s) {
    TESSERA_LAUNCH(invStdFromVarianceKernel, c, s, var, eps, invstd, c);
}

} // namespace tessera::cudak
