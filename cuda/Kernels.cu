// Tessera's own CUDA kernels: everything the CUDA backend does not hand to cuDNN or
// cuBLAS. Each kernel mirrors the loop of the CPU backend that computes the same op, so
// that the two agree to rounding (the consistency suite in tests/cuda checks it).
#include "cuda/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "cuda/Check.h"

namespace tessera::cudak {

namespace {

constexpr int kThreads = 256;

// True when every pointer is 16-byte aligned (float4 loads and stores are allowed).
template <class... P> bool aligned16(const P*... p) { return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...); }

unsigned blocksFor(int64_t n) {
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

// Sum of `v` over the block, added to *out by thread 0.
__device__ void blockSumAdd(double v, double* out) {
    __shared__ double partial[kThreads / 32];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0;
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) atomicAdd(out, v);
    }
}

// ---- fills, random, copies -------------------------------------------------------------

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

// ---- rows, element-wise -------------------------------------------------------------------

__global__ void broadcastRowsKernel(const float* row, float* y, int64_t rows, int64_t cols) {
    TESSERA_FOR_EACH(i, rows * cols) y[i] = row[i % cols];
}
__global__ void sumRowsKernel(const float* x, float alpha, float beta, float* y, int64_t rows, int64_t cols) {
    TESSERA_FOR_EACH(j, cols) {
        float acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + j];
        y[j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * y[j]);
    }
}
// z = a * x + b * y, y not read when b is 0 (it may hold anything then). z may be y.
// Element-wise kernels come in pairs: a float4 one for 16-byte aligned operands, which
// does the first n / 4 * 4 elements, and the scalar one for the rest (and for the rest of
// the cases).
__global__ void axpbyzKernel(float a, const float* x, float b, const float* y, float* z, int64_t n) {
    TESSERA_FOR_EACH(i, n) z[i] = a * x[i] + (b == 0.0f ? 0.0f : b * y[i]);
}
__global__ void axpbyzKernel4(float a, const float4* x, float b, const float4* y, float4* z, int64_t n4) {
    TESSERA_FOR_EACH(i, n4) {
        const float4 u = x[i];
        float4 r = make_float4(a * u.x, a * u.y, a * u.z, a * u.w);
        if (b != 0.0f) {
            const float4 v = y[i];
            r.x += b * v.x;
            r.y += b * v.y;
            r.z += b * v.z;
            r.w += b * v.w;
        }
        z[i] = r;
    }
}
__global__ void mulKernel(const float* a, const float* b, float* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = a[i] * b[i];
}
__global__ void binaryBroadcastKernel(BinaryOp op, const float* a, const float* b, float* y,
                                      element::BroadcastGeometry g, int64_t n) {
    TESSERA_FOR_EACH(i, n) {
        int64_t oa, ob;
        element::broadcastOffsets(g, i, oa, ob);
        y[i] = element::binary(op, a[oa], b[ob]);
    }
}
__global__ void sumToKernel(const float* x, float alpha, float* y, element::ReduceGeometry g, int64_t n) {
    TESSERA_FOR_EACH(j, n) y[j] = static_cast<float>(alpha * element::reduceAt(g, x, j));
}
__global__ void powerKernel(const float* x, float p, float* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = powf(x[i], p);
}
__global__ void affineKernel(const float* x, float a, float b, float* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = a * x[i] + b;
}
__global__ void mulChannelsKernel(const float* x, const float* m, float* y, int64_t planes, int64_t inner) {
    TESSERA_FOR_EACH(i, planes * inner) y[i] = x[i] * m[i / inner];
}
__global__ void castToIntKernel(const float* x, int32_t* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = static_cast<int32_t>(x[i]);
}
__global__ void castToFloatKernel(const int32_t* x, float* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = static_cast<float>(x[i]);
}
// Element i of x, a DType `from` array, as a float.
__device__ float loadAsFloat(const void* x, int from, int64_t i) {
    switch (static_cast<DType>(from)) {
    case DType::float32: return static_cast<const float*>(x)[i];
    case DType::int32: return static_cast<float>(static_cast<const int32_t*>(x)[i]);
    case DType::bfloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
    case DType::float16: return __half2float(static_cast<const __half*>(x)[i]);
    }
    return 0.0f;
}
// Between any two of DType's types (`from`, `to` are DType values), through float.
__global__ void castKernel(const void* x, int from, void* y, int to, int64_t n) {
    TESSERA_FOR_EACH(i, n) {
        const float v = loadAsFloat(x, from, i);
        switch (static_cast<DType>(to)) {
        case DType::float32: static_cast<float*>(y)[i] = v; break;
        case DType::int32: static_cast<int32_t*>(y)[i] = static_cast<int32_t>(v); break;
        case DType::bfloat16: static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v); break;
        case DType::float16: static_cast<__half*>(y)[i] = __float2half_rn(v); break;
        }
    }
}

__global__ void castAddChannelsKernel(const void* x, int from, const float* bias, float* y, int64_t channels,
                                      int64_t inner, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = loadAsFloat(x, from, i) + (bias ? bias[(i / inner) % channels] : 0.0f);
}
__global__ void castAxpbyKernel(float a, const void* x, int from, float b, float* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = a * loadAsFloat(x, from, i) + (b == 0.0f ? 0.0f : b * y[i]);
}

__device__ float activate(ActivationKind kind, float alpha, float beta, float x) {
    switch (kind) {
    case ActivationKind::sigmoid: return 1.0f / (1.0f + expf(-x));
    case ActivationKind::tanh: return tanhf(x);
    case ActivationKind::relu: return x > 0.0f ? x : alpha * x;
    case ActivationKind::leakyRelu: return x > 0.0f ? x : alpha * x;
    case ActivationKind::elu: return x > 0.0f ? x : alpha * (expf(x) - 1.0f);
    case ActivationKind::softPlus: return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case ActivationKind::clip: return fminf(fmaxf(x, alpha), beta);
    case ActivationKind::gelu: return 0.5f * x * (1.0f + erff(x * 0.70710678118f));
    case ActivationKind::hardSigmoid: return fminf(fmaxf(alpha * x + beta, 0.0f), 1.0f);
    case ActivationKind::hardSwish: return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    }
    return x;
}
// dL/dx from the input x, the output y and dL/dy.
__device__ float activateBackward(ActivationKind kind, float alpha, float beta, float x, float y, float dy) {
    switch (kind) {
    case ActivationKind::sigmoid: return dy * y * (1.0f - y);
    case ActivationKind::tanh: return dy * (1.0f - y * y);
    case ActivationKind::relu: return y > 0.0f ? dy : alpha * dy;
    case ActivationKind::leakyRelu: return x > 0.0f ? dy : alpha * dy;
    case ActivationKind::elu: return x > 0.0f ? dy : dy * alpha * expf(x);
    case ActivationKind::softPlus: return dy / (1.0f + expf(-x));
    case ActivationKind::clip: return x > alpha && x < beta ? dy : 0.0f;
    case ActivationKind::gelu:
        return dy * (0.5f * (1.0f + erff(x * 0.70710678118f)) + x * 0.39894228040f * expf(-0.5f * x * x));
    case ActivationKind::hardSigmoid: {
        const float u = alpha * x + beta;
        return u > 0.0f && u < 1.0f ? alpha * dy : 0.0f;
    }
    case ActivationKind::hardSwish: return x < -3.0f ? 0.0f : x > 3.0f ? dy : dy * (x / 3.0f + 0.5f);
    }
    return dy;
}
__global__ void activationForwardKernel(ActivationKind kind, float alpha, float beta, const float* x, float* y,
                                        int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = activate(kind, alpha, beta, x[i]);
}
__global__ void activationForwardKernel4(ActivationKind kind, float alpha, float beta, const float4* x, float4* y,
                                         int64_t n4) {
    TESSERA_FOR_EACH(i, n4) {
        const float4 v = x[i];
        y[i] = make_float4(activate(kind, alpha, beta, v.x), activate(kind, alpha, beta, v.y),
                           activate(kind, alpha, beta, v.z), activate(kind, alpha, beta, v.w));
    }
}
// Which of x and y activateBackward reads for `kind` (the other may be null).
__host__ __device__ bool backwardReadsX(ActivationKind kind) {
    return kind != ActivationKind::sigmoid && kind != ActivationKind::tanh && kind != ActivationKind::relu;
}
__global__ void activationBackwardKernel(ActivationKind kind, float alpha, float beta, const float* x, const float* y,
                                         const float* dy, float* dx, int64_t n) {
    const bool readsX = backwardReadsX(kind);
    TESSERA_FOR_EACH(i, n)
    dx[i] = activateBackward(kind, alpha, beta, readsX ? x[i] : 0.0f, readsX ? 0.0f : y[i], dy[i]);
}
__global__ void activationBackwardKernel4(ActivationKind kind, float alpha, float beta, const float4* x,
                                          const float4* y, const float4* dy, float4* dx, int64_t n4) {
    const bool readsX = backwardReadsX(kind);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    TESSERA_FOR_EACH(i, n4) {
        const float4 u = readsX ? x[i] : zero, v = readsX ? zero : y[i], g = dy[i];
        dx[i] = make_float4(
            activateBackward(kind, alpha, beta, u.x, v.x, g.x), activateBackward(kind, alpha, beta, u.y, v.y, g.y),
            activateBackward(kind, alpha, beta, u.z, v.z, g.z), activateBackward(kind, alpha, beta, u.w, v.w, g.w));
    }
}

// ---- pooling, LRN, resampling, padding, prelu --------------------------------------------

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

struct Dims3 {
    int64_t v[3];
};
Dims3 dims3(const int64_t d[3]) { return {{d[0], d[1], d[2]}}; }

// Linear interpolation taps along one dim, as oneDNN computes them (half-pixel centres,
// clamped at the edges).
__device__ void linearTaps(int64_t o, int64_t out, int64_t in, int64_t& i0, int64_t& i1, float& w1) {
    const float s = (static_cast<float>(o) + 0.5f) * static_cast<float>(in) / static_cast<float>(out) - 0.5f;
    const float f = floorf(s);
    i0 = static_cast<int64_t>(f) < 0 ? 0 : static_cast<int64_t>(f);
    i1 = static_cast<int64_t>(ceilf(s)) > in - 1 ? in - 1 : static_cast<int64_t>(ceilf(s));
    w1 = fabsf(s - f);
}
// Calls f(source flat index in the plane, weight) for every tap of output `o`.
template <class F> __device__ void forEachTap(bool linear, int64_t o, Dims3 in, Dims3 out, F&& f) {
    const int64_t od = o / (out.v[1] * out.v[2]), oh = o / out.v[2] % out.v[1], ow = o % out.v[2];
    const int64_t pos[3] = {od, oh, ow};
    int64_t lo[3], hi[3];
    float wh[3];
    for (int d = 0; d < 3; ++d) {
        if (linear) {
            linearTaps(pos[d], out.v[d], in.v[d], lo[d], hi[d], wh[d]);
        } else {
            lo[d] = hi[d] = pos[d] * in.v[d] / out.v[d];
            wh[d] = 0.0f;
        }
    }
    for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
            for (int c = 0; c < 2; ++c) {
                const float wt = (a ? wh[0] : 1.0f - wh[0]) * (b ? wh[1] : 1.0f - wh[1]) * (c ? wh[2] : 1.0f - wh[2]);
                if (wt == 0.0f) continue;
                const int64_t d = a ? hi[0] : lo[0], h = b ? hi[1] : lo[1], w = c ? hi[2] : lo[2];
                f((d * in.v[1] + h) * in.v[2] + w, wt);
            }
}
__global__ void resampleForwardKernel(bool linear, const float* x, float* y, Dims3 in, Dims3 out, int64_t planes) {
    const int64_t inPlane = in.v[0] * in.v[1] * in.v[2], outPlane = out.v[0] * out.v[1] * out.v[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        const float* plane = x + i / outPlane * inPlane;
        float acc = 0;
        forEachTap(linear, i % outPlane, in, out, [&](int64_t j, float wt) { acc += wt * plane[j]; });
        y[i] = acc;
    }
}
__global__ void resampleBackwardKernel(bool linear, const float* dy, float* dx, Dims3 in, Dims3 out, int64_t planes) {
    const int64_t inPlane = in.v[0] * in.v[1] * in.v[2], outPlane = out.v[0] * out.v[1] * out.v[2];
    TESSERA_FOR_EACH(i, planes * outPlane) {
        float* plane = dx + i / outPlane * inPlane;
        const float g = dy[i];
        forEachTap(linear, i % outPlane, in, out, [&](int64_t j, float wt) { atomicAdd(plane + j, wt * g); });
    }
}

// Source flat index of padded element `i`, or -1 for a constant pad.
__device__ int64_t padSourceIndex(bool reflect, int64_t i, Dims3 in, Dims3 out, Dims3 lo) {
    const int64_t inPlane = in.v[0] * in.v[1] * in.v[2], outPlane = out.v[0] * out.v[1] * out.v[2];
    const int64_t o = i % outPlane;
    const int64_t a = element::padSource(reflect, o / (out.v[1] * out.v[2]), lo.v[0], in.v[0]);
    const int64_t b = element::padSource(reflect, o / out.v[2] % out.v[1], lo.v[1], in.v[1]);
    const int64_t c = element::padSource(reflect, o % out.v[2], lo.v[2], in.v[2]);
    if (a < 0 || b < 0 || c < 0) return -1;
    return i / outPlane * inPlane + (a * in.v[1] + b) * in.v[2] + c;
}
__global__ void padForwardKernel(bool reflect, float value, const float* x, float* y, Dims3 in, Dims3 out, Dims3 lo,
                                 int64_t planes) {
    TESSERA_FOR_EACH(i, planes * out.v[0] * out.v[1] * out.v[2]) {
        const int64_t src = padSourceIndex(reflect, i, in, out, lo);
        y[i] = src < 0 ? value : x[src];
    }
}
__global__ void padBackwardKernel(bool reflect, const float* dy, float* dx, Dims3 in, Dims3 out, Dims3 lo,
                                  int64_t planes) {
    TESSERA_FOR_EACH(i, planes * out.v[0] * out.v[1] * out.v[2]) {
        const int64_t src = padSourceIndex(reflect, i, in, out, lo);
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

// ---- gathers and scatters -------------------------------------------------------------------

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
__global__ void topKKernel(const float* x, int32_t* idx, int64_t outer, int64_t along, int64_t inner, int64_t k) {
    TESSERA_FOR_EACH(col, outer * inner) {
        const int64_t o = col / inner, i = col % inner;
        const float* base = x + o * along * inner + i;
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

__global__ void varianceFromInvStdKernel(const float* invstd, float eps, float* var, int64_t c) {
    TESSERA_FOR_EACH(i, c) var[i] = 1.0f / (invstd[i] * invstd[i]) - eps;
}
__global__ void invStdFromVarianceKernel(const float* var, float eps, float* invstd, int64_t c) {
    TESSERA_FOR_EACH(i, c) invstd[i] = rsqrtf(var[i] + eps);
}

// ---- costs --------------------------------------------------------------------------------------

__global__ void crossEntropyKernel(const float* scores, const int32_t* labels, const float* weights, float* grad,
                                   int64_t n, int64_t c, int64_t inner, float smoothing, double* error,
                                   unsigned long long* hits) {
    const float norm = 1.0f / static_cast<float>(n * inner);
    double err = 0;
    unsigned long long hit = 0;
    TESSERA_FOR_EACH(i, n * inner) {
        const int64_t offset = i / inner * c * inner + i % inner;
        const int32_t y = labels[i];
        bool h = false;
        err += element::crossEntropy(scores + offset, y, weights ? weights[y] : 1.0f, grad ? grad + offset : nullptr, c,
                                     inner, norm, smoothing, h);
        hit += h;
    }
    blockSumAdd(err, error);
    if (hit) atomicAdd(hits, hit);
}

// CTC: log-softmax normalisers per (step, sample), then one block per sample runs the
// alpha and beta recursions over its extended labels (threads over positions, a barrier
// per step), then the gradient: softmax, less each position's share of the alignments.
__global__ void ctcLseKernel(const float* scores, double* lse, int64_t rows, int64_t V) {
    TESSERA_FOR_EACH(i, rows) lse[i] = element::logSumExp(scores + i * V, V, 1);
}

__device__ double ctcLogProb(const float* scores, const double* lse, const int32_t* l, int64_t t, int64_t n, int64_t N,
                             int64_t V, int64_t s, int32_t blank) {
    return static_cast<double>(scores[(t * N + n) * V + element::ctcLabel(l, s, blank)]) - lse[t * N + n];
}

__global__ void ctcAlphaBetaKernel(const float* scores, const double* lse, const int32_t* labels,
                                   const int32_t* labelLen, const int32_t* inputLen, int32_t blank, int64_t T,
                                   int64_t N, int64_t V, int64_t S, double* alpha, double* beta, double* losses) {
    const int64_t n = blockIdx.x, E = 2 * S + 1;
    const int32_t* l = labels + n * S;
    const int64_t Tn = inputLen[n], ext = 2 * int64_t{labelLen[n]} + 1;
    double* a = alpha + n * T * E; // [T, E] of this sample
    double* b = beta + n * T * E;
    auto lp = [&](int64_t t, int64_t s) { return ctcLogProb(scores, lse, l, t, n, N, V, s, blank); };
    for (int64_t s = threadIdx.x; s < ext; s += blockDim.x) {
        a[s] = s < 2 ? lp(0, s) : -INFINITY;
        b[(Tn - 1) * E + s] = s >= ext - 2 ? lp(Tn - 1, s) : -INFINITY;
    }
    __syncthreads();
    for (int64_t t = 1; t < Tn; ++t) {
        for (int64_t s = threadIdx.x; s < ext; s += blockDim.x) {
            a[t * E + s] = element::ctcAlpha(a + (t - 1) * E, l, s, lp(t, s));
        }
        __syncthreads();
    }
    for (int64_t t = Tn - 2; t >= 0; --t) {
        for (int64_t s = threadIdx.x; s < ext; s += blockDim.x) {
            b[t * E + s] = element::ctcBeta(b + (t + 1) * E, l, s, ext, lp(t, s));
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const double* last = a + (Tn - 1) * E;
        losses[n] = -(ext > 1 ? element::logAdd(last[ext - 1], last[ext - 2]) : last[0]);
    }
}

__global__ void ctcSoftmaxKernel(const float* scores, const double* lse, const int32_t* inputLen, const float* scale,
                                 float* grad, int64_t T, int64_t N, int64_t V) {
    TESSERA_FOR_EACH(i, T * N * V) {
        const int64_t row = i / V, t = row / N, n = row % N;
        grad[i] =
            t < inputLen[n] ? scale[n] * static_cast<float>(exp(static_cast<double>(scores[i]) - lse[row])) : 0.0f;
    }
}

__global__ void ctcShareKernel(const float* scores, const double* lse, const int32_t* labels, const int32_t* labelLen,
                               const int32_t* inputLen, int32_t blank, const float* scale, const double* alpha,
                               const double* beta, const double* losses, float* grad, int64_t T, int64_t N, int64_t V,
                               int64_t S) {
    const int64_t E = 2 * S + 1;
    TESSERA_FOR_EACH(i, N * T * E) {
        const int64_t n = i / (T * E), t = i / E % T, s = i % E;
        if (t >= inputLen[n] || s >= 2 * int64_t{labelLen[n]} + 1) continue;
        const int32_t* l = labels + n * S;
        const double share = exp(alpha[i] + beta[i] - ctcLogProb(scores, lse, l, t, n, N, V, s, blank) + losses[n]);
        atomicAdd(grad + (t * N + n) * V + element::ctcLabel(l, s, blank), -scale[n] * static_cast<float>(share));
    }
}

// t *= factor; *bad <- 1 when an element is not finite.
__global__ void scaleCheckFiniteKernel(float* t, float factor, int64_t n, int* bad) {
    bool any = false;
    TESSERA_FOR_EACH(i, n) {
        const float v = t[i] * factor;
        any = any || !isfinite(v);
        t[i] = v;
    }
    if (any) *bad = 1;
}

__global__ void sumSquaresKernel(const float* t, int64_t n, double* out) {
    double sum = 0;
    TESSERA_FOR_EACH(i, n) sum += static_cast<double>(t[i]) * t[i];
    blockSumAdd(sum, out);
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

__global__ void pointwiseCostKernel(CostKind kind, const float* p, const float* t, float* g, int64_t total, float norm,
                                    double* out) {
    double sum = 0;
    TESSERA_FOR_EACH(i, total) sum += element::pointwise(kind, p[i], t[i], norm, g[i]);
    blockSumAdd(sum, out);
}

// KL divergence with a softmax over dim 1, one thread per (sample, position).
__global__ void klDivergenceKernel(const float* p, const float* t, float* g, int64_t n, int64_t c, int64_t inner,
                                   float norm, bool crossEntropy, double* out) {
    double sum = 0;
    TESSERA_FOR_EACH(i, n * inner) {
        const int64_t base = i / inner * c * inner + i % inner;
        sum += element::klDivergence(p + base, t + base, g + base, c, inner, norm, crossEntropy);
    }
    blockSumAdd(sum, out);
}

__global__ void svmCostKernel(const float* s, const int32_t* labels, bool l2, float* g, int64_t n, int64_t c,
                              double* out) {
    const float norm = 1.0f / static_cast<float>(n);
    double sum = 0;
    TESSERA_FOR_EACH(i, n) sum += element::svm(s + i * c, labels[i], l2, g + i * c, c, norm);
    blockSumAdd(sum, out);
}

template <UpdateRule R>
__global__ void optimizerKernel(element::UpdateScalars k, float* w, const float* g, float* a, float* b, float* c,
                                int64_t n) {
    TESSERA_FOR_EACH(i, n) element::update<R>(k, w, g, a, b, c, i);
}

} // namespace

// ---- launchers ---------------------------------------------------------------------------------

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
void reorder(const float* src, int64_t srcBlock, float* dst, int64_t dstBlock, int64_t n, int64_t c, int64_t spatial,
             cudaStream_t s) {
    TESSERA_LAUNCH(reorderKernel, n * c * spatial, s, src, srcBlock, dst, dstBlock, n, c, spatial);
}

void broadcastRows(const float* row, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
    TESSERA_LAUNCH(broadcastRowsKernel, rows * cols, s, row, y, rows, cols);
}
void sumRows(const float* x, float alpha, float beta, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
    TESSERA_LAUNCH(sumRowsKernel, cols, s, x, alpha, beta, y, rows, cols);
}
void castAddChannels(const void* x, int from, const float* bias, float* y, int64_t channels, int64_t inner, int64_t n,
                     cudaStream_t s) {
    TESSERA_LAUNCH(castAddChannelsKernel, n, s, x, from, bias, y, channels, inner, n);
}
void castAxpby(float alpha, const void* x, int from, float beta, float* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(castAxpbyKernel, n, s, alpha, x, from, beta, y, n);
}
void axpby(float alpha, const float* x, float beta, float* y, int64_t n, cudaStream_t s) {
    axpbyz(alpha, x, beta, y, y, n, s);
}
void axpbyz(float alpha, const float* x, float beta, const float* y, float* z, int64_t n, cudaStream_t s) {
    int64_t done = 0;
    if (aligned16(x, y, z)) {
        done = n / 4 * 4;
        TESSERA_LAUNCH(axpbyzKernel4, n / 4, s, alpha, reinterpret_cast<const float4*>(x), beta,
                       reinterpret_cast<const float4*>(y), reinterpret_cast<float4*>(z), n / 4);
    }
    TESSERA_LAUNCH(axpbyzKernel, n - done, s, alpha, x + done, beta, y + done, z + done, n - done);
}
void mul(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(mulKernel, n, s, a, b, y, n);
}
void binaryBroadcast(BinaryOp op, const float* a, const float* b, float* y, const element::BroadcastGeometry& g,
                     int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(binaryBroadcastKernel, n, s, op, a, b, y, g, n);
}
void sumTo(const float* x, float alpha, float* y, const element::ReduceGeometry& g, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(sumToKernel, n, s, x, alpha, y, g, n);
}
void power(const float* x, float p, float* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(powerKernel, n, s, x, p, y, n);
}
void affine(const float* x, float a, float b, float* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(affineKernel, n, s, x, a, b, y, n);
}
void mulChannels(const float* x, const float* m, float* y, int64_t planes, int64_t inner, cudaStream_t s) {
    TESSERA_LAUNCH(mulChannelsKernel, planes * inner, s, x, m, y, planes, inner);
}
void castToInt(const float* x, int32_t* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(castToIntKernel, n, s, x, y, n);
}
void castToFloat(const int32_t* x, float* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(castToFloatKernel, n, s, x, y, n);
}
void cast(const void* x, int from, void* y, int to, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(castKernel, n, s, x, from, y, to, n);
}
void activationForward(int kind, float alpha, float beta, const float* x, float* y, int64_t n, cudaStream_t s) {
    const auto k = static_cast<ActivationKind>(kind);
    int64_t done = 0;
    if (aligned16(x, y)) {
        done = n / 4 * 4;
        TESSERA_LAUNCH(activationForwardKernel4, n / 4, s, k, alpha, beta, reinterpret_cast<const float4*>(x),
                       reinterpret_cast<float4*>(y), n / 4);
    }
    TESSERA_LAUNCH(activationForwardKernel, n - done, s, k, alpha, beta, x + done, y + done, n - done);
}
void activationBackward(int kind, float alpha, float beta, const float* x, const float* y, const float* dy, float* dx,
                        int64_t n, cudaStream_t s) {
    const auto k = static_cast<ActivationKind>(kind);
    const float* read = backwardReadsX(k) ? x : y;
    int64_t done = 0;
    if (aligned16(read, dy, dx)) {
        done = n / 4 * 4;
        TESSERA_LAUNCH(activationBackwardKernel4, n / 4, s, k, alpha, beta, reinterpret_cast<const float4*>(x),
                       reinterpret_cast<const float4*>(y), reinterpret_cast<const float4*>(dy),
                       reinterpret_cast<float4*>(dx), n / 4);
    }
    TESSERA_LAUNCH(activationBackwardKernel, n - done, s, k, alpha, beta, x ? x + done : x, y ? y + done : y, dy + done,
                   dx + done, n - done);
}

void maxPoolForward(const float* x, float* y, int32_t* idx, const Window3& w, int64_t planes, cudaStream_t s) {
    TESSERA_LAUNCH(maxPoolForwardKernel, planes * w.out[0] * w.out[1] * w.out[2], s, x, y, idx, w, planes);
}
void maxPoolBackward(const float* dy, const int32_t* idx, float* dx, int64_t planes, int64_t inPlane, int64_t outPlane,
                     cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * inPlane) * sizeof(float), s));
    TESSERA_LAUNCH(maxPoolBackwardKernel, planes * outPlane, s, dy, idx, dx, planes, inPlane, outPlane);
}
void lrnForward(bool across, int64_t size, float alpha, float beta, float k, const float* x, float* y, float* scale,
                int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t s) {
    TESSERA_LAUNCH(lrnForwardKernel, n * c * h * w, s, across, size, alpha, beta, k, x, y, scale, n, c, h, w);
}
void lrnBackward(bool across, int64_t size, float alpha, float beta, const float* x, const float* dy,
                 const float* scale, float* dx, int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t s) {
    TESSERA_LAUNCH(lrnBackwardKernel, n * c * h * w, s, across, size, alpha, beta, x, dy, scale, dx, n, c, h, w);
}
void resampleForward(bool linear, const float* x, float* y, const int64_t in[3], const int64_t out[3], int64_t planes,
                     cudaStream_t s) {
    TESSERA_LAUNCH(resampleForwardKernel, planes * out[0] * out[1] * out[2], s, linear, x, y, dims3(in), dims3(out),
                   planes);
}
void resampleBackward(bool linear, const float* dy, float* dx, const int64_t in[3], const int64_t out[3],
                      int64_t planes, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * in[0] * in[1] * in[2]) * sizeof(float), s));
    TESSERA_LAUNCH(resampleBackwardKernel, planes * out[0] * out[1] * out[2], s, linear, dy, dx, dims3(in), dims3(out),
                   planes);
}
void padForward(bool reflect, float value, const float* x, float* y, const int64_t in[3], const int64_t out[3],
                const int64_t lo[3], int64_t planes, cudaStream_t s) {
    TESSERA_LAUNCH(padForwardKernel, planes * out[0] * out[1] * out[2], s, reflect, value, x, y, dims3(in), dims3(out),
                   dims3(lo), planes);
}
void padBackward(bool reflect, const float* dy, float* dx, const int64_t in[3], const int64_t out[3],
                 const int64_t lo[3], int64_t planes, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<size_t>(planes * in[0] * in[1] * in[2]) * sizeof(float), s));
    TESSERA_LAUNCH(padBackwardKernel, planes * out[0] * out[1] * out[2], s, reflect, dy, dx, dims3(in), dims3(out),
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

void varianceFromInvStd(const float* invstd, float eps, float* var, int64_t c, cudaStream_t s) {
    TESSERA_LAUNCH(varianceFromInvStdKernel, c, s, invstd, eps, var, c);
}
void invStdFromVariance(const float* var, float eps, float* invstd, int64_t c, cudaStream_t s) {
    TESSERA_LAUNCH(invStdFromVarianceKernel, c, s, var, eps, invstd, c);
}

void crossEntropy(const float* scores, const int32_t* labels, const float* weights, float* grad, int64_t n, int64_t c,
                  int64_t inner, float smoothing, double* error, unsigned long long* hits, cudaStream_t s) {
    TESSERA_LAUNCH(crossEntropyKernel, n * inner, s, scores, labels, weights, grad, n, c, inner, smoothing, error,
                   hits);
}
void ctc(const float* scores, const int32_t* labels, const int32_t* labelLen, const int32_t* inputLen, int32_t blank,
         const float* scale, float* grad, int64_t T, int64_t N, int64_t V, int64_t S, double* lse, double* alpha,
         double* beta, double* losses, cudaStream_t s) {
    TESSERA_LAUNCH(ctcLseKernel, T * N, s, scores, lse, T * N, V);
    if (N > 0) {
        ctcAlphaBetaKernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(scores, lse, labels, labelLen, inputLen, blank,
                                                                         T, N, V, S, alpha, beta, losses);
        TESSERA_CUDA_CHECK(cudaGetLastError());
    }
    if (!grad) return;
    TESSERA_LAUNCH(ctcSoftmaxKernel, T * N * V, s, scores, lse, inputLen, scale, grad, T, N, V);
    TESSERA_LAUNCH(ctcShareKernel, N * T * (2 * S + 1), s, scores, lse, labels, labelLen, inputLen, blank, scale, alpha,
                   beta, losses, grad, T, N, V, S);
}
void scaleCheckFinite(float* t, float factor, int64_t n, int* bad, cudaStream_t s) {
    TESSERA_LAUNCH(scaleCheckFiniteKernel, n, s, t, factor, n, bad);
}
void spatialTfForward(const float* x, const float* theta, float* y, int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t Ho, int64_t Wo, cudaStream_t s) {
    TESSERA_LAUNCH(spatialTfForwardKernel, N * C * Ho * Wo, s, x, theta, y, N, C, H, W, Ho, Wo);
}
void spatialTfBackward(const float* x, const float* theta, const float* dy, float* dx, float* dtheta, int64_t N,
                       int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo, cudaStream_t s) {
    TESSERA_LAUNCH(spatialTfBackwardKernel, N * C * Ho * Wo, s, x, theta, dy, dx, dtheta, N, C, H, W, Ho, Wo);
}
void sumSquares(const float* t, int64_t n, double* sum, cudaStream_t s) {
    TESSERA_LAUNCH(sumSquaresKernel, n, s, t, n, sum);
}
void pointwiseCost(int kind, const float* pred, const float* target, float* grad, int64_t total, int64_t n, int64_t c,
                   double* sum, cudaStream_t s) {
    const float norm = 1.0f / static_cast<float>(n);
    const auto k = static_cast<CostKind>(kind);
    if (k == CostKind::klDivergence || k == CostKind::softCrossEntropy) {
        const int64_t inner = total / (n * c);
        TESSERA_LAUNCH(klDivergenceKernel, n * inner, s, pred, target, grad, n, c, inner, norm,
                       k == CostKind::softCrossEntropy, sum);
        return;
    }
    TESSERA_LAUNCH(pointwiseCostKernel, total, s, static_cast<CostKind>(kind), pred, target, grad, total, norm, sum);
}
void svmCost(const float* scores, const int32_t* labels, bool l2, float* grad, int64_t n, int64_t c, double* sum,
             cudaStream_t s) {
    TESSERA_LAUNCH(svmCostKernel, n, s, scores, labels, l2, grad, n, c, sum);
}

void optimizerUpdate(UpdateRule rule, const element::UpdateScalars& k, float* w, const float* g, float* a, float* b,
                     float* c, int64_t n, cudaStream_t s) {
    element::dispatchRule(rule, [&]<UpdateRule R>() { TESSERA_LAUNCH(optimizerKernel<R>, n, s, k, w, g, a, b, c, n); });
}

} // namespace tessera::cudak
