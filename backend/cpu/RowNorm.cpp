// Row normalisation (LayerNorm, RMSNorm, GroupNorm; Backend::rowNormForward): each row of
// x [rows, D] by its own statistics, then gamma and beta per channel. LayerNorm (groups 1,
// inner 1, mean subtracted) runs on oneDNN's layer-normalisation primitives; the others
// here: rows in parallel, backward summing the parameter gradients in the same pass as the
// input gradient, each thread into its own sums, added up at the end.
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <omp.h>

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

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

// ---- LayerNorm on oneDNN ------------------------------------------------------------
// oneDNN keeps the variance where Tessera keeps 1 / sqrt(var + eps): each call converts.
using namespace dnnl_util;

bool onDnnl(const RowNormParams& p) { return p.groups == 1 && p.inner == 1 && p.subtractMean; }

dnnl::normalization_flags flagsOf(bool scale, bool shift) {
    auto f = dnnl::normalization_flags::none;
    if (scale) f = f | dnnl::normalization_flags::use_scale;
    if (shift) f = f | dnnl::normalization_flags::use_shift;
    return f;
}

std::vector<int64_t> keyOf(int64_t rows, int64_t D, float eps, bool scale, bool shift) {
    int32_t bits = 0;
    std::memcpy(&bits, &eps, sizeof bits);
    return {rows, D, bits, scale, shift};
}

const dnnl::layer_normalization_forward::primitive_desc& layerNormForwardPd(int64_t rows, int64_t D, float eps,
                                                                            bool scale, bool shift) {
    static thread_local PrimitiveCache<dnnl::layer_normalization_forward::primitive_desc> cache;
    return cache.get(keyOf(rows, D, eps, scale, shift), [&] {
        return checkDnnl("layer_normalization_forward", [&] {
            const dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_training, plainDesc({rows, D}),
                                                            plainDesc({rows}), eps, flagsOf(scale, shift));
            return dnnl::layer_normalization_forward::primitive_desc(d, engine());
        });
    });
}

void layerNormForward(float eps, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                      const Tensor& mean, const Tensor& rstd) {
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    const bool scale = gamma.defined(), shift = beta.defined();
    static thread_local PrimitiveCache<dnnl::layer_normalization_forward> cache;
    const auto& fwd = cache.get(keyOf(rows, D, eps, scale, shift), [&] {
        return checkDnnl("layer_normalization_forward", [&] {
            return dnnl::layer_normalization_forward(layerNormForwardPd(rows, D, eps, scale, shift));
        });
    });
    float* var = rstd.data<float>(); // the variance first, made 1 / sqrt(var + eps) below
    const dnnl::memory::desc md = plainDesc({rows, D}), sd = plainDesc({rows}), pd = plainDesc({D});
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, wrap(md, x.data<float>())},
                                               {DNNL_ARG_DST, wrap(md, y.data<float>())},
                                               {DNNL_ARG_MEAN, wrap(sd, mean.data<float>())},
                                               {DNNL_ARG_VARIANCE, wrap(sd, var)}};
    if (scale) args.emplace(DNNL_ARG_SCALE, wrap(pd, gamma.data<float>()));
    if (shift) args.emplace(DNNL_ARG_SHIFT, wrap(pd, beta.data<float>()));
    checkDnnl("layer_normalization_forward::execute", [&] { fwd.execute(stream(), args); });
#pragma omp simd
    for (int64_t r = 0; r < rows; ++r) var[r] = 1.0f / std::sqrt(var[r] + eps);
}

void layerNormBackward(float eps, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                       const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    // Always prop_kind backward (oneDNN's backward_data takes no scale): a scale when the
    // layer has a weight or its gradient is asked for, a shift when the bias's gradient
    // is (dx does not depend on the shift); gradients nobody asked for go to scratch.
    const bool scale = gamma.defined() || dgamma.defined(), shift = dbeta.defined();
    static thread_local PrimitiveCache<dnnl::layer_normalization_backward> cache;
    const auto& bwd = cache.get(keyOf(rows, D, eps, scale, shift), [&] {
        return checkDnnl("layer_normalization_backward", [&] {
            const dnnl::layer_normalization_backward::desc d(dnnl::prop_kind::backward, plainDesc({rows, D}),
                                                             plainDesc({rows, D}), plainDesc({rows}), eps,
                                                             flagsOf(scale, shift));
            return dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(
                d, engine(), layerNormForwardPd(rows, D, eps, scale, shift)));
        });
    });
    static thread_local std::vector<float> var, ones, zeros, scratch;
    var.resize(static_cast<size_t>(rows));
    const float* rs = rstd.data<float>();
#pragma omp simd
    for (int64_t r = 0; r < rows; ++r) var[static_cast<size_t>(r)] = 1.0f / (rs[r] * rs[r]) - eps;
    const dnnl::memory::desc md = plainDesc({rows, D}), sd = plainDesc({rows}), pd = plainDesc({D});
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, wrap(md, x.data<float>())},
                                               {DNNL_ARG_DIFF_DST, wrap(md, dy.data<float>())},
                                               {DNNL_ARG_MEAN, wrap(sd, mean.data<float>())},
                                               {DNNL_ARG_VARIANCE, wrap(sd, var.data())},
                                               {DNNL_ARG_DIFF_SRC, wrap(md, dx.data<float>())}};
    if (scale) {
        if (!gamma.defined()) ones.assign(static_cast<size_t>(D), 1.0f); // no weight: the forward's scale was 1
        args.emplace(DNNL_ARG_SCALE, wrap(pd, gamma.defined() ? gamma.data<float>() : ones.data()));
        if (!dgamma.defined()) scratch.resize(static_cast<size_t>(D));
        args.emplace(DNNL_ARG_DIFF_SCALE, wrap(pd, dgamma.defined() ? dgamma.data<float>() : scratch.data()));
    }
    if (shift) { // the primitive takes the shift as an input, though dx does not depend on it
        zeros.assign(static_cast<size_t>(D), 0.0f);
        args.emplace(DNNL_ARG_SHIFT, wrap(pd, zeros.data()));
        args.emplace(DNNL_ARG_DIFF_SHIFT, wrap(pd, dbeta.data<float>()));
    }
    checkDnnl("layer_normalization_backward::execute", [&] { bwd.execute(stream(), args); });
}

} // namespace

void CpuBackend::rowNormForward(const RowNormParams& p, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd) {
    const RowGeometry g = geometryOf("rowNormForward", p, x, gamma, beta);
    cpu_util::requireSameNumel("rowNormForward", x, y);
    if (onDnnl(p) && g.rows > 0 && g.D > 0 && y.isPlain() && y.dtype() == DType::float32) {
        return layerNormForward(p.eps, x, gamma, beta, y.reshape(x.shape()), mean, rstd);
    }
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
    const int64_t D = g.D, channels = g.groups * g.chunks;
    const float invD = 1.0f / static_cast<float>(D);
    for (const Tensor* t : {&dgamma, &dbeta}) {
        if (t->defined() && t->numel() != channels) {
            throw ShapeError("CpuBackend::rowNormBackward: dgamma and dbeta need " + std::to_string(channels) +
                             " values, got " + t->shape().str());
        }
    }
    if (onDnnl(p) && g.rows > 0 && g.D > 0 && dx.isPlain() && dx.dtype() == DType::float32) {
        return layerNormBackward(p.eps, x, dyPlain.reshape(x.shape()), gamma, mean, rstd, dx.reshape(x.shape()), dgamma,
                                 dbeta);
    }
    float* dgs = dgamma.defined() ? dgamma.data<float>() : nullptr;
    float* dbs = dbeta.defined() ? dbeta.data<float>() : nullptr;
    // The parameter sums, per thread in the pass that computes dx: [threads][2][channels].
    const bool sums = dgs || dbs;
    const bool parallel = g.rows * D > kParallelMin;
    const int threads = parallel ? omp_get_max_threads() : 1;
    std::vector<float> partial(sums ? static_cast<size_t>(threads) * 2 * static_cast<size_t>(channels) : 0, 0.0f);
#pragma omp parallel num_threads(threads) if (parallel)
    {
        float* pg = sums ? partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * channels : nullptr;
        float* pb = sums ? pg + channels : nullptr;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < g.rows; ++r) {
            const float* xr = xs + r * D;
            const float* dyr = dys + r * D;
            float* dxr = dxs + r * D;
            const float mu = means[r], rs = rstds[r];
            const int64_t base = (r % g.groups) * g.chunks;
            float s1 = 0.0f, s2 = 0.0f; // sums of dxhat = dy gamma and of dxhat * xhat
            if (g.inner == 1) {         // gamma per value
#pragma omp simd reduction(+ : s1, s2)
                for (int64_t d = 0; d < D; ++d) {
                    const float dxh = dyr[d] * (gs ? gs[base + d] : 1.0f);
                    s1 += dxh;
                    s2 += dxh * (xr[d] - mu) * rs;
                }
            } else { // gamma per chunk of `inner` values
                for (int64_t j = 0; j < g.chunks; ++j) {
                    const float gj = gs ? gs[base + j] : 1.0f;
                    const float* xc = xr + j * g.inner;
                    const float* dyc = dyr + j * g.inner;
                    float c1 = 0.0f, c2 = 0.0f;
#pragma omp simd reduction(+ : c1, c2)
                    for (int64_t k = 0; k < g.inner; ++k) {
                        c1 += dyc[k];
                        c2 += dyc[k] * (xc[k] - mu);
                    }
                    s1 += gj * c1;
                    s2 += gj * c2 * rs;
                    if (sums) pg[base + j] += c2 * rs, pb[base + j] += c1;
                }
            }
            const float m1 = p.subtractMean ? s1 * invD : 0.0f, m2 = s2 * invD;
            if (g.inner == 1) {
                if (sums) {
#pragma omp simd
                    for (int64_t d = 0; d < D; ++d) {
                        const float xhat = (xr[d] - mu) * rs;
                        dxr[d] = rs * (dyr[d] * (gs ? gs[base + d] : 1.0f) - m1 - xhat * m2);
                        pg[base + d] += dyr[d] * xhat;
                        pb[base + d] += dyr[d];
                    }
                } else {
#pragma omp simd
                    for (int64_t d = 0; d < D; ++d) {
                        const float xhat = (xr[d] - mu) * rs;
                        dxr[d] = rs * (dyr[d] * (gs ? gs[base + d] : 1.0f) - m1 - xhat * m2);
                    }
                }
            } else {
                for (int64_t j = 0; j < g.chunks; ++j) {
                    const float gj = gs ? gs[base + j] : 1.0f;
                    const float* xc = xr + j * g.inner;
                    const float* dyc = dyr + j * g.inner;
                    float* dxc = dxr + j * g.inner;
#pragma omp simd
                    for (int64_t k = 0; k < g.inner; ++k) {
                        dxc[k] = rs * (dyc[k] * gj - m1 - (xc[k] - mu) * rs * m2);
                    }
                }
            }
        }
    }
    if (!sums) return;
    for (int64_t c = 0; c < channels; ++c) {
        float sg = 0.0f, sb = 0.0f;
        for (int t = 0; t < threads; ++t) {
            sg += partial[static_cast<size_t>(t) * 2 * channels + c];
            sb += partial[static_cast<size_t>(t) * 2 * channels + channels + c];
        }
        if (dgs) dgs[c] = sg;
        if (dbs) dbs[c] = sb;
    }
}

} // namespace tessera
