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
struct SoftmaxPrims {
    dnnl::softmax_forward::primitive_desc fwdPd;
    dnnl::softmax_forward fwd;
};

const SoftmaxPrims& forwardPrims(const std::vector<int64_t>& dims) {
    static thread_local PrimitiveCache<SoftmaxPrims> cache;
    return cache.get(dims, [&] {
        return checkDnnl("softmax_forward", [&] {
            dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_training, plainDesc(dims), 1);
            dnnl::softmax_forward::primitive_desc pd(d, engine());
            return SoftmaxPrims{pd, dnnl::softmax_forward(pd)};
        });
    });
}

struct LogSoftmaxPrims {
    dnnl::logsoftmax_forward::primitive_desc fwdPd;
    dnnl::logsoftmax_forward fwd;
};

const LogSoftmaxPrims& logForwardPrims(const std::vector<int64_t>& dims) {
    static thread_local PrimitiveCache<LogSoftmaxPrims> cache;
    return cache.get(dims, [&] {
        return checkDnnl("logsoftmax_forward", [&] {
            dnnl::logsoftmax_forward::desc d(dnnl::prop_kind::forward_training, plainDesc(dims), 1);
            dnnl::logsoftmax_forward::primitive_desc pd(d, engine());
            return LogSoftmaxPrims{pd, dnnl::logsoftmax_forward(pd)};
        });
    });
}

void requireAxis1(const char* op, const Tensor& t) {
    if (t.shape().rank() < 2) {
        throw ShapeError(std::string("CpuBackend::") + op + ": needs [N, C, ...], got " + t.shape().str());
    }
}
} // namespace

// x, y: [N, C, ...]
void CpuBackend::softmaxForward(const Tensor& x, const Tensor& y) {
    requireAxis1("softmaxForward", x);
    const auto& dims = x.shape().dims();
    const auto& prims = forwardPrims(dims);
    auto md = prims.fwdPd.src_desc();
    checkDnnl("softmax_forward::execute", [&] {
        prims.fwd.execute(stream(),
                          {{DNNL_ARG_SRC, wrap(md, x.data<float>())}, {DNNL_ARG_DST, wrap(md, y.data<float>())}});
    });
}

// y, dy, dx: [N, C, ...]
void CpuBackend::softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    requireAxis1("softmaxBackward", y);
    const auto& dims = y.shape().dims();
    static thread_local PrimitiveCache<dnnl::softmax_backward> cache;
    const auto& bwd = cache.get(dims, [&] {
        return checkDnnl("softmax_backward", [&] {
            auto md = plainDesc(dims);
            dnnl::softmax_backward::desc d(md, md, 1);
            dnnl::softmax_backward::primitive_desc pd(d, engine(), forwardPrims(dims).fwdPd);
            return dnnl::softmax_backward(pd);
        });
    });
    auto md = plainDesc(dims);
    checkDnnl("softmax_backward::execute", [&] {
        bwd.execute(stream(), {{DNNL_ARG_DST, wrap(md, y.data<float>())},
                               {DNNL_ARG_DIFF_DST, wrap(md, dy.data<float>())},
                               {DNNL_ARG_DIFF_SRC, wrap(md, dx.data<float>())}});
    });
}

// x, y: [N, C, ...]
void CpuBackend::logSoftmaxForward(const Tensor& x, const Tensor& y) {
    requireAxis1("logSoftmaxForward", x);
    const auto& prims = logForwardPrims(x.shape().dims());
    auto md = prims.fwdPd.src_desc();
    checkDnnl("logsoftmax_forward::execute", [&] {
        prims.fwd.execute(stream(),
                          {{DNNL_ARG_SRC, wrap(md, x.data<float>())}, {DNNL_ARG_DST, wrap(md, y.data<float>())}});
    });
}

// y, dy, dx: [N, C, ...]
void CpuBackend::logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    requireAxis1("logSoftmaxBackward", y);
    const auto& dims = y.shape().dims();
    static thread_local PrimitiveCache<dnnl::logsoftmax_backward> cache;
    const auto& bwd = cache.get(dims, [&] {
        return checkDnnl("logsoftmax_backward", [&] {
            auto md = plainDesc(dims);
            dnnl::logsoftmax_backward::desc d(md, md, 1);
            dnnl::logsoftmax_backward::primitive_desc pd(d, engine(), logForwardPrims(dims).fwdPd);
            return dnnl::logsoftmax_backward(pd);
        });
    });
    auto md = plainDesc(dims);
    checkDnnl("logsoftmax_backward::execute", [&] {
        bwd.execute(stream(), {{DNNL_ARG_DST, wrap(md, y.data<float>())},
                               {DNNL_ARG_DIFF_DST, wrap(md, dy.data<float>())},
                               {DNNL_ARG_DIFF_SRC, wrap(md, dx.data<float>())}});
    });
}

} // namespace tessera
