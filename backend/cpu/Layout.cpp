// Layout conversions: reorders between plain and blocked storage, and the staging
// buffers the oneDNN ops use to hand data to a primitive in the layout it wants.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;

namespace dnnl_util {

dnnl::memory Staged::from(const dnnl::memory& src) const {
    if (src.get_desc() == want_) return src;
    if (!buffer_) buffer_ = checkDnnl("memory", [&] { return dnnl::memory(want_, engine()); });
    if (!reorder_ || reorderFrom_ != src.get_desc()) {
        reorder_ = checkDnnl("reorder", [&] { return dnnl::reorder(src, *buffer_); });
        reorderFrom_ = src.get_desc();
    }
    dnnl::memory in = src, out = *buffer_;
    checkDnnl("reorder::execute", [&] { reorder_->execute(stream(), in, out); });
    return *buffer_;
}

Tensor tensorFor(const dnnl::memory::desc& md, const Shape& shape, Device device) {
    std::optional<Layout> layout = layoutOf(md);
    if (!layout) throw BackendError("CpuBackend: oneDNN chose a layout Tessera does not keep for " + shape.str());
    return Tensor::empty(shape, DType::float32, device, *layout);
}

} // namespace dnnl_util

// src, dst: same shape, any layouts
void CpuBackend::reorder(const Tensor& src, const Tensor& dst) {
    if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
        throw ShapeError("CpuBackend::reorder: " + src.shape().str() + " " + str(src.dtype()) + " to " +
                         dst.shape().str() + " " + str(dst.dtype()));
    }
    if (src.layout() == dst.layout()) {
        copy(src, dst);
        return;
    }
    std::vector<int64_t> key = {static_cast<int64_t>(dst.layout())};
    appendKey(key, src);
    static PrimitiveCache<dnnl::reorder> cache;
    const auto& prim = cache.get(key, [&] {
        return checkDnnl("reorder", [&] {
            return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), descOf(src), engine(), descOf(dst)));
        });
    });
    dnnl::memory in = memOf(descOf(src), src), out = memOf(descOf(dst), dst);
    checkDnnl("reorder::execute", [&] { prim.execute(stream(), in, out); });
}

} // namespace tessera
