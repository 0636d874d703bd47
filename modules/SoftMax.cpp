#include "modules/SoftMax.h"

#include "backend/Backend.h"

namespace tessera {

void SoftMax::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const auto rank = static_cast<int>(s.rank());
    if (axis_ >= rank || axis_ < -rank) {
        throw shapeError("runs over axis " + std::to_string(axis_) + ", which a rank-" + std::to_string(rank) +
                         " input " + s.str() + " does not have");
    }
}

Shape SoftMax::around(const Shape& s) const {
    const auto rank = static_cast<int64_t>(s.rank());
    const int64_t a = axis_ < 0 ? axis_ + rank : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i) {
        if (i < a) outer *= s[i];
        if (i > a) inner *= s[i];
    }
    if (inner == 1) return Shape{outer, s[a]}; // the last axis: rows, which oneDNN runs fastest
    return Shape{outer, s[a], inner};
}

// x -> y, both seen as [outer, C, inner]
Tensors SoftMax::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    const Shape v = around(x.shape());
    Backend& be = backendOf(x);
    if (log_) {
        be.logSoftmaxForward(x.reshape(v), y.reshape(v));
    } else {
        be.softmaxForward(x.reshape(v), y.reshape(v));
    }
    return {y};
}

Tensors SoftMax::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    const Shape v = around(dy.shape());
    Backend& be = backendOf(dy);
    if (log_) {
        be.logSoftmaxBackward(data().reshape(v), dy.reshape(v), dx.reshape(v));
    } else {
        be.softmaxBackward(data().reshape(v), dy.reshape(v), dx.reshape(v));
    }
    return {dx};
}

Blueprint SoftMax::blueprint() const {
    Blueprint bp = Module::blueprint();
    if (axis_ != 1) bp.scheme.emplace_back("axis", int64_t{axis_}); // older readers take the channels
    return bp;
}

} // namespace tessera
