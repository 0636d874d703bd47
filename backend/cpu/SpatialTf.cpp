// The spatial transformer's sampler: one (sample, output pixel) at a time, the source
// position computed once and used for every channel. The maths is backend/ElementMath.h's,
// shared with the CUDA kernels.
#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

namespace {
void checkShapes(const Tensor& x, const Tensor& theta, const Shape& y) {
    const Shape& s = x.shape();
    if (s.rank() != 4 || theta.shape() != Shape{s[0], 2, 3} || y.rank() != 4 || y[0] != s[0] || y[1] != s[1]) {
        throw ShapeError("CpuBackend::spatialTf: x " + s.str() + ", theta " + theta.shape().str() + " and y " +
                         y.str() + " do not fit [N, C, H, W], [N, 2, 3], [N, C, Ho, Wo]");
    }
}
} // namespace

void CpuBackend::spatialTfForward(const Tensor& x, const Tensor& theta, const Tensor& y) {
    checkShapes(x, theta, y.shape());
    const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t Ho = y.shape()[2], Wo = y.shape()[3];
    const float* px = x.data<float>();
    const float* pt = theta.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t i = 0; i < Ho; ++i) {
            for (int64_t j = 0; j < Wo; ++j) {
                float u, v;
                element::spatialTfSource(pt + n * 6, i, j, Ho, Wo, H, W, u, v);
                for (int64_t c = 0; c < C; ++c) {
                    py[((n * C + c) * Ho + i) * Wo + j] =
                        element::bilinear(px + (n * C + c) * H * W, u, v, H, W, nullptr, nullptr);
                }
            }
        }
    }
}

void CpuBackend::spatialTfBackward(const Tensor& x, const Tensor& theta, const Tensor& dy, const Tensor& dx,
                                   const Tensor& dtheta) {
    checkShapes(x, theta, dy.shape());
    const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t Ho = dy.shape()[2], Wo = dy.shape()[3];
    const float* px = x.data<float>();
    const float* pt = theta.data<float>();
    const float* pg = dy.data<float>();
    float* pdx = dx.data<float>();
    float* pdt = dtheta.data<float>();
    fill(dx, 0.0f);
    const float su = 0.5f * static_cast<float>(W - 1), sv = 0.5f * static_cast<float>(H - 1);
#pragma omp parallel for // each sample writes only its own image and transform
    for (int64_t n = 0; n < N; ++n) {
        double acc[6] = {0, 0, 0, 0, 0, 0};
        for (int64_t i = 0; i < Ho; ++i) {
            for (int64_t j = 0; j < Wo; ++j) {
                float u, v;
                element::spatialTfSource(pt + n * 6, i, j, Ho, Wo, H, W, u, v);
                int64_t rows[4], cols[4];
                float w[4];
                element::bilinearTaps(u, v, rows, cols, w);
                double gu = 0, gv = 0; // d loss / d u, d loss / d v, over the channels
                for (int64_t c = 0; c < C; ++c) {
                    const float g = pg[((n * C + c) * Ho + i) * Wo + j];
                    const float* plane = px + (n * C + c) * H * W;
                    float du, dv;
                    element::bilinear(plane, u, v, H, W, &du, &dv);
                    gu += static_cast<double>(g) * du;
                    gv += static_cast<double>(g) * dv;
                    float* dplane = pdx + (n * C + c) * H * W;
                    for (int k = 0; k < 4; ++k) {
                        if (rows[k] >= 0 && rows[k] < H && cols[k] >= 0 && cols[k] < W) {
                            dplane[rows[k] * W + cols[k]] += g * w[k];
                        }
                    }
                }
                const float xt = element::gridCoord(j, Wo), yt = element::gridCoord(i, Ho);
                const double t[3] = {xt, yt, 1.0};
                for (int k = 0; k < 3; ++k) {
                    acc[k] += gu * su * t[k];
                    acc[3 + k] += gv * sv * t[k];
                }
            }
        }
        for (int k = 0; k < 6; ++k) pdt[n * 6 + k] = static_cast<float>(acc[k]);
    }
}

} // namespace tessera
