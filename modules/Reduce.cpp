#include "modules/Reduce.h"

#include <algorithm>

#include "backend/Backend.h"
#include "modules/AxisUtil.h"

namespace tessera {

ReduceMean::ReduceMean(std::vector<int64_t> axes, bool keepDims, std::string name, bool sum)
    : Module(std::move(name)), axes_(std::move(axes)), keepDims_(keepDims), sum_(sum) {}

void ReduceMean::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const auto rank = static_cast<int64_t>(inShapes[0].rank());
    if (rank > 8) throw shapeError("input " + inShapes[0].str() + " has more than 8 dims");
    std::vector<int64_t> seen;
    for (int64_t a : axes_) {
        const int64_t d = a < 0 ? a + rank : a;
        if (d < 0 || d >= rank) {
            throw shapeError("axis " + std::to_string(a) + " is out of range for input " + inShapes[0].str());
        }
        if (std::find(seen.begin(), seen.end(), d) != seen.end()) {
            throw shapeError("axis " + std::to_string(a) + " is given twice");
        }
        seen.push_back(d);
    }
}

Shape ReduceMean::keptShape(const Shape& in) const {
    std::vector<int64_t> dims = in.dims();
    const auto rank = static_cast<int64_t>(in.rank());
    if (axes_.empty()) std::fill(dims.begin(), dims.end(), 1);
    for (int64_t a : axes_) dims[static_cast<size_t>(a < 0 ? a + rank : a)] = 1;
    return Shape(dims);
}

Shapes ReduceMean::dataShapeFrom(const Shapes& inShapes) const {
    const Shape kept = keptShape(inShapes[0]);
    if (keepDims_) return {kept};
    std::vector<int64_t> dims;
    const auto rank = static_cast<int64_t>(inShapes[0].rank());
    for (int64_t d = 0; d < rank; ++d) {
        bool reduced = axes_.empty();
        for (int64_t a : axes_) reduced = reduced || (a < 0 ? a + rank : a) == d;
        if (!reduced) dims.push_back(inShapes[0][d]);
    }
    if (dims.empty()) dims.push_back(1); // every dim reduced: [1]
    return {Shape(dims)};
}

Shapes ReduceMean::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

float ReduceMean::factor(const Shape& in) const {
    if (sum_) return 1.0f;
    return 1.0f / static_cast<float>(in.numel() / std::max<int64_t>(keptShape(in).numel(), 1));
}

Tensors ReduceMean::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Tensor y = Tensor::empty(keptShape(x.shape()), DType::float32, x.device());
    backendOf(y).sumTo(x, factor(x.shape()), y);
    return {y.reshape(dataShapeFrom(Shapes{x.shape()})[0])};
}

Tensors ReduceMean::updateGrad(const Tensors& grad) {
    const Shape& in = inData().shape();
    const Tensor dy = grad[0].plain().reshape(keptShape(in));
    Tensor dx = Tensor::empty(in, DType::float32, dy.device());
    backendOf(dx).binaryBroadcast(BinaryOp::mul, dy, Tensor::full({1}, factor(in), dy.device()), dx);
    return {dx};
}

Blueprint ReduceMean::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axes", axes_);
    bp.scheme.emplace_back("keepDims", keepDims_);
    return bp;
}

void ArgMax::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (axis::normalize(axis_, inShapes[0].rank()) < 0) {
        throw shapeError("axis " + std::to_string(axis_) + " is out of range for input " + inShapes[0].str());
    }
}

Shapes ArgMax::dataShapeFrom(const Shapes& inShapes) const {
    std::vector<int64_t> dims = inShapes[0].dims();
    const int a = axis::normalize(axis_, dims.size());
    if (keepDims_) {
        dims[static_cast<size_t>(a)] = 1;
    } else {
        dims.erase(dims.begin() + a);
        if (dims.empty()) dims.push_back(1); // the only dim reduced: [1]
    }
    return {Shape(dims)};
}

Shapes ArgMax::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

// x as [outer, along, inner]: the backend's top-1 positions, of -x for the smallest. With
// lastIndex, of the lines reversed (their first extreme is the last one), counted back
// from the end: n - 1 - i (in float, exact below 2^24).
Tensors ArgMax::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const int a = axis::normalize(axis_, x.shape().rank());
    const Shape& s = x.shape();
    const int64_t outer = axis::outer(s, a), inner = axis::inner(s, a), n = s[a];
    Backend& be = backendOf(x);
    Tensor src = x;
    if (min_) {
        src = Tensor::empty(s, DType::float32, x.device());
        be.binaryBroadcast(BinaryOp::mul, x, Tensor::full({1}, -1.0f, x.device()), src);
    }
    if (lastIndex_) {
        if (n > (int64_t{1} << 24)) throw shapeError("lastIndex along a dim beyond 2^24, " + s.str());
        Tensor reversed = Tensor::empty(s, DType::float32, x.device());
        for (int64_t j = 0; j < n; ++j) axis::copyAlong(a, src, n - 1 - j, reversed, j, 1);
        src = reversed;
    }
    Tensor idx = Tensor::empty({outer, 1, inner}, DType::int32, x.device());
    be.topKIndices(src.reshape({outer, n, inner}), 1, idx);
    if (lastIndex_) {
        Tensor f = Tensor::empty(idx.shape(), DType::float32, x.device());
        be.cast(idx, f);
        be.affine(f, -1.0f, static_cast<float>(n - 1), f);
        be.cast(f, idx);
    }
    return {idx.reshape(dataShapeFrom(Shapes{s})[0])};
}

Tensors ArgMax::updateGrad(const Tensors& /*grad*/) { return {Tensor()}; }

Blueprint ArgMax::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", int64_t{axis_});
    bp.scheme.emplace_back("keepDims", keepDims_);
    bp.scheme.emplace_back("lastIndex", lastIndex_);
    return bp;
}

} // namespace tessera
