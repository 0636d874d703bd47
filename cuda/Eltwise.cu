// The CUDA backend's own kernels for element-wise maps, casts, activations, broadcasts and row sums, and their
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

// A block of 32 columns by 8 rows of threads: each thread sums every 8th row of its column
// within the chunk (adjacent threads read adjacent columns), then the 8 partial sums of a
// column are added in a fixed order.
__global__ void columnPartialsKernel(const void* x, int xt, float* partial, int64_t rows, int64_t cols,
                                     int64_t rowsPerChunk) {
    __shared__ float tile[8][33];
    const int tx = static_cast<int>(threadIdx.x % 32), ty = static_cast<int>(threadIdx.x / 32);
    const int64_t j = blockIdx.x * int64_t{32} + tx;
    const int64_t r0 = blockIdx.y * rowsPerChunk, r1 = r0 + rowsPerChunk < rows ? r0 + rowsPerChunk : rows;
    float acc = 0.0f;
    if (j < cols) {
        for (int64_t r = r0 + ty; r < r1; r += 8) acc += loadAsFloat(x, xt, r * cols + j);
    }
    tile[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && j < cols) {
        float sum = 0.0f;
        for (int k = 0; k < 8; ++k) sum += tile[k][tx];
        partial[blockIdx.y * cols + j] = sum;
    }
}

// z = a * x + b * y, y not read when b is 0 (it may hold anything then). z may be y.
// Element-wise kernels come in pairs: a float4 one for 16-byte aligned operands, which
// does the first n / 4 * 4 elements, and the scalar one for the rest (and for the rest of
// the cases).
// With `relu`, max(0, that) (Backend::axpbyzRelu).
__device__ float reluIf(bool relu, float v) { return relu ? fmaxf(v, 0.0f) : v; }

__global__ void axpbyzKernel(float a, const float* x, float b, const float* y, float* z, int64_t n, bool relu) {
    TESSERA_FOR_EACH(i, n) z[i] = reluIf(relu, a * x[i] + (b == 0.0f ? 0.0f : b * y[i]));
}

__global__ void axpbyzKernel4(float a, const float4* x, float b, const float4* y, float4* z, int64_t n4, bool relu) {
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
        z[i] = make_float4(reluIf(relu, r.x), reluIf(relu, r.y), reluIf(relu, r.z), reluIf(relu, r.w));
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

// Between any two of DType's types (`from`, `to` are DType values), through float.
__global__ void castKernel(const void* x, int from, void* y, int to, int64_t n) {
    TESSERA_FOR_EACH(i, n) storeFromFloat(y, to, i, loadAsFloat(x, from, i));
}

__global__ void castAddChannelsKernel(const void* x, int from, const float* bias, float* y, int64_t channels,
                                      int64_t inner, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = loadAsFloat(x, from, i) + (bias ? bias[(i / inner) % channels] : 0.0f);
}

__global__ void castAxpbyKernel(float a, const void* x, int from, float b, float* y, int64_t n) {
    TESSERA_FOR_EACH(i, n) y[i] = a * loadAsFloat(x, from, i) + (b == 0.0f ? 0.0f : b * y[i]);
}

// One thread per element of the [K, S, C] side: consecutive threads write (forward) or
// read (backward) consecutive channels there.
__global__ void filterToChannelsLastKernel(const float* w, void* y, int to, int64_t C, int64_t S, int64_t n) {
    TESSERA_FOR_EACH(i, n) {
        const int64_t c = i % C, s = (i / C) % S, k = i / (C * S);
        storeFromFloat(y, to, i, w[(k * C + c) * S + s]);
    }
}

__global__ void filterGradFromChannelsLastKernel(float a, const void* g, int from, float b, float* dw, int64_t C,
                                                 int64_t S, int64_t n) {
    TESSERA_FOR_EACH(i, n) {
        const int64_t c = i % C, s = (i / C) % S, k = i / (C * S);
        float* d = dw + (k * C + c) * S + s;
        *d = a * loadAsFloat(g, from, i) + (b == 0.0f ? 0.0f : b * *d);
    }
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
    case ActivationKind::silu: return x / (1.0f + expf(-x));
    case ActivationKind::mish: return x * tanhf(x > 20.0f ? x : log1pf(expf(x)));
    case ActivationKind::exp: return expf(x);
    case ActivationKind::log: return logf(x);
    case ActivationKind::abs: return fabsf(x);
    case ActivationKind::sin: return sinf(x);
    case ActivationKind::cos: return cosf(x);
    case ActivationKind::tan: return tanf(x);
    case ActivationKind::asin: return asinf(x);
    case ActivationKind::acos: return acosf(x);
    case ActivationKind::atan: return atanf(x);
    case ActivationKind::sinh: return sinhf(x);
    case ActivationKind::cosh: return coshf(x);
    case ActivationKind::asinh: return asinhf(x);
    case ActivationKind::acosh: return acoshf(x);
    case ActivationKind::atanh: return atanhf(x);
    case ActivationKind::erf: return erff(x);
    case ActivationKind::sign: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x; // zeros and NaN as they are
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
    case ActivationKind::silu: {
        const float s = 1.0f / (1.0f + expf(-x));
        return dy * s * (1.0f + x * (1.0f - s));
    }
    case ActivationKind::mish: { // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)
        const float t = tanhf(x > 20.0f ? x : log1pf(expf(x)));
        return dy * (t + x / (1.0f + expf(-x)) * (1.0f - t * t));
    }
    case ActivationKind::exp: return dy * y;
    case ActivationKind::log: return dy / x;
    case ActivationKind::abs: return x > 0.0f ? dy : x < 0.0f ? -dy : 0.0f;
    case ActivationKind::sin: return dy * cosf(x);
    case ActivationKind::cos: return -dy * sinf(x);
    case ActivationKind::tan: {
        const float t = tanf(x);
        return dy * (1.0f + t * t);
    }
    case ActivationKind::asin: return dy / sqrtf(1.0f - x * x);
    case ActivationKind::acos: return -dy / sqrtf(1.0f - x * x);
    case ActivationKind::atan: return dy / (1.0f + x * x);
    case ActivationKind::sinh: return dy * coshf(x);
    case ActivationKind::cosh: return dy * sinhf(x);
    case ActivationKind::asinh: return dy / sqrtf(x * x + 1.0f);
    case ActivationKind::acosh: return dy / sqrtf(x * x - 1.0f);
    case ActivationKind::atanh: return dy / (1.0f - x * x);
    case ActivationKind::erf: return dy * 1.1283791670955126f * expf(-x * x);
    case ActivationKind::sign: return 0.0f;
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
    return kind != ActivationKind::sigmoid && kind != ActivationKind::tanh && kind != ActivationKind::relu &&
           kind != ActivationKind::exp;
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

// The same maps on operands of any floating DType each (16-bit activations,
// setCuda16BitActivations), computed in float.
__global__ void axpbyzAnyKernel(float a, const void* x, int xt, float b, const void* y, int yt, void* z, int zt,
                                int64_t n, bool relu) {
    TESSERA_FOR_EACH(i, n) {
        storeFromFloat(z, zt, i,
                       reluIf(relu, a * loadAsFloat(x, xt, i) + (b == 0.0f ? 0.0f : b * loadAsFloat(y, yt, i))));
    }
}

__global__ void activationForwardAnyKernel(ActivationKind kind, float alpha, float beta, const void* x, int xt, void* y,
                                           int yt, int64_t n) {
    TESSERA_FOR_EACH(i, n) storeFromFloat(y, yt, i, activate(kind, alpha, beta, loadAsFloat(x, xt, i)));
}

__global__ void activationBackwardAnyKernel(ActivationKind kind, float alpha, float beta, const void* x, int xt,
                                            const void* y, int yt, const void* dy, int dyt, void* dx, int dxt,
                                            int64_t n) {
    const bool readsX = backwardReadsX(kind);
    TESSERA_FOR_EACH(i, n) {
        const float u = readsX ? loadAsFloat(x, xt, i) : 0.0f, v = readsX ? 0.0f : loadAsFloat(y, yt, i);
        storeFromFloat(dx, dxt, i, activateBackward(kind, alpha, beta, u, v, loadAsFloat(dy, dyt, i)));
    }
}

// Fast paths for operands of one 16-bit type T, 16-byte aligned: eight elements per
// thread through one uint4 load and store each (the Any kernels above do the rest).
template <class T> __device__ float toFloat(T v);
template <> __device__ float toFloat(__half v) { return __half2float(v); }
template <> __device__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ T fromFloat(float v);
template <> __device__ __half fromFloat(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 fromFloat(float v) { return __float2bfloat16_rn(v); }

// Eight values of T in one uint4.
template <class T> struct Eight {
    uint4 bits;
    __device__ float get(int k) const { return toFloat(reinterpret_cast<const T*>(&bits)[k]); }
    __device__ void set(int k, float v) { reinterpret_cast<T*>(&bits)[k] = fromFloat<T>(v); }
};
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2);

template <class T> __device__ Eight<T> load8(const uint4* p, int64_t i) { return Eight<T>{p[i]}; }

template <class T>
__global__ void axpbyz8Kernel(float a, const uint4* x, float b, const uint4* y, uint4* z, int64_t n8, bool relu) {
    TESSERA_FOR_EACH(i, n8) {
        const Eight<T> u = load8<T>(x, i);
        Eight<T> r{};
        if (b == 0.0f) {
            for (int k = 0; k < 8; ++k) r.set(k, reluIf(relu, a * u.get(k)));
        } else {
            const Eight<T> w = load8<T>(y, i);
            for (int k = 0; k < 8; ++k) r.set(k, reluIf(relu, a * u.get(k) + b * w.get(k)));
        }
        z[i] = r.bits;
    }
}

template <class T>
__global__ void activationForward8Kernel(ActivationKind kind, float alpha, float beta, const uint4* x, uint4* y,
                                         int64_t n8) {
    TESSERA_FOR_EACH(i, n8) {
        const Eight<T> u = load8<T>(x, i);
        Eight<T> r{};
        for (int k = 0; k < 8; ++k) r.set(k, activate(kind, alpha, beta, u.get(k)));
        y[i] = r.bits;
    }
}

// `xy` is x or y, whichever activateBackward reads for `kind`.
template <class T>
__global__ void activationBackward8Kernel(ActivationKind kind, float alpha, float beta, const uint4* xy,
                                          const uint4* dy, uint4* dx, int64_t n8) {
    const bool readsX = backwardReadsX(kind);
    TESSERA_FOR_EACH(i, n8) {
        const Eight<T> u = load8<T>(xy, i), g = load8<T>(dy, i);
        Eight<T> r{};
        for (int k = 0; k < 8; ++k) {
            const float v = u.get(k);
            r.set(k, activateBackward(kind, alpha, beta, readsX ? v : 0.0f, readsX ? 0.0f : v, g.get(k)));
        }
        dx[i] = r.bits;
    }
}

// Runs f(T{}) for a 16-bit DType value; false for any other type.
template <class F> bool with16Bit(int dtype, F f) {
    if (static_cast<DType>(dtype) == DType::float16) {
        f(__half{});
        return true;
    }
    if (static_cast<DType>(dtype) == DType::bfloat16) {
        f(__nv_bfloat16{});
        return true;
    }
    return false;
}

const uint4* u4(const void* p) { return static_cast<const uint4*>(p); }
uint4* u4(void* p) { return static_cast<uint4*>(p); }
// p advanced by `elements` of a 16-bit type.
const void* skip16(const void* p, int64_t elements) { return p ? static_cast<const uint16_t*>(p) + elements : p; }
void* skip16(void* p, int64_t elements) { return static_cast<uint16_t*>(p) + elements; }

__global__ void addChannelsAnyKernel(void* y, int yt, const float* bias, int64_t channels, int64_t inner, int64_t n) {
    TESSERA_FOR_EACH(i, n) storeFromFloat(y, yt, i, loadAsFloat(y, yt, i) + bias[(i / inner) % channels]);
}

} // namespace

void axpbyzAny(float alpha, const void* x, int xt, float beta, const void* y, int yt, void* z, int zt, int64_t n,
               cudaStream_t s, bool relu) {
    int64_t done = 0;
    const bool readsY = beta != 0.0f;
    if (xt == zt && (!readsY || yt == zt) && aligned16(x, z) && (!readsY || aligned16(y))) {
        with16Bit(zt, [&](auto tag) {
            using T = decltype(tag);
            done = n / 8 * 8;
            TESSERA_LAUNCH(axpbyz8Kernel<T>, n / 8, s, alpha, u4(x), beta, readsY ? u4(y) : nullptr, u4(z), n / 8,
                           relu);
        });
    }
    if (done == 0) {
        TESSERA_LAUNCH(axpbyzAnyKernel, n, s, alpha, x, xt, beta, y, yt, z, zt, n, relu);
    } else { // the last n % 8 elements, of the one 16-bit type
        TESSERA_LAUNCH(axpbyzAnyKernel, n - done, s, alpha, skip16(x, done), xt, beta, readsY ? skip16(y, done) : y, yt,
                       skip16(z, done), zt, n - done, relu);
    }
}

void activationForwardAny(int kind, float alpha, float beta, const void* x, int xt, void* y, int yt, int64_t n,
                          cudaStream_t s) {
    const auto k = static_cast<ActivationKind>(kind);
    int64_t done = 0;
    if (xt == yt && aligned16(x, y)) {
        with16Bit(yt, [&](auto tag) {
            using T = decltype(tag);
            done = n / 8 * 8;
            TESSERA_LAUNCH(activationForward8Kernel<T>, n / 8, s, k, alpha, beta, u4(x), u4(y), n / 8);
        });
    }
    if (done == 0) {
        TESSERA_LAUNCH(activationForwardAnyKernel, n, s, k, alpha, beta, x, xt, y, yt, n);
    } else {
        TESSERA_LAUNCH(activationForwardAnyKernel, n - done, s, k, alpha, beta, skip16(x, done), xt, skip16(y, done),
                       yt, n - done);
    }
}

void activationBackwardAny(int kind, float alpha, float beta, const void* x, int xt, const void* y, int yt,
                           const void* dy, int dyt, void* dx, int dxt, int64_t n, cudaStream_t s) {
    const auto k = static_cast<ActivationKind>(kind);
    const bool readsX = backwardReadsX(k);
    const void* xy = readsX ? x : y;
    const int xyt = readsX ? xt : yt;
    int64_t done = 0;
    if (xyt == dxt && dyt == dxt && aligned16(xy, dy, dx)) {
        with16Bit(dxt, [&](auto tag) {
            using T = decltype(tag);
            done = n / 8 * 8;
            TESSERA_LAUNCH(activationBackward8Kernel<T>, n / 8, s, k, alpha, beta, u4(xy), u4(dy), u4(dx), n / 8);
        });
    }
    if (done == 0) {
        TESSERA_LAUNCH(activationBackwardAnyKernel, n, s, k, alpha, beta, x, xt, y, yt, dy, dyt, dx, dxt, n);
    } else { // x and y: only the one read is advanced (the other may be null)
        TESSERA_LAUNCH(activationBackwardAnyKernel, n - done, s, k, alpha, beta, readsX ? skip16(x, done) : x, xt,
                       readsX ? y : skip16(y, done), yt, skip16(dy, done), dyt, skip16(dx, done), dxt, n - done);
    }
}

void addChannelsAny(void* y, int yt, const float* bias, int64_t channels, int64_t inner, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(addChannelsAnyKernel, n, s, y, yt, bias, channels, inner, n);
}

void broadcastRows(const float* row, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
    TESSERA_LAUNCH(broadcastRowsKernel, rows * cols, s, row, y, rows, cols);
}

void sumRows(const float* x, float alpha, float beta, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
    TESSERA_LAUNCH(sumRowsKernel, cols, s, x, alpha, beta, y, rows, cols);
}

void columnPartialsAny(const void* x, int xt, float* partial, int64_t rows, int64_t cols, int64_t rowsPerChunk,
                       int64_t chunks, cudaStream_t s) {
    if (rows == 0 || cols == 0 || chunks == 0) return;
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
    columnPartialsKernel<<<grid, 256, 0, s>>>(x, xt, partial, rows, cols, rowsPerChunk);
    TESSERA_CUDA_CHECK(cudaGetLastError());
}

void castAddChannels(const void* x, int from, const float* bias, float* y, int64_t channels, int64_t inner, int64_t n,
                     cudaStream_t s) {
    TESSERA_LAUNCH(castAddChannelsKernel, n, s, x, from, bias, y, channels, inner, n);
}

void castAxpby(float alpha, const void* x, int from, float beta, float* y, int64_t n, cudaStream_t s) {
    TESSERA_LAUNCH(castAxpbyKernel, n, s, alpha, x, from, beta, y, n);
}

void filterToChannelsLast(const float* w, void* y, int to, int64_t K, int64_t C, int64_t S, cudaStream_t s) {
    const int64_t n = K * C * S;
    TESSERA_LAUNCH(filterToChannelsLastKernel, n, s, w, y, to, C, S, n);
}

void filterGradFromChannelsLast(float alpha, const void* g, int from, float beta, float* dw, int64_t K, int64_t C,
                                int64_t S, cudaStream_t s) {
    const int64_t n = K * C * S;
    TESSERA_LAUNCH(filterGradFromChannelsLastKernel, n, s, alpha, g, from, beta, dw, C, S, n);
}

void axpby(float alpha, const float* x, float beta, float* y, int64_t n, cudaStream_t s) {
    axpbyz(alpha, x, beta, y, y, n, s);
}

void axpbyz(float alpha, const float* x, float beta, const float* y, float* z, int64_t n, cudaStream_t s, bool relu) {
    int64_t done = 0;
    if (aligned16(x, y, z)) {
        done = n / 4 * 4;
        TESSERA_LAUNCH(axpbyzKernel4, n / 4, s, alpha, reinterpret_cast<const float4*>(x), beta,
                       reinterpret_cast<const float4*>(y), reinterpret_cast<float4*>(z), n / 4, relu);
    }
    TESSERA_LAUNCH(axpbyzKernel, n - done, s, alpha, x + done, beta, y + done, z + done, n - done, relu);
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

} // namespace tessera::cudak
