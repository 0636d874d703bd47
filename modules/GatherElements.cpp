#include "modules/GatherElements.h"

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

namespace {
// Why positions `idx` do not fit data `x` along `axis` ("" when they do): the axis exists,
// and idx has x's rank and dims but along it.
std::string positionsMisfit(const Shape& x, const Shape& idx, int axis) {
    const int a = axis::normalize(axis, x.rank());
    if (a < 0) return "axis " + std::to_string(axis) + " is out of range for input " + x.str();
    bool same = idx.rank() == x.rank();
    for (size_t d = 0; same && d < x.rank(); ++d) same = static_cast<int>(d) == a || idx[d] == x[d];
    if (same) return {};
    return "positions " + idx.str() + " must have the dims of input " + x.str() + " but along axis " +
           std::to_string(axis);
}

// Why the dtypes of [data, positions, ...] do not fit ("" when they do): float data, int32
// positions.
std::string positionTypesMisfit(const std::vector<DType>& dtypes) {
    if (!dtypes.empty() && !isFloating(dtypes[0])) {
        return "input 0 has dtype " + tessera::str(dtypes[0]) + ", expected float32, bfloat16 or float16";
    }
    if (dtypes.size() > 1 && dtypes[1] != DType::int32) {
        return "the positions (input 1) have dtype " + tessera::str(dtypes[1]) + ", expected int32";
    }
    return {};
}
} // namespace

GatherElements::GatherElements(int axis, std::string name) : Module(std::move(name)), axis_(axis) {}

void GatherElements::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 2, "input");
    if (const std::string why = positionsMisfit(inShapes[0], inShapes[1], axis_); !why.empty()) throw shapeError(why);
}

void GatherElements::checkDataType(const std::vector<DType>& dtypes) const {
    if (const std::string why = positionTypesMisfit(dtypes); !why.empty()) throw shapeError(why);
}

Shapes GatherElements::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors GatherElements::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    const int a = axis::normalize(axis_, x.shape().rank());
    positions_ = axis::fromEnd(data[1], x.shape()[a]);
    Tensor y = Tensor::empty(positions_.shape(), DType::float32, x.device());
    backendOf(x).gatherAxis(axis::lines(x, a), axis::lines(positions_, a), axis::lines(y, a));
    return {y};
}

Tensors GatherElements::updateGrad(const Tensors& grad) {
    const Shape& xs = inDataList()[0].shape();
    return {axis::routedBack(grad[0].plain(), positions_, xs, axis::normalize(axis_, xs.rank())), Tensor()};
}

Blueprint GatherElements::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    return bp;
}

ScatterElements::ScatterElements(int axis, bool add, std::string name)
    : Module(std::move(name)), axis_(axis), add_(add) {}

void ScatterElements::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 3, "input");
    const Shape &idx = inShapes[1], &u = inShapes[2];
    if (const std::string why = positionsMisfit(inShapes[0], idx, axis_); !why.empty()) throw shapeError(why);
    if (u != idx) throw shapeError("updates " + u.str() + " must have the positions' shape " + idx.str());
}

void ScatterElements::checkDataType(const std::vector<DType>& dtypes) const {
    if (const std::string why = positionTypesMisfit(dtypes); !why.empty()) throw shapeError(why);
    if (dtypes.size() > 2 && !isFloating(dtypes[2])) {
        throw shapeError("input 2 has dtype " + tessera::str(dtypes[2]) + ", expected float32, bfloat16 or float16");
    }
}

Shapes ScatterElements::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensor ScatterElements::untouched(const Tensor& idx, const Shape& dataShape, int a) const {
    Backend& be = backendOf(idx);
    Tensor hits = Tensor::zeros(dataShape, DType::float32, idx.device());
    be.scatterAddAxis(axis::lines(Tensor::full(idx.shape(), 1.0f, idx.device()), a), axis::lines(idx, a),
                      axis::lines(hits, a));
    be.activationForward(ActivationParams{ActivationKind::clip, 0.0f, 1.0f}, hits, hits);
    be.affine(hits, -1.0f, 1.0f, hits);
    return hits;
}

Tensors ScatterElements::updateData(const Tensors& data) {
    const Tensor x = data[0].plain(), u = data[2].plain();
    const int a = axis::normalize(axis_, x.shape().rank());
    positions_ = axis::fromEnd(data[1], x.shape()[a]);
    const Tensor& idx = positions_;
    Backend& be = backendOf(x);
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    if (add_) {
        be.copy(x, y);
    } else {
        be.mul(x, untouched(idx, x.shape(), a), y);
    }
    be.scatterAddAxis(axis::lines(u, a), axis::lines(idx, a), axis::lines(y, a));
    return {y};
}

Tensors ScatterElements::updateGrad(const Tensors& grad) {
    const Tensor dy = grad[0].plain();
    const Tensor& idx = positions_;
    const int a = axis::normalize(axis_, dy.shape().rank());
    Backend& be = backendOf(dy);
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    if (add_) {
        be.copy(dy, dx);
    } else {
        be.mul(dy, untouched(idx, dy.shape(), a), dx);
    }
    Tensor du = Tensor::empty(idx.shape(), DType::float32, dy.device());
    be.gatherAxis(axis::lines(dy, a), axis::lines(idx, a), axis::lines(du, a));
    return {dx, Tensor(), du};
}

Blueprint ScatterElements::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    bp.scheme.emplace_back("add", add_);
    return bp;
}

} // namespace tessera
