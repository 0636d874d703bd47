// Pooling through oneDNN (max, average with or without the padding counted), cached per
// shape and layout; outputs keep the input's layout. Max pooling of channel-blocked
// tensors (what convolutions hand on) with windows that do not overlap runs an own loop
// instead: a vector of channels per window position, the argmax kept as a byte per output
// element, and a backward that writes each input gradient once. The argmax used by
// unpooling is a plain loop, since oneDNN's max-pooling workspace is opaque.

#include <algorithm>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backend/ElementMath.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;
using dims = dnnl::memory::dims;

namespace {

dnnl::algorithm algOf(PoolKind kind) {
    switch (kind) {
    case PoolKind::max: return dnnl::algorithm::pooling_max;
    case PoolKind::avgWithPad: return dnnl::algorithm::pooling_avg_include_padding;
    case PoolKind::avgNoPad: return dnnl::algorithm::pooling_avg_exclude_padding;
    }
    throw BackendError("CpuBackend: unknown pooling kind");
}

std::vector<int64_t> keyOf(const PoolParams& p, const Shape& x, Layout layout, bool training, DType dtype) {
    std::vector<int64_t> k = {static_cast<int64_t>(p.kind), static_cast<int64_t>(layout), training,
                              static_cast<int64_t>(dtype)};
    for (const auto* v : {&p.kernel, &p.stride, &p.padLo, &p.padHi}) k.insert(k.end(), v->begin(), v->end());
    k.insert(k.end(), x.dims().begin(), x.dims().end());
    return k;
}

struct PoolEntry {
    dnnl::pooling_forward::primitive_desc pd;
    dnnl::pooling_forward fwd;
};

dnnl::pooling_forward::desc forwardDesc(const PoolParams& p, const Shape& x, const Shape& y, Layout layout,
                                        bool training, DType dtype) {
    return dnnl::pooling_forward::desc(
        training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, algOf(p.kind),
        descIn(x.dims(), layout, dnnlType(dtype)), descIn(y.dims(), layout, dnnlType(dtype)), dims(p.stride),
        dims(p.kernel), dims(p.padLo), dims(p.padHi));
}

const PoolEntry& forwardEntry(const PoolParams& p, const Shape& x, const Shape& y, Layout layout, bool training,
                              DType dtype) {
    static thread_local PrimitiveCache<PoolEntry> cache;
    return cache.get(keyOf(p, x, layout, training, dtype), [&] {
        return checkDnnl("pooling_forward", [&] {
            dnnl::pooling_forward::primitive_desc pd(forwardDesc(p, x, y, layout, training, dtype), engine());
            return PoolEntry{pd, dnnl::pooling_forward(pd)};
        });
    });
}

// ---- max pooling of channel-blocked tensors -------------------------------------------
// Storage [N, C/B, *spatial, B]: each (n, channel block) plane holds B lanes per position.

/// Max pooling of a blocked tensor with windows that do not overlap takes the own loop (the
/// common 2x2 stride 2): it beats oneDNN's there, forward and backward. Overlapping windows
/// stay with oneDNN, whose wider vectors win once each input is read several times.
bool ownMaxPool(const PoolParams& p, Layout layout) {
    if (p.kind != PoolKind::max || (layout != Layout::blocked8 && layout != Layout::blocked16)) return false;
    int64_t volume = 1;
    for (size_t d = 0; d < p.kernel.size(); ++d) {
        if (p.stride[d] < p.kernel[d]) return false;
        volume *= p.kernel[d];
    }
    return volume <= std::numeric_limits<uint8_t>::max();
}

/// Four lanes of floats, of int32 and of bytes (GCC vector extensions: one SSE operation
/// on all four). A position of a blocked tensor is B / 4 of them.
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef uint8_t U4 __attribute__((vector_size(4)));
template <class V> inline V load(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class V> inline void store(void* p, const V& v) { std::memcpy(p, &v, sizeof v); }

/// The argmax bytes of one position (Q = B / 4 vectors of window indices below 256), from
/// and to int32 lanes. SSE2 packs and unpacks them in a few instructions where a generic
/// conversion would go lane by lane.
template <int Q> inline void storeBytes(uint8_t* p, const I4 (&v)[Q]) {
#if defined(__SSE2__)
    const __m128i lo = _mm_packs_epi32(reinterpret_cast<__m128i>(v[0]), reinterpret_cast<__m128i>(v[1]));
    if constexpr (Q == 4) {
        const __m128i hi = _mm_packs_epi32(reinterpret_cast<__m128i>(v[2]), reinterpret_cast<__m128i>(v[3]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(lo, hi));
    } else {
        static_assert(Q == 2);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(lo, lo));
    }
#else
    for (int q = 0; q < Q; ++q) store(p + 4 * q, __builtin_convertvector(v[q], U4));
#endif
}
template <int Q> inline void loadBytes(const uint8_t* p, I4 (&v)[Q]) {
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    const __m128i bytes = Q == 4 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                 : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i lo = _mm_unpacklo_epi8(bytes, zero);
    v[0] = reinterpret_cast<I4>(_mm_unpacklo_epi16(lo, zero));
    v[1] = reinterpret_cast<I4>(_mm_unpackhi_epi16(lo, zero));
    if constexpr (Q == 4) {
        const __m128i hi = _mm_unpackhi_epi8(bytes, zero);
        v[2] = reinterpret_cast<I4>(_mm_unpacklo_epi16(hi, zero));
        v[3] = reinterpret_cast<I4>(_mm_unpackhi_epi16(hi, zero));
    }
#else
    for (int q = 0; q < Q; ++q) v[q] = __builtin_convertvector(load<U4>(p + 4 * q), I4);
#endif
}

/// Calls f(o, od, oh, ow) for each output position in order, o its in-plane index.
template <class F> inline void forOutputs(const element::Window3& w, F&& f) {
    int64_t o = 0;
    for (int64_t od = 0; od < w.out[0]; ++od) {
        for (int64_t oh = 0; oh < w.out[1]; ++oh) {
            for (int64_t ow = 0; ow < w.out[2]; ++ow) f(o++, od, oh, ow);
        }
    }
}

/// Calls f(k, j) for each window position of output (od, oh, ow) inside the input, in
/// window order: k its index within the window, j its in-plane position.
template <class F> inline void forWindow(const element::Window3& w, int64_t od, int64_t oh, int64_t ow, F&& f) {
    const int64_t o[3] = {od, oh, ow};
    int64_t lo[3], hi[3], at[3];
    for (int d = 0; d < 3; ++d) {
        at[d] = o[d] * w.stride[d] - w.pad[d];
        lo[d] = std::max<int64_t>(0, -at[d]);
        hi[d] = std::min<int64_t>(w.kernel[d], w.in[d] - at[d]);
    }
    for (int64_t kd = lo[0]; kd < hi[0]; ++kd) {
        for (int64_t kh = lo[1]; kh < hi[1]; ++kh) {
            const int32_t k = static_cast<int32_t>((kd * w.kernel[1] + kh) * w.kernel[2]);
            const int64_t j = ((at[0] + kd) * w.in[1] + at[1] + kh) * w.in[2] + at[2];
            for (int64_t kw = lo[2]; kw < hi[2]; ++kw) f(k + static_cast<int32_t>(kw), j + kw);
        }
    }
}

/// y <- the window maxima; with Arg, arg <- the window index of each lane's first maximum.
template <int B, bool Arg>
void maxPoolBlockedForward(const element::Window3& w, int64_t planes, const float* x, float* y, uint8_t* arg) {
    constexpr int Q = B / 4;
    const int64_t inPlane = w.in[0] * w.in[1] * w.in[2], outPlane = w.out[0] * w.out[1] * w.out[2];
#pragma omp parallel for
    for (int64_t pl = 0; pl < planes; ++pl) {
        const float* xp = x + pl * inPlane * B;
        forOutputs(w, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
            // The window's first position starts each lane; strictly greater keeps the first
            // maximum after that. (Padding never wins: forWindow skips it.)
            F4 best[Q] = {};
            I4 first[Q] = {};
            bool started = false;
            forWindow(w, od, oh, ow, [&](int32_t k, int64_t j) {
                for (int q = 0; q < Q; ++q) {
                    const F4 v = load<F4>(xp + j * B + 4 * q);
                    if (!started) {
                        best[q] = v;
                        if constexpr (Arg) first[q] = I4{} + k;
                    } else if constexpr (Arg) {
                        const I4 take = v > best[q];
                        best[q] = take ? v : best[q];
                        first[q] = take ? I4{} + k : first[q];
                    } else {
                        best[q] = v > best[q] ? v : best[q];
                    }
                }
                started = true;
            });
            const int64_t at = (pl * outPlane + o) * B;
            for (int q = 0; q < Q; ++q) store(y + at + 4 * q, best[q]);
            if constexpr (Arg) storeBytes<Q>(arg + at, first);
        });
    }
}

/// dx <- dy routed to each window's argmax; the windows do not overlap, so each position
/// is written once, and only positions no window covers need zeroing first.
template <int B>
void maxPoolBlockedBackward(const element::Window3& w, int64_t planes, const float* dy, const uint8_t* arg, float* dx) {
    constexpr int Q = B / 4;
    const int64_t inPlane = w.in[0] * w.in[1] * w.in[2], outPlane = w.out[0] * w.out[1] * w.out[2];
    bool tiled = true;
    for (int d = 0; d < 3; ++d) {
        tiled = tiled && w.pad[d] == 0 && w.stride[d] == w.kernel[d] && w.out[d] * w.stride[d] == w.in[d];
    }
#pragma omp parallel for
    for (int64_t pl = 0; pl < planes; ++pl) {
        float* dxp = dx + pl * inPlane * B;
        if (!tiled) std::memset(dxp, 0, static_cast<size_t>(inPlane * B) * sizeof(float));
        forOutputs(w, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
            const int64_t at = (pl * outPlane + o) * B;
            F4 g[Q];
            I4 a[Q];
            for (int q = 0; q < Q; ++q) g[q] = load<F4>(dy + at + 4 * q);
            loadBytes<Q>(arg + at, a);
            forWindow(w, od, oh, ow, [&](int32_t k, int64_t j) {
                for (int q = 0; q < Q; ++q) store(dxp + j * B + 4 * q, a[q] == k ? g[q] : F4{});
            });
        });
    }
}

/// Bytes of the own loop's argmax for output `y`: one per element, padding lanes included.
size_t argmaxBytes(const Shape& y, Layout layout) {
    return Tensor::storageBytes(y, DType::float32, layout) / sizeof(float);
}

/// Planes ([N, C/B]) of a blocked tensor of shape `s`.
int64_t blockedPlanes(const Shape& s, Layout layout) {
    const int64_t b = blockOf(layout);
    return s[0] * ((s[1] + b - 1) / b);
}

} // namespace

// x: [N, C, *in] -> y: [N, C, *out], x's layout and dtype (float32, or bfloat16 on
// oneDNN's bfloat16 pooling, emulated where the CPU has no bfloat16 kernels)
Tensor CpuBackend::poolForward(const PoolParams& p, const Tensor& x, const Shape& yShape, bool training,
                               Tensor& workspace) {
    const bool keep = training && p.kind == PoolKind::max;
    if (x.dtype() != DType::float32 && x.dtype() != DType::bfloat16) {
        throw BackendError("CpuBackend::poolForward: pools float32 or bfloat16, got " + str(x.dtype()));
    }
    if (emulatedBfloat16(x.dtype())) {
        return poolForward(p, x.convertedTo(DType::float32), yShape, training, workspace).convertedTo(DType::bfloat16);
    }
    if (x.dtype() == DType::float32 && ownMaxPool(p, x.layout())) {
        Tensor y = Tensor::empty(yShape, DType::float32, x.device(), x.layout());
        uint8_t* arg = nullptr;
        if (keep) {
            const size_t bytes = argmaxBytes(yShape, x.layout());
            workspace = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::int32, x.device());
            arg = reinterpret_cast<uint8_t*>(workspace.storageData<int32_t>());
        }
        const element::Window3 w = element::window3(p, x.shape(), yShape);
        const int64_t planes = blockedPlanes(x.shape(), x.layout());
        const float* px = x.storageData<float>();
        float* py = y.storageData<float>();
        if (x.layout() == Layout::blocked16) {
            keep ? maxPoolBlockedForward<16, true>(w, planes, px, py, arg)
                 : maxPoolBlockedForward<16, false>(w, planes, px, py, nullptr);
        } else {
            keep ? maxPoolBlockedForward<8, true>(w, planes, px, py, arg)
                 : maxPoolBlockedForward<8, false>(w, planes, px, py, nullptr);
        }
        return y;
    }
    const PoolEntry& e = forwardEntry(p, x.shape(), yShape, x.layout(), keep, x.dtype());
    Tensor y = Tensor::empty(yShape, x.dtype(), x.device(), x.layout());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, memOf(descOf(x), x)},
                                                  {DNNL_ARG_DST, memOf(descOf(y), y)}};
    if (keep) {
        const size_t bytes = e.pd.workspace_desc().get_size();
        workspace = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::int32, x.device());
        args[DNNL_ARG_WORKSPACE] = wrap(e.pd.workspace_desc(), workspace.raw());
    }
    checkDnnl("pooling_forward::execute", [&] { e.fwd.execute(stream(), args); });
    return y;
}

int64_t CpuBackend::poolWorkspaceBytes(const PoolParams& p, const Shape& x, const Shape& y, Layout xLayout) {
    // (float32's: a bfloat16 input's oneDNN workspace holds the same byte per output element.)
    const size_t bytes = ownMaxPool(p, xLayout)
                             ? argmaxBytes(y, xLayout)
                             : forwardEntry(p, x, y, xLayout, true, DType::float32).pd.workspace_desc().get_size();
    return static_cast<int64_t>((bytes + 3) / 4 * 4);
}

// dy: [N, C, *out] -> dx: [N, C, *in] in xLayout and dy's dtype (the forward's: a max
// pooling's workspace is its forward's of that dtype)
Tensor CpuBackend::poolBackward(const PoolParams& p, const Tensor& dy, const Tensor& workspace, const Shape& xShape,
                                Layout xLayout) {
    const bool keep = p.kind == PoolKind::max;
    if (keep && !workspace.defined()) {
        throw BackendError("CpuBackend::poolBackward: max pooling backward needs the workspace of a training forward");
    }
    const DType dtype = dy.dtype();
    if (dtype != DType::float32 && dtype != DType::bfloat16) {
        throw BackendError("CpuBackend::poolBackward: pools float32 or bfloat16, got " + str(dtype));
    }
    if (emulatedBfloat16(dtype)) { // the workspace is the float32 forward's
        return poolBackward(p, dy.convertedTo(DType::float32), workspace, xShape, xLayout).convertedTo(DType::bfloat16);
    }
    if (dtype == DType::float32 && ownMaxPool(p, xLayout)) {
        const Tensor g = dy.toLayout(xLayout);
        if (workspace.nbytes() < argmaxBytes(g.shape(), xLayout)) {
            throw BackendError("CpuBackend::poolBackward: the workspace holds " + std::to_string(workspace.nbytes()) +
                               " bytes, max pooling to " + g.shape().str() + " keeps " +
                               std::to_string(argmaxBytes(g.shape(), xLayout)) + " (not this pooling's forward?)");
        }
        Tensor dx = Tensor::empty(xShape, DType::float32, dy.device(), xLayout);
        const element::Window3 w = element::window3(p, xShape, g.shape());
        const int64_t planes = blockedPlanes(xShape, xLayout);
        const auto* arg = reinterpret_cast<const uint8_t*>(workspace.storageData<int32_t>());
        if (xLayout == Layout::blocked16) {
            maxPoolBlockedBackward<16>(w, planes, g.storageData<float>(), arg, dx.storageData<float>());
        } else {
            maxPoolBlockedBackward<8>(w, planes, g.storageData<float>(), arg, dx.storageData<float>());
        }
        return dx;
    }
    struct BwdEntry {
        dnnl::pooling_backward bwd;
        Staged diffDst;
        dnnl::memory::desc workspace;
    };
    static thread_local PrimitiveCache<BwdEntry> cache;
    const BwdEntry& e = cache.get(keyOf(p, xShape, xLayout, keep, dtype), [&] {
        const PoolEntry& f = forwardEntry(p, xShape, dy.shape(), xLayout, keep, dtype);
        return checkDnnl("pooling_backward", [&] {
            dnnl::pooling_backward::desc d(algOf(p.kind), descIn(xShape.dims(), xLayout, dnnlType(dtype)),
                                           descIn(dy.shape().dims(), xLayout, dnnlType(dtype)), dims(p.stride),
                                           dims(p.kernel), dims(p.padLo), dims(p.padHi));
            dnnl::pooling_backward::primitive_desc pd(d, engine(), f.pd);
            return BwdEntry{dnnl::pooling_backward(pd), Staged(pd.diff_dst_desc()), f.pd.workspace_desc()};
        });
    });
    Tensor dx = Tensor::empty(xShape, dtype, dy.device(), xLayout);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_DIFF_DST, e.diffDst.from(dy)},
                                                  {DNNL_ARG_DIFF_SRC, memOf(descOf(dx), dx)}};
    if (keep) args[DNNL_ARG_WORKSPACE] = wrap(e.workspace, workspace.raw());
    checkDnnl("pooling_backward::execute", [&] { e.bwd.execute(stream(), args); });
    return dx;
}

// x: [N, C, *in] -> idx: [N, C, *out] int32, flat index in the (n, c) plane of each
// window's first maximum (padding never wins)
void CpuBackend::maxPoolIndices(const PoolParams& p, const Tensor& x, const Tensor& idx) {
    const Shape& xs = x.shape();
    const Shape& ys = idx.shape();
    const size_t sp = xs.rank() - 2;
    if (sp < 1 || sp > 3) throw ShapeError("CpuBackend::maxPoolIndices: needs 1 to 3 spatial dims, got " + xs.str());
    const element::Window3 w = element::window3(p, xs, ys);
    const int64_t planes = xs[0] * xs[1], inPlane = w.in[0] * w.in[1] * w.in[2],
                  outPlane = w.out[0] * w.out[1] * w.out[2];
    const float* px = x.data<float>();
    int32_t* pi = idx.data<int32_t>();
#pragma omp parallel for
    for (int64_t pl = 0; pl < planes; ++pl) {
        const float* plane = px + pl * inPlane;
        int32_t* res = pi + pl * outPlane;
        float best = 0.0f;
        for (int64_t o = 0; o < outPlane; ++o) {
            const int64_t od = o / (w.out[1] * w.out[2]), oh = o / w.out[2] % w.out[1], ow = o % w.out[2];
            res[o] = static_cast<int32_t>(element::windowArgmax(plane, w, od, oh, ow, best));
        }
    }
}

} // namespace tessera
