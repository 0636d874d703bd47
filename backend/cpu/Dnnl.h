#pragma once
/// \file oneDNN plumbing shared by the CPU op files: the engine and stream, the status
/// checker, and a per-op cache of primitives keyed by shape. Private to backend/cpu.

#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <optional>

#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Tensor.h"

namespace tessera::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();

/// The CPU's instruction set as oneDNN uses it (capped by ONEDNN_MAX_CPU_ISA): "AVX2",
/// "AVX-512", "AVX-512 with bfloat16", "AVX-512 with AMX", ...
std::string isaName();

/// Whether oneDNN's effective instruction set (the CPU's, capped by ONEDNN_MAX_CPU_ISA)
/// includes `level`: the one test by which Tessera's own kernel choices (OpenBLAS's kernel
/// set, the fused attention's softmax kernels) follow the cap, so a capped run of the suite
/// runs the kernels of the CPU it stands in for.
bool isaIncludes(dnnl::cpu_isa level);

/// The float lanes of the vectors Tessera's own vector kernels (VecMath.h) run on: 16 where
/// the CPU is x86-64-v4 and its capped ISA includes AVX-512, 8 where it is x86-64-v3 and the
/// ISA includes AVX2, else 4 (16 off x86, where the compiler lowers the vectors itself).
int vectorLanes();

/// Whether oneDNN chose its reference (scalar) implementation for `pd` ("ref:any",
/// "lrn_ref:any", "bnorm_ref:any"...): where it does, Tessera's own loops run instead.
bool isReference(const dnnl::primitive_desc_base& pd);

/// Runs `f`, turning a dnnl::error into a BackendError that names the call (and, for
/// out-of-memory and unimplemented statuses, says what they mean).
template <class F> auto checkDnnl(const char* call, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const dnnl::error& e) {
        if (e.status == dnnl_out_of_memory) { // its message is only "could not create ..."
            throw BackendError(std::string("oneDNN: ") + call +
                               " failed: out of memory (oneDNN could not allocate its scratch or primitive memory; "
                               "use a smaller batch, or free memory)");
        }
        if (e.status == dnnl_unimplemented) { // no kernel for these types, layouts or this CPU
            throw BackendError(std::string("oneDNN: ") + call + " failed: " + e.what() +
                               " (status 3: oneDNN has no implementation for these data types and layouts on this "
                               "CPU, whose instruction set is " +
                               isaName() + ")");
        }
        throw BackendError(std::string("oneDNN: ") + call + " failed: " + e.what() + " (status " +
                           std::to_string(static_cast<int>(e.status)) + ")");
    }
}

/// oneDNN's type for a Tessera dtype.
inline dnnl::memory::data_type dnnlType(DType dtype) {
    switch (dtype) {
    case DType::float32: return dnnl::memory::data_type::f32;
    case DType::bfloat16: return dnnl::memory::data_type::bf16;
    case DType::float16: return dnnl::memory::data_type::f16;
    case DType::int32: return dnnl::memory::data_type::s32;
    }
    throw BackendError("oneDNN: unknown dtype");
}

/// Tessera's dtype for a oneDNN type (float32 and bfloat16 only: the types activations take).
inline DType dtypeOf(dnnl::memory::data_type type) {
    if (type == dnnl::memory::data_type::f32) return DType::float32;
    if (type == dnnl::memory::data_type::bf16) return DType::bfloat16;
    throw BackendError("oneDNN: a data type Tessera keeps no activations in");
}

/// A plain (row-major) memory descriptor, float32 unless told.
inline dnnl::memory::desc plainDesc(const std::vector<int64_t>& dims,
                                    dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
    static const dnnl::memory::format_tag tags[] = {dnnl::memory::format_tag::a,     dnnl::memory::format_tag::a,
                                                    dnnl::memory::format_tag::ab,    dnnl::memory::format_tag::abc,
                                                    dnnl::memory::format_tag::abcd,  dnnl::memory::format_tag::abcde,
                                                    dnnl::memory::format_tag::abcdef};
    if (dims.empty() || dims.size() > 6) throw BackendError("oneDNN: unsupported rank " + std::to_string(dims.size()));
    return dnnl::memory::desc(dims, type, tags[dims.size()]);
}

/// The tag of a blocked layout for a tensor of `rank` (3 to 5).
inline dnnl::memory::format_tag blockedTag(size_t rank, int64_t block) {
    using tag = dnnl::memory::format_tag;
    if (block == 16) return rank == 3 ? tag::nCw16c : rank == 4 ? tag::nChw16c : tag::nCdhw16c;
    return rank == 3 ? tag::nCw8c : rank == 4 ? tag::nChw8c : tag::nCdhw8c;
}

/// The descriptor of `dims` in `layout`, float32 unless told.
inline dnnl::memory::desc descIn(const std::vector<int64_t>& dims, Layout layout,
                                 dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
    if (layout == Layout::plain) return plainDesc(dims, type);
    if (layout == Layout::channelsLast) {
        using tag = dnnl::memory::format_tag;
        const size_t r = dims.size();
        return dnnl::memory::desc(dims, type, r == 3 ? tag::nwc : r == 4 ? tag::nhwc : tag::ndhwc);
    }
    return dnnl::memory::desc(dims, type, blockedTag(dims.size(), blockOf(layout)));
}

/// The descriptor of a tensor's storage (its dtype and layout).
inline dnnl::memory::desc descOf(const Tensor& t) { return descIn(t.shape().dims(), t.layout(), dnnlType(t.dtype())); }

/// The Tessera layout a oneDNN descriptor of activations is in, if it is one of ours.
inline std::optional<Layout> layoutOf(const dnnl::memory::desc& md) {
    std::vector<int64_t> dims = md.dims();
    for (Layout l : {Layout::plain, Layout::blocked16, Layout::blocked8, Layout::channelsLast}) {
        if (l != Layout::plain && (dims.size() < 3 || dims.size() > 5)) continue;
        if (md == descIn(dims, l, md.data_type())) return l;
    }
    return std::nullopt;
}

/// The storage of `t` as a oneDNN memory of descriptor `md` (which must match its layout).
inline dnnl::memory memOf(const dnnl::memory::desc& md, const Tensor& t);

struct KeyHash {
    size_t operator()(const std::vector<int64_t>& k) const {
        size_t h = 1469598103934665603ull;
        for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
        return h;
    }
};

/// Primitives built once per key (op parameters and dims) and reused afterwards.
///
/// Every cache is per thread: declare it `static thread_local`. oneDNN's primitives may not
/// run in two threads at once, nor (with its shared scratchpad) in a thread other than the
/// one that made them, and the entries' staging buffers are written on every call; so two
/// threads running models of the same shapes each build and keep their own. A cache reached
/// from a thread other than its own is a BackendError, not a silent race.
template <class Value> class PrimitiveCache {
public:
    const Value& get(const std::vector<int64_t>& key, const std::function<Value()>& make) {
        if (std::this_thread::get_id() != owner_) {
            throw BackendError("oneDNN: a primitive cache used from a thread other than its own (declare it "
                               "static thread_local)");
        }
        auto it = map_.find(key);
        if (it == map_.end()) it = map_.emplace(key, make()).first;
        return it->second;
    }

private:
    std::thread::id owner_ = std::this_thread::get_id();
    std::unordered_map<std::vector<int64_t>, Value, KeyHash> map_;
};

/// Bit pattern of a float, for use in cache keys.
inline int64_t keyOf(float v) {
    int32_t bits;
    static_assert(sizeof bits == sizeof v);
    __builtin_memcpy(&bits, &v, sizeof v);
    return bits;
}

/// A memory object over an existing buffer.
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* ptr) {
    return dnnl::memory(md, engine(), const_cast<void*>(ptr));
}

inline dnnl::memory memOf(const dnnl::memory::desc& md, const Tensor& t) {
    if (md.data_type() != dnnlType(t.dtype())) {
        throw BackendError("oneDNN: a " + str(t.dtype()) + " tensor described as another type");
    }
    return wrap(md, t.raw());
}

/// Data handed to a primitive in the descriptor it wants. When the source already has
/// it, the source itself is used; otherwise it is reordered into a buffer of this
/// stage's own. The buffer and the reorder are made on first need and kept, so a
/// primitive's stages cost nothing to rebuild in the steady state.
///
/// A rounding stage (emulated bfloat16: `want` is float32) always copies into its buffer
/// and rounds every value there to the nearest bfloat16, as a reorder into bfloat16 would.
class Staged {
public:
    explicit Staged(dnnl::memory::desc want = {}, bool roundToBfloat16 = false)
        : want_(std::move(want)), round_(roundToBfloat16) {}
    const dnnl::memory::desc& want() const { return want_; }
    /// The buffer the last reorder wrote (none before the first).
    const std::optional<dnnl::memory>& buffer() const { return buffer_; }
    /// Whether memory of descriptor `d` is read as it is (from() returns it unchanged).
    bool passes(const dnnl::memory::desc& d) const { return d == want_ && !round_; }
    /// `src` in the wanted descriptor.
    dnnl::memory from(const dnnl::memory& src) const;
    dnnl::memory from(const Tensor& t) const { return from(memOf(descOf(t), t)); }
    /// Reorders (and rounds) `src` into `dst`, a memory of the wanted descriptor; returns
    /// `dst`.
    dnnl::memory into(const dnnl::memory& src, const dnnl::memory& dst) const;

private:
    dnnl::memory::desc want_;
    bool round_ = false;
    mutable std::optional<dnnl::memory> buffer_;
    mutable std::optional<dnnl::reorder> reorder_;
    mutable dnnl::memory::desc reorderFrom_;
};

/// `w` (a layer's float32 weights, plain memory `plain`) in `stage`'s descriptor, for a
/// primitive that reads them. With a slot (`packed`: Module::packWeights in eval mode; see
/// ConvParams::packed) the converted copy is kept there, its bytes from Tessera's
/// allocator, and read again while it was made from these very weights into this
/// descriptor at the current parameterGeneration(); otherwise it is converted now into
/// `stage`'s buffer. Weights the primitive reads as they are pass unchanged.
dnnl::memory packedWeights(const Staged& stage, const dnnl::memory& plain, const Tensor& w, LayerState* packed);

/// An activation as oneDNN's eltwise algorithm and constants (what a primitive's post-op
/// takes); none for the kinds that run as loops (hardSigmoid, log).
struct EltwiseOp {
    dnnl::algorithm alg;
    float alpha = 0.0f, beta = 0.0f;
};
std::optional<EltwiseOp> eltwiseOpOf(const ActivationParams& act);

/// CpuBackend::bfloat16Kernels (probed once).
bool bfloat16Kernels();

/// Whether an op on bfloat16 tensors runs in float32 here: on CPUs without bfloat16
/// kernels (bfloat16Kernels(), the one capability query modules and backend share) oneDNN
/// has no bfloat16 pooling, batch norm or eltwise primitives, so those ops convert their
/// bfloat16 operands to float32, run the float32 primitive and round their outputs back:
/// the same values as the bfloat16 kernels' (which also compute in float32 inside), in
/// the same dtypes and layouts.
inline bool emulatedBfloat16(DType t) { return t == DType::bfloat16 && !bfloat16Kernels(); }

/// The type oneDNN's primitives take for bfloat16 compute: bf16 where the CPU has
/// bfloat16 kernels, else f32 with rounding stages.
inline dnnl::memory::data_type lowType() {
    return bfloat16Kernels() ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

/// A new tensor of `shape` whose storage has descriptor `md` (one of Tessera's layouts,
/// else BackendError), of md's type (float32 or bfloat16).
Tensor tensorFor(const dnnl::memory::desc& md, const Shape& shape, Device device);

/// `t` in `dtype` (float32 or bfloat16) and `layout`: itself when it already is, else a
/// converted copy (one oneDNN reorder).
Tensor converted(const Tensor& t, DType dtype, Layout layout);

/// Appends a tensor's dtype, layout and dims to a cache key.
inline void appendKey(std::vector<int64_t>& key, const Tensor& t) {
    key.push_back(static_cast<int64_t>(t.dtype()));
    key.push_back(static_cast<int64_t>(t.layout()));
    key.insert(key.end(), t.shape().dims().begin(), t.shape().dims().end());
}

} // namespace tessera::dnnl_util
