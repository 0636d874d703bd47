// The CUDA backend's own kernels for fills, random numbers, dropout masks and layout reorders, and their launchers
// (declared in cuda/Kernels.h). Each kernel mirrors the loop of the CPU backend that
// computes the same op, so that the two agree to rounding (tests/cuda checks it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "cuda/KernelUtil.cuh"
#include "cuda/Kernels.h"

namespace tessera::cudak {

namespace {

__global__ void fillKernel(float* p, int64_t n, float v) { TESSERA_FOR_EACH(i, n) p[i] = v; }

__global__ void fillIntKernel(int32_t* p, int64_t n, int32_t v) { TESSERA_FOR_EACH(i, n) p[i] = v; }

__global__ void uniformKernel(float* p, int64_t n, float lo, float range, uint64_t seed, uint64_t first) {
    TESSERA_FOR_EACH(i, n) p[i] = lo + range * randomUniform(seed, first + static_cast<uint64_t>(i));
}

__global__ void normalKernel(float* p, int64_t n, float mean, float sd, uint64_t seed, uint64_t first) {
    TESSERA_FOR_EACH(i, n) {
        const uint64_t c = first + 2 * static_cast<uint64_t>(i);
        const float u1 = 1.0f - randomUniform(seed, c);
        const float u2 = randomUniform(seed, c + 1);
        p[i] = mean + sd * sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
    }
}

__global__ void dropoutKernel(const float* x, float* mask, float* y, int64_t n, float p, float keep, uint64_t seed,
                              uint64_t first) {
    TESSERA_FOR_EACH(i, n) {
        mask[i] = randomUniform(seed, first + static_cast<uint64_t>(i)) < p ? 0.0f : keep;
        y[i] = x[i] * mask[i];
    }
}

__global__ void dropoutApplyKernel(const void* x, int xt, void* y, int yt, int64_t n, float p, float keep,
                                   uint64_t seed, uint64_t first) {
    TESSERA_FOR_EACH(i, n) {
        const float m = randomUniform(seed, first + static_cast<uint64_t>(i)) < p ? 0.0f : keep;
        storeFromFloat(y, yt, i, loadAsFloat(x, xt, i) * m);
    }
}

__device__ int64_t blockedIndex(int64_t n, int64_t c, int64_t sp, int64_t channels, int64_t spatial, int64_t block) {
    if (block == 1) return (n * channels + c) * spatial + sp;
    const int64_t blocks = (channels + block - 1) / block;
    return ((n * blocks + c / block) * spatial + sp) * block + c % block;
}

__global__ void reorderKernel(const float* src, int64_t sb, float* dst, int64_t db, int64_t n, int64_t c, int64_t sp) {
    TESSERA_FOR_EACH(i, n * c * sp) {
        const int64_t s = i % sp, ch = i / sp % c, b = i / (sp * c);
        dst[blockedIndex(b, ch, s, c, sp, db)] = src[blockedIndex(b, ch, s, c, sp, sb)];
    }
}

__global__ void reorderAnyKernel(const void* src, int st, int64_t sb, void* dst, int dt, int64_t db, int64_t n,
                                 int64_t c, int64_t sp) {
    TESSERA_FOR_EACH(i, n * c * sp) {
        const int64_t s = i % sp, ch = i / sp % c, b = i / (sp * c);
        storeFromFloat(dst, dt, blockedIndex(b, ch, s, c, sp, db),
                       loadAsFloat(src, st, blockedIndex(b, ch, s, c, sp, sb)));
    }
}

// Each of `batches` row-major [rows, cols] matrices into its transpose [cols, rows],
// converting between any floating DTypes: 32x32 tiles through shared memory (blocks of
// 32x8 threads), so that both the reads and the writes of a warp are 32 neighbours.
__global__ void transposeAnyKernel(const void* src, int st, void* dst, int dt, int64_t rows, int64_t cols,
                                   int64_t batches) {
    __shared__ float tile[32][33];
    const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
    const int64_t c0 = blockIdx.x * int64_t{32};
    for (int64_t b = blockIdx.z; b < batches; b += gridDim.z) {
        const int64_t base = b * rows * cols;
        for (int64_t r0 = blockIdx.y * int64_t{32}; r0 < rows; r0 += gridDim.y * int64_t{32}) {
            for (int k = ty; k < 32; k += 8) {
                const int64_t r = r0 + k, c = c0 + tx;
                if (r < rows && c < cols) tile[k][tx] = loadAsFloat(src, st, base + r * cols + c);
            }
            __syncthreads();
            for (int k = ty; k < 32; k += 8) {
                const int64_t c = c0 + k, r = r0 + tx;
                if (r < rows && c < cols) storeFromFloat(dst, dt, base + c * rows + r, tile[tx][k]);
            }
            __syncthreads();
        }
    }
}

void transposeAny(const void* src, int st, void* dst, int dt, int64_t rows, int64_t cols, int64_t batches,
                  cudaStream_t s) {
    if (rows == 0 || cols == 0 || batches == 0) return;
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                    static_cast<unsigned>(std::min<int64_t>((rows + 31) / 32, 65535)),
                    static_cast<unsigned>(std::min<int64_t>(batches, 65535)));
    transposeAnyKernel<<<grid, dim3(32, 8), 0, s>>>(src, st, dst, dt, rows, cols, batches);
    TESSERA_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void fill(float* p, int64_t n, float value, cudaStream_t s) { TESSERA_LAUNCH(fillKernel, n, s, p, n, value); }

void fillInt(int32_t* p, int64_t n, int32_t value, cudaStream_t s) { TESSERA_LAUNCH(fillIntKernel, n, s, p, n, value); }

void uniform(float* p, int64_t n, float lo, float hi, uint64_t seed, uint64_t first, cudaStream_t s) {
    TESSERA_LAUNCH(uniformKernel, n, s, p, n, lo, hi - lo, seed, first);
}

void normal(float* p, int64_t n, float mean, float stddev, uint64_t seed, uint64_t first, cudaStream_t s) {
    TESSERA_LAUNCH(normalKernel, n, s, p, n, mean, stddev, seed, first);
}

void dropout(const float* x, float* mask, float* y, int64_t n, float p, uint64_t seed, uint64_t first, cudaStream_t s) {
    TESSERA_LAUNCH(dropoutKernel, n, s, x, mask, y, n, p, 1.0f / (1.0f - p), seed, first);
}

void dropoutApply(const void* x, int xt, void* y, int yt, int64_t n, float p, uint64_t seed, uint64_t first,
                  cudaStream_t s) {
    TESSERA_LAUNCH(dropoutApplyKernel, n, s, x, xt, y, yt, n, p, 1.0f / (1.0f - p), seed, first);
}

void reorder(const float* src, int64_t srcBlock, float* dst, int64_t dstBlock, int64_t n, int64_t c, int64_t spatial,
             cudaStream_t s) {
    if (c > 1 && ((srcBlock == 1 && dstBlock == c) || (srcBlock == c && dstBlock == 1))) {
        const int f32 = static_cast<int>(DType::float32);
        return reorderAny(src, f32, srcBlock, dst, f32, dstBlock, n, c, spatial, s);
    }
    TESSERA_LAUNCH(reorderKernel, n * c * spatial, s, src, srcBlock, dst, dstBlock, n, c, spatial);
}

// Plain <-> channels-last (a block of all c channels) is a transpose of each sample's
// [C, S] matrix: tiled; other pairs element by element.
void reorderAny(const void* src, int st, int64_t srcBlock, void* dst, int dt, int64_t dstBlock, int64_t n, int64_t c,
                int64_t spatial, cudaStream_t s) {
    if (c > 1 && srcBlock == 1 && dstBlock == c) return transposeAny(src, st, dst, dt, c, spatial, n, s);
    if (c > 1 && srcBlock == c && dstBlock == 1) return transposeAny(src, st, dst, dt, spatial, c, n, s);
    TESSERA_LAUNCH(reorderAnyKernel, n * c * spatial, s, src, st, srcBlock, dst, dt, dstBlock, n, c, spatial);
}

} // namespace tessera::cudak
