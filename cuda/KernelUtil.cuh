#pragma once
// What every kernel file of the CUDA backend shares: the launch geometry, the grid-stride
// loop and the checked launch, a block reduction. Included by the cuda/*.cu files only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/DType.h"
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

// Element i of x, an array of DType value `from`, as a float.
inline __host__ __device__ float loadAsFloat(const void* x, int from, int64_t i) {
    switch (static_cast<DType>(from)) {
    case DType::float32: return static_cast<const float*>(x)[i];
    case DType::int32: return static_cast<float>(static_cast<const int32_t*>(x)[i]);
    case DType::bfloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
    case DType::float16: return __half2float(static_cast<const __half*>(x)[i]);
    }
    return 0.0f;
}

// y[i] <- v in y's DType `to` (to int32 toward zero; to the 16-bit floats to nearest even).
inline __host__ __device__ void storeFromFloat(void* y, int to, int64_t i, float v) {
    switch (static_cast<DType>(to)) {
    case DType::float32: static_cast<float*>(y)[i] = v; break;
    case DType::int32: static_cast<int32_t*>(y)[i] = static_cast<int32_t>(v); break;
    case DType::bfloat16: static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v); break;
    case DType::float16: static_cast<__half*>(y)[i] = __float2half_rn(v); break;
    }
}

// A plane of any DType read as floats (element::windowArgmax's reader).
// Element j of the plane is at offset + j * stride: 1 in [N, C, *spatial], C in channels-last
// [N, *spatial, C].
struct AnyPlane {
    const void* p;
    int dtype;
    int64_t offset;
    int64_t stride = 1;
    __host__ __device__ float operator[](int64_t j) const { return loadAsFloat(p, dtype, offset + j * stride); }
};

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
