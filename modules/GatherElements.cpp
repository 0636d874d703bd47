#include "modules/GatherElements.h"

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

GatherElements::GatherElements(int axis, std::string name) : Module(std::move(name)), axis_(axis) {}

void GatherElements::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 2, "input");
    const Shape &x = inShapes[0], &idx = inShapes[1];
    const int a = axis::normalize(axis_, x.rank());
    if (a < 0) throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + x.str());
    bool same = idx.rank() == x.rank();
    for (size_t d = 0; same && d < x.rank(); ++d) same = static_cast<int>(d) == a || idx[d] == x[d];
    if (!same) {
        throw shapeError("positions " + idx.str() + " must have the dims of input " + x.str() + " but along axis " +
                         std::to_string(axis_));
    }
}

void GatherElements::checkDataType(const std::vector<DType>& dtypes) const {
    if (!dtypes.empty() && !isFloating(dtypes[0])) {
        throw shapeError("input 0 has dtype " + tessera::str(dtypes[0]) + ", expected float32, bfloat16 or float16");
    }
    if (dtypes.size() > 1 && dtypes[1] != DType::int32) {
        throw shapeError("the positions (input 1) have dtype " + tessera::str(dtypes[1]) + ", expected int32");
    }
}

Shapes GatherElements::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors GatherElements::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    const Tensor& idx = data[1];
    const int a = axis::normalize(axis_, x.shape().rank());
    Tensor y = Tensor::empty(idx.shape(), DType::float32, x.device());
    backendOf(x).gatherAxis(axis::lines(x, a), axis::lines(idx, a), axis::lines(y, a));
    return {y};
}

Tensors GatherElements::updateGrad(const Tensors& grad) {
    const Shape& xs = inDataList()[0].shape();
    const Tensor& idx = inDataList()[1];
    const int a = axis::normalize(axis_, xs.rank());
    Tensor dx = Tensor::zeros(xs, DType::float32, grad[0].device());
    backendOf(dx).scatterAddAxis(axis::lines(grad[0].plain(), a), axis::lines(idx, a), axis::lines(dx, a));
    return {dx, Tensor()};
}

Blueprint GatherElements::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    return bp;
}

} // namespace tessera
