// The CUDA backend's own kernels for max pooling with its indices, and their launchers
// (declared in cuda/Kernels.h). Each kernel mirrors the loop of the CPU backend that
// computes the same op, so that the two agree to rounding (tests/cuda checks it).
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

__global__ void maxPoolForwardKernel(const float* x, float* y, int32_t* idx, Window3 w, int64_t planes) {
    const int64_t outPlane = w.out[0] * w.out[1] * w.out[2], inPlane = w.in[0] * w.in[1] * w.in[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const int64_t o = i % outPlane;
        float best = 0.0f;
        const int64_t at = element::windowArgmax(x + i / outPlane * inPlane, w, o / (w.out[1] * w.out[2]),
                                                 o / w.out[2] % w.out[1], o % w.out[2], best);
        if (y) y[i] = best;
        if (idx) idx[i] = static_cast<int32_t>(at);
    }
}

__global__ void maxPoolBackwardKernel(const float* dy, const int32_t* idx, float* dx, int64_t planes, int64_t inPlane,
                                      int64_t outPlane) {
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const int32_t at = idx[i];
        if (at >= 0) atomicAdd(dx + (i / outPlane) * inPlane + at, dy[i]);
    }
}

__global__ void maxPoolForwardAnyKernel(const void* x, void* y, int dtype, int32_t* idx, Window3 w, int64_t planes) {
    const int64_t outPlane = w.out[0] * w.out[1] * w.out[2], inPlane = w.in[0] * w.in[1] * w.in[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const int64_t o = i % outPlane;
        float best = 0.0f;
        const int64_t at =
            element::windowArgmax(AnyPlane{x, dtype, i / outPlane * inPlane}, w, o / (w.out[1] * w.out[2]),
                                  o / w.out[2] % w.out[1], o % w.out[2], best);
        if (y) storeFromFloat(y, dtype, i, best); // a value of x: exact in its type
        if (idx) idx[i] = static_cast<int32_t>(at);
    }
}

// i runs over y in its channels-last order: [N, outPlane, C].
__global__ void maxPoolForwardChannelsLastKernel(const void* x, void* y, int dtype, int32_t* idx, Window3 w,
                                                 int64_t planes, int64_t channels) {
    const int64_t outPlane = w.out[0] * w.out[1] * w.out[2], inPlane = w.in[0] * w.in[1] * w.in[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const int64_t c = i % channels, o = i / channels % outPlane, n = i / (channels * outPlane);
        float best = 0.0f;
        const int64_t at =
            element::windowArgmax(AnyPlane{x, dtype, n * inPlane * channels + c, channels}, w,
                                  o / (w.out[1] * w.out[2]), o / w.out[2] % w.out[1], o % w.out[2], best);
        if (y) storeFromFloat(y, dtype, i, best);
        if (idx) idx[i] = static_cast<int32_t>(at);
    }
}

__global__ void maxPoolBackwardChannelsLastKernel(const float* dy, const int32_t* idx, float* dx, int64_t planes,
                                                  int64_t channels, int64_t inPlane, int64_t outPlane) {
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const int32_t at = idx[i];
        const int64_t c = i % channels, n = i / (channels * outPlane);
        if (at >= 0) atomicAdd(dx + (n * inPlane + at) * channels + c, dy[i]);
    }
}

} // namespace

void maxPoolForwardChannelsLast(const void* x, void* y, int dtype, int32_t* idx, const Window3& w, int64_t planes,
                                int64_t channels, cudaStream_t s) {
    TESSERA_LAUNCH(maxPoolForwardChannelsLastKernel, planes * w.out[0] * w.out[1] * w.out[2], s, x, y, dtype, idx, w,
                   planes, channels);
}

void maxPoolBackwardChannelsLast(const float* dy, const int32_t* idx, float* dx, int64_t planes, int64_t channels,
                                 int64_t inPlane, int64_t outPlane, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * inPlane) * sizeof(float), s));
    TESSERA_LAUNCH(maxPoolBackwardChannelsLastKernel, planes * outPlane, s, dy, idx, dx, planes, channels, inPlane,
                   outPlane);
}

void maxPoolForwardAny(const void* x, void* y, int dtype, int32_t* idx, const Window3& w, int64_t planes,
                       cudaStream_t s) {
    TESSERA_LAUNCH(maxPoolForwardAnyKernel, planes * w.out[0] * w.out[1] * w.out[2], s, x, y, dtype, idx, w, planes);
}

void maxPoolForward(const float* x, float* y, int32_t* idx, const Window3& w, int64_t planes, cudaStream_t s) {
    TESSERA_LAUNCH(maxPoolForwardKernel, planes * w.out[0] * w.out[1] * w.out[2], s, x, y, idx, w, planes);
}

void maxPoolBackward(const float* dy, const int32_t* idx, float* dx, int64_t planes, int64_t inPlane, int64_t outPlane,
                     cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * inPlane) * sizeof(float), s));
    TESSERA_LAUNCH(maxPoolBackwardKernel, planes * outPlane, s, dy, idx, dx, planes, inPlane, outPlane);
}

} // namespace tessera::cudak
