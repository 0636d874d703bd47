// Resampling (a separable loop, one pass per resized dim) and PReLU (oneDNN prelu).
#include <algorithm>
#include <vector>

#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;

namespace {

std::vector<int64_t> pairKey(int64_t tag, const Shape& a, const Shape& b) {
    std::vector<int64_t> k = {tag, static_cast<int64_t>(a.rank())};
    k.insert(k.end(), a.dims().begin(), a.dims().end());
    k.insert(k.end(), b.dims().begin(), b.dims().end());
    return k;
}

// The taps of every output position along one dim: up to 4 per position (resampleTaps),
// those of weight 0 left out.
struct AxisTaps {
    int64_t in = 1, out = 1;
    bool identity = true; // out == in, each output its own input with weight 1
    bool unit = true;     // each output one input with weight 1 (nearest): single[o]
    std::vector<int> count;
    std::vector<int64_t> single;
    std::vector<int64_t> at; // 4 per output position
    std::vector<float> w;

    AxisTaps() = default;
    AxisTaps(const ResampleParams& p, int64_t inSize, int64_t outSize) : in(inSize), out(outSize) {
        identity = in == out;
        for (int64_t o = 0; o < out; ++o) {
            int64_t a[4] = {0, 0, 0, 0};
            float wt[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const int n = element::resampleTaps(p, o, out, in, a, wt);
            int kept = 0;
            for (int k = 0; k < n; ++k) {
                if (wt[k] == 0.0f) continue;
                at.push_back(a[k]);
                w.push_back(wt[k]);
                ++kept;
            }
            for (int k = kept; k < 4; ++k) at.push_back(0), w.push_back(0.0f);
            count.push_back(kept);
            single.push_back(at[static_cast<size_t>(o * 4)]);
            if (kept != 1 || w[static_cast<size_t>(o * 4)] != 1.0f) unit = false;
            if (kept != 1 || a[0] != o || w[static_cast<size_t>(o * 4)] != 1.0f) identity = false;
        }
    }
};

// Resampling is separable: the last dim, then each dim before it, one pass per dim that
// changes. Each pass reads `outer` blocks of [in, inner] and writes `outer` blocks of
// [out, inner]; along the last dim (inner 1) it gathers within rows, along the others it
// combines whole rows (vectorised).
void forwardLast(const AxisTaps& t, const float* src, float* dst, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* s = src + r * t.in;
        float* d = dst + r * t.out;
        if (t.unit) {
            const int64_t* a = t.single.data();
            for (int64_t o = 0; o < t.out; ++o) d[o] = s[a[o]];
            continue;
        }
        for (int64_t o = 0; o < t.out; ++o) {
            const int64_t* a = &t.at[static_cast<size_t>(o * 4)];
            const float* wt = &t.w[static_cast<size_t>(o * 4)];
            float acc = 0.0f;
            for (int k = 0; k < t.count[static_cast<size_t>(o)]; ++k) acc += wt[k] * s[a[k]];
            d[o] = acc;
        }
    }
}

void forwardMiddle(const AxisTaps& t, const float* src, float* dst, int64_t outer, int64_t inner) {
    for (int64_t b = 0; b < outer; ++b) {
        const float* s = src + b * t.in * inner;
        float* d = dst + b * t.out * inner;
        for (int64_t o = 0; o < t.out; ++o, d += inner) {
            const int64_t* a = &t.at[static_cast<size_t>(o * 4)];
            const float* wt = &t.w[static_cast<size_t>(o * 4)];
            const int n = t.count[static_cast<size_t>(o)];
            const float *s0 = s + a[0] * inner, w0 = wt[0];
            if (n == 1 && w0 == 1.0f) {
                std::copy(s0, s0 + inner, d);
                continue;
            }
            if (n == 2) {
                const float *s1 = s + a[1] * inner, w1 = wt[1];
                for (int64_t i = 0; i < inner; ++i) d[i] = w0 * s0[i] + w1 * s1[i];
                continue;
            }
            for (int64_t i = 0; i < inner; ++i) d[i] = w0 * s0[i];
            for (int k = 1; k < n; ++k) {
                const float *sk = s + a[k] * inner, wk = wt[k];
                for (int64_t i = 0; i < inner; ++i) d[i] += wk * sk[i];
            }
        }
    }
}

// The adjoints: each output's gradient added to the inputs it read, with its weights.
void backwardLast(const AxisTaps& t, const float* src, float* dst, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* g = src + r * t.out;
        float* d = dst + r * t.in;
        std::fill(d, d + t.in, 0.0f);
        if (t.unit) {
            const int64_t* a = t.single.data();
            for (int64_t o = 0; o < t.out; ++o) d[a[o]] += g[o];
            continue;
        }
        for (int64_t o = 0; o < t.out; ++o) {
            const int64_t* a = &t.at[static_cast<size_t>(o * 4)];
            const float* wt = &t.w[static_cast<size_t>(o * 4)];
            for (int k = 0; k < t.count[static_cast<size_t>(o)]; ++k) d[a[k]] += wt[k] * g[o];
        }
    }
}

void backwardMiddle(const AxisTaps& t, const float* src, float* dst, int64_t outer, int64_t inner) {
    for (int64_t b = 0; b < outer; ++b) {
        const float* g = src + b * t.out * inner;
        float* d = dst + b * t.in * inner;
        std::fill(d, d + t.in * inner, 0.0f);
        for (int64_t o = 0; o < t.out; ++o, g += inner) {
            const int64_t* a = &t.at[static_cast<size_t>(o * 4)];
            const float* wt = &t.w[static_cast<size_t>(o * 4)];
            for (int k = 0; k < t.count[static_cast<size_t>(o)]; ++k) {
                float* dk = d + a[k] * inner;
                const float wk = wt[k];
                for (int64_t i = 0; i < inner; ++i) dk[i] += wk * g[i];
            }
        }
    }
}

// One plane [*in] -> [*out] (or its adjoint), through the changing dims' passes.
class Separable {
public:
    Separable(const ResampleParams& p, const Shape& x, const Shape& y) {
        for (size_t d = 2; d < x.rank(); ++d) {
            const auto k = static_cast<int64_t>(d);
            axes_.emplace_back(p, x[k], y[k]);
        }
        inPlane_ = outPlane_ = 1;
        for (const AxisTaps& a : axes_) inPlane_ *= a.in, outPlane_ *= a.out;
        // Scratch: the largest intermediate, dims [0, d) at input size and [d, end) at output's.
        for (size_t d = 0; d < axes_.size(); ++d) scratch_ = std::max(scratch_, mixedSize(d));
    }

    int64_t inPlane() const { return inPlane_; }
    int64_t outPlane() const { return outPlane_; }
    int64_t scratch() const { return scratch_; }

    // x plane -> y plane; `a` and `b` hold scratch() floats each.
    void forward(const float* x, float* y, float* a, float* b) const {
        const float* src = x;
        const int last = lastChanging();
        if (last < 0) {
            std::copy(x, x + inPlane_, y);
            return;
        }
        for (int d = static_cast<int>(axes_.size()) - 1; d >= 0; --d) {
            const AxisTaps& t = axes_[static_cast<size_t>(d)];
            if (t.identity) continue;
            float* dst = d == last ? y : (src == a ? b : a);
            const int64_t outer = sizeBefore(d, true), inner = sizeAfter(d, false);
            if (inner == 1) {
                forwardLast(t, src, dst, outer);
            } else {
                forwardMiddle(t, src, dst, outer, inner);
            }
            src = dst;
        }
    }

    // dy plane -> dx plane, the passes in reverse order.
    void backward(const float* dy, float* dx, float* a, float* b) const {
        const float* src = dy;
        if (lastChanging() < 0) {
            std::copy(dy, dy + outPlane_, dx);
            return;
        }
        for (int d = 0; d < static_cast<int>(axes_.size()); ++d) {
            const AxisTaps& t = axes_[static_cast<size_t>(d)];
            if (t.identity) continue;
            float* dst = lastBackward(d) ? dx : (src == a ? b : a);
            const int64_t outer = sizeBefore(d, true), inner = sizeAfter(d, false);
            if (inner == 1) {
                backwardLast(t, src, dst, outer);
            } else {
                backwardMiddle(t, src, dst, outer, inner);
            }
            src = dst;
        }
    }

private:
    // The first changing dim: the forward's last pass (-1: none changes).
    int lastChanging() const {
        for (size_t d = 0; d < axes_.size(); ++d)
            if (!axes_[d].identity) return static_cast<int>(d);
        return -1;
    }
    bool lastBackward(int d) const {
        for (size_t e = static_cast<size_t>(d) + 1; e < axes_.size(); ++e)
            if (!axes_[e].identity) return false;
        return true;
    }
    // The forward pass along dim d sees dims before d at input size, dims after at output size.
    int64_t sizeBefore(int d, bool input) const {
        int64_t n = 1;
        for (int e = 0; e < d; ++e) n *= input ? axes_[static_cast<size_t>(e)].in : axes_[static_cast<size_t>(e)].out;
        return n;
    }
    int64_t sizeAfter(int d, bool input) const {
        int64_t n = 1;
        for (size_t e = static_cast<size_t>(d) + 1; e < axes_.size(); ++e) n *= input ? axes_[e].in : axes_[e].out;
        return n;
    }
    int64_t mixedSize(size_t d) const {
        return sizeBefore(static_cast<int>(d), true) * sizeAfter(static_cast<int>(d) - 1, false);
    }

    std::vector<AxisTaps> axes_;
    int64_t inPlane_ = 1, outPlane_ = 1, scratch_ = 0;
};

const Separable& separableFor(const ResampleParams& p, const Shape& x, const Shape& y) {
    static thread_local PrimitiveCache<Separable> cache;
    std::vector<int64_t> key = pairKey(static_cast<int64_t>(p.mode) * 2 + (p.alignCorners ? 1 : 0), x, y);
    key.erase(key.begin() + 2, key.begin() + 4); // N and C of x: the plane does not depend on them
    return cache.get(key, [&] { return Separable(p, x, y); });
}

void requireResamplable(const char* op, const Tensor& x, const Tensor& y) {
    const Shape &a = x.shape(), &b = y.shape();
    if (a.rank() < 3 || a.rank() > 5 || b.rank() != a.rank() || a[0] != b[0] || a[1] != b[1]) {
        throw ShapeError(std::string("CpuBackend::") + op +
                         ": expected [N, C, *in] and [N, C, *out] with 1 to 3 "
                         "spatial dims, got " +
                         a.str() + " and " + b.str());
    }
}

// f(plane index, src plane, dst plane, scratch a, scratch b) over every plane, in parallel.
template <class F> void eachPlane(int64_t planes, int64_t work, int64_t scratch, F&& f) {
#pragma omp parallel if (work > (1 << 15))
    {
        std::vector<float> a(static_cast<size_t>(scratch)), b(static_cast<size_t>(scratch));
#pragma omp for schedule(static)
        for (int64_t n = 0; n < planes; ++n) f(n, a.data(), b.data());
    }
}

} // namespace

// x: [N, C, *in] -> y: [N, C, *out], plane by plane, one pass per resized dim (the last dim
// first). oneDNN's resampling computes nearest and linear only, and its backward ran at a
// fifth of this loop's speed (tools/bench/resample.py).
void CpuBackend::resampleForward(const ResampleParams& p, const Tensor& x, const Tensor& y) {
    requireResamplable("resampleForward", x, y);
    const Separable& s = separableFor(p, x.shape(), y.shape());
    const int64_t planes = x.shape()[0] * x.shape()[1];
    const float* px = x.data<float>();
    float* py = y.data<float>();
    eachPlane(planes, planes * s.outPlane(), s.scratch(),
              [&](int64_t n, float* a, float* b) { s.forward(px + n * s.inPlane(), py + n * s.outPlane(), a, b); });
}

// dy: [N, C, *out] -> dx: [N, C, *in]
void CpuBackend::resampleBackward(const ResampleParams& p, const Tensor& dy, const Tensor& dx) {
    requireResamplable("resampleBackward", dx, dy);
    const Separable& s = separableFor(p, dx.shape(), dy.shape());
    const int64_t planes = dx.shape()[0] * dx.shape()[1];
    const float* pdy = dy.data<float>();
    float* pdx = dx.data<float>();
    eachPlane(planes, planes * s.outPlane(), s.scratch(),
              [&](int64_t n, float* a, float* b) { s.backward(pdy + n * s.outPlane(), pdx + n * s.inPlane(), a, b); });
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
