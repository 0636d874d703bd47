// Element-wise binary ops with NumPy broadcasting, and the sums that are their gradients,
// as plain OpenMP loops over the geometry the CUDA kernels share (backend/ElementMath.h).
#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

namespace {
constexpr int64_t kParallelMin = 1 << 15;

void requirePlainFloat(const char* op, const Tensor& t) {
    if (t.dtype() != DType::float32 || !t.isPlain()) {
        throw BackendError(std::string("CpuBackend::") + op + ": expects plain float32 tensors");
    }
}
} // namespace

void CpuBackend::binaryBroadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) {
    for (const Tensor* t : {&a, &b, &y}) requirePlainFloat("binaryBroadcast", *t);
    if (!broadcastsTo(a.shape(), y.shape()) || !broadcastsTo(b.shape(), y.shape())) {
        throw ShapeError("CpuBackend::binaryBroadcast: " + a.shape().str() + " and " + b.shape().str() +
                         " do not broadcast to " + y.shape().str());
    }
    const element::BroadcastGeometry g = element::broadcastGeometry(a.shape(), b.shape(), y.shape());
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
    // Rows of y's last dim: one offset computation per row, then strided runs.
    const int64_t last = g.rank ? g.dims[g.rank - 1] : 1;
    const int64_t sa = g.rank ? g.strideA[g.rank - 1] : 0, sb = g.rank ? g.strideB[g.rank - 1] : 0;
    const int64_t rows = last ? n / last : 0;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        int64_t oa, ob;
        element::broadcastOffsets(g, r * last, oa, ob);
        float* out = py + r * last;
        for (int64_t i = 0; i < last; ++i) out[i] = element::binary(op, pa[oa + i * sa], pb[ob + i * sb]);
    }
}

void CpuBackend::sumTo(const Tensor& x, float alpha, const Tensor& y) {
    requirePlainFloat("sumTo", x);
    requirePlainFloat("sumTo", y);
    if (!broadcastsTo(y.shape(), x.shape())) {
        throw ShapeError("CpuBackend::sumTo: " + y.shape().str() + " does not broadcast to " + x.shape().str());
    }
    const element::ReduceGeometry g = element::reduceGeometry(x.shape(), y.shape());
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for if (x.numel() > kParallelMin)
    for (int64_t j = 0; j < n; ++j) py[j] = static_cast<float>(alpha * element::reduceAt(g, px, j));
}

} // namespace tessera
