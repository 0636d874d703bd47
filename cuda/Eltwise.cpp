// The CUDA backend's element-wise ops: axpby, products, broadcasts, activations, powers, casts.
#include "cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "cuda/Kernels.h"
#include "cuda/Util.h"

namespace tessera {

using namespace cuda_util;

namespace {
bool allFloat32(std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts) {
        if (t->dtype() != DType::float32) return false;
    }
    return true;
}

void requirePlain(const char* op, std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts) {
        if (!t->isPlain()) {
            throw BackendError(std::string("CudaBackend::") + op + ": 16-bit operands must be plain, got " +
                               str(t->layout()) + " " + t->shape().str());
        }
    }
}

int dt(const Tensor& t) { return static_cast<int>(t.dtype()); }
} // namespace

void CudaBackend::axpby(float alpha, const Tensor& x, float beta, const Tensor& y) {
    requireSameNumel("axpby", x, y);
    if (!allFloat32({&x, &y})) { // 16-bit activations
        requirePlain("axpby", {&x, &y});
        cudak::axpbyzAny(alpha, x.raw(), dt(x), beta, y.raw(), dt(y), y.raw(), dt(y), y.numel(), s());
        return;
    }
    if (x.layout() != y.layout()) {
        axpby(alpha, x.toLayout(y.layout()), beta, y);
        return;
    }
    cudak::axpby(alpha, fp(x), beta, fp(y), static_cast<int64_t>(y.nbytes() / sizeof(float)), s());
}

void CudaBackend::axpbyz(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
    axpbyzMaybeRelu(alpha, x, beta, y, z, false);
}

void CudaBackend::axpbyzRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z) {
    axpbyzMaybeRelu(alpha, x, beta, y, z, true);
}

void CudaBackend::axpbyzMaybeRelu(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& z,
                                  bool relu) {
    requireSameNumel("axpbyz", x, z);
    requireSameNumel("axpbyz", y, z);
    if (!allFloat32({&x, &y, &z})) { // 16-bit activations
        requirePlain("axpbyz", {&x, &y, &z});
        cudak::axpbyzAny(alpha, x.raw(), dt(x), beta, y.raw(), dt(y), z.raw(), dt(z), z.numel(), s(), relu);
        return;
    }
    if (!x.isPlain() || !y.isPlain() || !z.isPlain()) { // blocked tensors moved from the CPU
        if (relu) {
            Backend::axpbyzRelu(alpha, x, beta, y, z);
        } else {
            Backend::axpbyz(alpha, x, beta, y, z);
        }
        return;
    }
    cudak::axpbyz(alpha, fp(x), beta, fp(y), fp(z), z.numel(), s(), relu);
}

void CudaBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
    requireSameNumel("mul", a, b);
    requireSameNumel("mul", a, y);
    cudak::mul(fp(a), fp(b), fp(y), y.numel(), s());
}

void CudaBackend::binaryBroadcast(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) {
    if (!broadcastsTo(a.shape(), y.shape()) || !broadcastsTo(b.shape(), y.shape())) {
        throw ShapeError("CudaBackend::binaryBroadcast: " + a.shape().str() + " and " + b.shape().str() +
                         " do not broadcast to " + y.shape().str());
    }
    cudak::binaryBroadcast(op, fp(a), fp(b), fp(y), element::broadcastGeometry(a.shape(), b.shape(), y.shape()),
                           y.numel(), s());
}

void CudaBackend::sumTo(const Tensor& x, float alpha, const Tensor& y) {
    if (!broadcastsTo(y.shape(), x.shape())) {
        throw ShapeError("CudaBackend::sumTo: " + y.shape().str() + " does not broadcast to " + x.shape().str());
    }
    // A sum over leading dimensions only (a bias's or a batch-broadcast table's gradient) is
    // a sum of rows: cuBLAS's gemv against ones spreads it over the device.
    const std::vector<int64_t>& xd = x.shape().dims();
    const std::vector<int64_t>& yd = y.shape().dims();
    size_t lead = 0;
    while (lead < yd.size() && yd[lead] == 1) ++lead;
    const size_t kept = yd.size() - lead;
    if (y.numel() > 0 && kept <= xd.size() &&
        std::equal(yd.begin() + static_cast<std::ptrdiff_t>(lead), yd.end(),
                   xd.end() - static_cast<std::ptrdiff_t>(kept))) {
        return sumColumns(fp(x), x.numel() / y.numel(), y.numel(), y.numel(), alpha, 0.0f, fp(y));
    }
    cudak::sumTo(fp(x), alpha, fp(y), element::reduceGeometry(x.shape(), y.shape()), y.numel(), s());
}

void CudaBackend::activationForward(const ActivationParams& act, const Tensor& x, const Tensor& y) {
    if (y.shape() != x.shape()) throw ShapeError("CudaBackend::activationForward: x and y differ in shape");
    if (!allFloat32({&x, &y})) { // 16-bit activations
        requirePlain("activationForward", {&x, &y});
        cudak::activationForwardAny(static_cast<int>(act.kind), act.alpha, act.beta, x.raw(), dt(x), y.raw(), dt(y),
                                    x.numel(), s());
        return;
    }
    if (!x.isPlain() || !y.isPlain()) { // blocked tensors moved from the CPU
        Tensor out = Tensor::empty(y.shape(), y.dtype(), y.device());
        activationForward(act, x.plain(), out);
        reorder(out, y);
        return;
    }
    cudak::activationForward(static_cast<int>(act.kind), act.alpha, act.beta, fp(x), fp(y), x.numel(), s());
}

void CudaBackend::activationBackward(const ActivationParams& act, const Tensor& x, const Tensor& y, const Tensor& dy,
                                     const Tensor& dx) {
    if (dx.shape() != x.shape() || dy.shape() != x.shape()) {
        throw ShapeError("CudaBackend::activationBackward: x, dy and dx differ in shape");
    }
    if (!allFloat32({&x, &y, &dy, &dx})) { // 16-bit activations
        requirePlain("activationBackward", {&x, &y, &dy, &dx});
        cudak::activationBackwardAny(static_cast<int>(act.kind), act.alpha, act.beta, x.raw(), dt(x), y.raw(), dt(y),
                                     dy.raw(), dt(dy), dx.raw(), dt(dx), x.numel(), s());
        return;
    }
    if (!x.isPlain() || !y.isPlain() || !dy.isPlain() || !dx.isPlain()) {
        Tensor out = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
        activationBackward(act, x.plain(), y.plain(), dy.plain(), out);
        reorder(out, dx);
        return;
    }
    cudak::activationBackward(static_cast<int>(act.kind), act.alpha, act.beta, fp(x), fp(y), fp(dy), fp(dx), x.numel(),
                              s());
}

void CudaBackend::affine(const Tensor& x, float a, float b, const Tensor& y) {
    requireSameNumel("affine", x, y);
    cudak::affine(fp(x), a, b, fp(y), y.numel(), s());
}

void CudaBackend::power(const Tensor& x, float p, const Tensor& y) {
    requireSameNumel("power", x, y);
    cudak::power(fp(x), p, fp(y), y.numel(), s());
}

void CudaBackend::mulChannels(const Tensor& x, const Tensor& m, const Tensor& y) {
    const Shape& xs = x.shape();
    if (xs.rank() < 2 || m.numel() != xs[0] * xs[1]) {
        throw ShapeError("CudaBackend::mulChannels: m " + m.shape().str() + " does not fit " + xs.str());
    }
    const int64_t planes = xs[0] * xs[1];
    cudak::mulChannels(fp(x), fp(m), fp(y), planes, planes ? xs.numel() / planes : 0, s());
}

void CudaBackend::cast(const Tensor& x, const Tensor& y) {
    requireSameNumel("cast", x, y);
    if (x.dtype() == y.dtype()) {
        copy(x, y);
    } else if (x.dtype() == DType::float32 && y.dtype() == DType::int32) {
        cudak::castToInt(fp(x), ip(y), x.numel(), s());
    } else if (x.dtype() == DType::int32 && y.dtype() == DType::float32) {
        cudak::castToFloat(ip(x), fp(y), x.numel(), s());
    } else {
        if (!x.isPlain() || !y.isPlain()) throw BackendError("CudaBackend::cast: plain tensors only");
        cudak::cast(x.raw(), static_cast<int>(x.dtype()), y.raw(), static_cast<int>(y.dtype()), x.numel(), s());
    }
}

} // namespace tessera
