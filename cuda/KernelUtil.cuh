#pragma once
// What every kernel file of the CUDA backend shares: the launch geometry, the grid-stride
// loop and the checked launch, a block reduction. Included by the cuda/*.cu files only.

#include <cstdint>

#include "cuda/Check.h"

namespace tessera::cudak {

inline constexpr int kThreads = 256;

// True when every pointer is 16-byte aligned (float4 loads and stores are allowed).
template <class... P> bool aligned16(const P*... p) { return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...); }

inline unsigned blocksFor(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

#define TESSERA_FOR_EACH(i, n)                                                                                         \
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);                             \
         i += static_cast<int64_t>(blockDim.x) * gridDim.x)

#define TESSERA_LAUNCH(kernel, n, stream, ...)                                                                         \
    do {                                                                                                               \
        if ((n) > 0) {                                                                                                 \
            kernel<<<blocksFor(n), kThreads, 0, stream>>>(__VA_ARGS__);                                                \
            TESSERA_CUDA_CHECK(cudaGetLastError());                                                                    \
        }                                                                                                              \
    } while (0)

// The sum of `v` over a 1-D block of up to kThreads threads, in thread 0 (the others hold
// partial sums). Every thread of the block must call it.
template <class T> __device__ T blockSumToThread0(T v) {
    __shared__ T partial[kThreads / 32];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : T(0);
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    __syncthreads(); // `partial` is free for the next call
    return v;
}

// Sum of `v` over the block, added to *out by thread 0.
inline __device__ void blockSumAdd(double v, double* out) {
    v = blockSumToThread0(v);
    if (threadIdx.x == 0) atomicAdd(out, v);
}

// The sum of `v` over the block, in every thread.
inline __device__ float blockSum(float v) {
    __shared__ float total;
    v = blockSumToThread0(v);
    if (threadIdx.x == 0) total = v;
    __syncthreads();
    const float out = total;
    __syncthreads(); // `total` is free for the next call
    return out;
}

} // namespace tessera::cudak
