#include "modules/CumSum.h"

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

namespace {
// dst <- src ([O, A, I]) moved s positions along dim 1, toward the end (up) or the start,
// zeros where nothing moves in.
void shift(const Tensor& src, int64_t s, bool up, const Tensor& dst) {
    const int64_t outer = src.shape()[0], along = src.shape()[1], inner = src.shape()[2];
    Backend& be = backendOf(dst);
    be.fill(dst, 0.0f);
    if (s >= along) return;
    be.copyStrided(src, up ? 0 : s * inner, along * inner, dst, up ? s * inner : 0, along * inner, outer,
                   (along - s) * inner);
}

// The running sums of v ([O, A, I]) along dim 1, toward the end (up) or the start, each
// leaving out its own position when exclusive: for s = 1, 2, 4, ... below A, y += y moved
// by s (Hillis and Steele's inclusive scan), from v moved by 1 when exclusive (which the
// scan commutes with).
Tensor runningSums(const Tensor& v, bool up, bool exclusive) {
    Backend& be = backendOf(v);
    Tensor y = Tensor::empty(v.shape(), DType::float32, v.device());
    if (exclusive) {
        shift(v, 1, up, y);
    } else {
        be.copy(v, y);
    }
    const int64_t along = v.shape()[1];
    if (along < 2) return y;
    Tensor moved = Tensor::empty(v.shape(), DType::float32, v.device());
    for (int64_t s = 1; s < along; s *= 2) {
        shift(y, s, up, moved);
        be.axpby(1.0f, moved, 1.0f, y);
    }
    return y;
}
} // namespace

CumSum::CumSum(int axis, const CumSumOptions& options) : Module(options.name), axis_(axis), options_(options) {}

void CumSum::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (axis::normalize(axis_, inShapes[0].rank()) < 0) {
        throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + inShapes[0].str());
    }
}

Tensors CumSum::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    const int a = axis::normalize(axis_, x.shape().rank());
    return {runningSums(axis::lines(x, a), !options_.reverse, options_.exclusive).reshape(x.shape())};
}

Tensors CumSum::updateGrad(const Tensors& grad) {
    const Tensor dy = grad[0].plain();
    const int a = axis::normalize(axis_, dy.shape().rank());
    return {runningSums(axis::lines(dy, a), options_.reverse, options_.exclusive).reshape(dy.shape())};
}

Blueprint CumSum::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", static_cast<int64_t>(axis_));
    bp.scheme.emplace_back("exclusive", options_.exclusive);
    bp.scheme.emplace_back("reverse", options_.reverse);
    return bp;
}

} // namespace tessera
