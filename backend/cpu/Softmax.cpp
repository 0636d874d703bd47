// Softmax and log-softmax over dim 1 through oneDNN, plus the engine and stream every oneDNN op shares.
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/Dnnl.h"

namespace tessera {

namespace dnnl_util {
dnnl::engine& engine() {
    static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}
// Per thread, like the primitive caches (Dnnl.h).
dnnl::stream& stream() {
    static thread_local dnnl::stream s(engine());
    return s;
}
} // namespace dnnl_util

using namespace dnnl_util;

namespace {
// oneDNN 2 has a primitive family for softmax and one for log-softmax, alike in use: Fwd is
// softmax_forward or logsoftmax_forward, Bwd the matching backward.
template <class Fwd> struct ForwardPrims {
    typename Fwd::primitive_desc fwdPd;
    Fwd fwd;
};

template <class Fwd> const ForwardPrims<Fwd>& forwardPrims(const std::vector<int64_t>& dims, const char* op) {
    static thread_local PrimitiveCache<ForwardPrims<Fwd>> cache;
    return cache.get(dims, [&] {
        return checkDnnl(op, [&] {
            typename Fwd::desc d(dnnl::prop_kind::forward_training, plainDesc(dims), 1);
            typename Fwd::primitive_desc pd(d, engine());
            return ForwardPrims<Fwd>{pd, Fwd(pd)};
        });
    });
}

void requireAxis1(const char* op, const Tensor& t) {
    if (t.shape().rank() < 2) {
        throw ShapeError(std::string("CpuBackend::") + op + ": needs [N, C, ...], got " + t.shape().str());
    }
}

// x, y: [N, C, ...]
template <class Fwd> void forward(const char* op, const Tensor& x, const Tensor& y) {
    requireAxis1(op, x);
    const auto& prims = forwardPrims<Fwd>(x.shape().dims(), op);
    auto md = prims.fwdPd.src_desc();
    checkDnnl(op, [&] {
        prims.fwd.execute(stream(),
                          {{DNNL_ARG_SRC, wrap(md, x.data<float>())}, {DNNL_ARG_DST, wrap(md, y.data<float>())}});
    });
}

// y (the forward's output), dy, dx: [N, C, ...]
template <class Fwd, class Bwd> void backward(const char* op, const Tensor& y, const Tensor& dy, const Tensor& dx) {
    requireAxis1(op, y);
    const auto& dims = y.shape().dims();
    static thread_local PrimitiveCache<Bwd> cache;
    const auto& bwd = cache.get(dims, [&] {
        return checkDnnl(op, [&] {
            auto md = plainDesc(dims);
            typename Bwd::desc d(md, md, 1);
            typename Bwd::primitive_desc pd(d, engine(), forwardPrims<Fwd>(dims, op).fwdPd);
            return Bwd(pd);
        });
    });
    auto md = plainDesc(dims);
    checkDnnl(op, [&] {
        bwd.execute(stream(), {{DNNL_ARG_DST, wrap(md, y.data<float>())},
                               {DNNL_ARG_DIFF_DST, wrap(md, dy.data<float>())},
                               {DNNL_ARG_DIFF_SRC, wrap(md, dx.data<float>())}});
    });
}
} // namespace

void CpuBackend::softmaxForward(const Tensor& x, const Tensor& y) {
    forward<dnnl::softmax_forward>("softmaxForward", x, y);
}

void CpuBackend::softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    backward<dnnl::softmax_forward, dnnl::softmax_backward>("softmaxBackward", y, dy, dx);
}

void CpuBackend::logSoftmaxForward(const Tensor& x, const Tensor& y) {
    forward<dnnl::logsoftmax_forward>("logSoftmaxForward", x, y);
}

void CpuBackend::logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    backward<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>("logSoftmaxBackward", y, dy, dx);
}

} // namespace tessera
