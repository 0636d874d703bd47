#include "modules/Transpose.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

namespace {
std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    return inv;
}

Shape permuted(const Shape& s, const std::vector<int64_t>& perm) {
    Shape out = s;
    for (size_t i = 0; i < perm.size(); ++i) out[i] = s[static_cast<size_t>(perm[i])];
    return out;
}

// An axis in [-rank, rank) as a position, or -1 when outside.
int64_t position(int64_t axis, size_t rank) {
    const auto r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) return -1;
    return axis < 0 ? axis + r : axis;
}
} // namespace

void AxisPermutation::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (permFor(inShapes[0].rank()).empty()) {
        throw shapeError("expects an input of " + rankNeeded() + ", got " + inShapes[0].str());
    }
}

void AxisPermutation::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    if (permFor(outGradShapes[0].rank()).empty()) {
        throw shapeError("expects a gradient of " + rankNeeded() + ", got " + outGradShapes[0].str());
    }
}

Shapes AxisPermutation::dataShapeFrom(const Shapes& inShapes) const {
    return {permuted(inShapes[0], permFor(inShapes[0].rank()))};
}

Shapes AxisPermutation::gradShapeFrom(const Shapes& outGradShapes) const {
    return {permuted(outGradShapes[0], inverse(permFor(outGradShapes[0].rank())))};
}

Tensors AxisPermutation::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{x.shape()})[0], DType::float32, x.device());
    backendOf(x).permute(x, permFor(x.shape().rank()), y);
    return {y};
}

Tensors AxisPermutation::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Tensor dx = Tensor::empty(gradShapeFrom(dy.shape()), DType::float32, dy.device());
    backendOf(dy).permute(dy, inverse(permFor(dy.shape().rank())), dx);
    return {dx};
}

// ---- Transpose --------------------------------------------------------------------------

Transpose::Transpose(std::vector<int64_t> axes, std::string name)
    : AxisPermutation(std::move(name)), axes_(std::move(axes)) {
    std::vector<int64_t> sorted = axes_;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
        if (sorted[i] != static_cast<int64_t>(i)) {
            throw ModuleError("Transpose: axes " + Shape(axes_).str() + " are not a permutation of 0.." +
                              std::to_string(static_cast<int64_t>(axes_.size()) - 1));
        }
    }
}

std::vector<int64_t> Transpose::permFor(size_t rank) const {
    return rank == axes_.size() ? axes_ : std::vector<int64_t>{};
}
std::string Transpose::rankNeeded() const { return "rank " + std::to_string(axes_.size()); }

Blueprint Transpose::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axes", axes_);
    return bp;
}

// ---- SwapAxes ---------------------------------------------------------------------------

SwapAxes::SwapAxes(int64_t axis1, int64_t axis2, std::string name)
    : AxisPermutation(std::move(name)), axis1_(axis1), axis2_(axis2) {}

std::vector<int64_t> SwapAxes::permFor(size_t rank) const {
    const int64_t a = position(axis1_, rank), b = position(axis2_, rank);
    if (a < 0 || b < 0) return {};
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
    return perm;
}

std::string SwapAxes::rankNeeded() const {
    return "rank above " +
           std::to_string(std::max(axis1_ < 0 ? -axis1_ - 1 : axis1_, axis2_ < 0 ? -axis2_ - 1 : axis2_));
}

Blueprint SwapAxes::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis1", axis1_);
    bp.scheme.emplace_back("axis2", axis2_);
    return bp;
}

// ---- MoveAxis ---------------------------------------------------------------------------

MoveAxis::MoveAxis(int64_t src, int64_t dst, std::string name)
    : AxisPermutation(std::move(name)), src_(src), dst_(dst) {}

std::vector<int64_t> MoveAxis::permFor(size_t rank) const {
    const int64_t s = position(src_, rank), d = position(dst_, rank);
    if (s < 0 || d < 0) return {};
    std::vector<int64_t> rest;
    for (int64_t i = 0; i < static_cast<int64_t>(rank); ++i) {
        if (i != s) rest.push_back(i);
    }
    rest.insert(rest.begin() + d, s);
    return rest;
}

std::string MoveAxis::rankNeeded() const {
    return "rank above " + std::to_string(std::max(src_ < 0 ? -src_ - 1 : src_, dst_ < 0 ? -dst_ - 1 : dst_));
}

Blueprint MoveAxis::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("src", src_);
    bp.scheme.emplace_back("dst", dst_);
    return bp;
}

} // namespace tessera
