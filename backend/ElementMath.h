#pragma once
/// \file The per-element and per-sample maths that the CPU loops (backend/cpu) and the
/// CUDA kernels (cuda/*.cu) share: optimizer rules, costs, padding sources and max
/// pooling windows. Written once, compiled for both, so the two backends cannot drift.
/// Private to the backends; plain functions of numbers and pointers, no tensors.

#include <math.h>

#include <cstdint>

#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h" // TESSERA_HOST_DEVICE

namespace tessera::element {

// ---- optimizers -------------------------------------------------------------------------

/// An update's constants, with Adam's bias correction folded into `adamLr`.
struct UpdateScalars {
    float lr, momentum, beta1, beta2, rho, epsilon, weightDecay, adamLr, gradScale;
};

inline UpdateScalars scalarsOf(const UpdateParams& p) {
    const auto t = static_cast<double>(p.step);
    return {p.lr,          p.momentum,
            p.beta1,       p.beta2,
            p.rho,         p.epsilon,
            p.weightDecay, static_cast<float>(p.lr * sqrt(1.0 - pow(p.beta2, t)) / (1.0 - pow(p.beta1, t))),
            p.gradScale};
}

/// Element i of rule R: wp[i] and the state ap, bp, cp (the rule's running averages; a rule
/// touches only the ones it has) from the gradient gr[i]. R is a template argument so that a
/// loop over one rule has no branch.
template <UpdateRule R>
TESSERA_HOST_DEVICE inline void update(const UpdateScalars& k, float* wp, const float* gr, float* ap, float* bp,
                                       float* cp, int64_t i) {
    float& w = wp[i];
    // The (clipped) gradient plus L2 weight decay; AdamW decays the weight apart from it.
    const float g = k.gradScale * gr[i] + (R == UpdateRule::adamW ? 0.0f : k.weightDecay) * w;
    if constexpr (R == UpdateRule::sgd) {
        w -= k.lr * g;
    } else if constexpr (R == UpdateRule::momentumSGD) { // v = mom v + lr g; w -= v
        ap[i] = k.momentum * ap[i] + k.lr * g;
        w -= ap[i];
    } else if constexpr (R == UpdateRule::nesterovSGD) { // v' = mom v - lr g; w += -mom v + (1 + mom) v'
        const float v = ap[i];
        ap[i] = k.momentum * v - k.lr * g;
        w += -k.momentum * v + (1.0f + k.momentum) * ap[i];
    } else if constexpr (R == UpdateRule::adam) {
        ap[i] = k.beta1 * ap[i] + (1.0f - k.beta1) * g;
        bp[i] = k.beta2 * bp[i] + (1.0f - k.beta2) * g * g;
        w -= k.adamLr * ap[i] / (sqrtf(bp[i]) + k.epsilon);
    } else if constexpr (R == UpdateRule::adamW) { // Adam on the gradient, and w -= lr decay w beside it
        ap[i] = k.beta1 * ap[i] + (1.0f - k.beta1) * g;
        bp[i] = k.beta2 * bp[i] + (1.0f - k.beta2) * g * g;
        w -= k.adamLr * ap[i] / (sqrtf(bp[i]) + k.epsilon) + k.lr * k.weightDecay * w;
    } else if constexpr (R == UpdateRule::adaGrad) {
        ap[i] += g * g;
        w -= k.lr * g / (sqrtf(ap[i]) + k.epsilon);
    } else if constexpr (R == UpdateRule::adaDelta) { // a: E[g^2], b: E[dx^2]
        ap[i] = k.rho * ap[i] + (1.0f - k.rho) * g * g;
        const float dx = sqrtf(bp[i] + k.epsilon) / sqrtf(ap[i] + k.epsilon) * g;
        bp[i] = k.rho * bp[i] + (1.0f - k.rho) * dx * dx;
        w -= k.lr * dx;
    } else if constexpr (R == UpdateRule::rmsProp) {
        ap[i] = k.rho * ap[i] + (1.0f - k.rho) * g * g;
        w -= k.lr * g / (sqrtf(ap[i]) + k.epsilon);
    } else if constexpr (R == UpdateRule::rmsPropGraves) { // a: E[g^2], b: E[g], c: momentum of the step
        ap[i] = k.rho * ap[i] + (1.0f - k.rho) * g * g;
        bp[i] = k.rho * bp[i] + (1.0f - k.rho) * g;
        cp[i] = k.momentum * cp[i] - k.lr * g / sqrtf(ap[i] - bp[i] * bp[i] + k.epsilon);
        w += cp[i];
    } else { // smorms3 - a: memory, b: E[g], c: E[g^2]
        const float r = 1.0f / (ap[i] + 1.0f);
        bp[i] = (1.0f - r) * bp[i] + r * g;
        cp[i] = (1.0f - r) * cp[i] + r * g * g;
        const float x = bp[i] * bp[i] / (cp[i] + k.epsilon);
        w -= g * fminf(k.lr, x) / (sqrtf(cp[i]) + k.epsilon);
        ap[i] = 1.0f + ap[i] * (1.0f - x);
    }
}

/// Calls f.template operator()<R>() with R the runtime rule, once: loops run per rule.
template <class F> inline void dispatchRule(UpdateRule rule, F&& f) {
    switch (rule) {
    case UpdateRule::sgd: f.template operator()<UpdateRule::sgd>(); break;
    case UpdateRule::momentumSGD: f.template operator()<UpdateRule::momentumSGD>(); break;
    case UpdateRule::nesterovSGD: f.template operator()<UpdateRule::nesterovSGD>(); break;
    case UpdateRule::adam: f.template operator()<UpdateRule::adam>(); break;
    case UpdateRule::adaGrad: f.template operator()<UpdateRule::adaGrad>(); break;
    case UpdateRule::adaDelta: f.template operator()<UpdateRule::adaDelta>(); break;
    case UpdateRule::rmsProp: f.template operator()<UpdateRule::rmsProp>(); break;
    case UpdateRule::rmsPropGraves: f.template operator()<UpdateRule::rmsPropGraves>(); break;
    case UpdateRule::smorms3: f.template operator()<UpdateRule::smorms3>(); break;
    case UpdateRule::adamW: f.template operator()<UpdateRule::adamW>(); break;
    }
}

// ---- costs ------------------------------------------------------------------------------

/// One element of an element-wise cost (not klDivergence): writes norm * d cost / d p to
/// `grad` and returns the element's cost.
TESSERA_HOST_DEVICE inline double pointwise(CostKind kind, float p, float t, float norm, float& grad) {
    const float d = p - t;
    const float sign = static_cast<float>((d > 0) - (d < 0));
    switch (kind) {
    case CostKind::mse: grad = norm * d; return 0.5 * static_cast<double>(d) * d;
    case CostKind::abs: grad = norm * sign; return fabsf(d);
    case CostKind::smoothL1:
        grad = norm * (fabsf(d) < 1.0f ? d : sign);
        return fabsf(d) < 1.0f ? 0.5 * d * d : fabsf(d) - 0.5;
    case CostKind::bce: { // softplus(p) - t p, computed without overflow
        const double x = p;
        grad = norm * (static_cast<float>(1.0 / (1.0 + exp(-x))) - t);
        return fmax(x, 0.0) + log1p(exp(-fabs(x))) - t * x;
    }
    case CostKind::hinge: {
        const float m = 1.0f - t * p;
        grad = m > 0 ? -norm * t : 0.0f;
        return m > 0 || m != m ? m : 0.0f; // a NaN margin stays NaN (fmaxf would give 0)
    }
    default: grad = 0.0f; return 0.0;
    }
}

/// KL(t || softmax(p)) over the `c` classes of one sample, `stride` apart, or with
/// `crossEntropy` the cross-entropy -sum t log softmax(p) (the same gradient): writes the
/// gradient (times norm) and returns the sample's divergence or cross-entropy.
TESSERA_HOST_DEVICE inline double klDivergence(const float* p, const float* t, float* g, int64_t c, int64_t stride,
                                               float norm, bool crossEntropy = false) {
    float mx = p[0];
    for (int64_t k = 1; k < c; ++k) mx = fmaxf(mx, p[k * stride]);
    double z = 0;
    for (int64_t k = 0; k < c; ++k) z += exp(static_cast<double>(p[k * stride] - mx));
    const double logz = log(z);
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) {
        const int64_t at = k * stride;
        const double logq = p[at] - mx - logz;
        if (t[at] > 0) sum += t[at] * ((crossEntropy ? 0.0 : log(static_cast<double>(t[at]))) - logq);
        g[at] = norm * (static_cast<float>(exp(logq)) - t[at]);
    }
    return sum;
}

/// Softmax cross-entropy of one sample (its `c` scores `stride` apart, label y, weight w)
/// against the target (1 - smoothing) onehot(y) + smoothing / c: writes the gradient
/// (times w * norm) when g is not null, returns the weighted error and sets `hit` when the
/// argmax (first maximum) is the label.
TESSERA_HOST_DEVICE inline double crossEntropy(const float* row, int32_t y, float w, float* g, int64_t c,
                                               int64_t stride, float norm, float smoothing, bool& hit) {
    float mx = row[0];
    int64_t arg = 0;
    for (int64_t k = 1; k < c; ++k) {
        if (row[k * stride] > mx) {
            mx = row[k * stride];
            arg = k;
        }
    }
    double sum = 0, shifted = 0; // shifted: the sum of the scores less their maximum
    for (int64_t k = 0; k < c; ++k) {
        const double d = static_cast<double>(row[k * stride] - mx);
        sum += exp(d);
        if (smoothing != 0.0f) shifted += d; // (a score of -inf is fine without smoothing)
    }
    hit = arg == y;
    const float spread = smoothing / static_cast<float>(c), onLabel = 1.0f - smoothing + spread;
    if (g) {
        for (int64_t k = 0; k < c; ++k) {
            const auto p = static_cast<float>(exp(static_cast<double>(row[k * stride] - mx)) / sum);
            g[k * stride] = w * norm * (p - (k == y ? onLabel : spread));
        }
    }
    // -sum_k q_k log p_k = log(sum) - (1 - smoothing) s_y - smoothing / c sum_k s_k (scores less mx)
    const double on = static_cast<double>(row[y * stride] - mx);
    if (smoothing == 0.0f) return w * (log(sum) - on);
    return w * (log(sum) - (1.0 - smoothing) * on - static_cast<double>(spread) * shifted);
}

/// Multi-class SVM of one sample: sum_{k != y} max(0, 1 + s_k - s_y)^(l2 ? 2 : 1); writes
/// the gradient (times norm) to g.
TESSERA_HOST_DEVICE inline double svm(const float* row, int32_t y, bool l2, float* g, int64_t c, float norm) {
    double sum = 0;
    float gy = 0;
    for (int64_t k = 0; k < c; ++k) {
        g[k] = 0;
        if (k == y) continue;
        const float m = 1.0f + row[k] - row[y];
        if (m <= 0) continue;
        sum += l2 ? m * m : m;
        const float d = norm * (l2 ? 2.0f * m : 1.0f);
        g[k] = d;
        gy -= d;
    }
    g[y] = gy;
    return sum;
}

// ---- padding and pooling ----------------------------------------------------------------

/// Source position of padded coordinate `o` along a dim of size `n` padded by `lo` before,
/// or -1 for a constant pad. Reflection mirrors without repeating the edge; edge repeats
/// the first or last element.
TESSERA_HOST_DEVICE inline int64_t padSource(PadMode mode, int64_t o, int64_t lo, int64_t n) {
    const int64_t i = o - lo;
    if (i >= 0 && i < n) return i;
    if (mode == PadMode::constant) return -1;
    if (mode == PadMode::edge) return i < 0 ? 0 : n - 1;
    return i < 0 ? -i : 2 * (n - 1) - i; // -1 -> 1, n -> n - 2
}

/// Keys' cubic convolution kernel with a = -0.75 (PyTorch's bicubic) at distance x:
/// ((a + 2) x - (a + 3)) x^2 + 1 for x <= 1 (near), ((a x - 5a) x + 8a) x - 4a for 1 < x < 2.
TESSERA_HOST_DEVICE inline float cubicNear(float x) {
    constexpr float a = -0.75f;
    return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
}
TESSERA_HOST_DEVICE inline float cubicFar(float x) {
    constexpr float a = -0.75f;
    return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
}

/// Output position `o` of `out` along a dim of `in` input positions: the inputs it reads
/// (`at`) and their weights (`w`), at most 4; returns how many. Nearest: floor(o * in / out),
/// alone. NearestExact: floor((o + 0.5) * in / out), at most in - 1, rounded as PyTorch
/// rounds it (the product in double of the float ratio, taken to float before the floor).
/// Linear: the two inputs around s = (o + 0.5) * in / out - 0.5 (half-pixel centres, as
/// oneDNN computes it), or s = o * ((in - 1) / (out - 1)) with alignCorners (0 for out 1),
/// clamped to the edges. Cubic: the four inputs floor(s) - 1 ... floor(s) + 2 around the same
/// s, not clamped (PyTorch's bicubic), weighted by Keys' cubic convolution with a = -0.75,
/// each index clamped to the edges.
TESSERA_HOST_DEVICE inline int resampleTaps(ResampleParams p, int64_t o, int64_t out, int64_t in, int64_t at[4],
                                            float w[4]) {
    if (p.mode == ResampleMode::nearest) {
        at[0] = o * in / out;
        w[0] = 1.0f;
        return 1;
    }
    if (p.mode == ResampleMode::nearestExact) {
        const float ratio = static_cast<float>(in) / static_cast<float>(out);
        const auto i = static_cast<int64_t>(floorf(static_cast<float>((static_cast<double>(o) + 0.5) * ratio)));
        at[0] = i > in - 1 ? in - 1 : i;
        w[0] = 1.0f;
        return 1;
    }
    float s = 0.0f;
    if (!p.alignCorners) {
        s = (static_cast<float>(o) + 0.5f) * static_cast<float>(in) / static_cast<float>(out) - 0.5f;
    } else if (out > 1) {
        s = static_cast<float>(o) * (static_cast<float>(in - 1) / static_cast<float>(out - 1));
    }
    const float f = floorf(s);
    if (p.mode == ResampleMode::cubic) {
        const float t = s - f, u = 1.0f - t;
        w[0] = cubicFar(t + 1.0f);
        w[1] = cubicNear(t);
        w[2] = cubicNear(u);
        w[3] = cubicFar(u + 1.0f);
        const auto first = static_cast<int64_t>(f) - 1;
        for (int k = 0; k < 4; ++k) {
            const int64_t i = first + k;
            at[k] = i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
        }
        return 4;
    }
    at[0] = f < 0.0f ? 0 : static_cast<int64_t>(f);
    const auto c = static_cast<int64_t>(ceilf(s));
    at[1] = c > in - 1 ? in - 1 : (c < 0 ? 0 : c);
    w[1] = fabsf(s - f);
    w[0] = 1.0f - w[1];
    return 2;
}

/// A pooling window's geometry over [d, h, w] (fewer spatial dims lead with 1s).
struct Window3 {
    int64_t in[3], out[3], kernel[3], stride[3], pad[3];
};

/// The in-plane flat index of the first maximum of output position (od, oh, ow)'s window,
/// padding ignored; `best` receives the maximum. `plane[j]` is the plane's element j as a
/// float (a float pointer, or a reader of another type).
template <class Plane>
TESSERA_HOST_DEVICE inline int64_t windowArgmax(Plane plane, const Window3& w, int64_t od, int64_t oh, int64_t ow,
                                                float& best) {
    int64_t at = -1;
    best = 0.0f;
    for (int64_t kd = 0; kd < w.kernel[0]; ++kd) {
        const int64_t d = od * w.stride[0] - w.pad[0] + kd;
        if (d < 0 || d >= w.in[0]) continue;
        for (int64_t kh = 0; kh < w.kernel[1]; ++kh) {
            const int64_t h = oh * w.stride[1] - w.pad[1] + kh;
            if (h < 0 || h >= w.in[1]) continue;
            for (int64_t kw = 0; kw < w.kernel[2]; ++kw) {
                const int64_t c = ow * w.stride[2] - w.pad[2] + kw;
                if (c < 0 || c >= w.in[2]) continue;
                const int64_t j = (d * w.in[1] + h) * w.in[2] + c;
                const float v = plane[j];
                if (at < 0 || v > best) {
                    best = v;
                    at = j;
                }
            }
        }
    }
    return at;
}

/// The Window3 of pooling `p` from x: [N, C, *in] to y: [N, C, *out].
inline Window3 window3(const PoolParams& p, const Shape& x, const Shape& y) {
    const size_t sp = x.rank() - 2;
    Window3 w{};
    for (int d = 0; d < 3; ++d) {
        w.in[d] = w.out[d] = w.kernel[d] = w.stride[d] = 1;
        w.pad[d] = 0;
    }
    for (size_t d = 0; d < sp; ++d) {
        const size_t o = 3 - sp + d;
        w.in[o] = x[2 + d];
        w.out[o] = y[2 + d];
        w.kernel[o] = p.kernel[d];
        w.stride[o] = p.stride[d];
        w.pad[o] = p.padLo[d];
    }
    return w;
}

// ---- broadcasting ---------------------------------------------------------------------

constexpr int kMaxBroadcastRank = 8;

/// y = a op b with NumPy broadcasting: y's dims and each operand's element strides in
/// them (0 along a dim it broadcasts).
struct BroadcastGeometry {
    int rank;
    int64_t dims[kMaxBroadcastRank];
    int64_t strideA[kMaxBroadcastRank];
    int64_t strideB[kMaxBroadcastRank];
};

/// The strides of `s` (contiguous) in the dims of `y`, aligned from the right, 0 where it broadcasts.
inline void broadcastStrides(const Shape& s, const Shape& y, int64_t* out) {
    int64_t stride = 1;
    for (size_t k = 0; k < y.rank(); ++k) {
        const size_t d = y.rank() - 1 - k;
        const int64_t dim = k < s.rank() ? s.dims()[s.rank() - 1 - k] : 1;
        out[d] = dim == 1 ? 0 : stride;
        stride *= dim;
    }
}

inline BroadcastGeometry broadcastGeometry(const Shape& a, const Shape& b, const Shape& y) {
    BroadcastGeometry g{};
    if (y.rank() > static_cast<size_t>(kMaxBroadcastRank)) {
        throw ShapeError("broadcasting: " + y.str() + " has more than 8 dims");
    }
    g.rank = static_cast<int>(y.rank());
    for (int d = 0; d < g.rank; ++d) g.dims[d] = y.dims()[static_cast<size_t>(d)];
    broadcastStrides(a, y, g.strideA);
    broadcastStrides(b, y, g.strideB);
    return g;
}

/// The element offsets in a and b of y's element `i`.
TESSERA_HOST_DEVICE inline void broadcastOffsets(const BroadcastGeometry& g, int64_t i, int64_t& oa, int64_t& ob) {
    oa = ob = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
        const int64_t c = i % g.dims[d];
        i /= g.dims[d];
        oa += c * g.strideA[d];
        ob += c * g.strideB[d];
    }
}

TESSERA_HOST_DEVICE inline float binary(BinaryOp op, float a, float b) {
    switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    }
    return a;
}

/// y = sum of x over the dims y broadcasts along: y's own dims (those it keeps) with x's
/// strides, and the summed dims with x's strides.
struct ReduceGeometry {
    int kept, summed;
    int64_t keptDims[kMaxBroadcastRank], keptStrides[kMaxBroadcastRank];
    int64_t summedDims[kMaxBroadcastRank], summedStrides[kMaxBroadcastRank];
    int64_t summedCount;
};

inline ReduceGeometry reduceGeometry(const Shape& x, const Shape& y) {
    if (x.rank() > static_cast<size_t>(kMaxBroadcastRank)) {
        throw ShapeError("broadcasting: " + x.str() + " has more than 8 dims");
    }
    ReduceGeometry g{};
    g.summedCount = 1;
    int64_t stride = 1;
    int64_t xs[kMaxBroadcastRank];
    for (size_t k = 0; k < x.rank(); ++k) {
        xs[x.rank() - 1 - k] = stride;
        stride *= x.dims()[x.rank() - 1 - k];
    }
    for (size_t d = 0; d < x.rank(); ++d) {
        const size_t k = x.rank() - 1 - d; // from the right
        const int64_t yd = k < y.rank() ? y.dims()[y.rank() - 1 - k] : 1;
        const int64_t xd = x.dims()[d];
        if (yd == xd) {
            g.keptDims[g.kept] = xd;
            g.keptStrides[g.kept++] = xs[d];
        } else {
            g.summedDims[g.summed] = xd;
            g.summedStrides[g.summed++] = xs[d];
            g.summedCount *= xd;
        }
    }
    return g;
}

/// The sum over x's elements that fall on y's element `j`, in double.
TESSERA_HOST_DEVICE inline double reduceAt(const ReduceGeometry& g, const float* x, int64_t j) {
    int64_t base = 0;
    for (int d = g.kept - 1; d >= 0; --d) {
        base += (j % g.keptDims[d]) * g.keptStrides[d];
        j /= g.keptDims[d];
    }
    double sum = 0.0;
    for (int64_t r = 0; r < g.summedCount; ++r) {
        int64_t off = base, rest = r;
        for (int d = g.summed - 1; d >= 0; --d) {
            off += (rest % g.summedDims[d]) * g.summedStrides[d];
            rest /= g.summedDims[d];
        }
        sum += x[off];
    }
    return sum;
}

// ---- CTC ----------------------------------------------------------------------------------
// A sample's labels l (length S) extend to 2 S + 1 positions: blank, l0, blank, l1, ...,
// blank. alpha[t][s] is the log-probability of the alignments of steps [0, t] that end at
// position s; beta[t][s] that of the alignments of steps [t, T) that start there. Both count
// step t's own log-probability.

/// log(exp(a) + exp(b)); -inf stands for probability zero.
TESSERA_HOST_DEVICE inline double logAdd(double a, double b) {
    if (a < b) {
        const double t = a;
        a = b;
        b = t;
    }
    if (b == -INFINITY) return a;
    return a + log1p(exp(b - a));
}

/// The label at extended position s.
TESSERA_HOST_DEVICE inline int32_t ctcLabel(const int32_t* labels, int64_t s, int32_t blank) {
    return s % 2 == 0 ? blank : labels[s / 2];
}

/// alpha[t][s] from the previous step's row `prev` (positions [0, 2 S + 1)) and step t's
/// log-probability lp of the label at s.
TESSERA_HOST_DEVICE inline double ctcAlpha(const double* prev, const int32_t* labels, int64_t s, double lp) {
    double a = prev[s];
    if (s >= 1) a = logAdd(a, prev[s - 1]);
    if (s % 2 == 1 && s >= 3 && labels[s / 2] != labels[s / 2 - 1]) a = logAdd(a, prev[s - 2]);
    return a + lp;
}

/// beta[t][s] from the next step's row `next`, over positions [0, ext).
TESSERA_HOST_DEVICE inline double ctcBeta(const double* next, const int32_t* labels, int64_t s, int64_t ext,
                                          double lp) {
    double b = next[s];
    if (s + 1 < ext) b = logAdd(b, next[s + 1]);
    if (s % 2 == 1 && s + 2 < ext && labels[s / 2] != labels[s / 2 + 1]) b = logAdd(b, next[s + 2]);
    return b + lp;
}

/// log sum_v exp(row[v * stride]) over v in [0, V).
TESSERA_HOST_DEVICE inline double logSumExp(const float* row, int64_t V, int64_t stride) {
    float mx = row[0];
    for (int64_t v = 1; v < V; ++v) mx = row[v * stride] > mx ? row[v * stride] : mx;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += exp(static_cast<double>(row[v * stride] - mx));
    return mx + log(sum);
}

// ---- spatial transformer ------------------------------------------------------------------
// Output pixel (i, j) of an [Ho, Wo] grid sits at x_t = -1 + 2 j / (Wo - 1), y_t likewise
// (0 for a single row or column); theta [2, 3] maps [x_t, y_t, 1] to the source's
// normalised coordinates, -1 and 1 being the centres of its corner pixels; the source is
// sampled bilinearly, zero outside.

/// The normalised target coordinate of index k of n.
TESSERA_HOST_DEVICE inline float gridCoord(int64_t k, int64_t n) {
    return n > 1 ? -1.0f + 2.0f * static_cast<float>(k) / static_cast<float>(n - 1) : 0.0f;
}

/// Where output (i, j) samples an [H, W] source, in pixels: (u, v) = (column, row).
TESSERA_HOST_DEVICE inline void spatialTfSource(const float* theta, int64_t i, int64_t j, int64_t Ho, int64_t Wo,
                                                int64_t H, int64_t W, float& u, float& v) {
    const float xt = gridCoord(j, Wo), yt = gridCoord(i, Ho);
    const float xs = theta[0] * xt + theta[1] * yt + theta[2], ys = theta[3] * xt + theta[4] * yt + theta[5];
    u = (xs + 1.0f) * 0.5f * static_cast<float>(W - 1);
    v = (ys + 1.0f) * 0.5f * static_cast<float>(H - 1);
}

/// The source value at pixel (r, c) of an [H, W] plane, zero outside.
TESSERA_HOST_DEVICE inline float pixelAt(const float* plane, int64_t r, int64_t c, int64_t H, int64_t W) {
    return r >= 0 && r < H && c >= 0 && c < W ? plane[r * W + c] : 0.0f;
}

/// Bilinear sample of an [H, W] plane at (u, v); with du, dv given, also the sample's
/// derivatives along u and v.
TESSERA_HOST_DEVICE inline float bilinear(const float* plane, float u, float v, int64_t H, int64_t W, float* du,
                                          float* dv) {
    const float cu = floorf(u), cv = floorf(v), fu = u - cu, fv = v - cv;
    const auto c0 = static_cast<int64_t>(cu), r0 = static_cast<int64_t>(cv);
    const float p00 = pixelAt(plane, r0, c0, H, W), p01 = pixelAt(plane, r0, c0 + 1, H, W),
                p10 = pixelAt(plane, r0 + 1, c0, H, W), p11 = pixelAt(plane, r0 + 1, c0 + 1, H, W);
    if (du) *du = (1.0f - fv) * (p01 - p00) + fv * (p11 - p10);
    if (dv) *dv = (1.0f - fu) * (p10 - p00) + fu * (p11 - p01);
    return (1.0f - fv) * ((1.0f - fu) * p00 + fu * p01) + fv * ((1.0f - fu) * p10 + fu * p11);
}

/// The four source pixels (row, column) and bilinear weights that sample (u, v).
TESSERA_HOST_DEVICE inline void bilinearTaps(float u, float v, int64_t rows[4], int64_t cols[4], float w[4]) {
    const float cu = floorf(u), cv = floorf(v), fu = u - cu, fv = v - cv;
    const auto c0 = static_cast<int64_t>(cu), r0 = static_cast<int64_t>(cv);
    rows[0] = r0, cols[0] = c0, w[0] = (1.0f - fv) * (1.0f - fu);
    rows[1] = r0, cols[1] = c0 + 1, w[1] = (1.0f - fv) * fu;
    rows[2] = r0 + 1, cols[2] = c0, w[2] = fv * (1.0f - fu);
    rows[3] = r0 + 1, cols[3] = c0 + 1, w[3] = fv * fu;
}

} // namespace tessera::element
