// Resampling (oneDNN's, cached per shape, or a loop for what oneDNN computes otherwise) and
// PReLU (oneDNN prelu).
#include <algorithm>

#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;

namespace {

dnnl::algorithm resampleAlg(ResampleMode mode) {
    return mode == ResampleMode::linear ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest;
}

std::vector<int64_t> pairKey(int64_t tag, const Shape& a, const Shape& b) {
    std::vector<int64_t> k = {tag, static_cast<int64_t>(a.rank())};
    k.insert(k.end(), a.dims().begin(), a.dims().end());
    k.insert(k.end(), b.dims().begin(), b.dims().end());
    return k;
}

struct ResampleEntry {
    dnnl::resampling_forward::primitive_desc pd;
    dnnl::resampling_forward fwd;
};

const ResampleEntry& resampleForwardEntry(ResampleMode mode, const Shape& x, const Shape& y) {
    static thread_local PrimitiveCache<ResampleEntry> cache;
    return cache.get(pairKey(static_cast<int64_t>(mode), x, y), [&] {
        return checkDnnl("resampling_forward", [&] {
            dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_training, resampleAlg(mode), plainDesc(x.dims()),
                                             plainDesc(y.dims()));
            dnnl::resampling_forward::primitive_desc pd(d, engine());
            return ResampleEntry{pd, dnnl::resampling_forward(pd)};
        });
    });
}

// oneDNN computes linear with half-pixel centres for any sizes, and nearest as
// round((o + 0.5) * in / out - 0.5), which is floor(o * in / out) (and nearestExact's
// floor((o + 0.5) * in / out)) only where every out is a whole multiple of its in: the rest
// is the loop below, as is cubic, which oneDNN does not have.
bool dnnlResamples(const ResampleParams& p, const Shape& in, const Shape& out) {
    if (p.mode == ResampleMode::cubic) return false;
    if (p.mode == ResampleMode::linear) return !p.alignCorners;
    for (size_t d = 2; d < in.rank(); ++d) {
        const auto k = static_cast<int64_t>(d);
        if (out[k] % in[k] != 0) return false;
    }
    return true;
}

// The taps of every output position along each of 3 dims (fewer spatial dims lead with 1s,
// read by one tap): up to 4 per position, those of weight 0 left out.
struct Taps3 {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
    std::vector<int> count[3];
    std::vector<int64_t> at[3]; // 4 per output position
    std::vector<float> w[3];

    Taps3(const ResampleParams& p, const Shape& x, const Shape& y) {
        const size_t sp = x.rank() - 2;
        for (size_t d = 0; d < sp; ++d) {
            in[3 - sp + d] = x[static_cast<int64_t>(2 + d)];
            out[3 - sp + d] = y[static_cast<int64_t>(2 + d)];
        }
        for (int d = 0; d < 3; ++d) {
            const bool leading = d < static_cast<int>(3 - sp);
            for (int64_t o = 0; o < out[d]; ++o) {
                int64_t a[4] = {0, 0, 0, 0};
                float wt[4] = {1.0f, 0.0f, 0.0f, 0.0f};
                const int n = leading ? 1 : element::resampleTaps(p, o, out[d], in[d], a, wt);
                int kept = 0;
                for (int k = 0; k < n; ++k) {
                    if (wt[k] == 0.0f) continue;
                    at[d].push_back(a[k]);
                    w[d].push_back(wt[k]);
                    ++kept;
                }
                for (int k = kept; k < 4; ++k) at[d].push_back(0), w[d].push_back(0.0f);
                count[d].push_back(kept);
            }
        }
    }

    int64_t inPlane() const { return in[0] * in[1] * in[2]; }
    int64_t outPlane() const { return out[0] * out[1] * out[2]; }

    // f(input flat index in the plane, weight) for every tap of output `o` (flat in the plane).
    template <class F> void forEach(int64_t o, F&& f) const {
        const int64_t pos[3] = {o / (out[1] * out[2]), o / out[2] % out[1], o % out[2]};
        const int64_t *a = &at[0][static_cast<size_t>(pos[0] * 4)], *b = &at[1][static_cast<size_t>(pos[1] * 4)],
                      *c = &at[2][static_cast<size_t>(pos[2] * 4)];
        const float *wa = &w[0][static_cast<size_t>(pos[0] * 4)], *wb = &w[1][static_cast<size_t>(pos[1] * 4)],
                    *wc = &w[2][static_cast<size_t>(pos[2] * 4)];
        const int na = count[0][static_cast<size_t>(pos[0])], nb = count[1][static_cast<size_t>(pos[1])],
                  nc = count[2][static_cast<size_t>(pos[2])];
        for (int i = 0; i < na; ++i)
            for (int j = 0; j < nb; ++j)
                for (int k = 0; k < nc; ++k) {
                    const float wt = wa[i] * wb[j] * wc[k];
                    if (wt == 0.0f) continue;
                    f((a[i] * in[1] + b[j]) * in[2] + c[k], wt);
                }
    }
};

void requireResamplable(const char* op, const Tensor& x, const Tensor& y) {
    const Shape &a = x.shape(), &b = y.shape();
    if (a.rank() < 3 || a.rank() > 5 || b.rank() != a.rank() || a[0] != b[0] || a[1] != b[1]) {
        throw ShapeError(std::string("CpuBackend::") + op +
                         ": expected [N, C, *in] and [N, C, *out] with 1 to 3 "
                         "spatial dims, got " +
                         a.str() + " and " + b.str());
    }
}

} // namespace

// x: [N, C, *in] -> y: [N, C, *out]
void CpuBackend::resampleForward(const ResampleParams& p, const Tensor& x, const Tensor& y) {
    requireResamplable("resampleForward", x, y);
    if (!dnnlResamples(p, x.shape(), y.shape())) {
        const Taps3 t(p, x.shape(), y.shape());
        const int64_t planes = x.shape()[0] * x.shape()[1], inPlane = t.inPlane(), outPlane = t.outPlane();
        const float* px = x.data<float>();
        float* py = y.data<float>();
#pragma omp parallel for if (planes * outPlane > (1 << 15))
        for (int64_t n = 0; n < planes; ++n) {
            const float* plane = px + n * inPlane;
            float* out = py + n * outPlane;
            for (int64_t o = 0; o < outPlane; ++o) {
                float acc = 0.0f;
                t.forEach(o, [&](int64_t j, float wt) { acc += wt * plane[j]; });
                out[o] = acc;
            }
        }
        return;
    }
    const ResampleEntry& e = resampleForwardEntry(p.mode, x.shape(), y.shape());
    checkDnnl("resampling_forward::execute", [&] {
        e.fwd.execute(stream(), {{DNNL_ARG_SRC, memOf(plainDesc(x.shape().dims()), x)},
                                 {DNNL_ARG_DST, memOf(plainDesc(y.shape().dims()), y)}});
    });
}

// dy: [N, C, *out] -> dx: [N, C, *in]
void CpuBackend::resampleBackward(const ResampleParams& p, const Tensor& dy, const Tensor& dx) {
    requireResamplable("resampleBackward", dx, dy);
    if (!dnnlResamples(p, dx.shape(), dy.shape())) {
        const Taps3 t(p, dx.shape(), dy.shape());
        const int64_t planes = dx.shape()[0] * dx.shape()[1], inPlane = t.inPlane(), outPlane = t.outPlane();
        const float* pdy = dy.data<float>();
        float* pdx = dx.data<float>();
#pragma omp parallel for if (planes * outPlane > (1 << 15))
        for (int64_t n = 0; n < planes; ++n) { // each plane's sums are its own: no races
            float* plane = pdx + n * inPlane;
            const float* g = pdy + n * outPlane;
            std::fill(plane, plane + inPlane, 0.0f);
            for (int64_t o = 0; o < outPlane; ++o) t.forEach(o, [&](int64_t j, float wt) { plane[j] += wt * g[o]; });
        }
        return;
    }
    const ResampleMode mode = p.mode;
    static thread_local PrimitiveCache<dnnl::resampling_backward> cache;
    const auto& bwd = cache.get(pairKey(static_cast<int64_t>(mode), dx.shape(), dy.shape()), [&] {
        const ResampleEntry& f = resampleForwardEntry(mode, dx.shape(), dy.shape());
        return checkDnnl("resampling_backward", [&] {
            dnnl::resampling_backward::desc d(resampleAlg(mode), plainDesc(dx.shape().dims()),
                                              plainDesc(dy.shape().dims()));
            return dnnl::resampling_backward(dnnl::resampling_backward::primitive_desc(d, engine(), f.pd));
        });
    });
    checkDnnl("resampling_backward::execute", [&] {
        bwd.execute(stream(), {{DNNL_ARG_DIFF_DST, memOf(plainDesc(dy.shape().dims()), dy)},
                               {DNNL_ARG_DIFF_SRC, memOf(plainDesc(dx.shape().dims()), dx)}});
    });
}

namespace {

// The slopes as a tensor broadcast over x: [1, C, 1, ...] or [1, 1, ...].
dnnl::memory::desc slopeDesc(const Tensor& x, const Tensor& slopes) {
    std::vector<int64_t> d(x.shape().rank(), 1);
    if (slopes.numel() > 1) d[1] = slopes.numel();
    return plainDesc(d);
}

struct PreluEntry {
    dnnl::prelu_forward::primitive_desc pd;
    dnnl::prelu_forward fwd;
};

const PreluEntry& preluForwardEntry(const Tensor& x, const Tensor& slopes) {
    static thread_local PrimitiveCache<PreluEntry> cache;
    return cache.get(pairKey(0, x.shape(), slopes.shape()), [&] {
        return checkDnnl("prelu_forward", [&] {
            dnnl::prelu_forward::desc d(dnnl::prop_kind::forward_training, plainDesc(x.shape().dims()),
                                        slopeDesc(x, slopes));
            dnnl::prelu_forward::primitive_desc pd(d, engine());
            return PreluEntry{pd, dnnl::prelu_forward(pd)};
        });
    });
}

} // namespace

// x: [N, C, ...], slopes: [C] or [1] -> y
void CpuBackend::preluForward(const Tensor& x, const Tensor& slopes, const Tensor& y) {
    const PreluEntry& e = preluForwardEntry(x, slopes);
    const auto md = plainDesc(x.shape().dims());
    checkDnnl("prelu_forward::execute", [&] {
        e.fwd.execute(stream(), {{DNNL_ARG_SRC, memOf(md, x)},
                                 {DNNL_ARG_WEIGHTS, memOf(slopeDesc(x, slopes), slopes)},
                                 {DNNL_ARG_DST, memOf(md, y)}});
    });
}

// -> dx, dslopes = scale * dL/dslopes + momentum * dslopes
void CpuBackend::preluBackward(const Tensor& x, const Tensor& slopes, const Tensor& dy, const Tensor& dx, float scale,
                               float momentum, const Tensor& dslopes) {
    static thread_local PrimitiveCache<dnnl::prelu_backward> cache;
    const auto& bwd = cache.get(pairKey(0, x.shape(), slopes.shape()), [&] {
        const PreluEntry& f = preluForwardEntry(x, slopes);
        return checkDnnl("prelu_backward", [&] {
            const auto md = plainDesc(x.shape().dims());
            const auto wd = slopeDesc(x, slopes);
            dnnl::prelu_backward::desc d(md, wd, md, wd);
            return dnnl::prelu_backward(dnnl::prelu_backward::primitive_desc(d, engine(), f.pd));
        });
    });
    const auto md = plainDesc(x.shape().dims());
    Tensor fresh = Tensor::empty(slopes.shape(), DType::float32, slopes.device());
    checkDnnl("prelu_backward::execute", [&] {
        bwd.execute(stream(), {{DNNL_ARG_SRC, memOf(md, x)},
                               {DNNL_ARG_WEIGHTS, memOf(slopeDesc(x, slopes), slopes)},
                               {DNNL_ARG_DIFF_DST, memOf(md, dy)},
                               {DNNL_ARG_DIFF_SRC, memOf(md, dx)},
                               {DNNL_ARG_DIFF_WEIGHTS, memOf(slopeDesc(x, slopes), fresh)}});
    });
    axpby(scale, fresh, momentum, dslopes);
}

} // namespace tessera
