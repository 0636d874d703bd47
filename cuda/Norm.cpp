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
        if (!persistentNorm(x, xDesc, pDesc, [&](void* work, size_t workBytes) {
                return cudnnBatchNormalizationForwardTrainingEx(
                    cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, &one, &zero, xDesc, x.raw(),
                    nullptr, nullptr, xDesc, y.raw(), pDesc, fp(scale), fp(shift), 1.0, nullptr, nullptr, eps, fp(mean),
                    fp(invstd), nullptr, work, workBytes, nullptr, 0);
            })) {
            TESSERA_CUDA_CHECK(cudnnBatchNormalizationForwardTraining(
                cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xDesc, x.raw(), xDesc, y.raw(), pDesc, fp(scale),
                fp(shift), 1.0, nullptr, nullptr, eps, fp(mean), fp(invstd)));
        }
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
    if (!persistentNorm(x, xDesc, pDesc, [&](void* work, size_t workBytes) {
            return cudnnBatchNormalizationBackwardEx(
                cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, xDesc,
                x.raw(), nullptr, nullptr, xDesc, dy.raw(), nullptr, nullptr, xDesc, dx.raw(), pDesc, fp(scale),
                nullptr, fp(dscale), fp(dshift), eps, fp(mean), fp(invstd), nullptr, work, workBytes, nullptr, 0);
        })) {
        TESSERA_CUDA_CHECK(cudnnBatchNormalizationBackward(
            cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xDesc, x.raw(), xDesc, dy.raw(), xDesc, dx.raw(),
            pDesc, fp(scale), fp(dscale), fp(dshift), eps, fp(mean), fp(invstd)));
    }
    return dx;
}

// cuDNN's plain calls run a 16-bit channels-last batch norm in generic kernels, several
// times slower than its persistent NHWC ones, which only the Ex calls reach. Those need no
// reserve for the normalisation alone (bnOps CUDNN_BATCHNORM_OPS_BN), and this backend
// keeps none between forward and backward, so it takes them only where cuDNN says the
// reserve is empty; any refusal is said once on stderr, and from then on this process
// runs the plain calls.
template <class Call>
bool CudaBackend::persistentNorm(const Tensor& x, cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t pDesc,
                                 Call&& call) {
    if (!is16Bit(x.dtype()) || x.layout() != Layout::channelsLast || persistentNormRefused_) return false;
    // cuDNN's sizes for this problem, asked once per shape and type.
    std::unique_lock<std::mutex> lock(dnn_->mutex);
    auto [it, fresh] = persistentNormBytes_.try_emplace({x.shape().dims(), x.dtype()}, 0);
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    size_t reserveBytes = 0;
    if (fresh) {
        size_t fwdBytes = 0, bwdBytes = 0;
        status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, nullptr, xDesc, &reserveBytes);
        if (status == CUDNN_STATUS_SUCCESS) {
            status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, xDesc, nullptr, xDesc, pDesc,
                nullptr, &fwdBytes);
        }
        if (status == CUDNN_STATUS_SUCCESS) {
            status = cudnnGetBatchNormalizationBackwardExWorkspaceSize(cudnn_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
                                                                       CUDNN_BATCHNORM_OPS_BN, xDesc, xDesc, xDesc,
                                                                       nullptr, xDesc, pDesc, nullptr, &bwdBytes);
        }
        it->second = std::max(fwdBytes, bwdBytes);
    }
    const size_t bytes = it->second;
    lock.unlock();
    const char* why = nullptr;
    if (status != CUDNN_STATUS_SUCCESS) {
        why = cudnnGetErrorString(status);
    } else if (reserveBytes != 0) {
        why = "a reserve of its own";
    } else {
        status = call(workspace(bytes + 1), bytes);
        if (status == CUDNN_STATUS_SUCCESS) return true;
        if (status != CUDNN_STATUS_NOT_SUPPORTED && status != CUDNN_STATUS_BAD_PARAM) TESSERA_CUDA_CHECK(status);
        why = cudnnGetErrorString(status);
    }
    std::fprintf(stderr,
                 "tessera: cuDNN's persistent batch norm answered %s for %s %s channels-last; this process runs "
                 "its plain batch norm calls\n",
                 why, x.shape().str().c_str(), str(x.dtype()).c_str());
    persistentNormRefused_ = true;
    return false;
}

namespace {
constexpr cudnnBatchNormMode_t fusedNormMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
constexpr cudnnBatchNormOps_t fusedNormOps = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
} // namespace

// NOT_SUPPORTED and BAD_PARAM: a problem this cuDNN's fused form does not take (its types,
// layouts and sizes are narrower than the plain calls'), said once on stderr; from then on
// this backend runs the normalisation and the sum apart. Any other status is an error.
void CudaBackend::stopFusingNormAdd(cudnnStatus_t status, const char* pass, const Shape& x, DType t) {
    if (status != CUDNN_STATUS_NOT_SUPPORTED && status != CUDNN_STATUS_BAD_PARAM) TESSERA_CUDA_CHECK(status);
    std::fprintf(stderr,
                 "tessera: cuDNN's fused batch norm + add + ReLU%s answered %s for %s %s channels-last; "
                 "this process runs the normalisation and the sum apart\n",
                 pass, cudnnGetErrorString(status), x.str().c_str(), str(t).c_str());
    batchNormAddRefused_ = true;
}

int64_t CudaBackend::batchNormAddReserveBytes(const Shape& x, Layout layout, DType dtype) {
    if (!carries16Bit(dtype) || layout != Layout::channelsLast || batchNormAddRefused_ || x.rank() < 2) return 0;
    size_t bytes = 0;
    s();
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x), dtype, Layout::channelsLast);
    if (cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnn_, fusedNormMode, fusedNormOps, dnn_->relu(), xDesc,
                                                             &bytes) != CUDNN_STATUS_SUCCESS)
        return 0;
    return static_cast<int64_t>(bytes);
}

Tensor CudaBackend::batchNormAddForward(const Tensor& x, const Tensor& z, const Tensor& scale, const Tensor& shift,
                                        const Tensor& mean, const Tensor& var, float eps, bool training, bool relu,
                                        Tensor& reserve) {
    reserve = Tensor();
    const DType t = carriedOrFloat32(x.dtype());
    if (!training || !relu || !is16Bit(t) || x.layout() != Layout::channelsLast || batchNormAddRefused_)
        return Backend::batchNormAddForward(x, z, scale, shift, mean, var, eps, training, relu, reserve);
    const Tensor zs = arranged(z, Layout::channelsLast, t);
    Tensor y = Tensor::empty(x.shape(), t, device(), Layout::channelsLast);
    Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()), t, Layout::channelsLast);
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    const cudnnActivationDescriptor_t act = dnn_->relu();
    size_t workBytes = 0, reserveBytes = 0;
    cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        cudnn_, fusedNormMode, fusedNormOps, xDesc, xDesc, xDesc, pDesc, act, &workBytes);
    if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnn_, fusedNormMode, fusedNormOps, act, xDesc,
                                                                      &reserveBytes);
    }
    Tensor kept;
    if (status == CUDNN_STATUS_SUCCESS) {
        // The reserve, which the backward reads, is a tensor the caller keeps until then.
        kept = Tensor::empty({static_cast<int64_t>((reserveBytes + 3) / 4)}, DType::int32, device());
        status = cudnnBatchNormalizationForwardTrainingEx(
            cudnn_, fusedNormMode, fusedNormOps, &one, &zero, xDesc, x.raw(), xDesc, zs.raw(), xDesc, y.raw(), pDesc,
            fp(scale), fp(shift), 1.0, nullptr, nullptr, eps, fp(mean), fp(invstd), act, workspace(workBytes + 1),
            workBytes, reserveBytes ? kept.raw() : nullptr, reserveBytes);
    }
    if (status == CUDNN_STATUS_SUCCESS) {
        cudak::varianceFromInvStd(fp(invstd), eps, fp(var), x.shape()[1], s());
        reserve = kept;
        return y;
    }
    stopFusingNormAdd(status, "", x.shape(), t);
    return Backend::batchNormAddForward(x, z, scale, shift, mean, var, eps, training, relu, reserve);
}

// The forward reserved only where it ran in one call: relu, 16-bit, channels-last. cuDNN
// reads x, y (the ReLU's output), dy and the reserve, and writes dx, dz (dy masked) and
// the parameter gradients; the saved statistics are the batch's (its inverse standard
// deviation recovered from the variance, as batchNormBackward does).
Tensor CudaBackend::batchNormAddBackward(const Tensor& x, const Tensor& y, const Tensor& dyIn, const Tensor& scale,
                                         const Tensor& shift, const Tensor& mean, const Tensor& var, float eps,
                                         bool relu, const Tensor& reserve, Tensor& dz, const Tensor& dscale,
                                         const Tensor& dshift) {
    const DType t = carriedOrFloat32(x.dtype());
    if (!reserve.defined() || !relu || !is16Bit(t) || x.layout() != Layout::channelsLast ||
        y.layout() != Layout::channelsLast || y.dtype() != t) {
        return Backend::batchNormAddBackward(x, y, dyIn, scale, shift, mean, var, eps, relu, reserve, dz, dscale,
                                             dshift);
    }
    const Tensor dy = arranged(dyIn, Layout::channelsLast, t);
    Tensor dx = Tensor::empty(x.shape(), t, device(), Layout::channelsLast);
    dz = Tensor::empty(x.shape(), t, device(), Layout::channelsLast);
    Tensor invstd = Tensor::empty({x.shape()[1]}, DType::float32, device());
    cudak::invStdFromVariance(fp(var), eps, fp(invstd), x.shape()[1], s());
    const float one = 1.0f, zero = 0.0f;
    const cudnnTensorDescriptor_t xDesc = dnn_->tensor(channelView(x.shape()), t, Layout::channelsLast);
    const cudnnTensorDescriptor_t pDesc = dnn_->tensor({1, static_cast<int>(x.shape()[1]), 1, 1});
    const cudnnActivationDescriptor_t act = dnn_->relu();
    size_t workBytes = 0;
    cudnnStatus_t status = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        cudnn_, fusedNormMode, fusedNormOps, xDesc, xDesc, xDesc, xDesc, xDesc, pDesc, act, &workBytes);
    if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnnBatchNormalizationBackwardEx(
            cudnn_, fusedNormMode, fusedNormOps, &one, &zero, &one, &zero, xDesc, x.raw(), xDesc, y.raw(), xDesc,
            dy.raw(), xDesc, dz.raw(), xDesc, dx.raw(), pDesc, fp(scale), fp(shift), fp(dscale), fp(dshift), eps,
            fp(mean), fp(invstd), act, workspace(workBytes + 1), workBytes, reserve.raw(),
            static_cast<size_t>(reserve.numel()) * sizeof(int32_t));
    }
    if (status == CUDNN_STATUS_SUCCESS) return dx;
    // This backward too runs apart: the ReLU's mask is y, which the fused forward wrote as
    // the unfused one would.
    stopFusingNormAdd(status, " backward", x.shape(), t);
    return Backend::batchNormAddBackward(x, y, dyIn, scale, shift, mean, var, eps, relu, reserve, dz, dscale, dshift);
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
    const Tensor d = dy.shape() == mask.shape() ? dy : dy.plain().reshape(mask.shape());
    return batchNormBackward(x, reluGradient(mask, d), scale, mean, var, eps, dscale, dshift);
}

namespace {
// BackendError unless every one is of a floating type (x, y, dy, dx of row normalisation).
void requireFloating(const char* op, std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts) {
        if (!isFloating(t->dtype())) {
            throw BackendError(std::string("CudaBackend::") + op + ": a tensor of " + str(t->dtype()) +
                               " (floating types are taken)");
        }
    }
}
} // namespace

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
    requireFloating("rowNormForward", {&x, &y});
    cudak::rowNormForward(x.raw(), static_cast<int>(x.dtype()), gamma.defined() ? fp(gamma) : nullptr,
                          beta.defined() ? fp(beta) : nullptr, y.raw(), static_cast<int>(y.dtype()), fp(mean), fp(rstd),
                          rows, D, p.groups, p.inner, p.eps, p.subtractMean, s());
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
    requireFloating("rowNormBackward", {&x, &dy, &dx});
    const int xt = static_cast<int>(x.dtype()), dyt = static_cast<int>(dy.dtype());
    cudak::rowNormBackward(x.raw(), xt, dy.raw(), dyt, gamma.defined() ? fp(gamma) : nullptr, fp(mean), fp(rstd),
                           dx.raw(), static_cast<int>(dx.dtype()), !columns && dgamma.defined() ? fp(dgamma) : nullptr,
                           !columns && dbeta.defined() ? fp(dbeta) : nullptr, rows, D, p.groups, p.inner,
                           p.subtractMean, s());
    if (!columns || rows == 0 || D == 0) return;
    constexpr int64_t kChunkRows = 256;
    const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
    const Tensor partial = Tensor::empty({chunks, 2 * D}, DType::float32, x.device());
    cudak::rowNormColumnPartials(x.raw(), xt, dy.raw(), dyt, fp(mean), fp(rstd), fp(partial), rows, D, kChunkRows, s());
    if (dgamma.defined()) sumColumns(fp(partial), chunks, D, 2 * D, 1.0f, 0.0f, fp(dgamma));
    if (dbeta.defined()) sumColumns(fp(partial) + D, chunks, D, 2 * D, 1.0f, 0.0f, fp(dbeta));
}

} // namespace tessera
