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
    if ((x.dtype() != DType::float32 && x.dtype() != DType::bfloat16) || !x.isPlain()) {
        throw BackendError(std::string("CpuBackend::") + op + ": x must be plain float32 or bfloat16, got " +
                           str(x.dtype()));
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

// The data's type (float32 or bfloat16: x and y, or x, dy and dx, share it) is part of every key.
std::vector<int64_t> keyOf(int64_t rows, int64_t D, float eps, bool scale, bool shift, DType type) {
    int32_t bits = 0;
    std::memcpy(&bits, &eps, sizeof bits);
    return {rows, D, bits, scale, shift, static_cast<int64_t>(type)};
}

const dnnl::layer_normalization_forward::primitive_desc& layerNormForwardPd(int64_t rows, int64_t D, float eps,
                                                                            bool scale, bool shift, DType type) {
    static thread_local PrimitiveCache<dnnl::layer_normalization_forward::primitive_desc> cache;
    return cache.get(keyOf(rows, D, eps, scale, shift, type), [&] {
        return checkDnnl("layer_normalization_forward", [&] {
            const dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_training,
                                                            plainDesc({rows, D}, dnnlType(type)), plainDesc({rows}),
                                                            eps, flagsOf(scale, shift));
            return dnnl::layer_normalization_forward::primitive_desc(d, engine());
        });
    });
}

void layerNormForward(float eps, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                      const Tensor& mean, const Tensor& rstd) {
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    const bool scale = gamma.defined(), shift = beta.defined();
    const DType type = x.dtype();
    static thread_local PrimitiveCache<dnnl::layer_normalization_forward> cache;
    const auto& fwd = cache.get(keyOf(rows, D, eps, scale, shift, type), [&] {
        return checkDnnl("layer_normalization_forward", [&] {
            return dnnl::layer_normalization_forward(layerNormForwardPd(rows, D, eps, scale, shift, type));
        });
    });
    float* var = rstd.data<float>(); // the variance first, made 1 / sqrt(var + eps) below
    const dnnl::memory::desc md = plainDesc({rows, D}, dnnlType(type)), sd = plainDesc({rows}), pd = plainDesc({D});
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, wrap(md, x.raw())},
                                               {DNNL_ARG_DST, wrap(md, y.raw())},
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
    const DType type = x.dtype();
    static thread_local PrimitiveCache<dnnl::layer_normalization_backward> cache;
    const auto& bwd = cache.get(keyOf(rows, D, eps, scale, shift, type), [&] {
        return checkDnnl("layer_normalization_backward", [&] {
            const dnnl::memory::desc data = plainDesc({rows, D}, dnnlType(type));
            const dnnl::layer_normalization_backward::desc d(dnnl::prop_kind::backward, data, data, plainDesc({rows}),
                                                             eps, flagsOf(scale, shift));
            return dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(
                d, engine(), layerNormForwardPd(rows, D, eps, scale, shift, type)));
        });
    });
    static thread_local std::vector<float> var, ones, zeros, scratch;
    var.resize(static_cast<size_t>(rows));
    const float* rs = rstd.data<float>();
#pragma omp simd
    for (int64_t r = 0; r < rows; ++r) var[static_cast<size_t>(r)] = 1.0f / (rs[r] * rs[r]) - eps;
    const dnnl::memory::desc md = plainDesc({rows, D}, dnnlType(type)), sd = plainDesc({rows}), pd = plainDesc({D});
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, wrap(md, x.raw())},
                                               {DNNL_ARG_DIFF_DST, wrap(md, dy.raw())},
                                               {DNNL_ARG_MEAN, wrap(sd, mean.data<float>())},
                                               {DNNL_ARG_VARIANCE, wrap(sd, var.data())},
                                               {DNNL_ARG_DIFF_SRC, wrap(md, dx.raw())}};
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

// Whether oneDNN's layer normalisation takes data of `type` here: float32 always, bfloat16
// where the CPU has bfloat16 kernels.
bool kernelsTake(DType type) { return type == DType::float32 || bfloat16Kernels(); }

// BackendError unless `t` is float32 or bfloat16.
void requireDataType(const char* op, const char* name, const Tensor& t) {
    if (t.dtype() != DType::float32 && t.dtype() != DType::bfloat16) {
        throw BackendError(std::string("CpuBackend::") + op + ": " + name + " is " + str(t.dtype()) +
                           ", expected float32 or bfloat16");
    }
}

// The generic loops, on float32 or bfloat16 data (each operand its own type; sums in float32).
inline float in(float v) { return v; }
inline float in(bfloat16 v) { return toFloat(v); }
template <class T> T out(float v);
template <> inline float out<float>(float v) { return v; }
template <> inline bfloat16 out<bfloat16>(float v) { return toBfloat16(v); }

// f(T{}) with T the element type of `t` (float32 or bfloat16).
template <class F> void withType(const Tensor& t, F&& f) {
    if (t.dtype() == DType::bfloat16) return f(bfloat16{});
    f(float{});
}

template <class TX, class TY>
void rowNormForwardLoop(const RowNormParams& p, const RowGeometry& g, const TX* xs, const float* gs, const float* bs,
                        TY* ys, float* means, float* rstds) {
    const int64_t D = g.D;
#pragma omp parallel for schedule(static) if (g.rows * D > kParallelMin)
    for (int64_t r = 0; r < g.rows; ++r) {
        const TX* xr = xs + r * D;
        TY* yr = ys + r * D;
        float mu = 0.0f;
        if (p.subtractMean) {
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t d = 0; d < D; ++d) sum += in(xr[d]);
            mu = sum / static_cast<float>(D);
        }
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t d = 0; d < D; ++d) sq += (in(xr[d]) - mu) * (in(xr[d]) - mu);
        const float rs = 1.0f / std::sqrt(sq / static_cast<float>(D) + p.eps);
        means[r] = mu;
        rstds[r] = rs;
        const int64_t base = (r % g.groups) * g.chunks; // the channel of the row's first value
        if (g.inner == 1) {
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) {
                yr[d] = out<TY>((in(xr[d]) - mu) * rs * (gs ? gs[base + d] : 1.0f) + (bs ? bs[base + d] : 0.0f));
            }
        } else {
            for (int64_t j = 0; j < g.chunks; ++j) {
                const float a = rs * (gs ? gs[base + j] : 1.0f), b = bs ? bs[base + j] : 0.0f;
                const TX* xc = xr + j * g.inner;
                TY* yc = yr + j * g.inner;
#pragma omp simd
                for (int64_t k = 0; k < g.inner; ++k) yc[k] = out<TY>((in(xc[k]) - mu) * a + b);
            }
        }
    }
}

template <class TX, class TD, class TDX>
void rowNormBackwardLoop(const RowNormParams& p, const RowGeometry& g, const TX* xs, const TD* dys, const float* gs,
                         const float* means, const float* rstds, TDX* dxs, float* dgs, float* dbs) {
    const int64_t D = g.D, channels = g.groups * g.chunks;
    const float invD = 1.0f / static_cast<float>(D);
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
            const TX* xr = xs + r * D;
            const TD* dyr = dys + r * D;
            TDX* dxr = dxs + r * D;
            const float mu = means[r], rs = rstds[r];
            const int64_t base = (r % g.groups) * g.chunks;
            float s1 = 0.0f, s2 = 0.0f; // sums of dxhat = dy gamma and of dxhat * xhat
            if (g.inner == 1) {         // gamma per value
#pragma omp simd reduction(+ : s1, s2)
                for (int64_t d = 0; d < D; ++d) {
                    const float dxh = in(dyr[d]) * (gs ? gs[base + d] : 1.0f);
                    s1 += dxh;
                    s2 += dxh * (in(xr[d]) - mu) * rs;
                }
            } else { // gamma per chunk of `inner` values
                for (int64_t j = 0; j < g.chunks; ++j) {
                    const float gj = gs ? gs[base + j] : 1.0f;
                    const TX* xc = xr + j * g.inner;
                    const TD* dyc = dyr + j * g.inner;
                    float c1 = 0.0f, c2 = 0.0f;
#pragma omp simd reduction(+ : c1, c2)
                    for (int64_t k = 0; k < g.inner; ++k) {
                        c1 += in(dyc[k]);
                        c2 += in(dyc[k]) * (in(xc[k]) - mu);
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
                        const float xhat = (in(xr[d]) - mu) * rs;
                        dxr[d] = out<TDX>(rs * (in(dyr[d]) * (gs ? gs[base + d] : 1.0f) - m1 - xhat * m2));
                        pg[base + d] += in(dyr[d]) * xhat;
                        pb[base + d] += in(dyr[d]);
                    }
                } else {
#pragma omp simd
                    for (int64_t d = 0; d < D; ++d) {
                        const float xhat = (in(xr[d]) - mu) * rs;
                        dxr[d] = out<TDX>(rs * (in(dyr[d]) * (gs ? gs[base + d] : 1.0f) - m1 - xhat * m2));
                    }
                }
            } else {
                for (int64_t j = 0; j < g.chunks; ++j) {
                    const float gj = gs ? gs[base + j] : 1.0f;
                    const TX* xc = xr + j * g.inner;
                    const TD* dyc = dyr + j * g.inner;
                    TDX* dxc = dxr + j * g.inner;
#pragma omp simd
                    for (int64_t k = 0; k < g.inner; ++k) {
                        dxc[k] = out<TDX>(rs * (in(dyc[k]) * gj - m1 - (in(xc[k]) - mu) * rs * m2));
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

} // namespace

// x and y float32 or bfloat16 (each its own): LayerNorm on oneDNN where they share a type
// oneDNN's kernels take (bfloat16 where the CPU has bfloat16 kernels), the generic loop
// otherwise.
void CpuBackend::rowNormForward(const RowNormParams& p, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd) {
    const RowGeometry g = geometryOf("rowNormForward", p, x, gamma, beta);
    cpu_util::requireSameNumel("rowNormForward", x, y);
    requireDataType("rowNormForward", "y", y);
    if (onDnnl(p) && g.rows > 0 && g.D > 0 && y.isPlain() && y.dtype() == x.dtype() && kernelsTake(x.dtype())) {
        return layerNormForward(p.eps, x, gamma, beta, y.reshape(x.shape()), mean, rstd);
    }
    if (!y.isPlain()) throw BackendError("CpuBackend::rowNormForward: y must be plain");
    const float* gs = gamma.defined() ? gamma.data<float>() : nullptr;
    const float* bs = beta.defined() ? beta.data<float>() : nullptr;
    withType(x, [&](auto tx) {
        withType(y, [&](auto ty) {
            using TX = decltype(tx);
            using TY = decltype(ty);
            rowNormForwardLoop(p, g, x.data<TX>(), gs, bs, y.data<TY>(), mean.data<float>(), rstd.data<float>());
        });
    });
}

void CpuBackend::rowNormBackward(const RowNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                 const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                                 const Tensor& dbeta) {
    const RowGeometry g = geometryOf("rowNormBackward", p, x, gamma, Tensor());
    cpu_util::requireSameNumel("rowNormBackward", x, dy);
    cpu_util::requireSameNumel("rowNormBackward", x, dx);
    requireDataType("rowNormBackward", "dy", dy);
    requireDataType("rowNormBackward", "dx", dx);
    const int64_t channels = g.groups * g.chunks;
    for (const Tensor* t : {&dgamma, &dbeta}) {
        if (t->defined() && t->numel() != channels) {
            throw ShapeError("CpuBackend::rowNormBackward: dgamma and dbeta need " + std::to_string(channels) +
                             " values, got " + t->shape().str());
        }
    }
    const Tensor dyPlain = dy.plain();
    if (onDnnl(p) && g.rows > 0 && g.D > 0 && dx.isPlain() && dx.dtype() == x.dtype() && dy.dtype() == x.dtype() &&
        kernelsTake(x.dtype())) {
        return layerNormBackward(p.eps, x, dyPlain.reshape(x.shape()), gamma, mean, rstd, dx.reshape(x.shape()), dgamma,
                                 dbeta);
    }
    if (!dx.isPlain()) throw BackendError("CpuBackend::rowNormBackward: dx must be plain");
    float* dgs = dgamma.defined() ? dgamma.data<float>() : nullptr;
    float* dbs = dbeta.defined() ? dbeta.data<float>() : nullptr;
    const float* gs = gamma.defined() ? gamma.data<float>() : nullptr;
    withType(x, [&](auto tx) {
        withType(dyPlain, [&](auto td) {
            withType(dx, [&](auto tdx) {
                using TX = decltype(tx);
                using TD = decltype(td);
                using TDX = decltype(tdx);
                rowNormBackwardLoop(p, g, x.data<TX>(), dyPlain.data<TD>(), gs, mean.data<float>(), rstd.data<float>(),
                                    dx.data<TDX>(), dgs, dbs);
            });
        });
    });
}

} // namespace tessera
