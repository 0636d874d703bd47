#include "modules/KMaxPool.h"

#include <stdexcept>

#include "modules/AxisUtil.h"

namespace tessera {

KMaxPool::KMaxPool(int64_t topk, int axis, std::string name) : Module(std::move(name)), topk_(topk), axis_(axis) {
    if (topk < 1) throw ModuleError("KMaxPool: topk must be at least 1, got " + std::to_string(topk));
}

void KMaxPool::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const int a = axis::normalize(axis_, s.rank());
    if (a < 0) throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + s.str());
    if (s[a] < topk_) {
        throw shapeError("input " + s.str() + " has " + std::to_string(s[a]) + " values along axis " +
                         std::to_string(axis_) + ", fewer than topk = " + std::to_string(topk_));
    }
}

Shapes KMaxPool::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    y[axis::normalize(axis_, y.rank())] = topk_;
    return {y};
}

Shapes KMaxPool::gradShapeFrom(const Shapes& outGradShapes) const {
    const Shape last = lastInShapes("gradShapeFrom")[0];
    Shape x = outGradShapes[0];
    const int a = axis::normalize(axis_, x.rank());
    x[a] = last[a];
    return {x};
}

Tensors KMaxPool::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const int a = axis::normalize(axis_, x.shape().rank());
    const Shape ys = dataShapeFrom(Shapes{x.shape()})[0];
    indices_ = Tensor::empty(ys, DType::int32, x.device());
    Tensor y = Tensor::empty(ys, DType::float32, x.device());
    Backend& be = backendOf(x);
    be.topKIndices(axis::lines(x, a), topk_, axis::lines(indices_, a));
    be.gatherAxis(axis::lines(x, a), axis::lines(indices_, a), axis::lines(y, a));
    return {y};
}

Tensors KMaxPool::updateGrad(const Tensors& grad) {
    const Shape& xs = inData().shape();
    return {axis::routedBack(grad[0], indices_, xs, axis::normalize(axis_, xs.rank()))};
}

Blueprint KMaxPool::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("topk", topk_);
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    return bp;
}

} // namespace tessera
