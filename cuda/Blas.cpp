// The CUDA backend's GEMM on cuBLAS (float32, TF32, float16 and bfloat16 on tensor cores) and row broadcasts and sums.
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

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
// In float16 or bfloat16, A and B are converted (unless they already are of that type) and
// cuBLAS multiplies them on tensor cores with float32 accumulation into C, float32 or the
// compute type (rounded once).
void CudaBackend::gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                       const Tensor& C, DType compute) {
    if (compute != DType::float32 && compute != DType::float16 && compute != DType::bfloat16) {
        throw BackendError("CudaBackend::gemm: computing in " + str(compute) +
                           " is not supported (float32, float16 and bfloat16 are)");
    }
    if (A.shape().rank() != 2 || B.shape().rank() != 2 || C.shape().rank() != 2) {
        throw ShapeError("CudaBackend::gemm: needs matrices, got " + A.shape().str() + ", " + B.shape().str() +
                         " and " + C.shape().str());
    }
    if (C.dtype() != DType::float32 && C.dtype() != compute) {
        throw BackendError("CudaBackend::gemm: C is " + str(C.dtype()) + ", expected float32" +
                           (compute == DType::float32 ? "" : " or " + str(compute)) + " (computing in " + str(compute) +
                           ")");
    }
    for (const Tensor* t : {&A, &B}) {
        if (t->dtype() != DType::float32 && !(is16Bit(t->dtype()) && compute != DType::float32)) {
            throw BackendError(std::string("CudaBackend::gemm: ") + (t == &A ? "A" : "B") + " is " + str(t->dtype()) +
                               ", expected float32" + (compute == DType::float32 ? "" : " or a 16-bit type") +
                               " (computing in " + str(compute) + ")");
        }
    }
    const int64_t m = C.shape()[0], n = C.shape()[1];
    const int64_t k = transA ? A.shape()[0] : A.shape()[1];
    if ((transA ? A.shape()[1] : A.shape()[0]) != m || (transB ? B.shape()[1] : B.shape()[0]) != k ||
        (transB ? B.shape()[0] : B.shape()[1]) != n) {
        throw ShapeError("CudaBackend::gemm: " + A.shape().str() + (transA ? "^T" : "") + " x " + B.shape().str() +
                         (transB ? "^T" : "") + " does not give " + C.shape().str());
    }
    s();
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (compute == DType::float32) {
        requireDtype("gemm", A, DType::float32, "A");
        requireDtype("gemm", B, DType::float32, "B");
        TESSERA_CUDA_CHECK(cublasSgemm(cublas_, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                       &alpha, fp(B), static_cast<int>(B.shape()[1]), fp(A),
                                       static_cast<int>(A.shape()[1]), &beta, fp(C), static_cast<int>(n)));
        return;
    }
    const Tensor a = A.convertedTo(compute), b = B.convertedTo(compute);
    const cudaDataType_t type = compute == DType::float16 ? CUDA_R_16F : CUDA_R_16BF;
    TESSERA_CUDA_CHECK(cublasGemmEx(
        cublas_, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b.raw(), type,
        static_cast<int>(B.shape()[1]), a.raw(), type, static_cast<int>(A.shape()[1]), &beta, C.raw(),
        C.dtype() == DType::float32 ? CUDA_R_32F : type, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The product, then the bias added in float32 to each element of C (in its own type: a
// 16-bit C is rounded twice, after the product and after the sum).
void CudaBackend::gemmWeights(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B,
                              const Tensor& bias, float beta, const Tensor& C, DType compute,
                              const std::shared_ptr<LayerState>&) {
    gemm(transA, transB, alpha, A, B, beta, C, compute);
    if (!bias.defined()) return;
    requireBiasable("CudaBackend::gemmWeights", alpha, beta);
    if (C.shape().rank() != 2 || bias.numel() != C.shape()[1] || bias.dtype() != DType::float32) {
        throw ShapeError("CudaBackend::gemmWeights: the bias must be [" + std::to_string(C.shape()[1]) +
                         "] float32, got " + bias.shape().str() + " " + str(bias.dtype()));
    }
    cudak::addChannelsAny(C.raw(), static_cast<int>(C.dtype()), fp(bias), C.shape()[1], 1, C.numel(), s());
}

// The products of attention's heads in one cuBLAS call: row-major C[i] = op(A[i]) op(B[i])
// is column-major C[i]^T = op(B[i])^T op(A[i])^T, the operands swapped as in gemm, with each
// matrix of a batch one stride after the last. TF32 as setAllowTF32 says (the handle's math mode).
void CudaBackend::gemmBatched(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                              const Tensor& C) {
    for (const Tensor* t : {&A, &B, &C}) {
        if (t->shape().rank() != 3 || t->shape()[0] != C.shape()[0]) {
            throw ShapeError("CudaBackend::gemmBatched: A, B and C must be 3-D with one batch, got " + A.shape().str() +
                             ", " + B.shape().str() + ", " + C.shape().str());
        }
        requireDtype("gemmBatched", *t, DType::float32, t == &A ? "A" : t == &B ? "B" : "C");
    }
    const int64_t batch = C.shape()[0], m = C.shape()[1], n = C.shape()[2];
    const int64_t k = transA ? A.shape()[1] : A.shape()[2];
    if ((transA ? A.shape()[2] : A.shape()[1]) != m || (transB ? B.shape()[2] : B.shape()[1]) != k ||
        (transB ? B.shape()[1] : B.shape()[2]) != n) {
        throw ShapeError("CudaBackend::gemmBatched: " + A.shape().str() + (transA ? "^T" : "") + " x " +
                         B.shape().str() + (transB ? "^T" : "") + " does not give " + C.shape().str());
    }
    if (batch == 0 || m == 0 || n == 0) return;
    if (k == 0) return axpby(0.0f, C, beta, C);
    for (int64_t v : {batch, m, n, k}) {
        if (v > INT_MAX) throw ShapeError("CudaBackend::gemmBatched: a dimension over 2^31 in " + C.shape().str());
    }
    s();
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    TESSERA_CUDA_CHECK(cublasSgemmStridedBatched(
        cublas_, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, fp(B),
        static_cast<int>(B.shape()[2]), B.shape()[1] * B.shape()[2], fp(A), static_cast<int>(A.shape()[2]),
        A.shape()[1] * A.shape()[2], &beta, fp(C), static_cast<int>(n), m * n, static_cast<int>(batch)));
}

void CudaBackend::broadcastRows(const Tensor& row, const Tensor& y) {
    if (y.shape().rank() != 2 || row.numel() != y.shape()[1]) {
        throw ShapeError("CudaBackend::broadcastRows: row " + row.shape().str() + " does not fit rows of " +
                         y.shape().str());
    }
    cudak::broadcastRows(fp(row), fp(y), y.shape()[0], y.shape()[1], s());
}

void CudaBackend::sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) {
    if (x.shape().rank() != 2 || y.numel() != x.shape()[1]) {
        throw ShapeError("CudaBackend::sumRows: y " + y.shape().str() + " does not fit the columns of " +
                         x.shape().str());
    }
    if (is16Bit(x.dtype()) && x.shape()[0] > 0) {
        // Float32 column sums of chunks of about 256 rows (at most 1024 chunks), then their sum.
        const int64_t rows = x.shape()[0], cols = x.shape()[1];
        const int64_t chunks = std::min<int64_t>(1024, (rows + 255) / 256), perChunk = (rows + chunks - 1) / chunks;
        const Tensor partial = Tensor::empty({chunks, cols}, DType::float32, x.device());
        cudak::columnPartialsAny(x.raw(), static_cast<int>(x.dtype()), fp(partial), rows, cols, perChunk, chunks, s());
        return sumColumns(fp(partial), chunks, cols, cols, alpha, beta, fp(y));
    }
    requireDtype("sumRows", x, DType::float32, "x");
    sumColumns(fp(x), x.shape()[0], x.shape()[1], x.shape()[1], alpha, beta, fp(y));
}

// y[j] <- alpha * sum_r x[r * ld + j] + beta * y[j] for j < cols: the product of the
// column-major cols x rows matrix with a vector of ones (cuBLAS's gemv: the whole device
// works on it, and the sum is the same on every run). y is not read when beta is 0.
void CudaBackend::sumColumns(const float* x, int64_t rows, int64_t cols, int64_t ld, float alpha, float beta,
                             float* y) {
    if (cols == 0) return;
    if (rows == 0) {
        if (beta == 0.0f) return cudak::fill(y, cols, 0.0f, s());
        return cudak::axpby(0.0f, y, beta, y, cols, s());
    }
    if (rows > INT_MAX || cols > INT_MAX || ld > INT_MAX) {
        throw ShapeError("CudaBackend::sumRows: " + std::to_string(rows) + " x " + std::to_string(cols) +
                         " has a dimension over 2^31");
    }
    const float* one = ones(rows);
    TESSERA_CUDA_CHECK(cublasSgemv(cublas_, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows), &alpha, x,
                                   static_cast<int>(ld), one, 1, &beta, y, 1));
}

} // namespace tessera
