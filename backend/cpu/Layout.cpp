// Layout conversions: reorders between plain and blocked storage, and the staging
// buffers the oneDNN ops use to hand data to a primitive in the layout it wants.
#include <cstdlib>
#include <string>

#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;

namespace dnnl_util {

dnnl::memory Staged::from(const dnnl::memory& src) const {
    if (passes(src.get_desc())) return src;
    if (!buffer_) buffer_ = checkDnnl("memory", [&] { return dnnl::memory(want_, engine()); });
    return into(src, *buffer_);
}

dnnl::memory Staged::into(const dnnl::memory& src, const dnnl::memory& dst) const {
    if (!reorder_ || reorderFrom_ != src.get_desc()) {
        reorder_ = checkDnnl("reorder", [&] { return dnnl::reorder(src, dst); });
        reorderFrom_ = src.get_desc();
    }
    dnnl::memory in = src, out = dst;
    checkDnnl("reorder::execute", [&] { reorder_->execute(stream(), in, out); });
    if (round_) { // every float of the buffer (a blocked layout's padding is zeros, which stay zeros)
        auto* p = static_cast<float*>(dst.get_data_handle());
        const auto n = static_cast<int64_t>(want_.get_size() / sizeof(float));
#pragma omp parallel for simd if (n > (1 << 15))
        for (int64_t i = 0; i < n; ++i) p[i] = toFloat(toBfloat16(p[i]));
    }
    return dst;
}

namespace {
// A layer's weights in a primitive's descriptor, kept between eval-mode forwards.
struct PackedWeights final : BackendState {
    Tensor bytes;               // desc.get_size() bytes
    dnnl::memory::desc desc;    // the descriptor the primitive reads
    const void* from = nullptr; // the float32 weights it was made from
    uint64_t generation = 0;    // parameterGeneration() when it was made
};
} // namespace

dnnl::memory packedWeights(const Staged& stage, const dnnl::memory& plain, const Tensor& w, LayerState* packed) {
    if (!packed || stage.passes(plain.get_desc())) return stage.from(plain); // nothing to pack when read as they are
    auto pack = std::dynamic_pointer_cast<PackedWeights>(packed->data);
    const uint64_t generation = parameterGeneration();
    if (pack && pack->from == w.raw() && pack->desc == stage.want() && pack->generation == generation) {
        return wrap(pack->desc, pack->bytes.raw());
    }
    packed->data.reset(); // the old pack, before the new one is allocated
    pack = std::make_shared<PackedWeights>();
    pack->desc = stage.want();
    const auto words = static_cast<int64_t>((pack->desc.get_size() + sizeof(float) - 1) / sizeof(float));
    pack->bytes = Tensor::empty(Shape{words}, DType::float32, w.device());
    pack->from = w.raw();
    pack->generation = generation;
    packed->data = pack;
    return stage.into(plain, wrap(pack->desc, pack->bytes.raw())); // straight into the pack
}

namespace {
// Whether oneDNN builds bfloat16 convolution and matmul primitives on this CPU (tiny ones).
bool probeBfloat16() {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    using md = dnnl::memory::desc;
    try {
        dnnl::matmul::primitive_desc mm(dnnl::matmul::desc(md({16, 16}, dt::bf16, tag::ab),
                                                           md({16, 16}, dt::bf16, tag::ab),
                                                           md({16, 16}, dt::f32, tag::ab)),
                                        engine());
        dnnl::convolution_forward::primitive_desc conv(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            md({1, 16, 4, 4}, dt::bf16, tag::any),
                                            md({16, 16, 3, 3}, dt::bf16, tag::any),
                                            md({1, 16, 4, 4}, dt::f32, tag::any), {1, 1}, {1, 1}, {1, 1}),
            engine());
        return true;
    } catch (const dnnl::error&) {
        return false;
    }
}
} // namespace

std::string isaName() {
    switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "SSE4.1";
    case dnnl::cpu_isa::avx: return "AVX";
    case dnnl::cpu_isa::avx2: return "AVX2";
    case dnnl::cpu_isa::avx2_vnni: return "AVX2 with VNNI";
    case dnnl::cpu_isa::avx512_core: return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni: return "AVX-512 with VNNI";
    case dnnl::cpu_isa::avx512_core_bf16: return "AVX-512 with bfloat16";
    case dnnl::cpu_isa::avx512_core_amx: return "AVX-512 with AMX";
    default: return "unknown";
    }
}

bool isaIncludes(dnnl::cpu_isa level) {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bits = static_cast<unsigned>(level);
    return (isa & bits) == bits;
}

bool isReference(const dnnl::primitive_desc_base& pd) {
    return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

int vectorLanes() {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    static const int lanes = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("x86-64-v4") && isaIncludes(dnnl::cpu_isa::avx512_core)) return 16;
        if (__builtin_cpu_supports("x86-64-v3") && isaIncludes(dnnl::cpu_isa::avx2)) return 8;
        return 4;
    }();
    return lanes;
#else
    return 16;
#endif
}

bool bfloat16Kernels() {
    static const bool kernels = [] {
        const char* force = std::getenv("TESSERA_BF16_EMULATE");
        if (force && std::string(force) == "1") return false;
        return probeBfloat16();
    }();
    return kernels;
}

Tensor tensorFor(const dnnl::memory::desc& md, const Shape& shape, Device device) {
    std::optional<Layout> layout = layoutOf(md);
    if (!layout) throw BackendError("CpuBackend: oneDNN chose a layout Tessera does not keep for " + shape.str());
    return Tensor::empty(shape, dtypeOf(md.data_type()), device, *layout);
}

Tensor converted(const Tensor& t, DType dtype, Layout layout) {
    if (t.dtype() == dtype && t.layout() == layout) return t;
    Tensor out = Tensor::empty(t.shape(), dtype, t.device(), layout);
    backendOf(t).reorder(t, out);
    return out;
}

} // namespace dnnl_util

bool CpuBackend::bfloat16Kernels() { return dnnl_util::bfloat16Kernels(); }

namespace {
// Between float16 and float32 storage of one dense layout (plain or channelsLast: numel
// elements in the same order), rounding to nearest even.
void convertDense(const Tensor& src, const Tensor& dst) {
    const int64_t n = src.numel();
    if (src.dtype() == DType::float16) {
        const auto* s = static_cast<const float16*>(src.raw());
        auto* d = static_cast<float*>(dst.raw());
        for (int64_t i = 0; i < n; ++i) d[i] = toFloat(s[i]);
    } else {
        const auto* s = static_cast<const float*>(src.raw());
        auto* d = static_cast<float16*>(dst.raw());
        for (int64_t i = 0; i < n; ++i) d[i] = toFloat16(s[i]);
    }
}
} // namespace

// src, dst: same shape, any layouts; the same dtype, or two floating types (converted,
// rounding to nearest even)
void CpuBackend::reorder(const Tensor& src, const Tensor& dst) {
    if (src.shape() != dst.shape() ||
        (src.dtype() != dst.dtype() && !(isFloating(src.dtype()) && isFloating(dst.dtype())))) {
        throw ShapeError("CpuBackend::reorder: " + src.shape().str() + " " + str(src.dtype()) + " to " +
                         dst.shape().str() + " " + str(dst.dtype()));
    }
    if (src.layout() == dst.layout() && src.dtype() == dst.dtype()) {
        copy(src, dst);
        return;
    }
    // oneDNN reorders no float16 on some CPUs: through float32, converted where the layout
    // is dense (float16 takes plain and channelsLast only).
    if (src.dtype() == DType::float16 || dst.dtype() == DType::float16) {
        Tensor from = src;
        if (src.dtype() == DType::float16) {
            from = Tensor::empty(src.shape(), DType::float32, src.device(), src.layout());
            convertDense(src, from);
        }
        const Tensor to = dst.dtype() == DType::float16
                              ? Tensor::empty(dst.shape(), DType::float32, dst.device(), dst.layout())
                              : dst;
        reorder(from, to);
        if (dst.dtype() == DType::float16) convertDense(to, dst);
        return;
    }
    std::vector<int64_t> key = {static_cast<int64_t>(dst.layout()), static_cast<int64_t>(dst.dtype())};
    appendKey(key, src);
    static thread_local PrimitiveCache<dnnl::reorder> cache;
    const auto& prim = cache.get(key, [&] {
        return checkDnnl("reorder", [&] {
            return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), descOf(src), engine(), descOf(dst)));
        });
    });
    dnnl::memory in = memOf(descOf(src), src), out = memOf(descOf(dst), dst);
    checkDnnl("reorder::execute", [&] { prim.execute(stream(), in, out); });
}

} // namespace tessera
