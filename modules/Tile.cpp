#include "modules/Tile.h"

#include <stdexcept>

#include "modules/AxisUtil.h"

namespace tessera {

Tile::Tile(int axis, int64_t times, std::string name) : Module(std::move(name)), axis_(axis), times_(times) {
    if (times < 1) throw ModuleError("Tile: times must be at least 1, got " + std::to_string(times));
}

void Tile::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (axis::normalize(axis_, inShapes[0].rank()) < 0) {
        throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + inShapes[0].str());
    }
}

void Tile::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    const int a = axis::normalize(axis_, s.rank());
    if (a < 0 || s[a] % times_ != 0) {
        throw shapeError("gradient " + s.str() + " does not hold " + std::to_string(times_) + " copies along axis " +
                         std::to_string(axis_));
    }
}

void Tile::checkDataType(const std::vector<DType>& dtypes) const {
    if (dtypes.size() == 1 && dtypes[0] == DType::int32) return;
    Module::checkDataType(dtypes);
}

Shapes Tile::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    int64_t& d = y[axis::normalize(axis_, y.rank())];
    if (__builtin_mul_overflow(d, times_, &d)) {
        throw shapeError(std::to_string(times_) + " copies of " + inShapes[0].str() + " overflow 64 bits");
    }
    return {y};
}

Shapes Tile::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape x = outGradShapes[0];
    x[axis::normalize(axis_, x.rank())] /= times_;
    return {x};
}

Tensors Tile::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const int a = axis::normalize(axis_, x.shape().rank());
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{x.shape()})[0], x.dtype(), x.device());
    const int64_t len = x.shape()[a];
    for (int64_t t = 0; t < times_; ++t) axis::copyAlong(a, x, 0, y, t * len, len);
    return {y};
}

// dx = sum over the copies of dy
Tensors Tile::updateGrad(const Tensors& grad) {
    if (!isFloating(inData().dtype())) return {Tensor()}; // integers have no gradient
    const Tensor& dy = grad[0];
    const Shape xs = inData().shape();
    const int a = axis::normalize(axis_, xs.rank());
    Tensor dx = Tensor::empty(xs, DType::float32, dy.device());
    Tensor part = times_ > 1 ? Tensor::empty(xs, DType::float32, dy.device()) : dx;
    for (int64_t t = 0; t < times_; ++t) {
        Tensor& target = t == 0 ? dx : part;
        axis::copyAlong(a, dy, t * xs[a], target, 0, xs[a]);
        if (t > 0) backendOf(dx).axpby(1.0f, part, 1.0f, dx);
    }
    return {dx};
}

Blueprint Tile::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    bp.scheme.emplace_back("times", times_);
    return bp;
}

} // namespace tessera
