// GEMM through OpenBLAS (the OpenMP build, sharing oneDNN's thread pool) in float32, and
// through oneDNN's matmul in bfloat16 (AMX or AVX-512 BF16 where the CPU has them; the
// float32 operands are reordered into bfloat16 on the way in; emulated in float32 on CPUs
// without bfloat16 kernels); the row reductions Linear needs around it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"
#include "backend/cpu/OpenBlas.h"

namespace tessera {

namespace {
void require2D(const char* op, const char* name, const Tensor& t) {
    if (t.shape().rank() != 2) {
        throw ShapeError(std::string("CpuBackend::") + op + ": " + name + " must be 2-D, got " + t.shape().str());
    }
}
using namespace dnnl_util;
using md = dnnl::memory::desc;

// K of C <- op(A) op(B) over the last two dims of each (A: [.., M, K] or [.., K, M] with
// transA; B: [.., K, N] or [.., N, K] with transB); throws ShapeError when they do not fit C.
int64_t productDepth(const char* op, bool transA, bool transB, const Shape& a, const Shape& b, const Shape& c) {
    const size_t r = c.rank();
    const int64_t M = c[r - 2], N = c[r - 1];
    const int64_t K = transA ? a[r - 2] : a[r - 1], am = transA ? a[r - 1] : a[r - 2];
    const int64_t bk = transB ? b[r - 1] : b[r - 2], bn = transB ? b[r - 2] : b[r - 1];
    if (am != M || bk != K || bn != N) {
        throw ShapeError(std::string("CpuBackend::") + op + ": op(A) " + Shape{am, K}.str() + " x op(B) " +
                         Shape{bk, bn}.str() + " does not give C " + c.str());
    }
    return K;
}

// A bfloat16 matmul C <- alpha op(A) op(B) + beta C: bfloat16 operands (reordered from the
// float32 ones, transposes read through strides), float32 result.
//
// B (a Linear's weights) is converted on every call unless the layer keeps it packed
// (gemmWeights: converted once, into the blocked layout), and at a small M (a batch) the
// conversion costs as much as the product: into oneDNN's blocked layout it is a reorder
// that runs several times slower from a transposed source with a power-of-two stride
// (W^T of a 1024x1024 Linear: 0.8 ms against 0.08 ms for a plain conversion, Zen 5),
// while the matmul on plain bfloat16 weights (their own strides; oneDNN packs them
// inside) runs up to 15% slower than on blocked ones. Which wins depends on the shape
// and the CPU, so a new entry times both (conversion and product, on scratch buffers)
// and keeps the faster. Both give the same bits: the kernel packs plain weights into the
// same blocks.
struct MatmulEntry {
    dnnl::matmul prim;
    md userA, userB, userC, c; // userC: C as the caller holds it; c: what the matmul writes
    md bias;                   // [1, N] float32, or empty
    Staged a, b;
    Staged cIn, cOut; // userC into c (read where beta is not 0) and back, where they differ
};

// The operands' dtypes, and whether a bias is added (part of a matmul's cache key).
struct GemmTypes {
    DType a = DType::float32, b = DType::float32, c = DType::float32;
    bool bias = false;
    std::optional<EltwiseOp> act = std::nullopt; // applied to the sums (a post-op)
};

// alpha as the output scale, beta as a sum post-op, and an activation's eltwise post-op.
dnnl::primitive_attr attrOf(float alpha, float beta, const std::optional<EltwiseOp>& act = std::nullopt) {
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    dnnl::post_ops ops;
    if (beta != 0.0f) ops.append_sum(beta);
    if (act) ops.append_eltwise(1.0f, act->alg, act->alpha, act->beta);
    if (ops.len() > 0) attr.set_post_ops(ops);
    return attr;
}

// A matmul's cache key: `head`, then the activation's part (none, or its algorithm and
// constants), in one allocation (it is made on every call).
std::vector<int64_t> keyWith(std::initializer_list<int64_t> head, const std::optional<EltwiseOp>& act) {
    std::vector<int64_t> key;
    key.reserve(head.size() + 3);
    key.assign(head);
    if (!act) {
        key.push_back(-1);
    } else {
        key.insert(key.end(), {static_cast<int64_t>(act->alg), keyOf(act->alpha), keyOf(act->beta)});
    }
    return key;
}

// Milliseconds of one call of `run` (after one untimed): the best of three.
template <class F> double bestOf3(F&& run) {
    run();
    double best = 1e30;
    for (int k = 0; k < 3; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        checkDnnl("stream::wait", [&] { stream().wait(); });
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

std::atomic<GemmWeightsLayout>& weightsLayout() {
    static std::atomic<GemmWeightsLayout> layout{GemmWeightsLayout::automatic};
    return layout;
}

// The caller's operands of C <- op(A) op(B): A [M, K] and B [K, N], transposes read
// through strides, C plain, each in its own dtype; the bias [1, N] float32.
void describeOperands(MatmulEntry& e, bool transA, bool transB, int64_t M, int64_t N, int64_t K, const GemmTypes& t) {
    e.userA = md({M, K}, dnnlType(t.a), transA ? dnnl::memory::dims{1, M} : dnnl::memory::dims{K, 1});
    e.userB = md({K, N}, dnnlType(t.b), transB ? dnnl::memory::dims{1, K} : dnnl::memory::dims{N, 1});
    e.userC = md({M, N}, dnnlType(t.c), dnnl::memory::format_tag::ab);
    if (t.bias) e.bias = md({1, N}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
}

// `packed`: B is kept converted between calls (gemmWeights), so only the product counts.
// Without bfloat16 kernels the float32 matmul runs on operands rounded to bfloat16, and a
// bfloat16 C is staged through float32.
const MatmulEntry& matmulFor(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                             bool packed, const GemmTypes& types) {
    static thread_local PrimitiveCache<MatmulEntry> cache;
    GemmWeightsLayout layout = weightsLayout().load();
    if (packed && layout == GemmWeightsLayout::automatic) layout = GemmWeightsLayout::blocked;
    const std::vector<int64_t> key = keyWith({transA, transB, M, N, K, keyOf(alpha), keyOf(beta),
                                              static_cast<int64_t>(layout), static_cast<int64_t>(types.a),
                                              static_cast<int64_t>(types.b), static_cast<int64_t>(types.c), types.bias},
                                             types.act);
    return cache.get(key, [&] {
        return checkDnnl("matmul (bfloat16)", [&] {
            using dt = dnnl::memory::data_type;
            using tag = dnnl::memory::format_tag;
            const dt low = lowType();
            const bool emulate = low == dt::f32;
            const dnnl::primitive_attr attr = attrOf(alpha, beta, types.act);
            auto make = [&](const md& weights) {
                MatmulEntry e;
                describeOperands(e, transA, transB, M, N, K, types);
                e.c = emulate ? md({M, N}, dt::f32, tag::ab) : e.userC;
                dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md({M, K}, low, tag::any), weights, e.bias, e.c),
                                                attr, engine());
                e.prim = dnnl::matmul(pd);
                e.a = Staged(pd.src_desc(), emulate);
                e.b = Staged(pd.weights_desc(), emulate);
                e.cIn = Staged(e.c);
                e.cOut = Staged(e.userC);
                return e;
            };
            const md plainB({K, N}, low, transB ? tag::ba : tag::ab);
            if (emulate || layout == GemmWeightsLayout::blocked) return make(md({K, N}, low, tag::any));
            if (layout == GemmWeightsLayout::plain) return make(plainB);
            MatmulEntry blocked = make(md({K, N}, low, tag::any)), plain = make(plainB);
            if (plain.b.want() == blocked.b.want()) return blocked;
            // Time both on scratch operands (zeros: the kernels' speed does not depend on values).
            const dnnl::memory b(blocked.userB, engine()), c(blocked.c, engine());
            auto zeroed = [](const dnnl::memory& m) {
                std::memset(m.get_data_handle(), 0, m.get_desc().get_size());
                return m;
            };
            zeroed(b);
            zeroed(c);
            const dnnl::memory bias = types.bias ? zeroed(dnnl::memory(blocked.bias, engine())) : dnnl::memory();
            auto timeOf = [&](const MatmulEntry& e) {
                const dnnl::memory src = zeroed(dnnl::memory(e.a.want(), engine()));
                return bestOf3([&] { // B's conversion and the product
                    std::unordered_map<int, dnnl::memory> args = {
                        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, e.b.from(b)}, {DNNL_ARG_DST, c}};
                    if (types.bias) args[DNNL_ARG_BIAS] = bias;
                    e.prim.execute(stream(), args);
                });
            };
            return timeOf(plain) < timeOf(blocked) ? plain : blocked;
        });
    });
}

// A float32 matmul C <- alpha op(A) op(B) + beta C on oneDNN's kernels: A and C read and
// written as they are, B either read as it is (plain: transposes through strides) or
// converted into the blocked layout the kernel picks (once, for B kept packed by
// gemmWeights; else on every call, into the entry's buffer). Which of the two is faster
// without packing depends on the shape and the CPU: reading plain B whose rows are 3072
// floats apart ran the forward product of a 768 -> 3072 Linear at 1576 rows at half the
// speed of the blocked one, conversion included (Emerald Rapids), while at one row the
// conversion costs more than the product. So with GemmWeightsLayout::automatic the first
// call of a shape times both (conversion and product, on scratch buffers) and keeps the
// blocked layout where it is at least 10% faster, for every M of the same power-of-two range
// (a sequence length that changes from batch to batch is timed once per range); products of
// fewer than 16 rows or columns read B plain. From 16 rows and columns on the two give the
// same bits (the kernel packs plain B into the same blocks); a single row of a transposed B
// on AVX2 runs another kernel plain, rounded otherwise.
const MatmulEntry& sgemmFor(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                            bool packed, bool bias, const std::optional<EltwiseOp>& act) {
    static thread_local PrimitiveCache<MatmulEntry> cache;
    static thread_local std::unordered_map<std::vector<int64_t>, bool, KeyHash> blockedFaster;
    GemmWeightsLayout layout = weightsLayout().load();
    if (packed) layout = GemmWeightsLayout::blocked;
    const std::vector<int64_t> key =
        keyWith({transA, transB, M, N, K, keyOf(alpha), keyOf(beta), static_cast<int64_t>(layout), bias}, act);
    return cache.get(key, [&] {
        return checkDnnl("matmul (float32)", [&] {
            auto make = [&](bool blocked) {
                MatmulEntry e;
                describeOperands(e, transA, transB, M, N, K, GemmTypes{.bias = bias});
                e.c = e.userC;
                const md weights =
                    blocked ? md({K, N}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any) : e.userB;
                dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.userA, weights, e.bias, e.c),
                                                attrOf(alpha, beta, act), engine());
                e.prim = dnnl::matmul(pd);
                e.a = Staged(pd.src_desc());
                e.b = Staged(pd.weights_desc());
                e.cIn = e.cOut = Staged(e.c);
                return e;
            };
            if (layout != GemmWeightsLayout::automatic) return make(layout == GemmWeightsLayout::blocked);
            if (M < 16 || N < 16) return make(false); // a conversion costs more than it saves
            const int64_t range = int64_t{1} << (63 - __builtin_clzll(static_cast<uint64_t>(M)));
            const std::vector<int64_t> rangeKey = keyWith({transA, transB, range, N, K, bias}, act);
            if (auto known = blockedFaster.find(rangeKey); known != blockedFaster.end()) return make(known->second);
            MatmulEntry blocked = make(true), plain = make(false);
            bool faster = false;
            if (!plain.b.passes(blocked.b.want())) {
                // Time both on scratch operands (zeros: the kernels' speed does not depend on values).
                auto zeroed = [](const dnnl::memory& m) {
                    std::memset(m.get_data_handle(), 0, m.get_desc().get_size());
                    return m;
                };
                const dnnl::memory a = zeroed(dnnl::memory(blocked.userA, engine())),
                                   b = zeroed(dnnl::memory(blocked.userB, engine())),
                                   c = zeroed(dnnl::memory(blocked.c, engine()));
                const dnnl::memory biasMemory = bias ? zeroed(dnnl::memory(blocked.bias, engine())) : dnnl::memory();
                auto timeOf = [&](const MatmulEntry& e) {
                    return bestOf3([&] { // B's conversion and the product
                        std::unordered_map<int, dnnl::memory> args = {
                            {DNNL_ARG_SRC, e.a.from(a)}, {DNNL_ARG_WEIGHTS, e.b.from(b)}, {DNNL_ARG_DST, c}};
                        if (bias) args[DNNL_ARG_BIAS] = biasMemory;
                        e.prim.execute(stream(), args);
                    });
                };
                faster = timeOf(blocked) < 0.9 * timeOf(plain); // near a tie, no conversion (nor its buffer)
            }
            blockedFaster[rangeKey] = faster;
            return faster ? std::move(blocked) : std::move(plain);
        });
    });
}

// One float32 matmul over a batch of products: [batch, M, K] x [batch, K, N] (transposes
// read through strides), as oneDNN runs attention's small per-head products together.
struct BatchedEntry {
    dnnl::matmul prim;
    md a, b, c;
};

const BatchedEntry& batchedFor(bool transA, bool transB, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                               float beta) {
    static thread_local PrimitiveCache<BatchedEntry> cache;
    return cache.get({transA, transB, batch, M, N, K, keyOf(alpha), keyOf(beta)}, [&] {
        return checkDnnl("matmul (float32, batched)", [&] {
            using dt = dnnl::memory::data_type;
            BatchedEntry e;
            e.a =
                md({batch, M, K}, dt::f32, transA ? dnnl::memory::dims{M * K, 1, M} : dnnl::memory::dims{M * K, K, 1});
            e.b =
                md({batch, K, N}, dt::f32, transB ? dnnl::memory::dims{K * N, 1, K} : dnnl::memory::dims{K * N, N, 1});
            e.c = md({batch, M, N}, dt::f32, dnnl::memory::format_tag::abc);
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attrOf(alpha, beta), engine());
            e.prim = dnnl::matmul(pd);
            return e;
        });
    });
}

Float32Gemm float32GemmFromEnvironment() {
    const char* env = std::getenv("TESSERA_FLOAT32_GEMM");
    const std::string v = env ? env : "";
    if (v == "openblas") return Float32Gemm::openblas;
    if (!v.empty() && v != "onednn") {
        throw BackendError("TESSERA_FLOAT32_GEMM=" + v + ": expected onednn or openblas");
    }
    return Float32Gemm::onednn;
}

std::atomic<Float32Gemm>& float32Engine() {
    static std::atomic<Float32Gemm> engine{float32GemmFromEnvironment()};
    return engine;
}

} // namespace

void CpuBackend::setFloat32Gemm(Float32Gemm engine) { float32Engine() = engine; }
Float32Gemm CpuBackend::float32Gemm() { return float32Engine(); }

void CpuBackend::setGemmWeightsLayout(GemmWeightsLayout layout) { weightsLayout() = layout; }
GemmWeightsLayout CpuBackend::gemmWeightsLayout() { return weightsLayout(); }

void CpuBackend::gemm(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                      const Tensor& C, DType compute) {
    gemmWeights(transA, transB, alpha, A, B, Tensor(), beta, C, compute, nullptr);
}

void CpuBackend::gemmWeights(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B,
                             const Tensor& bias, float beta, const Tensor& C, DType compute,
                             const std::shared_ptr<LayerState>& packed) {
    matmul(transA, transB, alpha, A, B, bias, beta, C, compute, packed, nullptr);
}

void CpuBackend::gemmWeightsActivation(bool transA, bool transB, const Tensor& A, const Tensor& B, const Tensor& bias,
                                       const Tensor& C, DType compute, const ActivationParams& act,
                                       const std::shared_ptr<LayerState>& packed) {
    if (!gemmFusesActivation(act, compute))
        return Backend::gemmWeightsActivation(transA, transB, A, B, bias, C, compute, act, packed);
    matmul(transA, transB, 1.0f, A, B, bias, 0.0f, C, compute, packed, &act);
}

bool CpuBackend::gemmFusesActivation(const ActivationParams& act, DType compute) const {
    const bool openblas = compute == DType::float32 && float32Engine().load() == Float32Gemm::openblas;
    return !openblas && (compute == DType::float32 || compute == DType::bfloat16) && eltwiseOpOf(act).has_value();
}

DType CpuBackend::gemmOutputDType(DType compute) const {
    return compute == DType::bfloat16 && bfloat16Kernels() && bfloat16Activations() ? DType::bfloat16 : DType::float32;
}

// A: [M, K] ([K, M] if transA), B: [K, N] ([N, K] if transB), C: [M, N]; `act`: an
// activation applied to the sums (gemmFusesActivation's, on oneDNN's matmul), or null.
void CpuBackend::matmul(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, const Tensor& bias,
                        float beta, const Tensor& C, DType compute, const std::shared_ptr<LayerState>& packed,
                        const ActivationParams* act) {
    require2D("gemm", "A", A);
    require2D("gemm", "B", B);
    require2D("gemm", "C", C);
    const int64_t M = C.shape()[0], N = C.shape()[1];
    const int64_t K = productDepth("gemm", transA, transB, A.shape(), B.shape(), C.shape());
    if (compute != DType::float32 && compute != DType::bfloat16) {
        throw BackendError("CpuBackend::gemm: computing in " + str(compute) +
                           " is not supported on the CPU (float32 and bfloat16 are; float16 runs on CUDA devices)");
    }
    for (const auto& [t, name] : {std::pair{&A, "A"}, {&B, "B"}, {&C, "C"}}) {
        if (t->dtype() != DType::float32 && t->dtype() != compute) {
            throw BackendError(std::string("CpuBackend::gemm: ") + name + " is " + str(t->dtype()) +
                               ", expected float32" + (compute == DType::float32 ? "" : " or " + str(compute)) +
                               " (computing in " + str(compute) + ")");
        }
    }
    if (bias.defined()) {
        requireBiasable("CpuBackend::gemmWeights", alpha, beta);
        if (bias.numel() != N || bias.dtype() != DType::float32) {
            throw ShapeError("CpuBackend::gemmWeights: the bias must be " + Shape{N}.str() + " float32, got " +
                             bias.shape().str() + " " + str(bias.dtype()));
        }
    }
    if (compute == DType::float32 && float32Engine().load() == Float32Gemm::openblas) {
        if (bias.defined()) broadcastRows(bias, C);
        cpu::openBlas().sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha,
                              A.data<float>(), static_cast<blasint>(A.shape()[1]), B.data<float>(),
                              static_cast<blasint>(B.shape()[1]), bias.defined() ? 1.0f : beta, C.data<float>(),
                              static_cast<blasint>(N));
        if (act) activationForward(*act, C, C);
        return;
    }
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (bias.defined())
            broadcastRows(bias, C);
        else
            axpby(0.0f, C, beta, C);
        if (act) activationForward(*act, C, C);
        return;
    }
    const bool keep = packed != nullptr;
    const std::optional<EltwiseOp> post = act ? eltwiseOpOf(*act) : std::nullopt;
    const MatmulEntry& e = compute == DType::bfloat16
                               ? matmulFor(transA, transB, M, N, K, alpha, beta, keep,
                                           {A.dtype(), B.dtype(), C.dtype(), bias.defined(), post})
                               : sgemmFor(transA, transB, M, N, K, alpha, beta, keep, bias.defined(), post);
    const dnnl::memory userC = wrap(e.userC, C.raw());
    const bool staged = e.c != e.userC; // a bfloat16 C, computed in float32 (no bfloat16 kernels)
    const dnnl::memory dst = !staged ? userC : beta != 0.0f ? e.cIn.from(userC) : dnnl::memory(e.c, engine());
    checkDnnl("matmul::execute", [&] {
        std::unordered_map<int, dnnl::memory> args = {
            {DNNL_ARG_SRC, e.a.from(wrap(e.userA, A.raw()))},
            {DNNL_ARG_WEIGHTS, packedWeights(e.b, wrap(e.userB, B.raw()), B, packed.get())},
            {DNNL_ARG_DST, dst}};
        if (bias.defined()) args[DNNL_ARG_BIAS] = wrap(e.bias, bias.raw());
        e.prim.execute(stream(), args);
    });
    if (staged) e.cOut.into(dst, userC);
}

void CpuBackend::gemmBatched(bool transA, bool transB, float alpha, const Tensor& A, const Tensor& B, float beta,
                             const Tensor& C) {
    for (const Tensor* t : {&A, &B, &C}) {
        if (t->shape().rank() != 3 || t->shape()[0] != C.shape()[0]) {
            throw ShapeError("CpuBackend::gemmBatched: A, B and C must be 3-D with one batch, got " + A.shape().str() +
                             ", " + B.shape().str() + ", " + C.shape().str());
        }
    }
    const int64_t batch = C.shape()[0], M = C.shape()[1], N = C.shape()[2];
    const int64_t K = productDepth("gemmBatched", transA, transB, A.shape(), B.shape(), C.shape());
    if (batch == 0 || M == 0 || N == 0) return;
    if (K == 0) return axpby(0.0f, C, beta, C);
    if (float32Engine().load() != Float32Gemm::openblas) {
        const BatchedEntry& e = batchedFor(transA, transB, batch, M, N, K, alpha, beta);
        checkDnnl("matmul::execute", [&] {
            e.prim.execute(stream(), {{DNNL_ARG_SRC, wrap(e.a, A.data<float>())},
                                      {DNNL_ARG_WEIGHTS, wrap(e.b, B.data<float>())},
                                      {DNNL_ARG_DST, wrap(e.c, C.data<float>())}});
        });
        return;
    }
    const float* pa = A.data<float>();
    const float* pb = B.data<float>();
    float* pc = C.data<float>();
    const int64_t sa = A.shape()[1] * A.shape()[2], sb = B.shape()[1] * B.shape()[2], sc = M * N;
    const auto lda = static_cast<blasint>(A.shape()[2]), ldb = static_cast<blasint>(B.shape()[2]);
    const cpu::OpenBlas& blas = cpu::openBlas();
    // OpenBLAS's OpenMP build runs single-threaded inside a parallel region
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i) {
        blas.sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                   static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, pa + i * sa, lda,
                   pb + i * sb, ldb, beta, pc + i * sc, static_cast<blasint>(N));
    }
}

bool CpuBackend::gemmPacksWeights(bool transA, bool transB, int64_t M, int64_t N, int64_t K, DType compute) {
    if (compute == DType::float32 && float32Engine().load() == Float32Gemm::openblas) return false;
    if (M <= 0 || N <= 0 || K <= 0) return false;
    const MatmulEntry& e = compute == DType::bfloat16 ? matmulFor(transA, transB, M, N, K, 1.0f, 0.0f, true, {})
                                                      : sgemmFor(transA, transB, M, N, K, 1.0f, 0.0f, true, false, {});
    return !e.b.passes(e.userB);
}

// row: [M], y: [N, M]
void CpuBackend::broadcastRows(const Tensor& row, const Tensor& y) {
    require2D("broadcastRows", "y", y);
    const int64_t N = y.shape()[0], M = y.shape()[1];
    if (row.numel() != M) {
        throw ShapeError("CpuBackend::broadcastRows: row " + row.shape().str() + " does not fit rows of " +
                         y.shape().str());
    }
    const float* pr = row.data<float>();
    if (y.dtype() == DType::bfloat16) { // each value rounded once
        auto* py = y.data<bfloat16>();
#pragma omp parallel for if (N * M > (1 << 15))
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t m = 0; m < M; ++m) py[n * M + m] = toBfloat16(pr[m]);
        }
        return;
    }
    float* py = y.data<float>();
#pragma omp parallel for if (N * M > (1 << 15))
    for (int64_t n = 0; n < N; ++n) {
#pragma omp simd
        for (int64_t m = 0; m < M; ++m) py[n * M + m] = pr[m];
    }
}

// x: [N, M], y: [M]
void CpuBackend::sumRows(const Tensor& x, float alpha, float beta, const Tensor& y) {
    require2D("sumRows", "x", x);
    const int64_t N = x.shape()[0], M = x.shape()[1];
    if (y.numel() != M) {
        throw ShapeError("CpuBackend::sumRows: y " + y.shape().str() + " does not fit the columns of " +
                         x.shape().str());
    }
    if (x.dtype() != DType::float32 && x.dtype() != DType::bfloat16) {
        throw BackendError("CpuBackend::sumRows: x is " + str(x.dtype()) + ", expected float32 or bfloat16");
    }
    const bool low = x.dtype() == DType::bfloat16;
    const float* px = low ? nullptr : x.data<float>();
    const bfloat16* pl = low ? x.data<bfloat16>() : nullptr;
    float* py = y.data<float>();
    // Each thread owns a block of columns and walks the rows: the inner loop is contiguous.
#pragma omp parallel for if (N * M > (1 << 15))
    for (int64_t m0 = 0; m0 < M; m0 += 256) {
        const int64_t m1 = m0 + 256 < M ? m0 + 256 : M;
        float acc[256] = {};
        for (int64_t n = 0; n < N; ++n) {
            if (low) {
#pragma omp simd
                for (int64_t m = m0; m < m1; ++m) acc[m - m0] += toFloat(pl[n * M + m]);
            } else {
#pragma omp simd
                for (int64_t m = m0; m < m1; ++m) acc[m - m0] += px[n * M + m];
            }
        }
        for (int64_t m = m0; m < m1; ++m) py[m] = alpha * acc[m - m0] + (beta == 0.0f ? 0.0f : beta * py[m]);
    }
}

} // namespace tessera
