#include "modules/InstanceNorm2D.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

// Instance normalisation of [N, C, H, W] is batch normalisation of the same data seen as
// [1, N * C, H, W], with the per-channel scale and bias repeated for every sample.

InstanceNorm2D::InstanceNorm2D(int64_t maps, const InstanceNormOptions& options)
    : Module(options.name), maps_(maps), options_(options) {
    if (maps <= 0) throw ModuleError("InstanceNorm2D: maps must be positive, got " + std::to_string(maps));
    setVar("scale", Variable::of(Tensor::full({maps}, 1.0f)));
    setVar("bias", Variable::of(Tensor::zeros({maps})));
}

void InstanceNorm2D::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() != 4 || s[1] != maps_) {
        throw shapeError("expects input [N, " + std::to_string(maps_) + ", H, W], got " + s.str());
    }
    if (s[2] * s[3] < 2) throw shapeError("needs at least 2 positions per plane for statistics, got " + s.str());
}

Tensor InstanceNorm2D::tiled(const Tensor& perChannel, int64_t n) const {
    Tensor t = Tensor::empty({n, maps_}, DType::float32, perChannel.device());
    backendOf(t).broadcastRows(perChannel, t);
    return t.reshape({n * maps_});
}

// x: [N, C, H, W] -> y
Tensors InstanceNorm2D::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const Shape& s = x.shape();
    const Shape planes{1, s[0] * s[1], s[2], s[3]};
    mean_ = Tensor::empty({planes[1]}, DType::float32, x.device());
    var_ = Tensor::empty({planes[1]}, DType::float32, x.device());
    Tensor y = backendOf(x).batchNormForward(x.reshape(planes), tiled(getVar("scale")->data, s[0]),
                                             tiled(getVar("bias")->data, s[0]), mean_, var_, options_.epsilon, true);
    return {y.plain().reshape(s)};
}

// dy -> dx and the per-plane parameter gradients [N * C], from one primitive.
Tensor InstanceNorm2D::fusedBackward(const Tensor& dy, Tensor& dscale, Tensor& dbias) const {
    const Tensor& x = inData();
    const Shape& s = x.shape();
    const Shape planes{1, s[0] * s[1], s[2], s[3]};
    dscale = Tensor::empty({planes[1]}, DType::float32, x.device());
    dbias = Tensor::empty({planes[1]}, DType::float32, x.device());
    Tensor dx =
        backendOf(x).batchNormBackward(x.reshape(planes), dy.reshape(planes), tiled(getVar("scale")->data, s[0]), mean_,
                                       var_, options_.epsilon, dscale, dbias);
    return dx.plain().reshape(s);
}

// dscale[c] = sum_n dscale_planes[n, c], and the same for the bias
void InstanceNorm2D::addParamGrads(const Tensor& dscale, const Tensor& dbias, float scale, float momentum) {
    const int64_t n = inData().shape()[0];
    Backend& be = backendOf(dscale);
    be.sumRows(dscale.reshape({n, maps_}), scale, momentum, getVar("scale")->grad);
    be.sumRows(dbias.reshape({n, maps_}), scale, momentum, getVar("bias")->grad);
}

Tensors InstanceNorm2D::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale,
                                     float momentum) {
    Tensor dscale, dbias;
    Tensor dx = fusedBackward(grad[0], dscale, dbias);
    if (updParamGrads && isTrain()) addParamGrads(dscale, dbias, scale, momentum);
    if (!updGrad) return {};
    return {dx};
}

Tensors InstanceNorm2D::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

Blueprint InstanceNorm2D::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("maps", maps_);
    bp.scheme.emplace_back("epsilon", static_cast<double>(options_.epsilon));
    return bp;
}

} // namespace tessera
