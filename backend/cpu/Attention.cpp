// Fused attention on the CPU: softmax(q k^T s) v one head at a time per thread, a chunk of
// query rows' scores kept in cache from the first product through the softmax to the
// second, and the backward from each row's log-sum-exp (the scores recomputed, the
// softmax's row sums taken from the recomputed probabilities, so the output is not read).
// Causally, a chunk computes only the keys its last row sees, the later ones in each row
// set to -inf before the softmax (so their probabilities are 0). With dropout, each
// probability's factor is drawn from its counter, as Backend::dropoutForward draws them
// over all heads' probabilities: the same masks as the blocks of heads. An additive mask
// is added to each chunk's scores; its gradient is summed per thread, then over threads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <omp.h>

#include "backend/AttentionSpec.h"
#include "backend/Random.h"
#include "backend/cpu/Clones.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"
#include "backend/cpu/OpenBlas.h"
#include "backend/cpu/VecMath.h"

namespace tessera {

namespace {

// The scores of one chunk of query rows take this many bytes (a whole row each): they stay
// in a core's L2 between the products and the softmax. But a chunk has at least kMinRows
// rows (where the head has them), up to kMaxChunkBytes and to kRaisedBytes over all threads'
// chunks: each chunk's products pack all of the head's k and v, which over thousands of keys
// costs as much as a product of a few dozen rows (4,096 keys of 128: chunks of 16 rows ran
// 2.1x slower than of 256), while many threads' chunks of that size would hold as much as
// the scores they save.
constexpr int64_t kChunkBytes = int64_t{256} << 10;
constexpr int64_t kMinRows = 256;
constexpr int64_t kMaxChunkBytes = int64_t{8} << 20;
constexpr int64_t kRaisedBytes = int64_t{32} << 20;
constexpr int64_t kLanes = 16;
// Causally, a chunk computes the keys its last row sees: at least four chunks a head (about
// 5/8 of the scores computed, not all), of at least kCausalRows rows (smaller products run
// too far below the GEMM's speed for the saving to pay); kCausalMinRows rows where the bytes
// would make fewer (more would compute more of the masked keys: 256 rows over 1,024 causal
// keys ran 1.15x slower than 64).
constexpr int64_t kCausalRows = 32;
constexpr int64_t kCausalMinRows = 64;

std::atomic<bool>& fusedOn() {
    static std::atomic<bool> on{[] {
        const char* v = std::getenv("TESSERA_CPU_FUSED_ATTENTION");
        return !(v && std::string(v) == "0");
    }()};
    return on;
}

// A row of scores as the kernels lay it out: Tk rounded up to whole vectors.
int64_t rowStride(int64_t Tk) { return (Tk + kLanes - 1) / kLanes * kLanes; }

int64_t rowsPerChunk(int64_t Tq, int64_t Tk, bool causal) {
    const int64_t row = rowStride(Tk) * static_cast<int64_t>(sizeof(float));
    const int64_t raised = std::min(kMaxChunkBytes, kRaisedBytes / omp_get_max_threads()) / row;
    const int64_t least = std::min(causal ? kCausalMinRows : kMinRows, raised);
    const int64_t R = std::clamp<int64_t>(std::max(kChunkBytes / row, least), 1, Tq);
    return causal ? std::min(R, std::max<int64_t>(kCausalRows, (Tq + 3) / 4)) : R;
}

// Backward, where the heads are fewer than the threads: how many tasks each head's chunks
// are dealt to (chunk s, s + S, ..., causal ones balanced so), each summing its chunks' dk
// and dv in a part of its own (at most kPartBytes of parts over all heads), the parts added
// after in a fixed order; or 1 (a task a head, dk and dv summed in place).
constexpr int64_t kPartBytes = int64_t{64} << 20;
// R: rowsPerChunk's rows.
int64_t splitsOf(int64_t B, int64_t Tq, int64_t Tk, int64_t d, int64_t dv, int64_t R) {
    const int64_t threads = omp_get_max_threads(), chunks = (Tq + R - 1) / R;
    if (B >= threads || chunks < 2) return 1;
    const int64_t part = Tk * (d + dv) * static_cast<int64_t>(sizeof(float));
    return std::max<int64_t>(1, std::min({threads, chunks, kPartBytes / (B * part)}));
}

// Per thread: forward, one chunk of scores and each row's 1 / sum; backward, two chunks
// (three with dropout: its factors) and, with a mask, a sum of its gradient.
int64_t scratchPerThread(int64_t Tq, int64_t Tk, bool causal, bool backward, bool dropout, int64_t maskNumel) {
    const int64_t R = rowsPerChunk(Tq, Tk, causal);
    return backward ? (dropout ? 3 : 2) * R * rowStride(Tk) + maskNumel : R * rowStride(Tk) + R;
}

// The softmax kernels' vectors: sixteen floats, held as 16 / W native vectors of W lanes
// (VecMath.h): one AVX-512 register (W 16), two AVX2 ones (W 8) or four SSE ones (W 4). A
// row's lanes are compared and added in the same order at every W, so the AVX-512 and
// AVX2 kernels compute the same bits (the baseline's, without fused multiply-add, may
// round differently). A 16-float vector left for the compiler to lower onto AVX2 spills to
// the stack and compares lane by lane: 5.8x slower.
using namespace vec;

// Across a 16-lane vector's parts: the max and the sum of its lanes in halves, lanes 0-7
// against 8-15, then 0-3 against 4-7, then pairs (a fixed order: the same bits at every W).
template <int W> [[gnu::always_inline]] inline V4 quarterMax(const typename Native<W>::F (&p)[16 / W]) {
    if constexpr (W == 16) {
        const V8 m8 = maxv(V8(__builtin_shufflevector(p[0], p[0], 0, 1, 2, 3, 4, 5, 6, 7)),
                           V8(__builtin_shufflevector(p[0], p[0], 8, 9, 10, 11, 12, 13, 14, 15)));
        return maxv(V4(__builtin_shufflevector(m8, m8, 0, 1, 2, 3)), V4(__builtin_shufflevector(m8, m8, 4, 5, 6, 7)));
    } else if constexpr (W == 8) {
        const V8 m8 = maxv(p[0], p[1]);
        return maxv(V4(__builtin_shufflevector(m8, m8, 0, 1, 2, 3)), V4(__builtin_shufflevector(m8, m8, 4, 5, 6, 7)));
    } else {
        return maxv(maxv(p[0], p[2]), maxv(p[1], p[3]));
    }
}
template <int W> [[gnu::always_inline]] inline V4 quarterSum(const typename Native<W>::F (&p)[16 / W]) {
    if constexpr (W == 16) {
        const V8 s8 = V8(__builtin_shufflevector(p[0], p[0], 0, 1, 2, 3, 4, 5, 6, 7)) +
                      V8(__builtin_shufflevector(p[0], p[0], 8, 9, 10, 11, 12, 13, 14, 15));
        return V4(__builtin_shufflevector(s8, s8, 0, 1, 2, 3)) + V4(__builtin_shufflevector(s8, s8, 4, 5, 6, 7));
    } else if constexpr (W == 8) {
        const V8 s8 = p[0] + p[1];
        return V4(__builtin_shufflevector(s8, s8, 0, 1, 2, 3)) + V4(__builtin_shufflevector(s8, s8, 4, 5, 6, 7));
    } else {
        return (p[0] + p[2]) + (p[1] + p[3]);
    }
}
template <int W> [[gnu::always_inline]] inline float maxOf(const typename Native<W>::F (&p)[16 / W]) {
    const V4 m4 = quarterMax<W>(p);
    const float x = m4[0] > m4[1] ? m4[0] : m4[1], y = m4[2] > m4[3] ? m4[2] : m4[3];
    return x > y ? x : y;
}
template <int W> [[gnu::always_inline]] inline float sumOf(const typename Native<W>::F (&p)[16 / W]) {
    const V4 s4 = quarterSum<W>(p);
    return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

// Rows of n scores, ld apart (ld >= n rounded up to 16: a row's last vectors are read and
// written whole, their lanes past n ignored) -> e^(score - the row's max) in place, inv[i] =
// 1 / the row's sum (the caller scales the product instead of the probabilities), lse[i]
// = the row's log-sum-exp (if given).
template <int W>
[[gnu::always_inline]] inline void expRowsOf(float* s, int64_t rows, int64_t n, int64_t ld, float* inv, float* lse) {
    using F = typename Native<W>::F;
    constexpr int K = kLanes / W;
    const int64_t whole = n / kLanes * kLanes, tail = n - whole;
    for (int64_t i = 0; i < rows; ++i) {
        float* x = s + i * ld;
        F top[K];
        for (int k = 0; k < K; ++k) top[k] = splat<F>(-INFINITY);
        for (int64_t j = 0; j < whole; j += kLanes)
            for (int k = 0; k < K; ++k) top[k] = maxv(load<F>(x + j + k * W), top[k]);
        if (tail) { // the parts holding lanes below n: a part past them would add -inf (max) and 0 (sum)
            for (int k = 0; k * W < tail; ++k)
                top[k] = maxv(keepFirst<W>(load<F>(x + whole + k * W), tail - k * W, -INFINITY), top[k]);
        }
        const float m = maxOf<W>(top);
        F sum[K] = {};
        for (int64_t j = 0; j < whole; j += kLanes) {
            for (int k = 0; k < K; ++k) {
                const F e = expOf<W>(load<F>(x + j + k * W) - m);
                store(x + j + k * W, e);
                sum[k] += e;
            }
        }
        if (tail) {
            for (int k = 0; k * W < tail; ++k) {
                const F e = expOf<W>(keepFirst<W>(load<F>(x + whole + k * W), tail - k * W, -INFINITY) - m);
                store(x + whole + k * W, e);
                sum[k] += e;
            }
        }
        const float total = sumOf<W>(sum);
        inv[i] = 1.0f / total;
        if (lse) lse[i] = m + std::log(total);
    }
}

// Rows of n scores, ld apart as in expRows -> exp(score - lse[i]): the probabilities again.
template <int W>
[[gnu::always_inline]] inline void probabilitiesOfRows(float* s, int64_t rows, int64_t n, int64_t ld,
                                                       const float* lse) {
    using F = typename Native<W>::F;
    const int64_t whole = n / kLanes * kLanes;
    for (int64_t i = 0; i < rows; ++i) {
        float* x = s + i * ld;
        for (int64_t j = 0; j < whole; j += W) store(x + j, expOf<W>(load<F>(x + j) - lse[i]));
        for (int64_t j = whole; j < n; j += W)
            store(x + j, expOf<W>(keepFirst<W>(load<F>(x + j), n - j, -INFINITY) - lse[i]));
    }
}

// dp <- p (dp - rowsum(p dp)): the softmax's backward, row by row (ld apart, as in expRows).
template <int W>
[[gnu::always_inline]] inline void softmaxGradRowsOf(const float* p, float* dp, int64_t rows, int64_t n, int64_t ld) {
    using F = typename Native<W>::F;
    constexpr int K = kLanes / W;
    const int64_t whole = n / kLanes * kLanes, tail = n - whole;
    for (int64_t i = 0; i < rows; ++i) {
        const float* y = p + i * ld;
        float* g = dp + i * ld;
        F acc[K] = {};
        for (int64_t j = 0; j < whole; j += kLanes)
            for (int k = 0; k < K; ++k) acc[k] += load<F>(y + j + k * W) * load<F>(g + j + k * W);
        if (tail) {
            for (int k = 0; k * W < tail; ++k) {
                const int64_t at = whole + k * W;
                acc[k] += keepFirst<W>(load<F>(y + at) * load<F>(g + at), tail - k * W, 0.0f);
            }
        }
        const float dot = sumOf<W>(acc);
        for (int64_t j = 0; j < n; j += W) store(g + j, load<F>(y + j) * (load<F>(g + j) - dot));
    }
}

// The three kernels compiled for each CPU level; `softmaxKernels` picks one set.
struct SoftmaxKernels {
    void (*expRows)(float*, int64_t, int64_t, int64_t, float*, float*);
    void (*probabilitiesOf)(float*, int64_t, int64_t, int64_t, const float*);
    void (*softmaxGradRows)(const float*, float*, int64_t, int64_t, int64_t);
};

#define TESSERA_SOFTMAX_KERNELS(W, TARGET)                                                                             \
    TARGET void expRows##W(float* s, int64_t rows, int64_t n, int64_t ld, float* inv, float* lse) {                    \
        expRowsOf<W>(s, rows, n, ld, inv, lse);                                                                        \
    }                                                                                                                  \
    TARGET void probabilitiesOf##W(float* s, int64_t rows, int64_t n, int64_t ld, const float* lse) {                  \
        probabilitiesOfRows<W>(s, rows, n, ld, lse);                                                                   \
    }                                                                                                                  \
    TARGET void softmaxGradRows##W(const float* p, float* dp, int64_t rows, int64_t n, int64_t ld) {                   \
        softmaxGradRowsOf<W>(p, dp, rows, n, ld);                                                                      \
    }                                                                                                                  \
    constexpr SoftmaxKernels kSoftmax##W{expRows##W, probabilitiesOf##W, softmaxGradRows##W};

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
TESSERA_SOFTMAX_KERNELS(16, __attribute__((target("arch=x86-64-v4"))))
TESSERA_SOFTMAX_KERNELS(8, __attribute__((target("arch=x86-64-v3"))))
TESSERA_SOFTMAX_KERNELS(4, )

// The kernels for the CPU's level as ONEDNN_MAX_CPU_ISA caps it (as OpenBLAS's kernel set
// follows it), so a capped run of the suite runs the kernels of the CPU it stands in for:
// under AVX2, an AVX-512 CPU runs an AVX2-only CPU's kernels, under SSE41 the baseline's.
const SoftmaxKernels& softmaxKernels() {
    const int lanes = dnnl_util::vectorLanes();
    return lanes == 16 ? kSoftmax16 : lanes == 8 ? kSoftmax8 : kSoftmax4;
}
#else
TESSERA_SOFTMAX_KERNELS(16, )
const SoftmaxKernels& softmaxKernels() { return kSoftmax16; }
#endif
#undef TESSERA_SOFTMAX_KERNELS

// y [rows, n], contiguous: row i times f[i].
TESSERA_CPU_CLONES void scaleRows(float* y, int64_t rows, int64_t n, const float* f) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] *= f[i];
}

// Causal masking of a chunk of rows whose first is query i0, n keys computed (ld apart
// as in expRows): row i0 + i keeps keys 0..i0 + i, the rest of its n become -inf.
void maskCausal(float* s, int64_t rows, int64_t i0, int64_t n, int64_t ld) {
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t keep = std::min(n, i0 + i + 1);
        std::fill(s + i * ld + keep, s + i * ld + n, -INFINITY);
    }
}

// The keys a chunk of rows from query i0 to i0 + r - 1 computes: causally, those its last
// row sees.
int64_t keysOf(bool causal, int64_t i0, int64_t r, int64_t Tk) { return causal ? std::min(Tk, i0 + r) : Tk; }

// Dropout factors of a chunk of rows (ld apart), n keys each, the first row's draws from
// counter `first` on and each row's Tk after the one before: with `f`, written there;
// otherwise s is multiplied by them in place. Bit for bit Backend::dropoutForward's.
TESSERA_CPU_CLONES void dropoutRows(float* s, float* f, int64_t rows, int64_t n, int64_t ld, float p, uint64_t seed,
                                    uint64_t first, int64_t Tk) {
    const float keep = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < rows; ++i) {
        const uint64_t at = first + static_cast<uint64_t>(i * Tk);
        float* x = f ? f + i * ld : s + i * ld;
        for (int64_t j = 0; j < n; ++j) {
            const float factor = randomUniform(seed, at + static_cast<uint64_t>(j)) < p ? 0.0f : keep;
            x[j] = f ? factor : x[j] * factor;
        }
    }
}

// s [rows, n] (rows ld apart) += m [rows, n] (rows mld apart: 0, one row for all).
TESSERA_CPU_CLONES void addRows(float* s, int64_t ld, const float* m, int64_t mld, int64_t rows, int64_t n) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) s[i * ld + j] += m[i * mld + j];
}

// acc [rows, n] (rows ald apart: 0, all summed into one) += g [rows, n] (rows ld apart).
TESSERA_CPU_CLONES void accumulateRows(float* acc, int64_t ald, const float* g, int64_t ld, int64_t rows, int64_t n) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) acc[i * ald + j] += g[i * ld + j];
}

// a [rows, n] *= b, rows ld apart.
TESSERA_CPU_CLONES void mulRows(float* a, const float* b, int64_t rows, int64_t n, int64_t ld) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) a[i * ld + j] *= b[i * ld + j];
}

// a [rows, n] = b * c, rows ld apart.
TESSERA_CPU_CLONES void productRows(float* a, const float* b, const float* c, int64_t rows, int64_t n, int64_t ld) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) a[i * ld + j] = b[i * ld + j] * c[i * ld + j];
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

bool fusable(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v, DType dtype) {
    if (!fusedOn().load() || dtype != DType::float32) return false;
    if (!(spec.dropout >= 0.0f && spec.dropout < 1.0f)) return false;
    if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3) return false;
    const Shape& m = spec.maskShape;
    if (m.rank() != 0 && (m.rank() != 3 || m[0] < 1 || (m[1] != q[1] && m[1] != 1) || m[2] != k[1])) return false;
    if (k[0] != q[0] || v[0] != q[0] || k[2] != q[2] || v[1] != k[1]) return false;
    return q.numel() > 0 && k.numel() > 0 && v.numel() > 0;
}

Dims dimsOf(const char* op, const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v) {
    for (const Tensor* t : {&q, &k, &v}) {
        if (t->dtype() != DType::float32 || t->layout() != Layout::plain) {
            throw BackendError(std::string("CpuBackend::") + op + ": expects plain float32 q, k and v, got " +
                               str(t->dtype()));
        }
    }
    if (!fusable(spec, q.shape(), k.shape(), v.shape(), DType::float32)) {
        throw ShapeError(std::string("CpuBackend::") + op +
                         ": expects q [B, Tq, d], k [B, Tk, d], v [B, Tk, dv], got " + q.shape().str() + ", " +
                         k.shape().str() + ", " + v.shape().str());
    }
    const Shape& m = spec.maskShape;
    if (m.rank() != 0) {
        for (const Tensor* t : {&spec.mask, &spec.dmask}) {
            if (t == &spec.dmask && !t->defined()) continue;
            if (!t->defined() || t->dtype() != DType::float32 || t->layout() != Layout::plain || t->shape() != m) {
                throw BackendError(std::string("CpuBackend::") + op + ": expects the mask" +
                                   (t == &spec.dmask ? "'s gradient" : "") + " as plain float32 " + m.str() + ", got " +
                                   (t->defined() ? str(t->dtype()) + " " + t->shape().str() : "none"));
            }
        }
        bool ok = static_cast<int64_t>(spec.maskOf.size()) == q.shape()[0];
        for (int64_t i : spec.maskOf) ok = ok && i >= 0 && i < m[0];
        if (!ok) {
            throw ShapeError(std::string("CpuBackend::") + op + ": expects maskOf to name one of the " +
                             std::to_string(m[0]) + " mask matrices for each of the " + std::to_string(q.shape()[0]) +
                             " problems, got " + std::to_string(spec.maskOf.size()) + " entries");
        }
    }
    return {q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2], v.shape()[2]};
}

// Where problem b's mask rows from query i0 on start in the mask's matrices, and how far
// apart they are (0: one row for all).
struct MaskRows {
    int64_t at, ld;
};
MaskRows maskRows(const AttentionSpec& spec, int64_t b, int64_t i0) {
    const Shape& m = spec.maskShape;
    const int64_t matrix = spec.maskOf[static_cast<size_t>(b)] * m[1] * m[2];
    return m[1] == 1 ? MaskRows{matrix, 0} : MaskRows{matrix + i0 * m[2], m[2]};
}

void gemmFailed(const char* op, bool failed) {
    if (failed) throw BackendError(std::string("CpuBackend::") + op + ": oneDNN's sgemm refused a product");
}

// Elements [from, to) of S parts `stride` apart, added in order, written from `out` on.
void sumParts(const float* first, int64_t S, int64_t stride, int64_t from, int64_t to, float* out) {
    for (int64_t j = from; j < to; ++j) {
        float sum = first[j];
        for (int64_t s = 1; s < S; ++s) sum += first[s * stride + j];
        out[j - from] = sum;
    }
}

} // namespace

void CpuBackend::setFusedAttention(bool on) { fusedOn() = on; }
bool CpuBackend::fusedAttention() { return fusedOn(); }

bool CpuBackend::fusesAttention(const AttentionSpec& spec, const Shape& q, const Shape& k, const Shape& v, DType dtype,
                                bool) const {
    return fusable(spec, q, k, v, dtype);
}

int64_t CpuBackend::fusedAttentionScratchBytes(const AttentionSpec& spec, const Shape& q, const Shape& k,
                                               const Shape& v, DType dtype, bool backward, bool) const {
    if (!fusable(spec, q, k, v, dtype)) return 0;
    const int64_t masks = spec.maskShape.rank() == 0 ? 0 : spec.maskShape.numel();
    const int64_t S = backward ? splitsOf(q[0], q[1], k[1], q[2], v[2], rowsPerChunk(q[1], k[1], spec.causal)) : 1;
    const int64_t parts = S > 1 ? q[0] * S * k[1] * (q[2] + v[2]) : 0;
    return (omp_get_max_threads() * scratchPerThread(q[1], k[1], spec.causal, backward, spec.dropout > 0.0f, masks) +
            parts) *
           static_cast<int64_t>(sizeof(float));
}

bool CpuBackend::fusedAttentionForward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& y, const Tensor& stats) {
    if (!fusable(spec, q.shape(), k.shape(), v.shape(), q.dtype())) return false;
    const Dims n = dimsOf("fusedAttentionForward", spec, q, k, v);
    const int64_t R = rowsPerChunk(n.Tq, n.Tk, spec.causal), ld = rowStride(n.Tk), chunks = (n.Tq + R - 1) / R;
    const int64_t per = scratchPerThread(n.Tq, n.Tk, spec.causal, false, false, 0);
    const Tensor scratch = Tensor::empty({omp_get_max_threads(), per}, DType::float32, device());
    const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>();
    float* py = y.data<float>();
    float* ps = scratch.data<float>();
    float* lse = stats.defined() ? stats.data<float>() : nullptr;
    const float* pm = spec.maskShape.rank() != 0 ? spec.mask.data<float>() : nullptr;
    std::atomic<bool> failed{false};
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < n.B * chunks; ++task) {
        const int64_t b = task / chunks, i0 = task % chunks * R, r = std::min(R, n.Tq - i0);
        float* s = ps + omp_get_thread_num() * per;
        float* inv = s + R * ld;
        float* yc = py + (b * n.Tq + i0) * n.dv;
        const int64_t keys = keysOf(spec.causal, i0, r, n.Tk);
        bool ok = sgemm1(false, true, r, keys, n.d, spec.scale, pq + (b * n.Tq + i0) * n.d, n.d, pk + b * n.Tk * n.d,
                         n.d, 0.0f, s, ld);
        if (pm) {
            const MaskRows m = maskRows(spec, b, i0);
            addRows(s, ld, pm + m.at, m.ld, r, keys);
        }
        if (spec.causal) maskCausal(s, r, i0, keys, ld);
        softmaxKernels().expRows(s, r, keys, ld, inv, lse ? lse + b * n.Tq + i0 : nullptr);
        if (spec.dropout > 0.0f) { // e^(s - max) dropped: the 1 / sum below makes them P * mask
            dropoutRows(s, nullptr, r, keys, ld, spec.dropout, spec.seed,
                        spec.first + static_cast<uint64_t>((b * n.Tq + i0) * n.Tk), n.Tk);
        }
        ok = ok && sgemm1(false, false, r, n.dv, keys, 1.0f, s, ld, pv + b * n.Tk * n.dv, n.dv, 0.0f, yc, n.dv);
        scaleRows(yc, r, n.dv, inv);
        if (!ok) failed = true;
    }
    gemmFailed("fusedAttentionForward", failed);
    return true;
}

// Per head, chunk after chunk of query rows: P = exp(q k^T s - lse), dv += P^T dy,
// dP = dy v^T, dS = P (dP - rowsum(P dP)), dq = s dS k, dk += s dS^T q. Causally, over
// the keys each chunk computes (dk and dv zeroed first: the first chunks reach few keys).
// With fewer heads than threads, a head's chunks split between tasks (splitsOf).
bool CpuBackend::fusedAttentionBackward(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor&, const Tensor& dy, const Tensor& stats, const Tensor& dq,
                                        const Tensor& dk, const Tensor& dv) {
    if (!fusable(spec, q.shape(), k.shape(), v.shape(), q.dtype())) return false;
    const Dims n = dimsOf("fusedAttentionBackward", spec, q, k, v);
    if (dy.dtype() != DType::float32 || dy.layout() != Layout::plain) {
        throw BackendError("CpuBackend::fusedAttentionBackward: expects a plain float32 dy, got " + str(dy.dtype()));
    }
    if (!stats.defined() || stats.shape() != Shape{n.B, n.Tq} || dy.shape() != Shape{n.B, n.Tq, n.dv}) {
        throw ShapeError("CpuBackend::fusedAttentionBackward: expects dy " + Shape{n.B, n.Tq, n.dv}.str() +
                         " and stats " + Shape{n.B, n.Tq}.str() + ", got " + dy.shape().str() + " and " +
                         (stats.defined() ? stats.shape().str() : std::string("none")));
    }
    const bool drop = spec.dropout > 0.0f;
    const int64_t masks = spec.maskShape.rank() != 0 && spec.dmask.defined() ? spec.dmask.numel() : 0;
    const int64_t R = rowsPerChunk(n.Tq, n.Tk, spec.causal), ld = rowStride(n.Tk);
    const int64_t per = scratchPerThread(n.Tq, n.Tk, spec.causal, true, drop, masks), threads = omp_get_max_threads();
    const Tensor scratch = Tensor::empty({threads, per}, DType::float32, device());
    const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>(), *pdy = dy.data<float>();
    const float* lse = stats.data<float>();
    const float* pm = spec.maskShape.rank() != 0 ? spec.mask.data<float>() : nullptr;
    float *pdq = dq.data<float>(), *pdk = dk.data<float>(), *pdv = dv.data<float>();
    float* ps = scratch.data<float>();
    const int64_t sums = (drop ? 3 : 2) * R * ld; // where each thread's sum of the mask's gradient starts
    if (masks > 0) {
        for (int64_t t = 0; t < threads; ++t) std::fill(ps + t * per + sums, ps + t * per + sums + masks, 0.0f);
    }
    const int64_t S = splitsOf(n.B, n.Tq, n.Tk, n.d, n.dv, R), part = n.Tk * (n.d + n.dv);
    const Tensor parts = S > 1 ? Tensor::empty({n.B * S, part}, DType::float32, device()) : Tensor();
    float* pp = S > 1 ? parts.data<float>() : nullptr;
    const bool zeroed = spec.causal || S > 1; // dk and dv zeroed first, then summed into
    std::atomic<bool> failed{false};
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < n.B * S; ++task) {
        const int64_t b = task / S;
        float* p = ps + omp_get_thread_num() * per;
        float* g = p + R * ld;
        float* f = g + R * ld; // with dropout: its factors
        float* acc = p + sums; // with the mask's gradient wanted: this thread's sum of it
        const float *kb = pk + b * n.Tk * n.d, *vb = pv + b * n.Tk * n.dv;
        float* dkb = S > 1 ? pp + task * part : pdk + b * n.Tk * n.d;
        float* dvb = S > 1 ? dkb + n.Tk * n.d : pdv + b * n.Tk * n.dv;
        if (zeroed) {
            std::fill(dkb, dkb + n.Tk * n.d, 0.0f);
            std::fill(dvb, dvb + n.Tk * n.dv, 0.0f);
        }
        bool ok = true;
        for (int64_t i0 = task % S * R; i0 < n.Tq && ok; i0 += S * R) {
            const int64_t r = std::min(R, n.Tq - i0), keys = keysOf(spec.causal, i0, r, n.Tk);
            const float beta = i0 == 0 && !zeroed ? 0.0f : 1.0f, scale = spec.scale;
            const float *qc = pq + (b * n.Tq + i0) * n.d, *dyc = pdy + (b * n.Tq + i0) * n.dv;
            ok = sgemm1(false, true, r, keys, n.d, scale, qc, n.d, kb, n.d, 0.0f, p, ld);
            const MaskRows m = pm ? maskRows(spec, b, i0) : MaskRows{0, 0};
            if (pm) addRows(p, ld, pm + m.at, m.ld, r, keys);
            if (spec.causal) maskCausal(p, r, i0, keys, ld);
            softmaxKernels().probabilitiesOf(p, r, keys, ld, lse + b * n.Tq + i0);
            if (drop) { // dv from P * mask (in g), dP = (dy v^T) * mask
                dropoutRows(nullptr, f, r, keys, ld, spec.dropout, spec.seed,
                            spec.first + static_cast<uint64_t>((b * n.Tq + i0) * n.Tk), n.Tk);
                productRows(g, p, f, r, keys, ld);
            }
            ok = ok && sgemm1(true, false, keys, n.dv, r, 1.0f, drop ? g : p, ld, dyc, n.dv, beta, dvb, n.dv);
            ok = ok && sgemm1(false, true, r, keys, n.dv, 1.0f, dyc, n.dv, vb, n.dv, 0.0f, g, ld);
            if (drop) mulRows(g, f, r, keys, ld);
            softmaxKernels().softmaxGradRows(p, g, r, keys, ld);
            if (masks > 0) accumulateRows(acc + m.at, m.ld, g, ld, r, keys); // dS, laid out as the mask
            ok =
                ok && sgemm1(false, false, r, n.d, keys, scale, g, ld, kb, n.d, 0.0f, pdq + (b * n.Tq + i0) * n.d, n.d);
            ok = ok && sgemm1(true, false, keys, n.d, r, scale, g, ld, qc, n.d, beta, dkb, n.d);
        }
        if (!ok) failed = true;
    }
    gemmFailed("fusedAttentionBackward", failed);
    if (S > 1) { // each head's parts added in order, in blocks of a part: dk's n.Tk d, then dv's
        constexpr int64_t kBlock = 4096;
        const int64_t blocks = (part + kBlock - 1) / kBlock, keyPart = n.Tk * n.d;
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < n.B * blocks; ++t) {
            const int64_t b = t / blocks, j0 = t % blocks * kBlock, j1 = std::min(part, j0 + kBlock);
            const float* first = pp + b * S * part;
            if (j0 < keyPart) sumParts(first, S, part, j0, std::min(j1, keyPart), pdk + b * keyPart + j0);
            if (j1 > keyPart) {
                const int64_t from = std::max(j0, keyPart);
                sumParts(first, S, part, from, j1, pdv + b * n.Tk * n.dv + from - keyPart);
            }
        }
    }
    if (masks > 0) { // the threads' sums added up
        float* out = spec.dmask.data<float>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < masks; ++i) {
            float sum = 0.0f;
            for (int64_t t = 0; t < threads; ++t) sum += ps[t * per + sums + i];
            out[i] = sum;
        }
    }
    return true;
}

} // namespace tessera
