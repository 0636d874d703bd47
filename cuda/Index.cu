// The CUDA backend's own kernels for gathers, scatters, top-k and permutations, with the index checks, and their
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

__global__ void checkIndicesKernel(const int32_t* idx, int64_t n, int64_t limit, unsigned long long* bad) {
    TESSERA_FOR_EACH(i, n) {
        if (idx[i] < 0 || idx[i] >= limit) atomicMin(bad, static_cast<unsigned long long>(i));
    }
}

__global__ void gatherAxisKernel(const float* x, const int32_t* idx, float* y, int64_t along, int64_t j, int64_t inner,
                                 int64_t total) {
    TESSERA_FOR_EACH(at, total) {
        const int64_t i = at % inner, o = at / (j * inner);
        y[at] = x[(o * along + idx[at]) * inner + i];
    }
}

__global__ void scatterAddAxisKernel(const float* src, const int32_t* idx, float* dst, int64_t along, int64_t j,
                                     int64_t inner, int64_t total) {
    TESSERA_FOR_EACH(at, total) {
        const int64_t i = at % inner, o = at / (j * inner);
        atomicAdd(dst + (o * along + idx[at]) * inner + i, src[at]);
    }
}

// One thread per (o, i) column: element a is selected when fewer than k elements beat it
// (larger, or equal at an earlier position); selected elements are written in position order.
// k = 1 is one pass.
__global__ void topKKernel(const float* x, int32_t* idx, int64_t outer, int64_t along, int64_t inner, int64_t k) {
    TESSERA_FOR_EACH(col, outer * inner) {
        const int64_t o = col / inner, i = col % inner;
        const float* base = x + o * along * inner + i;
        if (k == 1) { // the first largest in one pass; a NaN beats every number (the CPU's loop)
            float top = base[0];
            int32_t best = 0;
            for (int64_t a = 1; a < along; ++a) {
                const float v = base[a * inner];
                if (!isnan(top) && (v > top || isnan(v))) top = v, best = static_cast<int32_t>(a);
            }
            idx[o * inner + i] = best;
            continue;
        }
        int64_t written = 0;
        for (int64_t a = 0; a < along && written < k; ++a) {
            const float v = base[a * inner];
            int64_t beaten = 0;
            for (int64_t b = 0; b < along && beaten < k; ++b) {
                const float u = base[b * inner];
                if (u > v || (u == v && b < a)) ++beaten;
            }
            if (beaten < k) idx[(o * k + written++) * inner + i] = static_cast<int32_t>(a);
        }
    }
}

__global__ void gatherRowsKernel(const float* table, const int32_t* idx, float* y, int64_t m, int64_t d) {
    TESSERA_FOR_EACH(i, m * d) y[i] = table[static_cast<int64_t>(idx[i / d]) * d + i % d];
}

__global__ void scatterAddRowsKernel(const float* src, const int32_t* idx, float scale, float* table, int64_t m,
                                     int64_t d) {
    TESSERA_FOR_EACH(i, m * d) atomicAdd(table + static_cast<int64_t>(idx[i / d]) * d + i % d, scale * src[i]);
}

__global__ void permuteKernel(const float* x, float* y, PermuteDims p, int64_t n) {
    TESSERA_FOR_EACH(i, n) {
        int64_t rem = i, off = 0;
        for (int d = p.rank - 1; d >= 0; --d) {
            off += rem % p.ydims[d] * p.xstride[d];
            rem /= p.ydims[d];
        }
        y[i] = x[off];
    }
}

} // namespace

void checkIndices(const int32_t* idx, int64_t n, int64_t limit, unsigned long long* bad, cudaStream_t s) {
    TESSERA_LAUNCH(checkIndicesKernel, n, s, idx, n, limit, bad);
}

void gatherAxis(const float* x, const int32_t* idx, float* y, int64_t outer, int64_t along, int64_t j, int64_t inner,
                cudaStream_t s) {
    TESSERA_LAUNCH(gatherAxisKernel, outer * j * inner, s, x, idx, y, along, j, inner, outer * j * inner);
}

void scatterAddAxis(const float* src, const int32_t* idx, float* dst, int64_t outer, int64_t along, int64_t j,
                    int64_t inner, cudaStream_t s) {
    TESSERA_LAUNCH(scatterAddAxisKernel, outer * j * inner, s, src, idx, dst, along, j, inner, outer * j * inner);
}

void topKIndices(const float* x, int32_t* idx, int64_t outer, int64_t along, int64_t inner, int64_t k, cudaStream_t s) {
    TESSERA_LAUNCH(topKKernel, outer * inner, s, x, idx, outer, along, inner, k);
}

void gatherRows(const float* table, const int32_t* idx, float* y, int64_t m, int64_t d, cudaStream_t s) {
    TESSERA_LAUNCH(gatherRowsKernel, m * d, s, table, idx, y, m, d);
}

void scatterAddRows(const float* src, const int32_t* idx, float scale, float* table, int64_t m, int64_t d,
                    cudaStream_t s) {
    TESSERA_LAUNCH(scatterAddRowsKernel, m * d, s, src, idx, scale, table, m, d);
}

void permute(const float* x, float* y, const PermuteDims& p, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(permuteKernel, n, s, x, y, p, n);
}

} // namespace tessera::cudak
