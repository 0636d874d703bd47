// The CUDA backend's batch norm (cuDNN) and local response normalisation.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <cstdio>
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
// [N, C, H, W] view of an LRN input: 1-D inputs get W = 1; across channels, 3-D spatial
// dims fold into H.
void lrnDims(const LrnParams& p, const Shape& s, int64_t& h, int64_t& w) {
    if (s.rank() < 3 || s.rank() > 5 || (!p.acrossChannels && s.rank() == 5)) {
        throw ShapeError("CudaBackend::lrn: unsupported input " + s.str() +
                         (p.acrossChannels ? "" : " for within-channel LRN (1-D or 2-D maps)"));
    }
    if (s.rank() == 4) {
        h = s[2];
        w = s[3];
    } else {
        h = s.numel() / (s[0] * s[1]);
        w = 1;
    }
}
} // namespace

Tensor CudaBackend::lrnForward(const LrnParams& p, const Tensor& xIn, Tensor& workspace) {
    const Tensor x = xIn.plain();
    const Shape& sh = x.shape();
    int64_t h = 0, w = 0;
    lrnDims(p, sh, h, w);
    Tensor y = Tensor::empty(sh, DType::float32, device());
    workspace = Tensor::empty(sh, DType::float32, device());
    cudak::lrnForward(p.acrossChannels, p.size, p.alpha, p.beta, p.k, fp(x), fp(y), fp(workspace), sh[0], sh[1], h, w,
                      s());
    return y;
}

Tensor CudaBackend::lrnBackward(const LrnParams& p, const Tensor& xIn, const Tensor& dyIn, const Tensor& workspace) {
    if (!workspace.defined()) throw BackendError("CudaBackend::lrnBackward: no workspace from a forward pass");
    const Tensor x = xIn.plain(), dy = dyIn.plain();
    const Shape& sh = x.shape();
    int64_t h = 0, w = 0;
    lrnDims(p, sh, h, w);
    Tensor dx = Tensor::empty(sh, DType::float32, device());
    cudak::lrnBackward(p.acrossChannels, p.size, p.alpha, p.beta, fp(x), fp(dy), fp(workspace), fp(dx), sh[0], sh[1], h,
                       w, s());
    return dx;
}

// Batch norm runs on a 16-bit type the backend carries (cuDNN reads and writes 16-bit x, y,
// dy and dx with float32 parameters and statistics), on float32 otherwise; in channels-last
// where x comes in it (setCudaChannelsLast), plain otherwise.
Tensor CudaBackend::batchNormForward(const Tensor& xIn, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                     const Tensor& var, float eps, bool training) {
    const DType t = carriedOrFloat32(xIn.dtype());
    const Layout layout = carriedLayout(xIn.layout());
    const Tensor x = arranged(xIn, layout, t);
    if (x.shape().rank() < 2)
        throw ShapeError("CudaBackend::batchNormForward: needs [N, C, ...], got " + x.shape().str());
    Tensor y = Tensor::empty(x.shape(), t, device(), layout);
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()), t, layout);
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    if (training) {
        // Batch statistics: cuDNN saves the mean and the inverse standard deviation; the
        // biased variance the interface promises is recovered from the latter.
        Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
        TESSERA_CUDA_CHECK(cudnnBatchNormalizationForwardTraining(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xDesc,
                                                                  x.raw(), xDesc, y.raw(), pDesc, fp(scale), fp(shift),
                                                                  1.0, nullptr, nullptr, eps, fp(mean), fp(invstd)));
        cudak::varianceFromInvStd(fp(invstd), eps, fp(var), x.shape()[1], s());
    } else {
        TESSERA_CUDA_CHECK(cudnnBatchNormalizationForwardInference(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xDesc,
                                                                   x.raw(), xDesc, y.raw(), pDesc, fp(scale), fp(shift),
                                                                   fp(mean), fp(var), eps));
    }
    return y;
}

Tensor CudaBackend::batchNormBackward(const Tensor& xIn, const Tensor& dyIn, const Tensor& scale, const Tensor& mean,
                                      const Tensor& var, float eps, const Tensor& dscale, const Tensor& dshift) {
    const DType t = carriedOrFloat32(xIn.dtype());
    const Layout layout = carriedLayout(xIn.layout());
    const Tensor x = arranged(xIn, layout, t), dy = arranged(dyIn, layout, t);
    Tensor dx = Tensor::empty(x.shape(), t, device(), layout);
    Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
    cudak::invStdFromVariance(fp(var), eps, fp(invstd), x.shape()[1], s());
    const float one = 1.0f, zero = 0.0f;
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()), t, layout);
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    TESSERA_CUDA_CHECK(cudnnBatchNormalizationBackward(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xDesc,
                                                       x.raw(), xDesc, dy.raw(), xDesc, dx.raw(), pDesc, fp(scale),
                                                       fp(dscale), fp(dshift), eps, fp(mean), fp(invstd)));
    return dx;
}

Tensor CudaBackend::batchNormAddForward(const Tensor& x, const Tensor& z, const Tensor& scale, const Tensor& shift,
                                        const Tensor& mean, const Tensor& var, float eps, bool training, bool relu) {
    const DType t = carriedOrFloat32(x.dtype());
    if (!training || !relu || !is16Bit(t) || x.layout() != Layout::channelsLast || batchNormAddRefused_)
        return Backend::batchNormAddForward(x, z, scale, shift, mean, var, eps, training, relu);
    const Tensor zs = arranged(z, Layout::channelsLast, t);
    Tensor y = Tensor::empty(x.shape(), t, device(), Layout::channelsLast);
    Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()), t, Layout::channelsLast);
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    const cudnnActivationDescriptor_t act = dnn_->relu();
    const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    size_t workBytes = 0, reserveBytes = 0;
    cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(cudnn_, mode, ops, xDesc, xDesc,
                                                                                    xDesc, pDesc, act, &workBytes);
    if (status == CUDNN_STATUS_SUCCESS)
        status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnn_, mode, ops, act, xDesc, &reserveBytes);
    if (status == CUDNN_STATUS_SUCCESS) {
        // One scratch buffer: the workspace, then (256-byte aligned) the reserve space,
        // which only cuDNN's own backward would read.
        const size_t at = (workBytes + 255) / 256 * 256;
        auto* scratch = static_cast<char*>(workspace(at + reserveBytes + 1));
        status = cudnnBatchNormalizationForwardTrainingEx(cudnn_, mode, ops, &one, &zero, xDesc, x.raw(), xDesc,
                                                          zs.raw(), xDesc, y.raw(), pDesc, fp(scale), fp(shift), 1.0,
                                                          nullptr, nullptr, eps, fp(mean), fp(invstd), act, scratch,
                                                          workBytes, scratch + at, reserveBytes);
    }
    if (status == CUDNN_STATUS_SUCCESS) {
        cudak::varianceFromInvStd(fp(invstd), eps, fp(var), x.shape()[1], s());
        return y;
    }
    // NOT_SUPPORTED and BAD_PARAM: a problem this cuDNN's fused form does not take (its
    // types, layouts and sizes are narrower than the plain calls'); said once, on stderr.
    if (status != CUDNN_STATUS_NOT_SUPPORTED && status != CUDNN_STATUS_BAD_PARAM) TESSERA_CUDA_CHECK(status);
    std::fprintf(stderr,
                 "tessera: cuDNN's fused batch norm + add + ReLU answered %s for %s %s channels-last; "
                 "this process runs the normalisation and the sum apart\n",
                 cudnnGetErrorString(status), x.shape().str().c_str(), str(t).c_str());
    batchNormAddRefused_ = true;
    return Backend::batchNormAddForward(x, z, scale, shift, mean, var, eps, training, relu);
}

Tensor CudaBackend::batchNormReluForward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                                         const Tensor& var, float eps, bool training, Tensor& mask) {
    Tensor y = batchNormForward(x, scale, shift, mean, var, eps, training);
    activationForward(ActivationParams{ActivationKind::relu}, y, y);
    mask = training ? y : Tensor(); // where the output is positive, the gradient passes
    return y;
}

Tensor CudaBackend::batchNormReluBackward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor&,
                                          const Tensor& mean, const Tensor& var, float eps, const Tensor& mask,
                                          const Tensor& dscale, const Tensor& dshift) {
    if (!mask.defined()) throw BackendError("CudaBackend::batchNormReluBackward: no mask from a training forward");
    const Tensor g = Tensor::empty(mask.shape(), mask.dtype(), device(), mask.layout());
    const Tensor d = dy.shape() == mask.shape() ? dy : dy.plain().reshape(mask.shape());
    activationBackward(ActivationParams{ActivationKind::relu}, mask, mask, d, g); // d moves to g's layout
    return batchNormBackward(x, g, scale, mean, var, eps, dscale, dshift);
}

void CudaBackend::rowNormForward(const RowNormParams& p, const Tensor& xIn, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& y, const Tensor& mean, const Tensor& rstd) {
    const Tensor x = xIn.plain();
    if (x.shape().rank() != 2)
        throw ShapeError("CudaBackend::rowNormForward: x must be [rows, D], got " + x.shape().str());
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    if (p.groups < 1 || p.inner < 1 || D % p.inner != 0 || rows % p.groups != 0) {
        throw ShapeError("CudaBackend::rowNormForward: groups " + std::to_string(p.groups) + " and inner " +
                         std::to_string(p.inner) + " do not divide x " + x.shape().str());
    }
    cudak::rowNormForward(fp(x), gamma.defined() ? fp(gamma) : nullptr, beta.defined() ? fp(beta) : nullptr, fp(y),
                          fp(mean), fp(rstd), rows, D, p.groups, p.inner, p.eps, p.subtractMean, s());
}

void CudaBackend::rowNormBackward(const RowNormParams& p, const Tensor& xIn, const Tensor& dyIn, const Tensor& gamma,
                                  const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                                  const Tensor& dbeta) {
    const Tensor x = xIn.plain(), dy = dyIn.plain();
    if (x.shape().rank() != 2 || dy.numel() != x.numel()) {
        throw ShapeError("CudaBackend::rowNormBackward: x [rows, D] and dy of as many values, got " + x.shape().str() +
                         " and " + dy.shape().str());
    }
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    // LayerNorm's parameter gradients are column sums over every row: chunks of rows in
    // parallel, then the chunks summed (sumColumns), so that long batches fill the device.
    const bool columns = p.groups == 1 && p.inner == 1 && (dgamma.defined() || dbeta.defined());
    cudak::rowNormBackward(fp(x), fp(dy), gamma.defined() ? fp(gamma) : nullptr, fp(mean), fp(rstd), fp(dx),
                           !columns && dgamma.defined() ? fp(dgamma) : nullptr,
                           !columns && dbeta.defined() ? fp(dbeta) : nullptr, rows, D, p.groups, p.inner,
                           p.subtractMean, s());
    if (!columns || rows == 0 || D == 0) return;
    constexpr int64_t kChunkRows = 256;
    const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
    const Tensor partial = Tensor::empty({chunks, 2 * D}, DType::float32, x.device());
    cudak::rowNormColumnPartials(fp(x), fp(dy), fp(mean), fp(rstd), fp(partial), rows, D, kChunkRows, s());
    if (dgamma.defined()) sumColumns(fp(partial), chunks, D, 2 * D, 1.0f, 0.0f, fp(dgamma));
    if (dbeta.defined()) sumColumns(fp(partial) + D, chunks, D, 2 * D, 1.0f, 0.0f, fp(dbeta));
}

} // namespace tessera
