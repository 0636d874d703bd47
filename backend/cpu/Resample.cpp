// Upsampling (oneDNN resampling) and PReLU (oneDNN prelu), cached per shape.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

using namespace dnnl_util;

namespace {

dnnl::algorithm resampleAlg(ResampleMode mode) {
    return mode == ResampleMode::nearest ? dnnl::algorithm::resampling_nearest : dnnl::algorithm::resampling_linear;
}

std::vector<int64_t> pairKey(int64_t tag, const Shape& a, const Shape& b) {
    std::vector<int64_t> k = {tag, static_cast<int64_t>(a.rank())};
    k.insert(k.end(), a.dims().begin(), a.dims().end());
    k.insert(k.end(), b.dims().begin(), b.dims().end());
    return k;
}

struct ResampleEntry {
    dnnl::resampling_forward::primitive_desc pd;
    dnnl::resampling_forward fwd;
};

const ResampleEntry& resampleForwardEntry(ResampleMode mode, const Shape& x, const Shape& y) {
    static thread_local PrimitiveCache<ResampleEntry> cache;
    return cache.get(pairKey(static_cast<int64_t>(mode), x, y), [&] {
        return checkDnnl("resampling_forward", [&] {
            dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_training, resampleAlg(mode), plainDesc(x.dims()),
                                             plainDesc(y.dims()));
            dnnl::resampling_forward::primitive_desc pd(d, engine());
            return ResampleEntry{pd, dnnl::resampling_forward(pd)};
        });
    });
}

} // namespace

// x: [N, C, *in] -> y: [N, C, *out]
void CpuBackend::resampleForward(ResampleMode mode, const Tensor& x, const Tensor& y) {
    const ResampleEntry& e = resampleForwardEntry(mode, x.shape(), y.shape());
    checkDnnl("resampling_forward::execute", [&] {
        e.fwd.execute(stream(), {{DNNL_ARG_SRC, memOf(plainDesc(x.shape().dims()), x)},
                                 {DNNL_ARG_DST, memOf(plainDesc(y.shape().dims()), y)}});
    });
}

// dy: [N, C, *out] -> dx: [N, C, *in]
void CpuBackend::resampleBackward(ResampleMode mode, const Tensor& dy, const Tensor& dx) {
    static thread_local PrimitiveCache<dnnl::resampling_backward> cache;
    const auto& bwd = cache.get(pairKey(static_cast<int64_t>(mode), dx.shape(), dy.shape()), [&] {
        const ResampleEntry& f = resampleForwardEntry(mode, dx.shape(), dy.shape());
        return checkDnnl("resampling_backward", [&] {
            dnnl::resampling_backward::desc d(resampleAlg(mode), plainDesc(dx.shape().dims()),
                                              plainDesc(dy.shape().dims()));
            return dnnl::resampling_backward(dnnl::resampling_backward::primitive_desc(d, engine(), f.pd));
        });
    });
    checkDnnl("resampling_backward::execute", [&] {
        bwd.execute(stream(), {{DNNL_ARG_DIFF_DST, memOf(plainDesc(dy.shape().dims()), dy)},
                               {DNNL_ARG_DIFF_SRC, memOf(plainDesc(dx.shape().dims()), dx)}});
    });
}

namespace {

// The slopes as a tensor broadcast over x: [1, C, 1, ...] or [1, 1, ...].
dnnl::memory::desc slopeDesc(const Tensor& x, const Tensor& slopes) {
    std::vector<int64_t> d(x.shape().rank(), 1);
    if (slopes.numel() > 1) d[1] = slopes.numel();
    return plainDesc(d);
}

struct PreluEntry {
    dnnl::prelu_forward::primitive_desc pd;
    dnnl::prelu_forward fwd;
};

const PreluEntry& preluForwardEntry(const Tensor& x, const Tensor& slopes) {
    static thread_local PrimitiveCache<PreluEntry> cache;
    return cache.get(pairKey(0, x.shape(), slopes.shape()), [&] {
        return checkDnnl("prelu_forward", [&] {
            dnnl::prelu_forward::desc d(dnnl::prop_kind::forward_training, plainDesc(x.shape().dims()),
                                        slopeDesc(x, slopes));
            dnnl::prelu_forward::primitive_desc pd(d, engine());
            return PreluEntry{pd, dnnl::prelu_forward(pd)};
        });
    });
}

} // namespace

// x: [N, C, ...], slopes: [C] or [1] -> y
void CpuBackend::preluForward(const Tensor& x, const Tensor& slopes, const Tensor& y) {
    const PreluEntry& e = preluForwardEntry(x, slopes);
    const auto md = plainDesc(x.shape().dims());
    checkDnnl("prelu_forward::execute", [&] {
        e.fwd.execute(stream(), {{DNNL_ARG_SRC, memOf(md, x)},
                                 {DNNL_ARG_WEIGHTS, memOf(slopeDesc(x, slopes), slopes)},
                                 {DNNL_ARG_DST, memOf(md, y)}});
    });
}

// -> dx, dslopes = scale * dL/dslopes + momentum * dslopes
void CpuBackend::preluBackward(const Tensor& x, const Tensor& slopes, const Tensor& dy, const Tensor& dx, float scale,
                               float momentum, const Tensor& dslopes) {
    static thread_local PrimitiveCache<dnnl::prelu_backward> cache;
    const auto& bwd = cache.get(pairKey(0, x.shape(), slopes.shape()), [&] {
        const PreluEntry& f = preluForwardEntry(x, slopes);
        return checkDnnl("prelu_backward", [&] {
            const auto md = plainDesc(x.shape().dims());
            const auto wd = slopeDesc(x, slopes);
            dnnl::prelu_backward::desc d(md, wd, md, wd);
            return dnnl::prelu_backward(dnnl::prelu_backward::primitive_desc(d, engine(), f.pd));
        });
    });
    const auto md = plainDesc(x.shape().dims());
    Tensor fresh = Tensor::empty(slopes.shape(), DType::float32, slopes.device());
    checkDnnl("prelu_backward::execute", [&] {
        bwd.execute(stream(), {{DNNL_ARG_SRC, memOf(md, x)},
                               {DNNL_ARG_WEIGHTS, memOf(slopeDesc(x, slopes), slopes)},
                               {DNNL_ARG_DIFF_DST, memOf(md, dy)},
                               {DNNL_ARG_DIFF_SRC, memOf(md, dx)},
                               {DNNL_ARG_DIFF_WEIGHTS, memOf(slopeDesc(x, slopes), fresh)}});
    });
    axpby(scale, fresh, momentum, dslopes);
}

} // namespace tessera
