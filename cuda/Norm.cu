// The CUDA backend's own kernels for local response normalisation, row normalisation (LayerNorm, RMSNorm, GroupNorm)
// and the batch-norm statistics' conversions, and their
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

// ---- row normalisation: one block per row; the channel of (row, d) is
// (row % groups) * (D / inner) + d / inner (RowNormParams).

// x, y, dy and dx are of any floating DType each (xt, yt, ...), read and written through
// float32 (sums in float32).
__global__ void rowNormForwardKernel(const void* x, int xt, const float* gamma, const float* beta, void* y, int yt,
                                     float* mean, float* rstd, int64_t rows, int64_t D, int64_t groups, int64_t inner,
                                     float eps, bool subtractMean) {
    const float invD = 1.0f / static_cast<float>(D);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t row = r * D;
        float mu = 0.0f;
        if (subtractMean) {
            float sum = 0.0f;
            for (int64_t d = threadIdx.x; d < D; d += blockDim.x) sum += loadAsFloat(x, xt, row + d);
            mu = blockSum(sum) * invD;
        }
        float sq = 0.0f;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            const float c = loadAsFloat(x, xt, row + d) - mu;
            sq += c * c;
        }
        const float rs = 1.0f / sqrtf(blockSum(sq) * invD + eps);
        if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
        const int64_t base = (r % groups) * (D / inner);
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            const int64_t c = base + d / inner;
            storeFromFloat(y, yt, row + d,
                           (loadAsFloat(x, xt, row + d) - mu) * rs * (gamma ? gamma[c] : 1.0f) +
                               (beta ? beta[c] : 0.0f));
        }
    }
}

__global__ void rowNormBackwardKernel(const void* x, int xt, const void* dy, int dyt, const float* gamma,
                                      const float* mean, const float* rstd, void* dx, int dxt, int64_t rows, int64_t D,
                                      int64_t groups, int64_t inner, bool subtractMean) {
    const float invD = 1.0f / static_cast<float>(D);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t row = r * D;
        const float mu = mean[r], rs = rstd[r];
        const int64_t base = (r % groups) * (D / inner);
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            const float dxh = loadAsFloat(dy, dyt, row + d) * (gamma ? gamma[base + d / inner] : 1.0f);
            s1 += dxh;
            s2 += dxh * (loadAsFloat(x, xt, row + d) - mu) * rs;
        }
        const float m1 = subtractMean ? blockSum(s1) * invD : 0.0f, m2 = blockSum(s2) * invD;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            const float dxh = loadAsFloat(dy, dyt, row + d) * (gamma ? gamma[base + d / inner] : 1.0f);
            storeFromFloat(dx, dxt, row + d, rs * (dxh - m1 - (loadAsFloat(x, xt, row + d) - mu) * rs * m2));
        }
    }
}

// The parameter gradients, one block per channel c: chunk c % (D / inner) of the rows r
// with r % groups == c / (D / inner).
__global__ void rowNormParamGradKernel(const void* x, int xt, const void* dy, int dyt, const float* mean,
                                       const float* rstd, float* dgamma, float* dbeta, int64_t rows, int64_t D,
                                       int64_t groups, int64_t inner) {
    const int64_t chunks = D / inner, channels = groups * chunks, count = rows / groups * inner;
    for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
        const int64_t q = c / chunks, j = c % chunks;
        float sg = 0.0f, sb = 0.0f;
        for (int64_t t = threadIdx.x; t < count; t += blockDim.x) {
            const int64_t r = q + t / inner * groups, i = r * D + j * inner + t % inner;
            const float g = loadAsFloat(dy, dyt, i);
            sg += g * (loadAsFloat(x, xt, i) - mean[r]) * rstd[r];
            sb += g;
        }
        sg = blockSum(sg);
        sb = blockSum(sb);
        if (threadIdx.x == 0) {
            if (dgamma) dgamma[c] = sg;
            if (dbeta) dbeta[c] = sb;
        }
    }
}

// LayerNorm's parameter gradients (groups 1, inner 1: channel d), one chunk of rows per
// blockIdx.y: a tile of 32 columns per block, its 8 rows of threads striding over the
// chunk's rows, so that a warp reads 32 neighbours; the chunk's sums go to its partial row.
__global__ void rowNormColumnPartialKernel(const void* x, int xt, const void* dy, int dyt, const float* mean,
                                           const float* rstd, float* partial, int64_t rows, int64_t D,
                                           int64_t chunkRows) {
    __shared__ float sg[8][33], sb[8][33];
    const int64_t d = blockIdx.x * 32 + threadIdx.x;
    const int64_t r0 = blockIdx.y * chunkRows, r1 = r0 + chunkRows < rows ? r0 + chunkRows : rows;
    float g = 0.0f, b = 0.0f;
    if (d < D) {
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            const int64_t i = r * D + d;
            const float gi = loadAsFloat(dy, dyt, i);
            g += gi * (loadAsFloat(x, xt, i) - mean[r]) * rstd[r];
            b += gi;
        }
    }
    sg[threadIdx.y][threadIdx.x] = g;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && d < D) {
        for (int k = 1; k < 8; ++k) g += sg[k][threadIdx.x], b += sb[k][threadIdx.x];
        partial[blockIdx.y * 2 * D + d] = g;
        partial[blockIdx.y * 2 * D + D + d] = b;
    }
}

unsigned rowBlocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535); }

} // namespace

void rowNormForward(const void* x, int xt, const float* gamma, const float* beta, void* y, int yt, float* mean,
                    float* rstd, int64_t rows, int64_t D, int64_t groups, int64_t inner, float eps, bool subtractMean,
                    cudaStream_t s) {
    if (rows == 0 || D == 0) return;
    rowNormForwardKernel<<<rowBlocks(rows), kThreads, 0, s>>>(x, xt, gamma, beta, y, yt, mean, rstd, rows, D, groups,
                                                              inner, eps, subtractMean);
    TESSERA_CUDA_CHECK(cudaGetLastError());
}

void rowNormBackward(const void* x, int xt, const void* dy, int dyt, const float* gamma, const float* mean,
                     const float* rstd, void* dx, int dxt, float* dgamma, float* dbeta, int64_t rows, int64_t D,
                     int64_t groups, int64_t inner, bool subtractMean, cudaStream_t s) {
    if (rows == 0 || D == 0) return;
    rowNormBackwardKernel<<<rowBlocks(rows), kThreads, 0, s>>>(x, xt, dy, dyt, gamma, mean, rstd, dx, dxt, rows, D,
                                                               groups, inner, subtractMean);
    TESSERA_CUDA_CHECK(cudaGetLastError());
    if (!dgamma && !dbeta) return;
    rowNormParamGradKernel<<<rowBlocks(groups * (D / inner)), kThreads, 0, s>>>(x, xt, dy, dyt, mean, rstd, dgamma,
                                                                                dbeta, rows, D, groups, inner);
    TESSERA_CUDA_CHECK(cudaGetLastError());
}

void rowNormColumnPartials(const void* x, int xt, const void* dy, int dyt, const float* mean, const float* rstd,
                           float* partial, int64_t rows, int64_t D, int64_t chunkRows, cudaStream_t s) {
    if (rows == 0 || D == 0) return;
    const dim3 grid(static_cast<unsigned>((D + 31) / 32), static_cast<unsigned>((rows + chunkRows - 1) / chunkRows));
    rowNormColumnPartialKernel<<<grid, dim3(32, 8), 0, s>>>(x, xt, dy, dyt, mean, rstd, partial, rows, D, chunkRows);
    TESSERA_CUDA_CHECK(cudaGetLastError());
}

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
