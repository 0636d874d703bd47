// The CUDA backend's own kernels for resampling, padding, PReLU and the spatial transformer's sampling, and their
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

struct Dims3 {
    int64_t v[3];
};

Dims3 dims3(const int64_t d[3]) { return {{d[0], d[1], d[2]}}; }

// Calls f(source flat index in the plane, weight) for every tap of output `o` (up to 4 along
// each spatial dim; the leading dims of fewer than 3 are 1s, read by one tap).
template <class F> __device__ void forEachTap(ResampleParams p, int64_t o, Dims3 in, Dims3 out, F&& f) {
    const int64_t od = o / (out.v[1] * out.v[2]), oh = o / out.v[2] % out.v[1], ow = o % out.v[2];
    const int64_t pos[3] = {od, oh, ow};
    int64_t at[3][4];
    float w[3][4];
    int n[3];
    for (int d = 0; d < 3; ++d) {
        if (out.v[d] == 1 && in.v[d] == 1) {
            at[d][0] = 0, w[d][0] = 1.0f, n[d] = 1;
        } else {
            n[d] = element::resampleTaps(p, pos[d], out.v[d], in.v[d], at[d], w[d]);
        }
    }
    for (int a = 0; a < n[0]; ++a)
        for (int b = 0; b < n[1]; ++b)
            for (int c = 0; c < n[2]; ++c) {
                const float wt = w[0][a] * w[1][b] * w[2][c];
                if (wt == 0.0f) continue;
                f((at[0][a] * in.v[1] + at[1][b]) * in.v[2] + at[2][c], wt);
            }
}

__global__ void resampleForwardKernel(ResampleParams p, const float* x, float* y, Dims3 in, Dims3 out, int64_t planes) {
    const int64_t inPlane = in.v[0] * in.v[1] * in.v[2], outPlane = out.v[0] * out.v[1] * out.v[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const float* plane = x + i / outPlane * inPlane;
        float acc = 0;
        forEachTap(p, i % outPlane, in, out, [&](int64_t j, float wt) { acc += wt * plane[j]; });
        y[i] = acc;
    }
}

__global__ void resampleBackwardKernel(ResampleParams p, const float* dy, float* dx, Dims3 in, Dims3 out,
                                       int64_t planes) {
    const int64_t inPlane = in.v[0] * in.v[1] * in.v[2], outPlane = out.v[0] * out.v[1] * out.v[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        float* plane = dx + i / outPlane * inPlane;
        const float g = dy[i];
        forEachTap(p, i % outPlane, in, out, [&](int64_t j, float wt) { atomicAdd(plane + j, wt * g); });
    }
}

// Source flat index of padded element `i`, or -1 for a constant pad.
__device__ int64_t padSourceIndex(PadMode mode, int64_t i, Dims3 in, Dims3 out, Dims3 lo) {
    const int64_t inPlane = in.v[0] * in.v[1] * in.v[2], outPlane = out.v[0] * out.v[1] * out.v[2];
    const int64_t o = i % outPlane;
    const int64_t a = element::padSource(mode, o / (out.v[1] * out.v[2]), lo.v[0], in.v[0]);
    const int64_t b = element::padSource(mode, o / out.v[2] % out.v[1], lo.v[1], in.v[1]);
    const int64_t c = element::padSource(mode, o % out.v[2], lo.v[2], in.v[2]);
    if (a < 0 || b < 0 || c < 0) return -1;
    return i / outPlane * inPlane + (a * in.v[1] + b) * in.v[2] + c;
}

__global__ void padForwardKernel(PadMode mode, float value, const float* x, float* y, Dims3 in, Dims3 out, Dims3 lo,
                                 int64_t planes) {
    TESSERA_FOR_EACH(i, planes * out.v[0] * out.v[1] * out.v[2]) {
        const int64_t src = padSourceIndex(mode, i, in, out, lo);
        y[i] = src < 0 ? value : x[src];
    }
}

__global__ void padForwardAnyKernel(PadMode mode, float value, const void* x, void* y, int t, Dims3 in, Dims3 out,
                                    Dims3 lo, int64_t planes) {
    TESSERA_FOR_EACH(i, planes * out.v[0] * out.v[1] * out.v[2]) {
        const int64_t src = padSourceIndex(mode, i, in, out, lo);
        storeFromFloat(y, t, i, src < 0 ? value : loadAsFloat(x, t, src)); // exact for a value of the type
    }
}

__global__ void padBackwardMoveKernel(const uint16_t* dy, uint16_t* dx, Dims3 in, Dims3 out, Dims3 lo, int64_t planes) {
    TESSERA_FOR_EACH(i, planes * out.v[0] * out.v[1] * out.v[2]) {
        const int64_t src = padSourceIndex(PadMode::constant, i, in, out, lo);
        if (src >= 0) dx[src] = dy[i];
    }
}

__global__ void padBackwardKernel(PadMode mode, const float* dy, float* dx, Dims3 in, Dims3 out, Dims3 lo,
                                  int64_t planes) {
    TESSERA_FOR_EACH(i, planes * out.v[0] * out.v[1] * out.v[2]) {
        const int64_t src = padSourceIndex(mode, i, in, out, lo);
        if (src >= 0) atomicAdd(dx + src, dy[i]);
    }
}

__global__ void preluForwardKernel(const float* x, const float* slopes, float* y, int64_t n, int64_t c, int64_t inner,
                                   bool shared) {
    TESSERA_FOR_EACH(i, n * c * inner) {
        const float a = slopes[shared ? 0 : i / inner % c];
        y[i] = x[i] > 0.0f ? x[i] : a * x[i];
    }
}

__global__ void preluBackwardKernel(const float* x, const float* slopes, const float* dy, float* dx, float* dslopes,
                                    int64_t n, int64_t c, int64_t inner, bool shared) {
    TESSERA_FOR_EACH(i, n * c * inner) {
        const int64_t ch = shared ? 0 : i / inner % c;
        const bool pos = x[i] > 0.0f;
        dx[i] = pos ? dy[i] : slopes[ch] * dy[i];
        if (!pos) atomicAdd(dslopes + ch, dy[i] * x[i]);
    }
}

// Spatial transformer: a thread per output element forward; backward a thread per output
// element too, scattering into dx and dtheta with atomics.
__global__ void spatialTfForwardKernel(const float* x, const float* theta, float* y, int64_t N, int64_t C, int64_t H,
                                       int64_t W, int64_t Ho, int64_t Wo) {
    TESSERA_FOR_EACH(e, N * C * Ho * Wo) {
        const int64_t j = e % Wo, i = e / Wo % Ho, nc = e / (Ho * Wo), n = nc / C;
        float u, v;
        element::spatialTfSource(theta + n * 6, i, j, Ho, Wo, H, W, u, v);
        y[e] = element::bilinear(x + nc * H * W, u, v, H, W, nullptr, nullptr);
    }
}

__global__ void spatialTfBackwardKernel(const float* x, const float* theta, const float* dy, float* dx, float* dtheta,
                                        int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
    TESSERA_FOR_EACH(e, N * C * Ho * Wo) {
        const int64_t j = e % Wo, i = e / Wo % Ho, nc = e / (Ho * Wo), n = nc / C;
        float u, v, du, dv;
        element::spatialTfSource(theta + n * 6, i, j, Ho, Wo, H, W, u, v);
        element::bilinear(x + nc * H * W, u, v, H, W, &du, &dv);
        const float g = dy[e];
        int64_t rows[4], cols[4];
        float w[4];
        element::bilinearTaps(u, v, rows, cols, w);
        for (int k = 0; k < 4; ++k) {
            if (rows[k] >= 0 && rows[k] < H && cols[k] >= 0 && cols[k] < W) {
                atomicAdd(dx + nc * H * W + rows[k] * W + cols[k], g * w[k]);
            }
        }
        const float t[3] = {element::gridCoord(j, Wo), element::gridCoord(i, Ho), 1.0f};
        const float gu = g * du * 0.5f * static_cast<float>(W - 1), gv = g * dv * 0.5f * static_cast<float>(H - 1);
        for (int k = 0; k < 3; ++k) {
            atomicAdd(dtheta + n * 6 + k, gu * t[k]);
            atomicAdd(dtheta + n * 6 + 3 + k, gv * t[k]);
        }
    }
}

} // namespace

void resampleForward(ResampleParams p, const float* x, float* y, const int64_t in[3], const int64_t out[3],
                     int64_t planes, cudaStream_t s) {
    TESSERA_LAUNCH(resampleForwardKernel, planes * out[0] * out[1] * out[2], s, p, x, y, dims3(in), dims3(out), planes);
}

void resampleBackward(ResampleParams p, const float* dy, float* dx, const int64_t in[3], const int64_t out[3],
                      int64_t planes, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * in[0] * in[1] * in[2]) * sizeof(float), s));
    TESSERA_LAUNCH(resampleBackwardKernel, planes * out[0] * out[1] * out[2], s, p, dy, dx, dims3(in), dims3(out),
                   planes);
}

void padForward(PadMode mode, float value, const float* x, float* y, const int64_t in[3], const int64_t out[3],
                const int64_t lo[3], int64_t planes, cudaStream_t s) {
    TESSERA_LAUNCH(padForwardKernel, planes * out[0] * out[1] * out[2], s, mode, value, x, y, dims3(in), dims3(out),
                   dims3(lo), planes);
}

void padForwardAny(PadMode mode, float value, const void* x, void* y, int t, const int64_t in[3], const int64_t out[3],
                   const int64_t lo[3], int64_t planes, cudaStream_t s) {
    TESSERA_LAUNCH(padForwardAnyKernel, planes * out[0] * out[1] * out[2], s, mode, value, x, y, t, dims3(in),
                   dims3(out), dims3(lo), planes);
}

void padBackwardMove(const void* dy, void* dx, const int64_t in[3], const int64_t out[3], const int64_t lo[3],
                     int64_t planes, cudaStream_t s) {
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * in[0] * in[1] * in[2]) * sizeof(uint16_t), s));
    TESSERA_LAUNCH(padBackwardMoveKernel, planes * out[0] * out[1] * out[2], s, static_cast<const uint16_t*>(dy),
                   static_cast<uint16_t*>(dx), dims3(in), dims3(out), dims3(lo), planes);
}

void padBackward(PadMode mode, const float* dy, float* dx, const int64_t in[3], const int64_t out[3],
                 const int64_t lo[3], int64_t planes, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * in[0] * in[1] * in[2]) * sizeof(float), s));
    TESSERA_LAUNCH(padBackwardKernel, planes * out[0] * out[1] * out[2], s, mode, dy, dx, dims3(in), dims3(out),
                   dims3(lo), planes);
}

void preluForward(const float* x, const float* slopes, float* y, int64_t n, int64_t c, int64_t inner, bool shared,
                  cudaStream_t s) {
    TESSERA_LAUNCH(preluForwardKernel, n * c * inner, s, x, slopes, y, n, c, inner, shared);
}

void preluBackward(const float* x, const float* slopes, const float* dy, float* dx, float* dslopes, int64_t n,
                   int64_t c, int64_t inner, bool shared, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dslopes, 0, static_cast<size_t>(shared ? 1 : c) * sizeof(float), s));
    TESSERA_LAUNCH(preluBackwardKernel, n * c * inner, s, x, slopes, dy, dx, dslopes, n, c, inner, shared);
}

void spatialTfForward(const float* x, const float* theta, float* y, int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t Ho, int64_t Wo, cudaStream_t s) {
    TESSERA_LAUNCH(spatialTfForwardKernel, N * C * Ho * Wo, s, x, theta, y, N, C, H, W, Ho, Wo);
}

void spatialTfBackward(const float* x, const float* theta, const float* dy, float* dx, float* dtheta, int64_t N,
                       int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo, cudaStream_t s) {
    TESSERA_LAUNCH(spatialTfBackwardKernel, N * C * Ho * Wo, s, x, theta, dy, dx, dtheta, N, C, H, W, Ho, Wo);
}

} // namespace tessera::cudak
