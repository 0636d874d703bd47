#include "modules/DepthConcat.h"

#include <algorithm>

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

void DepthConcat::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.empty()) throw shapeError("expects at least one input tensor, got none");
    const Shape& first = inShapes[0];
    for (size_t i = 0; i < inShapes.size(); ++i) {
        const Shape& s = inShapes[i];
        if (s.rank() < 3 || s.rank() > 5 || s.rank() != first.rank() || s[0] != first[0]) {
            throw shapeError("input " + std::to_string(i) + " " + s.str() + " does not fit input 0 " + first.str() +
                             ": all must be [N, C, *spatial] of one rank (3 to 5) and one N");
        }
    }
}

Shapes DepthConcat::dataShapeFrom(const Shapes& inShapes) const {
    Shape out = inShapes[0];
    out[1] = 0;
    for (const Shape& s : inShapes) {
        out[1] += s[1];
        for (size_t d = 2; d < s.rank(); ++d) out[d] = std::max(out[d], s[d]);
    }
    return {out};
}

Shapes DepthConcat::gradShapeFrom(const Shapes& outGradShapes) const {
    Shapes in = lastInShapes("gradShapeFrom");
    for (Shape& s : in) s[0] = outGradShapes[0][0];
    return in;
}

void DepthConcat::padsOf(const Shape& in, const Shape& out, std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
    lo.clear();
    hi.clear();
    for (size_t d = 2; d < in.rank(); ++d) {
        lo.push_back((out[d] - in[d]) / 2);
        hi.push_back(out[d] - in[d] - lo.back());
    }
}

bool DepthConcat::samePlanes(const Shapes& inShapes) {
    for (const Shape& s : inShapes) {
        for (size_t d = 2; d < s.rank(); ++d) {
            if (s.rank() != inShapes[0].rank() || s[d] != inShapes[0][d]) return false;
        }
    }
    return true;
}

// Inputs of one dtype: a copy moves any type; the inputs it pads, 16-bit ones where the
// backend carries them (Backend::padForward takes them with constant padding).
bool DepthConcat::takes16Bit(const Tensors& data) const {
    for (const Tensor& x : data) {
        if (x.dtype() != data[0].dtype()) return false;
    }
    return samePlanes(shapesOf(data)) || backendCarries(data);
}

std::vector<DType> DepthConcat::outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                             Device device) const {
    for (DType t : inDTypes) {
        if (t != inDTypes[0]) return {DType::float32};
    }
    if (inDTypes.empty()) return {DType::float32};
    const bool takes = samePlanes(inShapes) || !is16Bit(inDTypes[0]) || backendFor(device).carries16Bit(inDTypes[0]);
    return {takes ? inDTypes[0] : DType::float32};
}

// Each input padded to the output's spatial size, then copied into its channels, in the
// inputs' dtype.
Tensors DepthConcat::updateData(const Tensors& data) {
    const Shape out = dataShapeFrom(shapesOf(data))[0];
    Tensor y = Tensor::empty(out, data[0].dtype(), data[0].device());
    Backend& be = backendOf(y);
    std::vector<int64_t> lo, hi;
    int64_t channel = 0;
    for (const Tensor& x : data) {
        Shape padded = out;
        padded[1] = x.shape()[1];
        padsOf(x.shape(), out, lo, hi);
        Tensor p = x;
        if (padded != x.shape()) {
            p = Tensor::empty(padded, x.dtype(), x.device());
            be.padForward(PadMode::constant, 0.0f, lo, hi, x, p);
        }
        axis::copyAlong(1, p, 0, y, channel, x.shape()[1]);
        channel += x.shape()[1];
    }
    return {y};
}

Tensors DepthConcat::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Backend& be = backendOf(dy);
    std::vector<int64_t> lo, hi;
    Tensors dx;
    int64_t channel = 0;
    for (const Tensor& x : inDataList()) {
        Shape padded = dy.shape();
        padded[1] = x.shape()[1];
        Tensor part = Tensor::empty(padded, dy.dtype(), dy.device()); // Module::backward gives it x's dtype
        axis::copyAlong(1, dy, channel, part, 0, x.shape()[1]);
        if (padded == x.shape()) {
            dx.push_back(part);
        } else {
            padsOf(x.shape(), dy.shape(), lo, hi);
            Tensor g = Tensor::empty(x.shape(), dy.dtype(), dy.device());
            be.padBackward(PadMode::constant, lo, hi, part, g);
            dx.push_back(g);
        }
        channel += x.shape()[1];
    }
    return dx;
}

} // namespace tessera
