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
// cuBLAS multiplies them on tensor cores with float32 accumulation into float32 C.
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
    requireDtype("gemm", C, DType::float32, "C");
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
    TESSERA_CUDA_CHECK(cublasGemmEx(cublas_, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                    &alpha, b.raw(), type, static_cast<int>(B.shape()[1]), a.raw(), type,
                                    static_cast<int>(A.shape()[1]), &beta, C.raw(), CUDA_R_32F, static_cast<int>(n),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
    cudak::sumRows(fp(x), alpha, beta, fp(y), x.shape()[0], x.shape()[1], s());
}

} // namespace tessera
