// Index-driven ops as plain OpenMP loops: gathers and scatters along an axis (k-max
// pooling, unpooling), row lookups (embeddings), top-k selection and axis permutation.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include <omp.h>

#include "backend/cpu/Clones.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

namespace {

constexpr int64_t kParallelMin = 1 << 15;

struct Axis3 {
    int64_t outer, along, inner;
};

Axis3 dimsOf(const Tensor& t, const char* op) {
    const Shape& s = t.shape();
    if (s.rank() != 3)
        throw ShapeError(std::string("CpuBackend::") + op + ": expects a [O, A, I] view, got " + s.str());
    return {s[0], s[1], s[2]};
}

void checkIndex(const char* op, int64_t v, int64_t limit) {
    if (v < 0 || v >= limit) {
        throw ShapeError(std::string("CpuBackend::") + op + ": index " + std::to_string(v) + " outside [0, " +
                         std::to_string(limit) + ")");
    }
}

// The position of the first largest of x[0, n), a NaN's if there is one (a NaN beats every
// number, as in PyTorch's argmax). Sixteen running maxima and NaN flags side by side, which
// vectorise, then the first position holding the maximum (or the first NaN).
TESSERA_CPU_CLONES int64_t firstLargest(const float* x, int64_t n) {
    constexpr int64_t kLanes = 16;
    float top[kLanes];
    int32_t nan[kLanes];
    const int64_t whole = n / kLanes * kLanes;
    if (whole == 0) {
        int64_t best = 0;
        for (int64_t a = 1; a < n; ++a)
            if (!std::isnan(x[best]) && (x[a] > x[best] || std::isnan(x[a]))) best = a;
        return best;
    }
    for (int64_t l = 0; l < kLanes; ++l) {
        top[l] = x[l];
        nan[l] = x[l] != x[l];
    }
    for (int64_t a = kLanes; a < whole; a += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) {
            const float v = x[a + l];
            top[l] = v > top[l] ? v : top[l];
            nan[l] |= v != v;
        }
    float most = top[0];
    int32_t anyNan = 0;
    for (int64_t l = 0; l < kLanes; ++l) {
        most = top[l] > most ? top[l] : most;
        anyNan |= nan[l];
    }
    for (int64_t a = whole; a < n; ++a) {
        most = x[a] > most ? x[a] : most;
        anyNan |= x[a] != x[a];
    }
    int64_t a = 0;
    if (anyNan)
        while (!std::isnan(x[a])) ++a;
    else
        while (x[a] != most) ++a;
    return a;
}

} // namespace

// x: [O, A, I], idx: [O, J, I] -> y: [O, J, I]
void CpuBackend::gatherAxis(const Tensor& x, const Tensor& idx, const Tensor& y) {
    const Axis3 xs = dimsOf(x, "gatherAxis"), is = dimsOf(idx, "gatherAxis");
    const float* px = x.data<float>();
    const int32_t* pi = idx.data<int32_t>();
    float* py = y.data<float>();
    for (int64_t i = 0, count = idx.numel(); i < count; ++i) checkIndex("gatherAxis", pi[i], xs.along);
#pragma omp parallel for if (idx.numel() > kParallelMin)
    for (int64_t o = 0; o < is.outer; ++o)
        for (int64_t j = 0; j < is.along; ++j)
            for (int64_t i = 0; i < is.inner; ++i) {
                const int64_t at = (o * is.along + j) * is.inner + i;
                py[at] = px[(o * xs.along + pi[at]) * xs.inner + i];
            }
}

// src, idx: [O, J, I] -> dst: [O, A, I] += scattered src
void CpuBackend::scatterAddAxis(const Tensor& src, const Tensor& idx, const Tensor& dst) {
    const Axis3 ds = dimsOf(dst, "scatterAddAxis"), is = dimsOf(idx, "scatterAddAxis");
    const float* ps = src.data<float>();
    const int32_t* pi = idx.data<int32_t>();
    float* pd = dst.data<float>();
    for (int64_t i = 0, count = idx.numel(); i < count; ++i) checkIndex("scatterAddAxis", pi[i], ds.along);
        // Parallel over outer slices only: indices may repeat within one.
#pragma omp parallel for if (idx.numel() > kParallelMin)
    for (int64_t o = 0; o < is.outer; ++o)
        for (int64_t j = 0; j < is.along; ++j)
            for (int64_t i = 0; i < is.inner; ++i) {
                const int64_t at = (o * is.along + j) * is.inner + i;
                pd[(o * ds.along + pi[at]) * ds.inner + i] += ps[at];
            }
}

// x: [O, A, I] -> idx: [O, k, I], positions of the k largest along A, ascending
void CpuBackend::topKIndices(const Tensor& x, int64_t k, const Tensor& idx) {
    const Axis3 xs = dimsOf(x, "topKIndices");
    if (k < 1 || k > xs.along) {
        throw ShapeError("CpuBackend::topKIndices: k = " + std::to_string(k) + " outside [1, " +
                         std::to_string(xs.along) + "]");
    }
    const float* px = x.data<float>();
    int32_t* pi = idx.data<int32_t>();
    if (k == 1 && xs.inner == 1) { // the first largest of each contiguous line
#pragma omp parallel for if (x.numel() > kParallelMin)
        for (int64_t o = 0; o < xs.outer; ++o) pi[o] = static_cast<int32_t>(firstLargest(px + o * xs.along, xs.along));
        return;
    }
    if (k == 1) { // the first largest by one pass along A per o, over the inner positions side by side
#pragma omp parallel for if (x.numel() > kParallelMin)
        for (int64_t o = 0; o < xs.outer; ++o) {
            const float* base = px + o * xs.along * xs.inner;
            int32_t* best = pi + o * xs.inner;
            std::vector<float> top(base, base + xs.inner);
            std::fill_n(best, xs.inner, 0);
            for (int64_t a = 1; a < xs.along; ++a) {
                const float* row = base + a * xs.inner;
                for (int64_t i = 0; i < xs.inner; ++i) {
                    const float v = row[i], t = top[static_cast<size_t>(i)];
                    if (!std::isnan(t) && (v > t || std::isnan(v))) { // a NaN beats every number
                        top[static_cast<size_t>(i)] = v;
                        best[i] = static_cast<int32_t>(a);
                    }
                }
            }
        }
        return;
    }
#pragma omp parallel for if (x.numel() > kParallelMin)
    for (int64_t o = 0; o < xs.outer; ++o) {
        std::vector<int32_t> order(static_cast<size_t>(xs.along));
        for (int64_t i = 0; i < xs.inner; ++i) {
            auto value = [&](int32_t a) { return px[(o * xs.along + a) * xs.inner + i]; };
            std::iota(order.begin(), order.end(), 0);
            // Largest first; ties keep the earlier position.
            std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
                return value(a) > value(b) || (value(a) == value(b) && a < b);
            });
            std::sort(order.begin(), order.begin() + k);
            for (int64_t j = 0; j < k; ++j) pi[(o * k + j) * xs.inner + i] = order[static_cast<size_t>(j)];
        }
    }
}

// table: [V, D], idx: [M] -> y: [M, D]
void CpuBackend::gatherRows(const Tensor& table, const Tensor& idx, const Tensor& y) {
    const int64_t v = table.shape()[0], d = table.shape()[1], m = idx.numel();
    const float* pt = table.data<float>();
    const int32_t* pi = idx.data<int32_t>();
    float* py = y.data<float>();
    for (int64_t i = 0; i < m; ++i) checkIndex("gatherRows", pi[i], v);
#pragma omp parallel for if (m * d > kParallelMin)
    for (int64_t i = 0; i < m; ++i) std::copy_n(pt + pi[i] * d, d, py + i * d);
}

// src: [M, D], idx: [M] -> table[idx[m]] += scale * src[m]
void CpuBackend::scatterAddRows(const Tensor& src, const Tensor& idx, float scale, const Tensor& table) {
    const int64_t v = table.shape()[0], d = table.shape()[1], m = idx.numel();
    const float* ps = src.data<float>();
    const int32_t* pi = idx.data<int32_t>();
    float* pt = table.data<float>();
    for (int64_t i = 0; i < m; ++i) checkIndex("scatterAddRows", pi[i], v);
        // Rows may repeat, so split the work over columns, not rows.
#pragma omp parallel for if (m * d > kParallelMin)
    for (int64_t c = 0; c < d; ++c)
        for (int64_t i = 0; i < m; ++i) pt[pi[i] * d + c] += scale * ps[i * d + c];
}

// x: [d0, ..., dr-1] -> y: dims permuted by perm
void CpuBackend::permute(const Tensor& x, const std::vector<int64_t>& perm, const Tensor& y) {
    const Shape& xs = x.shape();
    const size_t r = xs.rank();
    if (perm.size() != r) throw ShapeError("CpuBackend::permute: permutation of the wrong rank for " + xs.str());
    if (r == 0 || y.numel() == 0) return;
    // Stride in x of each y dim; walk y in order, a row (y's last dim) at a time.
    std::vector<int64_t> xStride(r, 1), yStride(r);
    for (size_t i = r - 1; i-- > 0;) xStride[i] = xStride[i + 1] * xs[i + 1];
    for (size_t i = 0; i < r; ++i) yStride[i] = xStride[static_cast<size_t>(perm[i])];
    const std::vector<int64_t> ys = y.shape().dims();
    const int64_t last = ys[r - 1], lastStride = yStride[r - 1], rows = y.numel() / last;
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int threads = y.numel() > kParallelMin ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(threads)
    {
        // Each thread a contiguous run of rows: the row's index and its offset in x are
        // worked out once, then carried from row to row.
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;
        std::vector<int64_t> idx(r, 0);
        int64_t off = 0;
        for (int64_t rem = begin, i = static_cast<int64_t>(r) - 2; i >= 0; --i) {
            const auto d = static_cast<size_t>(i);
            idx[d] = rem % ys[d];
            rem /= ys[d];
            off += idx[d] * yStride[d];
        }
        for (int64_t row = begin; row < end; ++row) {
            float* out = py + row * last;
            const float* in = px + off;
            if (lastStride == 1) {
                std::copy(in, in + last, out);
            } else {
                for (int64_t j = 0; j < last; ++j) out[j] = in[j * lastStride];
            }
            for (int64_t i = static_cast<int64_t>(r) - 2; i >= 0; --i) { // the next row, carrying
                const auto d = static_cast<size_t>(i);
                off += yStride[d];
                if (++idx[d] < ys[d]) break;
                off -= yStride[d] * ys[d];
                idx[d] = 0;
            }
        }
    }
}

namespace {

std::atomic<bool> tapKernelsOn{true};

// gatherTaps' operands: x [N, C, A], idx and w [T, N, P], y (or dy) [N, C, P].
struct TapDims {
    int64_t n, c, a, t, p;
};

TapDims tapDimsOf(const char* op, const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& y) {
    const Shape &xs = x.shape(), &is = idx.shape(), &ys = y.shape();
    if (xs.rank() != 3 || is.rank() != 3 || w.shape() != is || ys.rank() != 3 || is[1] != xs[0] ||
        ys != Shape{xs[0], xs[1], is[2]}) {
        throw ShapeError(std::string("CpuBackend::") + op +
                         ": expects x [N, C, A], idx and w [T, N, P], y [N, C, P]; got x " + xs.str() + ", idx " +
                         is.str() + ", w " + w.shape().str() + ", y " + ys.str());
    }
    const int32_t* pi = idx.data<int32_t>();
    const int64_t count = idx.numel(), limit = xs[2];
    for (int64_t i = 0; i < count; ++i) checkIndex(op, pi[i], limit);
    return {xs[0], xs[1], xs[2], is[0], is[2]};
}

bool tapOperands(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& y) {
    return tapKernelsOn.load() && x.dtype() == DType::float32 && w.dtype() == DType::float32 &&
           y.dtype() == DType::float32 && idx.dtype() == DType::int32 && x.isPlain() && idx.isPlain() && w.isPlain() &&
           y.isPlain();
}

// out[p] += w[p] * plane[at[p]] over one row of P.
TESSERA_CPU_CLONES void addTap(float* __restrict out, const float* __restrict plane, const int32_t* __restrict at,
                               const float* __restrict w, int64_t p) {
    for (int64_t i = 0; i < p; ++i) out[i] += w[i] * plane[at[i]];
}

// plane[at[p]] += w[p] * dy[p]: positions may repeat, so one at a time.
void scatterTap(float* plane, const int32_t* at, const float* w, const float* dy, int64_t p) {
    for (int64_t i = 0; i < p; ++i) plane[at[i]] += w[i] * dy[i];
}

// Positions per block of gatherTapsBackward's sum over the channels.
constexpr int64_t kTapBlock = 512;

} // namespace

void CpuBackend::setTapKernels(bool on) { tapKernelsOn = on; }
bool CpuBackend::tapKernels() { return tapKernelsOn.load(); }
bool CpuBackend::gathersTaps() const { return tapKernelsOn.load(); }

// Each (n, c) plane of x stays in cache while its P outputs gather all T taps.
bool CpuBackend::gatherTaps(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& y) {
    if (!tapOperands(x, idx, w, y)) return false;
    const TapDims d = tapDimsOf("gatherTaps", x, idx, w, y);
    const float* px = x.data<float>();
    const int32_t* pi = idx.data<int32_t>();
    const float* pw = w.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for if (y.numel() * d.t > kParallelMin)
    for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
        const int64_t n = nc / d.c;
        float* out = py + nc * d.p;
        std::fill_n(out, d.p, 0.0f);
        for (int64_t t = 0; t < d.t; ++t)
            addTap(out, px + nc * d.a, pi + (t * d.n + n) * d.p, pw + (t * d.n + n) * d.p, d.p);
    }
    return true;
}

// dx by planes (each (n, c) plane is one thread's, so repeated positions never race); dw by
// blocks of positions of one sample, summing over the channels into the block.
bool CpuBackend::gatherTapsBackward(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& dy,
                                    const Tensor& dx, const Tensor& dw) {
    if (!tapOperands(x, idx, w, dy) || !dx.isPlain() || dx.dtype() != DType::float32 ||
        (dw.defined() && (!dw.isPlain() || dw.dtype() != DType::float32)))
        return false;
    const TapDims d = tapDimsOf("gatherTapsBackward", x, idx, w, dy);
    if (dx.shape() != x.shape() || (dw.defined() && dw.shape() != idx.shape())) {
        throw ShapeError("CpuBackend::gatherTapsBackward: expects dx " + x.shape().str() + " and dw " +
                         idx.shape().str() + ", got dx " + dx.shape().str() +
                         (dw.defined() ? ", dw " + dw.shape().str() : std::string()));
    }
    const float* px = x.data<float>();
    const int32_t* pi = idx.data<int32_t>();
    const float* pw = w.data<float>();
    const float* pdy = dy.data<float>();
    float* pdx = dx.data<float>();
    const bool parallel = dy.numel() * d.t > kParallelMin;
#pragma omp parallel for if (parallel)
    for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
        const int64_t n = nc / d.c;
        for (int64_t t = 0; t < d.t; ++t)
            scatterTap(pdx + nc * d.a, pi + (t * d.n + n) * d.p, pw + (t * d.n + n) * d.p, pdy + nc * d.p, d.p);
    }
    if (!dw.defined()) return true;
    float* pdw = dw.data<float>();
    const int64_t blocks = (d.p + kTapBlock - 1) / kTapBlock;
#pragma omp parallel for if (parallel)
    for (int64_t nb = 0; nb < d.n * blocks; ++nb) {
        const int64_t n = nb / blocks, p0 = nb % blocks * kTapBlock, len = std::min(kTapBlock, d.p - p0);
        for (int64_t t = 0; t < d.t; ++t) std::fill_n(pdw + (t * d.n + n) * d.p + p0, len, 0.0f);
        for (int64_t c = 0; c < d.c; ++c) {
            const int64_t nc = n * d.c + c;
            for (int64_t t = 0; t < d.t; ++t) {
                const int64_t row = (t * d.n + n) * d.p + p0;
                addTap(pdw + row, px + nc * d.a, pi + row, pdy + nc * d.p + p0, len);
            }
        }
    }
    return true;
}

} // namespace tessera
