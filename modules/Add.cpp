#include "modules/Add.h"

#include "backend/Backend.h"

namespace tessera {

namespace {
void requireSameShapes(const Module& m, const Shapes& inShapes, size_t minimum) {
    if (inShapes.size() < minimum) {
        throw ShapeError(m.str() + ": expects at least " + std::to_string(minimum) + " input tensors, got " +
                         std::to_string(inShapes.size()));
    }
    for (size_t i = 1; i < inShapes.size(); ++i) {
        if (inShapes[i] != inShapes[0]) {
            throw ShapeError(m.str() + ": input " + std::to_string(i) + " " + inShapes[i].str() +
                             " differs from input 0 " + inShapes[0].str() + "; all inputs must have one shape");
        }
    }
}
} // namespace

Add::Add(std::vector<float> coefficients, std::string name)
    : Module(std::move(name)), coefficients_(std::move(coefficients)) {}

void Add::checkDataShape(const Shapes& inShapes) const {
    requireSameShapes(*this, inShapes, 1);
    if (!coefficients_.empty() && coefficients_.size() != inShapes.size()) {
        throw shapeError("has " + std::to_string(coefficients_.size()) + " coefficients but got " +
                         std::to_string(inShapes.size()) + " inputs");
    }
}

Shapes Add::gradShapeFrom(const Shapes& outGradShapes) const {
    return Shapes(lastInShapes("gradShapeFrom").size(), outGradShapes[0]);
}

// x_i: same shape (any layouts) -> y = sum c_i x_i, in the first input's layout
Tensors Add::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(data[0].shape(), DType::float32, data[0].device(), data[0].layout());
    Backend& be = backendOf(y);
    if (data.size() == 1) {
        be.axpby(coefficient(0), data[0], 0.0f, y);
    } else {
        be.axpbyz(coefficient(1), data[1], coefficient(0), data[0], y);
    }
    for (size_t i = 2; i < data.size(); ++i) be.axpby(coefficient(i), data[i], 1.0f, y);
    return {y};
}

Tensors Add::updateGrad(const Tensors& grad) {
    Tensors dx;
    for (size_t i = 0; i < inDataList().size(); ++i) {
        if (coefficient(i) == 1.0f) {
            dx.push_back(grad[0]); // shared, never written in place
        } else {
            Tensor g = Tensor::empty(grad[0].shape(), DType::float32, grad[0].device(), grad[0].layout());
            backendOf(g).axpby(coefficient(i), grad[0], 0.0f, g);
            dx.push_back(g);
        }
    }
    return dx;
}

Blueprint Add::blueprint() const {
    Blueprint bp = Module::blueprint();
    if (!coefficients_.empty()) {
        bp.scheme.emplace_back("coefficients", std::vector<double>(coefficients_.begin(), coefficients_.end()));
    }
    return bp;
}

namespace {
// True when `gate` is `x`'s per-channel gate: [N, C, 1, ...] against x [N, C, ...], same rank.
bool gates(const Shape& gate, const Shape& x) {
    if (gate.rank() != x.rank() || x.rank() < 3 || gate == x) return false;
    if (gate[0] != x[0] || gate[1] != x[1]) return false;
    for (size_t d = 2; d < gate.rank(); ++d) {
        if (gate[static_cast<int64_t>(d)] != 1) return false;
    }
    return true;
}
} // namespace

void Mul::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.size() == 2 && (gates(inShapes[0], inShapes[1]) || gates(inShapes[1], inShapes[0]))) return;
    if (inShapes.size() == 2 && inShapes[0] != inShapes[1]) {
        throw shapeError("input 1 " + inShapes[1].str() + " differs from input 0 " + inShapes[0].str() +
                         "; expected one shape, or a per-channel gate [N, C, 1, ...] of the other");
    }
    requireSameShapes(*this, inShapes, 2);
}

Shapes Mul::dataShapeFrom(const Shapes& inShapes) const {
    return {inShapes.size() == 2 && gates(inShapes[0], inShapes[1]) ? inShapes[1] : inShapes[0]};
}

Shapes Mul::gradShapeFrom(const Shapes& outGradShapes) const {
    const Shapes& in = lastInShapes("gradShapeFrom");
    if (in.size() == 2 && in[0] != in[1]) return in; // a gate's gradient has the gate's shape
    return Shapes(in.size(), outGradShapes[0]);
}

// x_i: same shape -> y = prod x_i; or x [N, C, ...] and a gate g [N, C, 1, ...] -> y = x g
Tensors Mul::updateData(const Tensors& data) {
    if (data.size() == 2 && data[0].shape() != data[1].shape()) {
        const bool gateFirst = gates(data[0].shape(), data[1].shape());
        const Tensor& x = gateFirst ? data[1] : data[0];
        const Tensor& g = gateFirst ? data[0] : data[1];
        Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
        backendOf(y).mulChannels(x, g, y);
        return {y};
    }
    Tensor y = Tensor::empty(data[0].shape(), DType::float32, data[0].device());
    Backend& be = backendOf(y);
    be.mul(data[0], data[1], y);
    for (size_t i = 2; i < data.size(); ++i) be.mul(y, data[i], y);
    return {y};
}

Tensors Mul::updateGrad(const Tensors& grad) {
    const Tensors& x = inDataList();
    Backend& be = backendOf(grad[0]);
    if (x.size() == 2 && x[0].shape() != x[1].shape()) {
        // dx = dy g per channel; dg[n, c] = sum over the plane of dy x (a GEMV against ones).
        const bool gateFirst = gates(x[0].shape(), x[1].shape());
        const Tensor& data = gateFirst ? x[1] : x[0];
        const Tensor& g = gateFirst ? x[0] : x[1];
        const Tensor& dy = grad[0];
        Tensor dx = Tensor::empty(data.shape(), DType::float32, dy.device());
        be.mulChannels(dy, g, dx);
        const int64_t planes = g.numel(), inner = data.numel() / planes;
        Tensor prod = Tensor::empty({planes, inner}, DType::float32, dy.device());
        be.mul(dy, data, prod);
        Tensor ones = Tensor::empty({inner, 1}, DType::float32, dy.device());
        be.fill(ones, 1.0f);
        Tensor dg = Tensor::empty({planes, 1}, DType::float32, dy.device());
        be.gemm(false, false, 1.0f, prod, ones, 0.0f, dg);
        dg = dg.reshape(g.shape());
        return gateFirst ? Tensors{dg, dx} : Tensors{dx, dg};
    }
    Tensors dx;
    for (size_t i = 0; i < x.size(); ++i) {
        Tensor g = grad[0].clone();
        for (size_t j = 0; j < x.size(); ++j) {
            if (j != i) be.mul(g, x[j], g);
        }
        dx.push_back(g);
    }
    return dx;
}

MemoryUse Add::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                         Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    for (size_t i = 0; i < inShapes.size(); ++i) use.gradViews[i] = coefficient(i) == 1.0f ? 0 : -1; // dx_i = dy
    return use;
}

} // namespace tessera
