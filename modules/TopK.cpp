#include "modules/TopK.h"

#include <cfloat>

#include "modules/AxisUtil.h"

namespace tessera {

TopK::TopK(int64_t k, int axis, const TopKOptions& options)
    : Module(options.name), k_(k), axis_(axis), options_(options) {
    if (k < 1) throw ModuleError("TopK: k must be at least 1, got " + std::to_string(k));
}

void TopK::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const int a = axis::normalize(axis_, s.rank());
    if (a < 0) throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + s.str());
    if (s[a] < k_) {
        throw shapeError("input " + s.str() + " has " + std::to_string(s[a]) + " values along axis " +
                         std::to_string(axis_) + ", fewer than k = " + std::to_string(k_));
    }
}

Shapes TopK::dataShapeFrom(const Shapes& inShapes) const {
    Shape y = inShapes[0];
    y[axis::normalize(axis_, y.rank())] = k_;
    return {y, y};
}

Shapes TopK::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

// On x as [O, A, I] (negated for the smallest, so that the largest are wanted): the
// backend's k positions (in the order they appear) and their values v. Sorted: the rank of
// v_j among the k is the count of v_i above it plus that of the equal v_i before it (the
// positions ascend, so ties keep their order), from the steps of the differences of the
// values clipped to the finite range; each value and position is then added at its rank.
Tensors TopK::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const int a = axis::normalize(axis_, x.shape().rank());
    const Shape ys = dataShapeFrom(Shapes{x.shape()})[0];
    const Shape& s = x.shape();
    const int64_t outer = axis::outer(s, a), inner = axis::inner(s, a), k = k_;
    Backend& be = backendOf(x);
    const Device dev = x.device();
    Tensor src = axis::lines(x, a);
    if (!options_.largest) {
        Tensor negated = Tensor::empty(src.shape(), DType::float32, dev);
        be.affine(src, -1.0f, 0.0f, negated);
        src = negated;
    }
    Tensor at = Tensor::empty({outer, k, inner}, DType::int32, dev);
    be.topKIndices(src, k, at);
    Tensor v = Tensor::empty({outer, k, inner}, DType::float32, dev);
    be.gatherAxis(src, at, v);
    if (options_.sorted && k > 1) {
        Tensor bounded = Tensor::empty(v.shape(), DType::float32, dev);
        be.activationForward(ActivationParams{ActivationKind::clip, -FLT_MAX, FLT_MAX}, v, bounded);
        // d[o, i, j, n] = v_i - v_j
        Tensor d = Tensor::empty({outer, k, k, inner}, DType::float32, dev);
        be.binaryBroadcast(BinaryOp::sub, bounded.reshape({outer, k, 1, inner}), bounded.reshape({outer, 1, k, inner}),
                           d);
        const ActivationParams unit{ActivationKind::clip, 0.0f, 1.0f};
        // above = step(d): 1 where v_i > v_j (d scaled past 1, then clipped)
        Tensor above = Tensor::empty(d.shape(), DType::float32, dev);
        be.affine(d, 0x1p127f, 0.0f, above);
        be.affine(above, 0x1p22f, 0.0f, above);
        be.activationForward(unit, above, above);
        // equal = 1 - step(|d|), counted where i < j
        Tensor equal = Tensor::empty(d.shape(), DType::float32, dev);
        be.activationForward(ActivationParams{ActivationKind::abs}, d, equal);
        be.affine(equal, 0x1p127f, 0.0f, equal);
        be.affine(equal, 0x1p22f, 0.0f, equal);
        be.activationForward(unit, equal, equal);
        be.affine(equal, -1.0f, 1.0f, equal);
        std::vector<float> before(static_cast<size_t>(k * k), 0.0f);
        for (int64_t i = 0; i < k; ++i) {
            for (int64_t j = i + 1; j < k; ++j) before[static_cast<size_t>(i * k + j)] = 1.0f;
        }
        be.binaryBroadcast(BinaryOp::mul, equal, Tensor::fromVector({k, k, 1}, before).to(dev), equal);
        be.axpby(1.0f, equal, 1.0f, above);
        Tensor rankF = Tensor::empty({outer, 1, k, inner}, DType::float32, dev);
        be.sumTo(above, 1.0f, rankF);
        Tensor rank = Tensor::empty({outer, k, inner}, DType::int32, dev);
        be.cast(rankF.reshape({outer, k, inner}), rank);
        Tensor sortedV = Tensor::zeros(v.shape(), DType::float32, dev);
        be.scatterAddAxis(v, rank, sortedV);
        Tensor position = Tensor::empty(v.shape(), DType::float32, dev);
        be.cast(at, position);
        Tensor sortedP = Tensor::zeros(v.shape(), DType::float32, dev);
        be.scatterAddAxis(position, rank, sortedP);
        be.cast(sortedP, at);
        v = sortedV;
    }
    if (!options_.largest) be.affine(v, -1.0f, 0.0f, v);
    indices_ = at.reshape(ys);
    return {v.reshape(ys), indices_};
}

Tensors TopK::updateGrad(const Tensors& grad) {
    const Shape& xs = inData().shape();
    return {axis::routedBack(grad[0], indices_, xs, axis::normalize(axis_, xs.rank()))};
}

Blueprint TopK::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("k", k_);
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    bp.scheme.emplace_back("largest", options_.largest);
    bp.scheme.emplace_back("sorted", options_.sorted);
    return bp;
}

} // namespace tessera
