// Row normalisation (LayerNorm, RMSNorm, GroupNorm; Backend::rowNormForward): each row of
// x [rows, D] by its own statistics, then gamma and beta per channel. Rows run in
// parallel; the parameter gradients are summed over rows per block of channels, so no two
// threads write one sum.
#include <cmath>
#include <string>

#include "backend/cpu/CpuBackend.h"

namespace tessera {

namespace {

constexpr int64_t kParallelMin = 1 << 14; // values below which one thread does it all

struct RowGeometry {
    int64_t rows, D, groups, inner, chunks; // chunks: channels per group, D / inner
};

RowGeometry geometryOf(const char* op, const RowNormParams& p, const Tensor& x, const Tensor& gamma,
                       const Tensor& beta) {
    if (x.dtype() != DType::float32 || !x.isPlain()) {
        throw BackendError(std::string("CpuBackend::") + op + ": x must be plain float32, got " + str(x.dtype()));
    }
    if (x.shape().rank() != 2)
        throw ShapeError(std::string("CpuBackend::") + op + ": x must be [rows, D], got " + x.shape().str());
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    if (p.groups < 1 || p.inner < 1 || D % p.inner != 0 || rows % p.groups != 0) {
        throw ShapeError(std::string("CpuBackend::") + op + ": groups " + std::to_string(p.groups) + " and inner " +
                         std::to_string(p.inner) + " do not divide x " + x.shape().str());
    }
    const int64_t channels = p.groups * (D / p.inner);
    for (const Tensor* t : {&gamma, &beta}) {
        if (t->defined() && t->numel() != channels) {
            throw ShapeError(std::string("CpuBackend::") + op + ": gamma and beta need " + std::to_string(channels) +
                             " values, got " + t->shape().str());
        }
    }
    return {rows, D, p.groups, p.inner, D / p.inner};
}

} // namespace

void CpuBackend::rowNormForward(const RowNormParams& p, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd) {
    const RowGeometry g = geometryOf("rowNormForward", p, x, gamma, beta);
    cpu_util::requireSameNumel("rowNormForward", x, y);
    const float* xs = x.data<float>();
    float* ys = y.data<float>();
    float* means = mean.data<float>();
    float* rstds = rstd.data<float>();
    const float* gs = gamma.defined() ? gamma.data<float>() : nullptr;
    const float* bs = beta.defined() ? beta.data<float>() : nullptr;
    const int64_t D = g.D;
#pragma omp parallel for schedule(static) if (g.rows * D > kParallelMin)
    for (int64_t r = 0; r < g.rows; ++r) {
        const float* xr = xs + r * D;
        float* yr = ys + r * D;
        float mu = 0.0f;
        if (p.subtractMean) {
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t d = 0; d < D; ++d) sum += xr[d];
            mu = sum / static_cast<float>(D);
        }
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t d = 0; d < D; ++d) sq += (xr[d] - mu) * (xr[d] - mu);
        const float rs = 1.0f / std::sqrt(sq / static_cast<float>(D) + p.eps);
        means[r] = mu;
        rstds[r] = rs;
        const int64_t base = (r % g.groups) * g.chunks; // the channel of the row's first value
        if (g.inner == 1) {
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) {
                yr[d] = (xr[d] - mu) * rs * (gs ? gs[base + d] : 1.0f) + (bs ? bs[base + d] : 0.0f);
            }
        } else {
            for (int64_t j = 0; j < g.chunks; ++j) {
                const float a = rs * (gs ? gs[base + j] : 1.0f), b = bs ? bs[base + j] : 0.0f;
                const float* xc = xr + j * g.inner;
                float* yc = yr + j * g.inner;
#pragma omp simd
                for (int64_t k = 0; k < g.inner; ++k) yc[k] = (xc[k] - mu) * a + b;
            }
        }
    }
}

void CpuBackend::rowNormBackward(const RowNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                 const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                                 const Tensor& dbeta) {
    const RowGeometry g = geometryOf("rowNormBackward", p, x, gamma, Tensor());
    cpu_util::requireSameNumel("rowNormBackward", x, dy);
    cpu_util::requireSameNumel("rowNormBackward", x, dx);
    const Tensor dyPlain = dy.isPlain() && dy.dtype() == DType::float32 ? dy : dy.plain().convertedTo(DType::float32);
    const float* xs = x.data<float>();
    const float* dys = dyPlain.data<float>();
    float* dxs = dx.data<float>();
    const float* means = mean.data<float>();
    const float* rstds = rstd.data<float>();
    const float* gs = gamma.defined() ? gamma.data<float>() : nullptr;
    const int64_t D = g.D;
    const float invD = 1.0f / static_cast<float>(D);
#pragma omp parallel for schedule(static) if (g.rows * D > kParallelMin)
    for (int64_t r = 0; r < g.rows; ++r) {
        const float* xr = xs + r * D;
        const float* dyr = dys + r * D;
        float* dxr = dxs + r * D;
        const float mu = means[r], rs = rstds[r];
        const int64_t base = (r % g.groups) * g.chunks;
        auto gammaAt = [&](int64_t d) { return gs ? gs[base + d / g.inner] : 1.0f; };
        float s1 = 0.0f, s2 = 0.0f; // sums of dxhat and of dxhat * xhat
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t d = 0; d < D; ++d) {
            const float dxh = dyr[d] * gammaAt(d);
            s1 += dxh;
            s2 += dxh * (xr[d] - mu) * rs;
        }
        const float m1 = p.subtractMean ? s1 * invD : 0.0f, m2 = s2 * invD;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) {
            const float xhat = (xr[d] - mu) * rs;
            dxr[d] = rs * (dyr[d] * gammaAt(d) - m1 - xhat * m2);
        }
    }
    if (!dgamma.defined() && !dbeta.defined()) return;
    const int64_t channels = g.groups * g.chunks;
    for (const Tensor* t : {&dgamma, &dbeta}) {
        if (t->defined() && t->numel() != channels) {
            throw ShapeError("CpuBackend::rowNormBackward: dgamma and dbeta need " + std::to_string(channels) +
                             " values, got " + t->shape().str());
        }
    }
    float* dgs = dgamma.defined() ? dgamma.data<float>() : nullptr;
    float* dbs = dbeta.defined() ? dbeta.data<float>() : nullptr;
    if (g.inner == 1 && g.groups == 1) {
        // LayerNorm: channel d of every row. Each thread sums a block of columns over all rows.
#pragma omp parallel if (g.rows * D > kParallelMin)
        {
#pragma omp for schedule(static)
            for (int64_t d = 0; d < D; ++d) {
                if (dgs) dgs[d] = 0.0f;
                if (dbs) dbs[d] = 0.0f;
            }
            // the same static split of d as above: each thread sums the columns it zeroed
#pragma omp for schedule(static)
            for (int64_t d = 0; d < D; ++d) {
                float sg = 0.0f, sb = 0.0f;
                for (int64_t r = 0; r < g.rows; ++r) {
                    const float v = dys[r * D + d];
                    sg += v * (xs[r * D + d] - means[r]) * rstds[r];
                    sb += v;
                }
                if (dgs) dgs[d] = sg;
                if (dbs) dbs[d] = sb;
            }
        }
        return;
    }
    // Channel c of group q = c / chunks is chunk j = c % chunks of the rows r with r % groups == q.
#pragma omp parallel for schedule(static) if (g.rows * D > kParallelMin)
    for (int64_t c = 0; c < channels; ++c) {
        const int64_t q = c / g.chunks, j = c % g.chunks;
        float sg = 0.0f, sb = 0.0f;
        for (int64_t r = q; r < g.rows; r += g.groups) {
            const float mu = means[r], rs = rstds[r];
            const float* xc = xs + r * D + j * g.inner;
            const float* dyc = dys + r * D + j * g.inner;
#pragma omp simd reduction(+ : sg, sb)
            for (int64_t k = 0; k < g.inner; ++k) {
                sg += dyc[k] * (xc[k] - mu) * rs;
                sb += dyc[k];
            }
        }
        if (dgs) dgs[c] = sg;
        if (dbs) dbs[c] = sb;
    }
}

} // namespace tessera
