#include "modules/Split.h"

#include <numeric>
#include <stdexcept>

#include "modules/AxisUtil.h"

namespace tessera {

Split::Split(int axis, std::vector<int64_t> sections, std::string name)
    : Module(std::move(name)), axis_(axis), sections_(std::move(sections)) {
    if (sections_.empty()) throw ModuleError("Split: needs at least one section");
    for (int64_t s : sections_) {
        if (s <= 0) throw ModuleError("Split: sections must be positive, got " + std::to_string(s));
    }
}

void Split::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const int a = axis::normalize(axis_, s.rank());
    if (a < 0) throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + s.str());
    const int64_t total = std::accumulate(sections_.begin(), sections_.end(), int64_t{0});
    if (s[a] != total) {
        throw shapeError("sections add up to " + std::to_string(total) + " but input " + s.str() + " has " +
                         std::to_string(s[a]) + " along axis " + std::to_string(a));
    }
}

Shapes Split::dataShapeFrom(const Shapes& inShapes) const {
    const int a = axis::normalize(axis_, inShapes[0].rank());
    Shapes out;
    for (int64_t n : sections_) {
        Shape s = inShapes[0];
        s[a] = n;
        out.push_back(s);
    }
    return out;
}

Shapes Split::gradShapeFrom(const Shapes& outGradShapes) const {
    const int a = axis::normalize(axis_, outGradShapes[0].rank());
    Shape in = outGradShapes[0];
    in[a] = std::accumulate(sections_.begin(), sections_.end(), int64_t{0});
    return {in};
}

// x: [..., D, ...] -> y_i: [..., sections[i], ...]
Tensors Split::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const int a = axis::normalize(axis_, x.shape().rank());
    Tensors ys;
    int64_t offset = 0;
    for (const Shape& s : dataShapeFrom(Shapes{x.shape()})) {
        Tensor y = Tensor::empty(s, x.dtype(), x.device());
        axis::copyAlong(a, x, offset, y, 0, s[a]);
        ys.push_back(y);
        offset += s[a];
    }
    return ys;
}

Tensors Split::updateGrad(const Tensors& grad) {
    const Shape in = inData().shape();
    const int a = axis::normalize(axis_, in.rank());
    Tensor dx = Tensor::empty(in, DType::float32, grad[0].device());
    int64_t offset = 0;
    for (const Tensor& g : grad) {
        axis::copyAlong(a, g, 0, dx, offset, g.shape()[a]);
        offset += g.shape()[a];
    }
    return {dx};
}

Blueprint Split::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    bp.scheme.emplace_back("sections", sections_);
    return bp;
}

} // namespace tessera
