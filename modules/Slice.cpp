#include "modules/Slice.h"

#include <algorithm>

#include "modules/AxisUtil.h"

namespace tessera {

Slice::Slice(int axis, int64_t start, int64_t end, std::string name)
    : Slice(std::vector<int>{axis}, std::vector<int64_t>{start}, std::vector<int64_t>{end}, std::move(name)) {}

Slice::Slice(std::vector<int> axes, std::vector<int64_t> starts, std::vector<int64_t> ends, std::string name)
    : Slice(std::move(axes), std::move(starts), std::move(ends), SliceOptions{.name = std::move(name)}) {}

Slice::Slice(std::vector<int> axes, std::vector<int64_t> starts, std::vector<int64_t> ends, const SliceOptions& options)
    : Module(options.name), axes_(std::move(axes)), starts_(std::move(starts)), ends_(std::move(ends)),
      steps_(options.steps) {
    if (steps_.empty()) steps_.assign(axes_.size(), 1);
    if (axes_.empty() || starts_.size() != axes_.size() || ends_.size() != axes_.size() ||
        steps_.size() != axes_.size()) {
        throw moduleError("takes one start and one end per axis (and one step each, or none), got " +
                          std::to_string(axes_.size()) + " axes, " + std::to_string(starts_.size()) + " starts, " +
                          std::to_string(ends_.size()) + " ends and " + std::to_string(steps_.size()) + " steps");
    }
    for (int64_t s : steps_) {
        if (s == 0) throw moduleError("a step must not be 0");
    }
}

std::pair<int64_t, int64_t> Slice::range(size_t k, int64_t dim) const {
    if (steps_[k] < 0) { // from b down to e (exclusive); end 0: through index 0
        const int64_t b = starts_[k] < 0 ? starts_[k] + dim : starts_[k];
        const int64_t e = ends_[k] == 0 ? -1 : ends_[k] < 0 ? ends_[k] + dim : ends_[k];
        return {std::clamp<int64_t>(b, -1, dim - 1), std::clamp<int64_t>(e, -1, dim - 1)};
    }
    const int64_t b = starts_[k] < 0 ? starts_[k] + dim : starts_[k];
    const int64_t e = ends_[k] <= 0 ? ends_[k] + dim : ends_[k];
    return {std::clamp<int64_t>(b, 0, dim), std::clamp<int64_t>(e, 0, dim)};
}

int64_t Slice::count(size_t k, int64_t dim) const {
    const auto [b, e] = range(k, dim);
    const int64_t s = steps_[k];
    if (s < 0) return b > e ? (b - e - 1) / -s + 1 : 0;
    return e > b ? (e - b + s - 1) / s : 0;
}

Shape Slice::shapeAfter(const Shape& in, size_t k) const {
    Shape out = in;
    for (size_t j = 0; j < k; ++j) {
        const int a = axis::normalize(axes_[j], in.rank());
        out[a] = count(j, in[a]);
    }
    return out;
}

void Slice::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    std::vector<int> seen;
    for (size_t k = 0; k < axes_.size(); ++k) {
        const int a = axis::normalize(axes_[k], s.rank());
        if (a < 0) throw shapeError("axis " + std::to_string(axes_[k]) + " is out of range for input " + s.str());
        if (std::find(seen.begin(), seen.end(), a) != seen.end()) {
            throw shapeError("axis " + std::to_string(a) + " is sliced twice (input " + s.str() + ")");
        }
        seen.push_back(a);
        if (count(k, s[a]) == 0) {
            throw shapeError("range [" + std::to_string(starts_[k]) + ", " + std::to_string(ends_[k]) + ")" +
                             (steps_[k] < 0 ? " with step " + std::to_string(steps_[k]) : std::string()) +
                             " is empty for input " + s.str() + " along axis " + std::to_string(a));
        }
    }
}

Shapes Slice::dataShapeFrom(const Shapes& inShapes) const { return {shapeAfter(inShapes[0], axes_.size())}; }

Shapes Slice::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape in = lastInShapes("gradShapeFrom")[0];
    in[0] = outGradShapes[0][0];
    return {in};
}

void Slice::checkDataType(const std::vector<DType>& dtypes) const {
    if (dtypes.size() == 1 && dtypes[0] == DType::int32) return;
    Module::checkDataType(dtypes);
}

// x: [..., D, ...] -> y: [..., e - b, ...], one axis after another
Tensors Slice::updateData(const Tensors& data) {
    Tensor t = data[0];
    const Shape in = t.shape();
    for (size_t k = 0; k < axes_.size(); ++k) {
        const Shape out = shapeAfter(in, k + 1);
        const int a = axis::normalize(axes_[k], out.rank());
        Tensor y = Tensor::empty(out, t.dtype(), t.device());
        const int64_t b = range(k, in[a]).first;
        if (steps_[k] == 1) { // one block; other steps element by element, in either direction
            axis::copyAlong(a, t, b, y, 0, out[a]);
        } else {
            for (int64_t j = 0; j < out[a]; ++j) axis::copyAlong(a, t, b + j * steps_[k], y, j, 1);
        }
        t = y;
    }
    return {t};
}

// dx is zero outside the ranges: the last axis's range first, back to the input's shape.
Tensors Slice::updateGrad(const Tensors& grad) {
    if (!isFloating(inData().dtype())) return {Tensor()}; // integers have no gradient
    Tensor g = grad[0];
    const Shape in = inData().shape();
    for (size_t k = axes_.size(); k-- > 0;) {
        const Shape before = shapeAfter(in, k);
        const int a = axis::normalize(axes_[k], in.rank());
        Tensor dx = Tensor::zeros(before, DType::float32, g.device());
        const int64_t b = range(k, in[a]).first;
        if (steps_[k] == 1) {
            axis::copyAlong(a, g, 0, dx, b, g.shape()[a]);
        } else {
            for (int64_t j = 0; j < g.shape()[a]; ++j) axis::copyAlong(a, g, j, dx, b + j * steps_[k], 1);
        }
        g = dx;
    }
    return {g};
}

Blueprint Slice::blueprint() const {
    Blueprint bp = Module::blueprint();
    if (axes_.size() == 1) {
        bp.scheme.emplace_back("axis", static_cast<int64_t>(axes_[0]));
        bp.scheme.emplace_back("start", starts_[0]);
        bp.scheme.emplace_back("end", ends_[0]);
    } else {
        bp.scheme.emplace_back("axis", std::vector<int64_t>(axes_.begin(), axes_.end()));
        bp.scheme.emplace_back("start", starts_);
        bp.scheme.emplace_back("end", ends_);
    }
    if (std::any_of(steps_.begin(), steps_.end(), [](int64_t s) { return s != 1; })) {
        if (axes_.size() == 1) {
            bp.scheme.emplace_back("step", steps_[0]);
        } else {
            bp.scheme.emplace_back("step", steps_);
        }
    }
    return bp;
}

} // namespace tessera
