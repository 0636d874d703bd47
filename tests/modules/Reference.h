#pragma once
// Direct, loop-by-loop reference implementations the layer tests compare against. Slow
// and obvious on purpose; every spatial op is written once for 3 dims, lower ranks get
// leading unit dims.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/Tensor.h"

namespace tessera::reference {

// A [N, C, *spatial] shape as N, C and three spatial dims.
struct Dims5 {
    int64_t n, c;
    std::array<int64_t, 3> s;
    int64_t plane() const { return s[0] * s[1] * s[2]; }
};

inline Dims5 dims5(const Shape& sh) {
    Dims5 d{sh[0], sh[1], {1, 1, 1}};
    const size_t sp = sh.rank() - 2;
    for (size_t i = 0; i < sp; ++i) d.s[3 - sp + i] = sh[2 + i];
    return d;
}

inline std::array<int64_t, 3> pad3(const std::vector<int64_t>& v, int64_t fill) {
    std::array<int64_t, 3> a{fill, fill, fill};
    for (size_t i = 0; i < v.size(); ++i) a[3 - v.size() + i] = v[i];
    return a;
}

struct Geometry {
    std::vector<int64_t> stride, pad, dilation;
    int64_t groups = 1;
};

// x: [N, C, *in], w: [K, C/g, *k], b: [K] or empty -> y: [N, K, *out]
inline std::vector<float> conv(const Tensor& xt, const Tensor& wt, const std::vector<float>& b, const Geometry& g,
                               const Shape& yShape) {
    const Dims5 x = dims5(xt.shape()), y = dims5(yShape), k = dims5(wt.shape());
    const auto st = pad3(g.stride, 1), pd = pad3(g.pad, 0), dl = pad3(g.dilation, 1);
    const std::vector<float> xv = xt.toVector<float>(), wv = wt.toVector<float>();
    std::vector<float> out(static_cast<size_t>(yShape.numel()));
    const int64_t cg = x.c / g.groups, kg = y.c / g.groups;
    for (int64_t n = 0; n < y.n; ++n)
        for (int64_t o = 0; o < y.c; ++o)
            for (int64_t a = 0; a < y.s[0]; ++a)
                for (int64_t bb = 0; bb < y.s[1]; ++bb)
                    for (int64_t c = 0; c < y.s[2]; ++c) {
                        double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
                        const int64_t grp = o / kg;
                        for (int64_t ci = 0; ci < cg; ++ci)
                            for (int64_t ka = 0; ka < k.s[0]; ++ka)
                                for (int64_t kb = 0; kb < k.s[1]; ++kb)
                                    for (int64_t kc = 0; kc < k.s[2]; ++kc) {
                                        const int64_t ia = a * st[0] - pd[0] + ka * dl[0],
                                                      ib = bb * st[1] - pd[1] + kb * dl[1],
                                                      ic = c * st[2] - pd[2] + kc * dl[2];
                                        if (ia < 0 || ia >= x.s[0] || ib < 0 || ib >= x.s[1] || ic < 0 || ic >= x.s[2])
                                            continue;
                                        const int64_t xi = ((n * x.c + grp * cg + ci) * x.s[0] + ia) * x.s[1] * x.s[2] +
                                                           ib * x.s[2] + ic;
                                        const int64_t wi =
                                            ((o * cg + ci) * k.s[0] + ka) * k.s[1] * k.s[2] + kb * k.s[2] + kc;
                                        acc += static_cast<double>(xv[static_cast<size_t>(xi)]) *
                                               wv[static_cast<size_t>(wi)];
                                    }
                        out[static_cast<size_t>(((n * y.c + o) * y.s[0] + a) * y.s[1] * y.s[2] + bb * y.s[2] + c)] =
                            static_cast<float>(acc);
                    }
    return out;
}

// Transposed convolution: x: [N, C, *in], w: [C, K/g, *k] -> y: [N, K, *out], every input
// value scattered through the kernel.
inline std::vector<float> deconv(const Tensor& xt, const Tensor& wt, const std::vector<float>& b, const Geometry& g,
                                 const Shape& yShape) {
    const Dims5 x = dims5(xt.shape()), y = dims5(yShape), k = dims5(wt.shape());
    const auto st = pad3(g.stride, 1), pd = pad3(g.pad, 0), dl = pad3(g.dilation, 1);
    const std::vector<float> xv = xt.toVector<float>(), wv = wt.toVector<float>();
    std::vector<double> acc(static_cast<size_t>(yShape.numel()), 0.0);
    const int64_t cg = x.c / g.groups, kg = y.c / g.groups;
    for (int64_t n = 0; n < x.n; ++n)
        for (int64_t ci = 0; ci < x.c; ++ci)
            for (int64_t a = 0; a < x.s[0]; ++a)
                for (int64_t bb = 0; bb < x.s[1]; ++bb)
                    for (int64_t c = 0; c < x.s[2]; ++c) {
                        const float v =
                            xv[static_cast<size_t>(((n * x.c + ci) * x.s[0] + a) * x.s[1] * x.s[2] + bb * x.s[2] + c)];
                        const int64_t grp = ci / cg;
                        for (int64_t ko = 0; ko < kg; ++ko)
                            for (int64_t ka = 0; ka < k.s[0]; ++ka)
                                for (int64_t kb = 0; kb < k.s[1]; ++kb)
                                    for (int64_t kc = 0; kc < k.s[2]; ++kc) {
                                        const int64_t oa = a * st[0] - pd[0] + ka * dl[0],
                                                      ob = bb * st[1] - pd[1] + kb * dl[1],
                                                      oc = c * st[2] - pd[2] + kc * dl[2];
                                        if (oa < 0 || oa >= y.s[0] || ob < 0 || ob >= y.s[1] || oc < 0 || oc >= y.s[2])
                                            continue;
                                        const int64_t o = grp * kg + ko;
                                        const int64_t wi =
                                            ((ci * kg + ko) * k.s[0] + ka) * k.s[1] * k.s[2] + kb * k.s[2] + kc;
                                        acc[static_cast<size_t>(((n * y.c + o) * y.s[0] + oa) * y.s[1] * y.s[2] +
                                                                ob * y.s[2] + oc)] +=
                                            static_cast<double>(v) * wv[static_cast<size_t>(wi)];
                                    }
                    }
    std::vector<float> out(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) {
        const int64_t o = static_cast<int64_t>(i) / y.plane() % y.c;
        out[i] = static_cast<float>(acc[i] + (b.empty() ? 0.0 : b[static_cast<size_t>(o)]));
    }
    return out;
}

enum class Pool { max, avgWithPad, avgNoPad };

// Calls f(o, inside) for each pooling window from x: [N, C, *in] to y: [N, C, *out] in
// output order: o the flat output index, inside the flat input indices of the window's
// positions within the input (padding left out), in window order.
template <class F>
inline void forEachWindow(const Shape& xShape, const Shape& yShape, const std::vector<int64_t>& size,
                          const std::vector<int64_t>& stride, const std::vector<int64_t>& pad, F&& f) {
    const Dims5 x = dims5(xShape), y = dims5(yShape);
    const auto ks = pad3(size, 1), st = pad3(stride, 1), pd = pad3(pad, 0);
    std::vector<int64_t> inside;
    size_t o = 0;
    for (int64_t p = 0; p < y.n * y.c; ++p)
        for (int64_t a = 0; a < y.s[0]; ++a)
            for (int64_t b = 0; b < y.s[1]; ++b)
                for (int64_t c = 0; c < y.s[2]; ++c, ++o) {
                    inside.clear();
                    for (int64_t ka = 0; ka < ks[0]; ++ka)
                        for (int64_t kb = 0; kb < ks[1]; ++kb)
                            for (int64_t kc = 0; kc < ks[2]; ++kc) {
                                const int64_t ia = a * st[0] - pd[0] + ka, ib = b * st[1] - pd[1] + kb,
                                              ic = c * st[2] - pd[2] + kc;
                                if (ia < 0 || ia >= x.s[0] || ib < 0 || ib >= x.s[1] || ic < 0 || ic >= x.s[2])
                                    continue;
                                inside.push_back(p * x.plane() + (ia * x.s[1] + ib) * x.s[2] + ic);
                            }
                    f(o, inside);
                }
}

// x: [N, C, *in] -> y: [N, C, *out]
inline std::vector<float> pool(const Tensor& xt, Pool kind, const std::vector<int64_t>& size,
                               const std::vector<int64_t>& stride, const std::vector<int64_t>& pad,
                               const Shape& yShape) {
    const std::vector<float> xv = xt.toVector<float>();
    const auto ks = pad3(size, 1);
    std::vector<float> out;
    forEachWindow(xt.shape(), yShape, size, stride, pad, [&](size_t, const std::vector<int64_t>& inside) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (int64_t j : inside) {
            const double v = xv[static_cast<size_t>(j)];
            best = std::max(best, v);
            sum += v;
        }
        out.push_back(static_cast<float>(kind == Pool::max        ? best
                                         : kind == Pool::avgNoPad ? sum / static_cast<double>(inside.size())
                                                                  : sum / static_cast<double>(ks[0] * ks[1] * ks[2])));
    });
    return out;
}

// x: [N, C, *in], dy: [N, C, *out] -> dx: [N, C, *in], each dy routed to its window's
// first maximum
inline std::vector<float> maxPoolBackward(const Tensor& xt, const Tensor& dyt, const std::vector<int64_t>& size,
                                          const std::vector<int64_t>& stride, const std::vector<int64_t>& pad) {
    const std::vector<float> xv = xt.toVector<float>(), dy = dyt.toVector<float>();
    std::vector<float> dx(xv.size(), 0.0f);
    forEachWindow(xt.shape(), dyt.shape(), size, stride, pad, [&](size_t o, const std::vector<int64_t>& inside) {
        int64_t at = inside.front();
        for (int64_t j : inside) {
            if (xv[static_cast<size_t>(j)] > xv[static_cast<size_t>(at)]) at = j;
        }
        dx[static_cast<size_t>(at)] += dy[o];
    });
    return dx;
}

} // namespace tessera::reference
