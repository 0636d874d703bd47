#include "modules/Concat.h"

#include "modules/AxisUtil.h"

namespace tessera {

void Concat::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.empty()) throw shapeError("expects at least one input tensor, got none");
    const Shape& first = inShapes[0];
    const int a = axis::normalize(axis_, first.rank());
    if (a < 0) throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + first.str());
    for (size_t i = 1; i < inShapes.size(); ++i) {
        const Shape& s = inShapes[i];
        bool same = s.rank() == first.rank();
        for (int d = 0; same && d < static_cast<int>(s.rank()); ++d) same = d == a || s[d] == first[d];
        if (!same) {
            throw shapeError("input " + std::to_string(i) + " " + s.str() + " does not fit input 0 " + first.str() +
                             ": all dims but axis " + std::to_string(a) + " must agree");
        }
    }
}

Shapes Concat::dataShapeFrom(const Shapes& inShapes) const {
    const int a = axis::normalize(axis_, inShapes[0].rank());
    Shape out = inShapes[0];
    for (size_t i = 1; i < inShapes.size(); ++i) out[a] += inShapes[i][a];
    return {out};
}

Shapes Concat::gradShapeFrom(const Shapes& outGradShapes) const {
    Shapes in = lastInShapes("gradShapeFrom");
    for (Shape& s : in) s[0] = outGradShapes[0][0];
    return in;
}

void Concat::checkDataType(const std::vector<DType>& dtypes) const {
    bool ints = !dtypes.empty();
    for (DType t : dtypes) ints = ints && t == DType::int32;
    if (!ints) Module::checkDataType(dtypes);
}

bool Concat::takes16Bit(const Tensors& data) const {
    for (const Tensor& x : data) {
        if (x.dtype() != data[0].dtype()) return false;
    }
    return true;
}

std::vector<DType> Concat::outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const {
    for (DType t : inDTypes) {
        if (t != inDTypes[0]) return {DType::float32};
    }
    return {inDTypes.empty() ? DType::float32 : inDTypes[0]};
}

// x_i: [..., d_i, ...] -> y: [..., sum d_i, ...] (in the inputs' dtype)
Tensors Concat::updateData(const Tensors& data) {
    const Shape out = dataShapeFrom(shapesOf(data))[0];
    const int a = axis::normalize(axis_, out.rank());
    Tensor y = Tensor::empty(out, data[0].dtype(), data[0].device());
    int64_t offset = 0;
    for (const Tensor& x : data) {
        axis::copyAlong(a, x, 0, y, offset, x.shape()[a]);
        offset += x.shape()[a];
    }
    return {y};
}

Tensors Concat::updateGrad(const Tensors& grad) {
    if (inDataList()[0].dtype() == DType::int32) return Tensors(inDataList().size()); // integers: no gradient
    const Tensor& dy = grad[0];
    const int a = axis::normalize(axis_, dy.shape().rank());
    Tensors dx;
    int64_t offset = 0;
    for (const Tensor& x : inDataList()) {
        Tensor g = Tensor::empty(x.shape(), dy.dtype(), dy.device()); // Module::backward gives it x's dtype
        axis::copyAlong(a, dy, offset, g, 0, x.shape()[a]);
        dx.push_back(g);
        offset += x.shape()[a];
    }
    return dx;
}

Blueprint Concat::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    return bp;
}

} // namespace tessera
