#include "modules/Slice.h"

#include <algorithm>

#include "modules/AxisUtil.h"

namespace tessera {

Slice::Slice(int axis, int64_t start, int64_t end, std::string name)
    : Module(std::move(name)), axis_(axis), start_(start), end_(end) {}

std::pair<int64_t, int64_t> Slice::range(int64_t dim) const {
    const int64_t b = start_ < 0 ? start_ + dim : start_;
    const int64_t e = end_ <= 0 ? end_ + dim : end_;
    return {std::clamp<int64_t>(b, 0, dim), std::clamp<int64_t>(e, 0, dim)};
}

void Slice::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const int a = axis::normalize(axis_, s.rank());
    if (a < 0) throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + s.str());
    auto [b, e] = range(s[a]);
    if (b >= e) {
        throw shapeError("range [" + std::to_string(start_) + ", " + std::to_string(end_) + ") is empty for input " +
                         s.str() + " along axis " + std::to_string(a));
    }
}

Shapes Slice::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& in = inShapes[0];
    const int a = axis::normalize(axis_, in.rank());
    auto [b, e] = range(in[a]);
    Shape out = in;
    out[a] = e - b;
    return {out};
}

Shapes Slice::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape in = lastInShapes("gradShapeFrom")[0];
    in[0] = outGradShapes[0][0];
    return {in};
}

// x: [..., D, ...] -> y: [..., e - b, ...]
Tensors Slice::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const Shape out = dataShapeFrom(Shapes{x.shape()})[0];
    const int a = axis::normalize(axis_, out.rank());
    Tensor y = Tensor::empty(out, x.dtype(), x.device());
    axis::copyAlong(a, x, range(x.shape()[a]).first, y, 0, out[a]);
    return {y};
}

// dx is zero outside the range.
Tensors Slice::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    const Shape in = inData().shape();
    const int a = axis::normalize(axis_, in.rank());
    Tensor dx = Tensor::zeros(in, DType::float32, dy.device());
    axis::copyAlong(a, dy, 0, dx, range(in[a]).first, dy.shape()[a]);
    return {dx};
}

Blueprint Slice::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    bp.scheme.emplace_back("start", start_);
    bp.scheme.emplace_back("end", end_);
    return bp;
}

} // namespace tessera
