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

// Whether a layout stores exactly numel elements in some order (no channel padding), so that
// element-wise kernels run over its storage as it lies.
bool dense(Layout l) { return l == Layout::plain || l == Layout::channelsLast; }

// Whether every tensor is in `l`, a dense layout.
bool allIn(Layout l, std::initializer_list<const Tensor*> ts) {
    if (!dense(l)) return false;
    for (const Tensor* t : ts) {
        if (t->layout() != l) return false;
    }
    return true;
}

// 16-bit operands are plain or channels-last (the backend writes no other layout in 16 bits).
void requireDense(const char* op, const Tensor& t) {
    if (!dense(t.layout())) {
        throw BackendError(std::string("CudaBackend::") + op + ": 16-bit operands must be plain or channelsLast, got " +
                           str(t.layout()) + " " + t.shape().str());
    }
}

int dt(const Tensor& t) { return static_cast<int>(t.dtype()); }
} // namespace

void CudaBackend::axpby(float alpha, const Tensor& x, float beta, const Tensor& y) {
    requireSameNumel("axpby", x, y);
    if (!allFloat32({&x, &y})) { // 16-bit activations
        requireDense("axpby", y);
        const Tensor xs = x.toLayout(y.layout());
        cudak::axpbyzAny(alpha, xs.raw(), dt(xs), beta, y.raw(), dt(y), y.raw(), dt(y), y.numel(), s());
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
        requireDense("axpbyz", z);
        const Tensor xs = x.toLayout(z.layout()), ys = y.toLayout(z.layout());
        cudak::axpbyzAny(alpha, xs.raw(), dt(xs), beta, ys.raw(), dt(ys), z.raw(), dt(z), z.numel(), s(), relu);
        return;
    }
    if (!allIn(z.layout(), {&x, &y, &z})) { // blocked tensors moved from the CPU, or layouts that differ
        if (relu) {
            Backend::axpbyzRelu(alpha, x, beta, y, z);
        } else {
            Backend::axpbyz(alpha, x, beta, y, z);
        }
        return;
    }
    cudak::axpbyz(alpha, fp(x), beta, fp(y), fp(z), z.numel(), s(), relu); // plain or channels-last alike
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
        requireDense("activationForward", y);
        const Tensor xs = x.toLayout(y.layout());
        cudak::activationForwardAny(static_cast<int>(act.kind), act.alpha, act.beta, xs.raw(), dt(xs), y.raw(), dt(y),
                                    x.numel(), s());
        return;
    }
    if (!allIn(y.layout(), {&x, &y})) { // blocked tensors moved from the CPU, or layouts that differ
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
        requireDense("activationBackward", dx);
        const Layout l = dx.layout();
        // x or y may be undefined (the map reads one of them): only defined ones move.
        auto in = [l](const Tensor& t) { return t.defined() ? t.toLayout(l) : t; };
        const Tensor xs = in(x), ys = in(y), dys = in(dy);
        cudak::activationBackwardAny(static_cast<int>(act.kind), act.alpha, act.beta, xs.defined() ? xs.raw() : nullptr,
                                     dt(xs), ys.defined() ? ys.raw() : nullptr, dt(ys), dys.raw(), dt(dys), dx.raw(),
                                     dt(dx), x.numel(), s());
        return;
    }
    if (!allIn(dx.layout(), {&x, &y, &dy, &dx})) {
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
        if (x.layout() != y.layout() || !dense(x.layout())) {
            throw BackendError("CudaBackend::cast: plain (or both channelsLast) tensors only, got " + str(x.layout()) +
                               " and " + str(y.layout()));
        }
        cudak::cast(x.raw(), static_cast<int>(x.dtype()), y.raw(), static_cast<int>(y.dtype()), x.numel(), s());
    }
}

} // namespace tessera
