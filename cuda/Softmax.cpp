// The CUDA backend's softmax and log-softmax on cuDNN.
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

void CudaBackend::softmaxForward(const Tensor& x, const Tensor& y) {
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t d = dnn_->tensor(channelView(x.shape()));
    TESSERA_CUDA_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d, fp(x),
                                           &zero, d, fp(y)));
}

void CudaBackend::softmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t d = dnn_->tensor(channelView(y.shape()));
    TESSERA_CUDA_CHECK(cudnnSoftmaxBackward(cudnn_, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d, fp(y),
                                            d, fp(dy), &zero, d, fp(dx)));
}

void CudaBackend::logSoftmaxForward(const Tensor& x, const Tensor& y) {
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t d = dnn_->tensor(channelView(x.shape()));
    TESSERA_CUDA_CHECK(
        cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d, fp(x), &zero, d, fp(y)));
}

void CudaBackend::logSoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
    const float one = 1.0f, zero = 0.0f;
    s();
    const cudnnTensorDescriptor_t d = dnn_->tensor(channelView(y.shape()));
    TESSERA_CUDA_CHECK(cudnnSoftmaxBackward(cudnn_, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d, fp(y), d,
                                            fp(dy), &zero, d, fp(dx)));
}

} // namespace tessera
