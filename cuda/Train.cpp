// The CUDA backend's costs, finite checks and optimizer updates.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

using namespace cuda_util;

void CudaBackend::crossEntropy(const Tensor& scores, const Tensor& labels, const Tensor& weights, float smoothing,
                               const Tensor& grad, double& error, int64_t& correct) {
    const Shape& sh = scores.shape();
    const int64_t n = sh[0], c = sh[1], inner = sh.numel() / (n * c), samples = n * inner;
    checkIndexRange("crossEntropy", labels, c, "label");
    auto* slots = static_cast<char*>(scalars());
    auto* err = reinterpret_cast<double*>(slots + 8);
    auto* hits = reinterpret_cast<unsigned long long*>(slots + 16);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(slots + 8, 0, 16, s()));
    cudak::crossEntropy(fp(scores), ip(labels), weights.defined() ? fp(weights) : nullptr,
                        grad.defined() ? fp(grad) : nullptr, n, c, inner, smoothing, err, hits, s());
    struct {
        double err;
        unsigned long long hits;
    } host{};
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, slots + 8, 16, cudaMemcpyDeviceToHost, s()));
    synchronize();
    error = host.err / static_cast<double>(samples);
    correct = static_cast<int64_t>(host.hits);
}

double CudaBackend::pointwiseCost(CostKind kind, const Tensor& pred, const Tensor& target, const Tensor& grad) {
    auto* sum = reinterpret_cast<double*>(static_cast<char*>(scalars()) + 8);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), s()));
    const int64_t n = pred.shape()[0], c = pred.shape().rank() > 1 ? pred.shape()[1] : 1;
    cudak::pointwiseCost(static_cast<int>(kind), fp(pred), fp(target), fp(grad), pred.numel(), n, c, sum, s());
    double host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host / static_cast<double>(n);
}

bool CudaBackend::scaleCheckFinite(const Tensor& t, float factor) {
    auto* bad = static_cast<int*>(scalars());
    TESSERA_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), s()));
    cudak::scaleCheckFinite(fp(t), factor, static_cast<int64_t>(t.nbytes() / sizeof(float)), bad, s());
    int host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host == 0;
}

double CudaBackend::sumSquares(const Tensor& t) {
    auto* sum = reinterpret_cast<double*>(static_cast<char*>(scalars()) + 8);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), s()));
    cudak::sumSquares(fp(t), static_cast<int64_t>(t.nbytes() / sizeof(float)), sum, s());
    double host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host;
}

double CudaBackend::svmCost(const Tensor& scores, const Tensor& labels, bool l2, const Tensor& grad) {
    const int64_t n = scores.shape()[0], c = scores.shape()[1];
    checkIndexRange("svmCost", labels, c, "label");
    auto* sum = reinterpret_cast<double*>(static_cast<char*>(scalars()) + 8);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), s()));
    cudak::svmCost(fp(scores), ip(labels), l2, fp(grad), n, c, sum, s());
    double host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, s()));
    synchronize();
    return host / static_cast<double>(n);
}

void CudaBackend::ctc(const Tensor& scores, const Tensor& labels, const Tensor& labelLengths,
                      const Tensor& inputLengths, int32_t blank, const std::vector<float>& gradScale,
                      const Tensor& grad, std::vector<double>& losses) {
    const int64_t T = scores.shape()[0], N = scores.shape()[1], V = scores.shape()[2], S = labels.shape()[1];
    // float64 scratch: lse [T, N], alpha and beta [N, T, 2 S + 1], losses [N]
    const int64_t rows = T * N, cells = N * T * (2 * S + 1);
    const Tensor scratch = Tensor::empty({2 * (rows + 2 * cells + N)}, DType::float32, device());
    auto* lse = static_cast<double*>(scratch.raw());
    double *alpha = lse + rows, *beta = alpha + cells, *dLosses = beta + cells;
    const Tensor scale = Tensor::fromVector({N}, gradScale).to(device());
    cudak::ctc(fp(scores), ip(labels), ip(labelLengths), ip(inputLengths), blank, fp(scale),
               grad.defined() ? fp(grad) : nullptr, T, N, V, S, lse, alpha, beta, dLosses, s());
    losses.assign(static_cast<size_t>(N), 0.0);
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(losses.data(), dLosses, static_cast<size_t>(N) * sizeof(double), cudaMemcpyDeviceToHost, s()));
    synchronize();
}

void CudaBackend::optimizerUpdate(const UpdateParams& p, const Tensor& param, const Tensor& grad, const Tensor& s1,
                                  const Tensor& s2, const Tensor& s3) {
    requireSameNumel("optimizerUpdate", param, grad);
    cudak::optimizerUpdate(p.rule, element::scalarsOf(p), fp(param), fp(grad), s1.defined() ? fp(s1) : nullptr,
                           s2.defined() ? fp(s2) : nullptr, s3.defined() ? fp(s3) : nullptr, param.numel(), s());
}

} // namespace tessera
