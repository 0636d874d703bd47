// Fused attention on the CPU: softmax(q k^T s) v one head at a time per thread, a chunk of
// query rows' scores kept in cache from the first product through the softmax to the
// second, and the backward from each row's log-sum-exp (the scores recomputed, the
// softmax's row sums taken from the recomputed probabilities, so the output is not read).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <omp.h>

#include "backend/cpu/Clones.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"
#include "backend/cpu/OpenBlas.h"

namespace tessera {

namespace {

// The scores of one chunk of query rows take at most this many bytes (a whole row each):
// they stay in a core's L2 between the products and the softmax.
constexpr int64_t kChunkBytes = int64_t{256} << 10;
constexpr int64_t kLanes = 16;

std::atomic<bool>& fusedOn() {
    static std::atomic<bool> on{[] {
        const char* v = std::getenv("TESSERA_CPU_FUSED_ATTENTION");
        return !(v && std::string(v) == "0");
    }()};
    return on;
}

// A row of scores as the kernels lay it out: Tk rounded up to whole vectors.
int64_t rowStride(int64_t Tk) { return (Tk + kLanes - 1) / kLanes * kLanes; }

int64_t rowsPerChunk(int64_t Tq, int64_t Tk) {
    return std::clamp<int64_t>(kChunkBytes / (rowStride(Tk) * static_cast<int64_t>(sizeof(float))), 1, Tq);
}

// Per thread: forward, one chunk of scores and each row's 1 / sum; backward, two chunks.
int64_t scratchPerThread(int64_t Tq, int64_t Tk, bool backward) {
    const int64_t R = rowsPerChunk(Tq, Tk);
    return backward ? 2 * R * rowStride(Tk) : R * rowStride(Tk) + R;
}

// Sixteen floats side by side (GCC's vector extension): one AVX-512 register, two AVX2
// ones, four SSE ones, the same bits in every clone. The helpers taking them are always
// inlined into the clones, so the ABI of passing them (which -Wpsabi warns of) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"
using V = float __attribute__((vector_size(64)));
using VI = int32_t __attribute__((vector_size(64)));
using VU = uint32_t __attribute__((vector_size(64)));

[[gnu::always_inline]] inline V splat(float x) { return V{} + x; }
[[gnu::always_inline]] inline V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
[[gnu::always_inline]] inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
// Lanes at or past n (a row's last, partial vector): `fill`.
[[gnu::always_inline]] inline V keepFirst(V v, int64_t n, float fill) {
    const VI lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return lane < static_cast<int32_t>(n) ? v : splat(fill);
}
// Across the lanes, in halves (a fixed order: the same bits on every CPU level).
using V8 = float __attribute__((vector_size(32)));
using V4 = float __attribute__((vector_size(16)));
[[gnu::always_inline]] inline float maxOf(V v) {
    const V8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    const V8 b = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const V8 m8 = a > b ? a : b;
    const V4 c = __builtin_shufflevector(m8, m8, 0, 1, 2, 3), d = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
    const V4 m4 = c > d ? c : d;
    const float x = m4[0] > m4[1] ? m4[0] : m4[1], y = m4[2] > m4[3] ? m4[2] : m4[3];
    return x > y ? x : y;
}
[[gnu::always_inline]] inline float sumOf(V v) {
    const V8 s8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const V4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

// e^x for x <= 0 (the softmax's shifted scores), 0 below -87 (where e^x leaves float's
// normal range) and for -inf: x = n ln 2 + r, |r| <= ln(2) / 2, e^r by Cephes' polynomial,
// 2^n from the exponent bits (unsigned: any input, NaN too, is defined behaviour; above 88
// it stays finite). Within 2 ulp of std::exp.
[[gnu::always_inline]] inline V expOf(V x) {
    const V lo = splat(-87.0f);
    const V hi = splat(88.0f);
    const V xc = x < lo ? lo : x > hi ? hi : x;
    const V t = xc * 1.44269504088896341f + 12582912.0f; // 1.5 * 2^23: rounds to an integer
    const V n = t - 12582912.0f;
    const VU ni = (VU)t - 0x4B400000u; // n, two's complement
    const V r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
    V p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const VU bits = (ni + 127u) << 23;
    const V e = p * (V)bits;
    return x < lo ? V{} : e;
}

// Rows of n scores, ld apart (ld >= n rounded up to 16: a row's last vector is read and
// written whole, its lanes past n ignored) -> e^(score - the row's max) in place, inv[i] =
// 1 / the row's sum (the caller scales the product instead of the probabilities), lse[i]
// = the row's log-sum-exp (if given).
TESSERA_CPU_CLONES void expRows(float* s, int64_t rows, int64_t n, int64_t ld, float* inv, float* lse) {
    const int64_t whole = n / kLanes * kLanes, tail = n - whole;
    for (int64_t i = 0; i < rows; ++i) {
        float* x = s + i * ld;
        V top = splat(-INFINITY);
        for (int64_t j = 0; j < whole; j += kLanes) {
            const V v = load(x + j);
            top = v > top ? v : top;
        }
        if (tail) {
            const V v = keepFirst(load(x + whole), tail, -INFINITY);
            top = v > top ? v : top;
        }
        const float m = maxOf(top);
        V sum{};
        for (int64_t j = 0; j < whole; j += kLanes) {
            const V e = expOf(load(x + j) - m);
            store(x + j, e);
            sum += e;
        }
        if (tail) {
            const V e = expOf(keepFirst(load(x + whole), tail, -INFINITY) - m);
            store(x + whole, e);
            sum += e;
        }
        const float total = sumOf(sum);
        inv[i] = 1.0f / total;
        if (lse) lse[i] = m + std::log(total);
    }
}

// y [rows, n], contiguous: row i times f[i].
TESSERA_CPU_CLONES void scaleRows(float* y, int64_t rows, int64_t n, const float* f) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] *= f[i];
}

// Rows of n scores, ld apart as in expRows -> exp(score - lse[i]): the probabilities again.
TESSERA_CPU_CLONES void probabilitiesOf(float* s, int64_t rows, int64_t n, int64_t ld, const float* lse) {
    const int64_t whole = n / kLanes * kLanes, tail = n - whole;
    for (int64_t i = 0; i < rows; ++i) {
        float* x = s + i * ld;
        for (int64_t j = 0; j < whole; j += kLanes) store(x + j, expOf(load(x + j) - lse[i]));
        if (tail) store(x + whole, expOf(keepFirst(load(x + whole), tail, -INFINITY) - lse[i]));
    }
}

// dp <- p (dp - rowsum(p dp)): the softmax's backward, row by row (ld apart, as in expRows).
TESSERA_CPU_CLONES void softmaxGradRows(const float* p, float* dp, int64_t rows, int64_t n, int64_t ld) {
    const int64_t whole = n / kLanes * kLanes, tail = n - whole;
    for (int64_t i = 0; i < rows; ++i) {
        const float* y = p + i * ld;
        float* g = dp + i * ld;
        V acc{};
        for (int64_t j = 0; j < whole; j += kLanes) acc += load(y + j) * load(g + j);
        if (tail) acc += keepFirst(load(y + whole) * load(g + whole), tail, 0.0f);
        const float dot = sumOf(acc);
        for (int64_t j = 0; j < n; j += kLanes) store(g + j, load(y + j) * (load(g + j) - dot));
    }
}

// One single-threaded row-major sgemm on the float32 engine (inside a parallel region,
// both engines run on the calling thread): C = alpha op(A) op(B) + beta C, C [M, N].
// Returns false where oneDNN refused it.
bool sgemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
            int64_t ldb, float beta, float* C, int64_t ldc) {
    if (CpuBackend::float32Gemm() == Float32Gemm::openblas) {
        cpu::openBlas().sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                              static_cast<blasint>(ldc));
        return true;
    }
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success;
}

struct Dims {
    int64_t B, Tq, Tk, d, dv;
};

bool fusable(const Shape& q, const Shape& k, const Shape& v, DType dtype) {
    if (!fusedOn().load() || dtype != DType::float32) return false;
    if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3) return false;
    if (k[0] != q[0] || v[0] != q[0] || k[2] != q[2] || v[1] != k[1]) return false;
    return q.numel() > 0 && k.numel() > 0 && v.numel() > 0;
}

Dims dimsOf(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
    for (const Tensor* t : {&q, &k, &v}) {
        if (t->dtype() != DType::float32 || t->layout() != Layout::plain) {
            throw BackendError(std::string("CpuBackend::") + op + ": expects plain float32 q, k and v, got " +
                               str(t->dtype()));
        }
    }
    if (!fusable(q.shape(), k.shape(), v.shape(), DType::float32)) {
        throw ShapeError(std::string("CpuBackend::") + op +
                         ": expects q [B, Tq, d], k [B, Tk, d], v [B, Tk, dv], got " + q.shape().str() + ", " +
                         k.shape().str() + ", " + v.shape().str());
    }
    return {q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2], v.shape()[2]};
}

void gemmFailed(const char* op, bool failed) {
    if (failed) throw BackendError(std::string("CpuBackend::") + op + ": oneDNN's sgemm refused a product");
}

} // namespace

void CpuBackend::setFusedAttention(bool on) { fusedOn() = on; }
bool CpuBackend::fusedAttention() { return fusedOn(); }

bool CpuBackend::fusesAttention(const Shape& q, const Shape& k, const Shape& v, DType dtype, bool) const {
    return fusable(q, k, v, dtype);
}

int64_t CpuBackend::fusedAttentionScratchBytes(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                                               bool backward, bool) const {
    if (!fusable(q, k, v, dtype)) return 0;
    return omp_get_max_threads() * scratchPerThread(q[1], k[1], backward) * static_cast<int64_t>(sizeof(float));
}

bool CpuBackend::fusedAttentionForward(float scale, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                       const Tensor& stats) {
    if (!fusable(q.shape(), k.shape(), v.shape(), q.dtype())) return false;
    const Dims n = dimsOf("fusedAttentionForward", q, k, v);
    const int64_t R = rowsPerChunk(n.Tq, n.Tk), ld = rowStride(n.Tk), chunks = (n.Tq + R - 1) / R;
    const int64_t per = scratchPerThread(n.Tq, n.Tk, false);
    const Tensor scratch = Tensor::empty({omp_get_max_threads(), per}, DType::float32, device());
    const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>();
    float* py = y.data<float>();
    float* ps = scratch.data<float>();
    float* lse = stats.defined() ? stats.data<float>() : nullptr;
    std::atomic<bool> failed{false};
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < n.B * chunks; ++task) {
        const int64_t b = task / chunks, i0 = task % chunks * R, r = std::min(R, n.Tq - i0);
        float* s = ps + omp_get_thread_num() * per;
        float* inv = s + R * ld;
        float* yc = py + (b * n.Tq + i0) * n.dv;
        bool ok = sgemm1(false, true, r, n.Tk, n.d, scale, pq + (b * n.Tq + i0) * n.d, n.d, pk + b * n.Tk * n.d, n.d,
                         0.0f, s, ld);
        expRows(s, r, n.Tk, ld, inv, lse ? lse + b * n.Tq + i0 : nullptr);
        ok = ok && sgemm1(false, false, r, n.dv, n.Tk, 1.0f, s, ld, pv + b * n.Tk * n.dv, n.dv, 0.0f, yc, n.dv);
        scaleRows(yc, r, n.dv, inv);
        if (!ok) failed = true;
    }
    gemmFailed("fusedAttentionForward", failed);
    return true;
}

// Per head, chunk after chunk of query rows: P = exp(q k^T s - lse), dv += P^T dy,
// dP = dy v^T, dS = P (dP - rowsum(P dP)), dq = s dS k, dk += s dS^T q.
bool CpuBackend::fusedAttentionBackward(float scale, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&,
                                        const Tensor& dy, const Tensor& stats, const Tensor& dq, const Tensor& dk,
                                        const Tensor& dv) {
    if (!fusable(q.shape(), k.shape(), v.shape(), q.dtype())) return false;
    const Dims n = dimsOf("fusedAttentionBackward", q, k, v);
    if (dy.dtype() != DType::float32 || dy.layout() != Layout::plain) {
        throw BackendError("CpuBackend::fusedAttentionBackward: expects a plain float32 dy, got " + str(dy.dtype()));
    }
    if (!stats.defined() || stats.shape() != Shape{n.B, n.Tq} || dy.shape() != Shape{n.B, n.Tq, n.dv}) {
        throw ShapeError("CpuBackend::fusedAttentionBackward: expects dy " + Shape{n.B, n.Tq, n.dv}.str() +
                         " and stats " + Shape{n.B, n.Tq}.str() + ", got " + dy.shape().str() + " and " +
                         (stats.defined() ? stats.shape().str() : std::string("none")));
    }
    const int64_t R = rowsPerChunk(n.Tq, n.Tk), ld = rowStride(n.Tk), per = scratchPerThread(n.Tq, n.Tk, true);
    const Tensor scratch = Tensor::empty({omp_get_max_threads(), per}, DType::float32, device());
    const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>(), *pdy = dy.data<float>();
    const float* lse = stats.data<float>();
    float *pdq = dq.data<float>(), *pdk = dk.data<float>(), *pdv = dv.data<float>();
    float* ps = scratch.data<float>();
    std::atomic<bool> failed{false};
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n.B; ++b) {
        float* p = ps + omp_get_thread_num() * per;
        float* g = p + R * ld;
        const float *kb = pk + b * n.Tk * n.d, *vb = pv + b * n.Tk * n.dv;
        float *dkb = pdk + b * n.Tk * n.d, *dvb = pdv + b * n.Tk * n.dv;
        bool ok = true;
        for (int64_t i0 = 0; i0 < n.Tq && ok; i0 += R) {
            const int64_t r = std::min(R, n.Tq - i0);
            const float beta = i0 == 0 ? 0.0f : 1.0f;
            const float *qc = pq + (b * n.Tq + i0) * n.d, *dyc = pdy + (b * n.Tq + i0) * n.dv;
            ok = sgemm1(false, true, r, n.Tk, n.d, scale, qc, n.d, kb, n.d, 0.0f, p, ld);
            probabilitiesOf(p, r, n.Tk, ld, lse + b * n.Tq + i0);
            ok = ok && sgemm1(true, false, n.Tk, n.dv, r, 1.0f, p, ld, dyc, n.dv, beta, dvb, n.dv);
            ok = ok && sgemm1(false, true, r, n.Tk, n.dv, 1.0f, dyc, n.dv, vb, n.dv, 0.0f, g, ld);
            softmaxGradRows(p, g, r, n.Tk, ld);
            ok =
                ok && sgemm1(false, false, r, n.d, n.Tk, scale, g, ld, kb, n.d, 0.0f, pdq + (b * n.Tq + i0) * n.d, n.d);
            ok = ok && sgemm1(true, false, n.Tk, n.d, r, scale, g, ld, qc, n.d, beta, dkb, n.d);
        }
        if (!ok) failed = true;
    }
    gemmFailed("fusedAttentionBackward", failed);
    return true;
}

} // namespace tessera
