// GEMM through OpenBLAS (the OpenMP build, sharing oneDNN's thread pool) and the row
// reductions Linear needs around it.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/OpenBlas.h"

namespace tessera {

namespace {
void require2D(const char* op, const char* name, const Tensor& t) {
    if (t.shape().rank() != 2) {
        throw ShapeError(std::string("CpuBackend::") + op + ": " + name + " must be 2-D, got " + t.shape().str());
    }
}
} // namespace

// A: [M, K] ([K, M] if transA), B: [K, N] ([N, K] if transB), C: [M, N]
void CpuBackend::gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                      const Tensor& C) {
    require2D("gemm", "A", A);
    require2D("gemm", "B", B);
    require2D("gemm", "C", C);
    const int64_t M = C.shape()[0], N = C.shape()[1];
    const int64_t K = transA ? A.shape()[0] : A.shape()[1];
    const int64_t am = transA ? A.shape()[1] : A.shape()[0];
    const int64_t bk = transB ? B.shape()[1] : B.shape()[0];
    const int64_t bn = transB ? B.shape()[0] : B.shape()[1];
    if (am != M || bk != K || bn != N) {
        throw ShapeError("CpuBackend::gemm: op(A) " + Shape{am, K}.str() + " x op(B) " + Shape{bk, bn}.str() +
                         " does not give C " + C.shape().str());
    }
    cpu::openBlas().sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                          static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha,
                          A.data<float>(), static_cast<blasint>(A.shape()[1]), B.data<float>(),
                          static_cast<blasint>(B.shape()[1]), beta, C.data<float>(), static_cast<blasint>(N));
}

// row: [M], y: [N, M]
void CpuBackend::broadcastRows(const Tensor& row, const Tensor& y) {
    require2D("broadcastRows", "y", y);
    const int64_t N = y.shape()[0], M = y.shape()[1];
    if (row.numel() != M) {
        throw ShapeError("CpuBackend::broadcastRows: row " + row.shape().str() + " does not fit rows of " +
                         y.shape().str());
    }
    const float* pr = row.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for if (N * M > (1 << 15))
    for (int64_t n = 0; n < N; ++n) {
#pragma omp simd
        for (int64_t m = 0; m < M; ++m) py[n * M + m] = pr[m];
    }
}

// x: [N, M], y: [M]
void CpuBackend::sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) {
    require2D("sumRows", "x", x);
    const int64_t N = x.shape()[0], M = x.shape()[1];
    if (y.numel() != M) {
        throw ShapeError("CpuBackend::sumRows: y " + y.shape().str() + " does not fit the columns of " +
                         x.shape().str());
    }
    const float* px = x.data<float>();
    float* py = y.data<float>();
    // Each thread owns a block of columns and walks the rows: the inner loop is contiguous.
#pragma omp parallel for if (N * M > (1 << 15))
    for (int64_t m0 = 0; m0 < M; m0 += 256) {
        const int64_t m1 = m0 + 256 < M ? m0 + 256 : M;
        float acc[256] = {};
        for (int64_t n = 0; n < N; ++n) {
#pragma omp simd
            for (int64_t m = m0; m < m1; ++m) acc[m - m0] += px[n * M + m];
        }
        for (int64_t m = m0; m < m1; ++m) py[m] = alpha * acc[m - m0] + (beta == 0.0f ? 0.0f : beta * py[m]);
    }
}

} // namespace tessera
