// The CUDA backend's own kernels for costs (cross entropy, CTC, pointwise, SVM), finite checks and optimizer updates,
// and their launchers (declared in cuda/Kernels.h). Each kernel mirrors the loop of the CPU backend that computes the
// same op, so that the two agree to rounding (tests/cuda checks it).
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
