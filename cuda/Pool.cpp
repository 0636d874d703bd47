// The CUDA backend's pooling: average on cuDNN, max on Tessera's kernel (which records each window's argmax, so
// backward needs neither x nor y).
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Dnn.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

using namespace cuda_util;

using namespace cudnn_util;

namespace {

cudak::Window3 window3(const PoolParams& p, const Shape& x, const Shape& y) {
    if (x.rank() < 3 || x.rank() > 5)
        throw ShapeError("CudaBackend: pooling needs 1 to 3 spatial dims, got " + x.str());
    return element::window3(p, x, y);
}

} // namespace

// Average pooling's cuDNN descriptor (symmetric padding only).
static cudnnPoolingDescriptor_t avgPoolDesc(CudaBackend::DnnState& dnn, const PoolParams& p) {
    for (size_t d = 0; d < p.padLo.size(); ++d) {
        if (p.padLo[d] != p.padHi[d]) {
            throw BackendError("CudaBackend: cuDNN average pooling pads both sides alike; got pad " +
                               std::to_string(p.padLo[d]) + " before and " + std::to_string(p.padHi[d]) + " after");
        }
    }
    std::vector<int> window = ints(p.kernel), pad = ints(p.padLo), stride = ints(p.stride);
    while (window.size() < 2) { // 1-D pooling as 2-D over [N, C, L, 1]
        window.push_back(1);
        pad.push_back(0);
        stride.push_back(1);
    }
    const bool includePad = p.kind == PoolKind::avgWithPad;
    const std::string key = keyOf(includePad ? "avg-pad" : "avg", {window, pad, stride});
    std::lock_guard<std::mutex> lock(dnn.mutex);
    auto& slot = dnn.pools[key];
    if (!slot) {
        auto desc = std::make_unique<PoolDesc>();
        TESSERA_CUDA_CHECK(cudnnCreatePoolingDescriptor(&desc->d));
        TESSERA_CUDA_CHECK(cudnnSetPoolingNdDescriptor(
            desc->d,
            includePad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
            CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(window.size()), window.data(), pad.data(), stride.data()));
        slot = std::move(desc);
    }
    return slot->d;
}

// Pooling runs on a 16-bit type the backend carries (setCuda16BitActivations), on float32
// otherwise (carriedOrFloat32); in channels-last where x comes in it (setCudaChannelsLast),
// plain otherwise. Max pooling's argmax is laid out as y.
Tensor CudaBackend::poolForward(const PoolParams& p, const Tensor& xIn, const Shape& yShape, bool training,
                                Tensor& workspace) {
    const DType t = carriedOrFloat32(xIn.dtype());
    const Layout layout = carriedLayout(xIn.layout());
    const Tensor x = arranged(xIn, layout, t);
    Tensor y = Tensor::empty(yShape, t, device(), layout);
    if (p.kind == PoolKind::max) {
        workspace = training ? Tensor::empty(yShape, DType::int32, device()) : Tensor();
        int32_t* idx = training ? static_cast<int32_t*>(workspace.raw()) : nullptr;
        const cudak::Window3 w = window3(p, x.shape(), yShape);
        if (layout == Layout::channelsLast) {
            cudak::maxPoolForwardChannelsLast(x.raw(), y.raw(), static_cast<int>(t), idx, w,
                                              x.shape()[0] * x.shape()[1], x.shape()[1], s());
        } else if (t == DType::float32) {
            cudak::maxPoolForward(fp(x), fp(y), idx, w, x.shape()[0] * x.shape()[1], s());
        } else {
            cudak::maxPoolForwardAny(x.raw(), y.raw(), static_cast<int>(t), idx, w, x.shape()[0] * x.shape()[1], s());
        }
        return y;
    }
    workspace = Tensor();
    const float one = 1.0f, zero = 0.0f;
    s();
    TESSERA_CUDA_CHECK(cudnnPoolingForward(cudnn_, avgPoolDesc(*dnn_, p), &one, dnn_->tensor(nd(x.shape()), t, layout),
                                           x.raw(), &zero, dnn_->tensor(nd(yShape), t, layout), y.raw()));
    return y;
}

Tensor CudaBackend::poolBackward(const PoolParams& p, const Tensor& dyIn, const Tensor& workspace, const Shape& xShape,
                                 Layout xLayout) {
    // dx in dy's type (a 16-bit one where carried): Module::backward gives x's its own.
    const DType t = carriedOrFloat32(dyIn.dtype());
    const Layout layout = carriedLayout(xLayout); // the forward's
    Tensor dx;
    if (p.kind == PoolKind::max) {
        if (!workspace.defined()) throw BackendError("CudaBackend::poolBackward: no argmax from a training forward");
        // Windows may overlap: the scatter adds in float32, then rounds once.
        const Tensor dy = arranged(dyIn, layout, DType::float32);
        dx = Tensor::empty(xShape, DType::float32, device(), layout);
        const cudak::Window3 w = window3(p, xShape, dy.shape());
        const int64_t inPlane = w.in[0] * w.in[1] * w.in[2], outPlane = w.out[0] * w.out[1] * w.out[2];
        const auto* idx = static_cast<const int32_t*>(workspace.raw());
        if (layout == Layout::channelsLast) {
            cudak::maxPoolBackwardChannelsLast(fp(dy), idx, fp(dx), xShape[0] * xShape[1], xShape[1], inPlane, outPlane,
                                               s());
        } else {
            cudak::maxPoolBackward(fp(dy), idx, fp(dx), xShape[0] * xShape[1], inPlane, outPlane, s());
        }
        dx = arranged(dx, layout, t);
    } else {
        // Average pooling's gradient depends on neither x nor y; cuDNN still takes both
        // pointers, so dy and dx (of the same shapes) stand in for them.
        const Tensor dy = arranged(dyIn, layout, t);
        dx = Tensor::empty(xShape, t, device(), layout);
        const float one = 1.0f, zero = 0.0f;
        s();
        const cudnnTensorDescriptor_t yDesc = dnn_->tensor(nd(dy.shape()), t, layout),
                                      xDesc = dnn_->tensor(nd(xShape), t, layout);
        TESSERA_CUDA_CHECK(cudnnPoolingBackward(cudnn_, avgPoolDesc(*dnn_, p), &one, yDesc, dy.raw(), yDesc, dy.raw(),
                                                xDesc, dx.raw(), &zero, xDesc, dx.raw()));
    }
    return dx.toLayout(xLayout);
}

void CudaBackend::maxPoolIndices(const PoolParams& p, const Tensor& xIn, const Tensor& idx) {
    const Tensor x = xIn.plain();
    cudak::maxPoolForward(fp(x), nullptr, static_cast<int32_t*>(idx.raw()), window3(p, x.shape(), idx.shape()),
                          x.shape()[0] * x.shape()[1], s());
}

} // namespace tessera
