// The CUDA backend's resampling, padding, PReLU and the spatial transformer.
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

void CudaBackend::spatialTfForward(const Tensor& x, const Tensor& theta, const Tensor& y) {
    const Shape& s = x.shape();
    if (s.rank() != 4 || theta.shape() != Shape{s[0], 2, 3} || y.shape().rank() != 4 || y.shape()[1] != s[1]) {
        throw ShapeError("CudaBackend::spatialTf: x " + s.str() + ", theta " + theta.shape().str() + " and y " +
                         y.shape().str() + " do not fit");
    }
    cudak::spatialTfForward(fp(x), fp(theta), fp(y), s[0], s[1], s[2], s[3], y.shape()[2], y.shape()[3], this->s());
}

void CudaBackend::spatialTfBackward(const Tensor& x, const Tensor& theta, const Tensor& dy, const Tensor& dx,
                                    const Tensor& dtheta) {
    const Shape& s = x.shape();
    fill(dx, 0.0f);
    fill(dtheta, 0.0f);
    cudak::spatialTfBackward(fp(x), fp(theta), fp(dy), fp(dx), fp(dtheta), s[0], s[1], s[2], s[3], dy.shape()[2],
                             dy.shape()[3], this->s());
}

void CudaBackend::resampleForward(const ResampleParams& p, const Tensor& x, const Tensor& y) {
    int64_t in[3], out[3];
    spatial3("resampleForward", x.shape(), in);
    spatial3("resampleForward", y.shape(), out);
    cudak::resampleForward(p, fp(x), fp(y), in, out, x.shape()[0] * x.shape()[1], s());
}

void CudaBackend::resampleBackward(const ResampleParams& p, const Tensor& dy, const Tensor& dx) {
    int64_t in[3], out[3];
    spatial3("resampleBackward", dx.shape(), in);
    spatial3("resampleBackward", dy.shape(), out);
    cudak::resampleBackward(p, fp(dy), fp(dx), in, out, dx.shape()[0] * dx.shape()[1], s());
}

namespace {
void padLo3(const std::vector<int64_t>& lo, int64_t out[3]) {
    const size_t sp = lo.size();
    out[0] = out[1] = out[2] = 0;
    for (size_t d = 0; d < sp && d < 3; ++d) out[3 - sp + d] = lo[d];
}
} // namespace

void CudaBackend::padForward(PadMode mode, float value, const std::vector<int64_t>& lo, const std::vector<int64_t>&,
                             const Tensor& x, const Tensor& y) {
    int64_t in[3], out[3], l[3];
    spatial3("padForward", x.shape(), in);
    spatial3("padForward", y.shape(), out);
    padLo3(lo, l);
    requirePadTypes("CudaBackend::padForward", mode, x, y);
    if (is16Bit(x.dtype())) {
        return cudak::padForwardAny(mode, value, x.raw(), y.raw(), static_cast<int>(x.dtype()), in, out, l,
                                    x.shape()[0] * x.shape()[1], s());
    }
    cudak::padForward(mode, value, fp(x), fp(y), in, out, l, x.shape()[0] * x.shape()[1], s());
}

void CudaBackend::padBackward(PadMode mode, const std::vector<int64_t>& lo, const std::vector<int64_t>&,
                              const Tensor& dy, const Tensor& dx) {
    int64_t in[3], out[3], l[3];
    spatial3("padBackward", dx.shape(), in);
    spatial3("padBackward", dy.shape(), out);
    padLo3(lo, l);
    requirePadTypes("CudaBackend::padBackward", mode, dy, dx);
    if (is16Bit(dy.dtype())) {
        return cudak::padBackwardMove(dy.raw(), dx.raw(), in, out, l, dx.shape()[0] * dx.shape()[1], s());
    }
    cudak::padBackward(mode, fp(dy), fp(dx), in, out, l, dx.shape()[0] * dx.shape()[1], s());
}

void CudaBackend::preluForward(const Tensor& x, const Tensor& slopes, const Tensor& y) {
    const Shape& xs = x.shape();
    const int64_t n = xs[0], c = xs[1];
    cudak::preluForward(fp(x), fp(slopes), fp(y), n, c, (n * c) != 0 ? xs.numel() / (n * c) : 0, slopes.numel() == 1,
                        s());
}

void CudaBackend::preluBackward(const Tensor& x, const Tensor& slopes, const Tensor& dy, const Tensor& dx, float scale,
                                float momentum, const Tensor& dslopes) {
    const Shape& xs = x.shape();
    const int64_t n = xs[0], c = xs[1];
    Tensor fresh = Tensor::empty(slopes.shape(), DType::float32, device());
    cudak::preluBackward(fp(x), fp(slopes), fp(dy), fp(dx), fp(fresh), n, c, (n * c) != 0 ? xs.numel() / (n * c) : 0,
                         slopes.numel() == 1, s());
    axpby(scale, fresh, momentum, dslopes);
}

} // namespace tessera
