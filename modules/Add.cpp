#include "modules/Add.h"

#include <algorithm>

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

// The shape two inputs broadcast to, as the module's ShapeError when they do not.
Shape broadcastOf(const Module& m, const Shape& a, const Shape& b) {
    try {
        return broadcastShapes(a, b);
    } catch (const ShapeError& e) {
        throw ShapeError(m.str() + ": inputs " + e.what() + " (NumPy's broadcasting rules)");
    }
}

bool broadcasting(const Tensors& data) { return data.size() == 2 && data[0].shape() != data[1].shape(); }

// y = a op b, broadcast (plain float32 on a's device).
Tensor broadcastOp(BinaryOp op, const Tensor& a, const Tensor& b) {
    Tensor y = Tensor::empty(broadcastShapes(a.shape(), b.shape()), DType::float32, a.device());
    backendOf(y).binaryBroadcast(op, a.plain(), b.plain(), y);
    return y;
}

// alpha * `full` summed to `shape` (the gradient of an input that broadcast to `full`).
Tensor sumToShape(const Tensor& full, const Shape& shape, float alpha = 1.0f) {
    if (full.shape() == shape && alpha == 1.0f) return full;
    Tensor r = Tensor::empty(shape, DType::float32, full.device());
    backendOf(r).sumTo(full.plain(), alpha, r);
    return r;
}

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

Add::Add(std::vector<float> coefficients, std::string name)
    : Module(std::move(name)), coefficients_(std::move(coefficients)) {}

void Add::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.size() == 2 && inShapes[0] != inShapes[1] && coefficients_.empty()) {
        broadcastOf(*this, inShapes[0], inShapes[1]);
        return;
    }
    requireSameShapes(*this, inShapes, 1);
    if (!coefficients_.empty() && coefficients_.size() != inShapes.size()) {
        throw shapeError("has " + std::to_string(coefficients_.size()) + " coefficients but got " +
                         std::to_string(inShapes.size()) + " inputs");
    }
}

Shapes Add::dataShapeFrom(const Shapes& inShapes) const {
    if (inShapes.size() == 2 && inShapes[0] != inShapes[1]) return {broadcastOf(*this, inShapes[0], inShapes[1])};
    return {inShapes[0]};
}

Shapes Add::gradShapeFrom(const Shapes& outGradShapes) const {
    const Shapes& in = lastInShapes("gradShapeFrom");
    if (in.size() == 2 && in[0] != in[1]) return in;
    return Shapes(in.size(), outGradShapes[0]);
}

bool Add::takes16Bit(const Tensors& data) const { return !broadcasting(data) && backendCarries(data); }

std::vector<DType> Add::outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes, Device) const {
    const bool broadcast = inShapes.size() == 2 && inShapes[0] != inShapes[1];
    return {broadcast ? DType::float32 : sumDType(inDTypes)};
}

// The inputs' 16-bit type where they all have the same one; float32 otherwise.
DType Add::sumDType(const std::vector<DType>& inDTypes) {
    const DType first = inDTypes.empty() ? DType::float32 : inDTypes[0];
    for (DType t : inDTypes) {
        if (t != first) return DType::float32;
    }
    return is16Bit(first) ? first : DType::float32;
}

bool Add::plainSum() const {
    return std::all_of(coefficients_.begin(), coefficients_.end(), [](float c) { return c == 1.0f; });
}

// The fused batch norm's x and the other operand z give the unfused sum's result in one
// call where they have one shape, the sum's dtype is the normalisation's (z has x's type
// when that is 16-bit), and its layout is too (the sum takes the first input's layout).
bool Add::normaliseFusedInput(Tensors& data, Tensor& y) {
    normalisedInSum_ = false;
    normUsed_ = nullptr;
    if (!norm_ || !norm_->deferredToSum()) return false;
    normUsed_ = norm_;
    normUsedSlot_ = normSlot_;
    const auto k = static_cast<size_t>(normSlot_);
    const Tensor& x = data.at(k);
    if (data.size() == 2 && plainSum()) {
        const Tensor& z = data[1 - k];
        const bool sameType = !is16Bit(x.dtype()) || z.dtype() == x.dtype();
        if (z.shape() == x.shape() && sameType && (k == 0 || z.layout() == x.layout())) {
            y = norm_->normaliseAdd(x, &z, fuseRelu_);
            normalisedInSum_ = true;
            return true;
        }
    }
    data[k] = norm_->normaliseAdd(x, nullptr, false);
    return false;
}

// x_i: same shape (any layouts) -> y = sum c_i x_i, in the first input's layout (in the
// inputs' 16-bit type when they all have the same one); or a + b broadcast
// With a ReLU fused (containers/Fusion.h), y = max(0, sum): in the same pass for two inputs.
// With a batch norm fused, its input comes instead of its output, and it normalises here.
Tensors Add::updateData(const Tensors& inputs) {
    appliedRelu_ = fuseRelu_;
    Tensors data = inputs;
    if (Tensor y; normaliseFusedInput(data, y)) return {y};
    const ActivationParams relu{ActivationKind::relu};
    if (broadcasting(data)) {
        Tensor y = broadcastOp(BinaryOp::add, data[0], data[1]);
        if (appliedRelu_) backendOf(y).activationForward(relu, y, y);
        return {y};
    }
    std::vector<DType> dtypes;
    for (const Tensor& x : data) dtypes.push_back(x.dtype());
    Tensor y = Tensor::empty(data[0].shape(), sumDType(dtypes), data[0].device(), data[0].layout());
    Backend& be = backendOf(y);
    if (data.size() == 1) {
        be.axpby(coefficient(0), data[0], 0.0f, y);
    } else if (data.size() == 2 && appliedRelu_) {
        be.axpbyzRelu(coefficient(1), data[1], coefficient(0), data[0], y);
        return {y};
    } else {
        be.axpbyz(coefficient(1), data[1], coefficient(0), data[0], y);
    }
    for (size_t i = 2; i < data.size(); ++i) be.axpby(coefficient(i), data[i], 1.0f, y);
    if (appliedRelu_) be.activationForward(relu, y, y);
    return {y};
}

// With a batch norm fused (its input came instead of its output), the gradient of its slot
// is its input's, which the batch norm's backward passes on; with the ReLU fused too, the
// gradient comes unmasked (keptReluMask) and the mask applies here.
Tensors Add::updateGrad(const Tensors& grad) {
    const Tensors& x = inDataList();
    const auto k = static_cast<size_t>(normUsedSlot_);
    if (normUsed_ && normalisedInSum_) { // one call: the ReLU's, the sum's and the normalisation's gradients
        Tensor dz;
        const Tensor dn = normUsed_->sumBackward(grad[0], appliedRelu_ ? &data() : nullptr, &dz);
        Tensors dx(2);
        dx[k] = dn;
        dx[1 - k] = dz;
        return dx;
    }
    Tensor dy = grad[0];
    if (normUsed_ && appliedRelu_) dy = backendOf(dy).reluGradient(data(), grad[0]);
    Tensors dx;
    if (broadcasting(x)) {
        dx = {sumToShape(dy, x[0].shape()), sumToShape(dy, x[1].shape())};
    } else {
        for (size_t i = 0; i < x.size(); ++i) {
            if (coefficient(i) == 1.0f) {
                dx.push_back(dy); // shared, never written in place
            } else {
                Tensor g = Tensor::empty(dy.shape(), dy.dtype(), dy.device(), dy.layout());
                backendOf(g).axpby(coefficient(i), dy, 0.0f, g);
                dx.push_back(g);
            }
        }
    }
    if (normUsed_) dx[k] = normUsed_->sumBackward(dx[k], nullptr, nullptr); // it ran alone in the forward
    return dx;
}

Blueprint Add::blueprint() const {
    Blueprint bp = Module::blueprint();
    if (!coefficients_.empty()) {
        bp.scheme.emplace_back("coefficients", std::vector<double>(coefficients_.begin(), coefficients_.end()));
    }
    return bp;
}

MemoryUse Add::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                         Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (inShapes.size() == 2 && inShapes[0] != inShapes[1]) { // broadcast: a plain output of its own
        const Shape out = broadcastShapes(inShapes[0], inShapes[1]);
        use.outLayouts = {Layout::plain};
        for (size_t i = 0; i < 2; ++i) use.gradViews[i] = inShapes[i] == out ? 0 : -1;
    } else {
        for (size_t i = 0; i < inShapes.size(); ++i) use.gradViews[i] = coefficient(i) == 1.0f ? 0 : -1; // dx_i = dy
    }
    if (norm_ && norm_->defersToSum() && static_cast<size_t>(normSlot_) < inShapes.size()) {
        use.gradViews[static_cast<size_t>(normSlot_)] = -1; // the normalisation's input gradient
        if (train && fuseRelu_) {                           // and the masked gradient, z's
            for (int& v : use.gradViews) v = -1;
        }
    }
    return use;
}

// ---- Mul --------------------------------------------------------------------------------

void Mul::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.size() == 2 && inShapes[0] != inShapes[1]) {
        broadcastOf(*this, inShapes[0], inShapes[1]);
        return;
    }
    requireSameShapes(*this, inShapes, 2);
}

Shapes Mul::dataShapeFrom(const Shapes& inShapes) const {
    if (inShapes.size() == 2 && inShapes[0] != inShapes[1]) return {broadcastOf(*this, inShapes[0], inShapes[1])};
    return {inShapes[0]};
}

Shapes Mul::gradShapeFrom(const Shapes& outGradShapes) const {
    const Shapes& in = lastInShapes("gradShapeFrom");
    if (in.size() == 2 && in[0] != in[1]) return in; // each input's gradient has its shape
    return Shapes(in.size(), outGradShapes[0]);
}

// x_i: same shape -> y = prod x_i; or a * b broadcast (a per-channel gate on a fast path)
Tensors Mul::updateData(const Tensors& data) {
    if (broadcasting(data)) {
        for (bool gateFirst : {true, false}) {
            const Tensor& g = data[gateFirst ? 0 : 1];
            const Tensor& x = data[gateFirst ? 1 : 0];
            if (!gates(g.shape(), x.shape())) continue;
            Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
            backendOf(y).mulChannels(x, g, y);
            return {y};
        }
        return {broadcastOp(BinaryOp::mul, data[0], data[1])};
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
    if (broadcasting(x)) {
        // d a = dy * b summed to a's shape, and the same for b.
        return {sumToShape(broadcastOp(BinaryOp::mul, grad[0], x[1]), x[0].shape()),
                sumToShape(broadcastOp(BinaryOp::mul, grad[0], x[0]), x[1].shape())};
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

// ---- Sub, Div ---------------------------------------------------------------------------

void BroadcastPair::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.size() != 2) throw shapeError("expects 2 input tensors, got " + std::to_string(inShapes.size()));
    broadcastOf(*this, inShapes[0], inShapes[1]);
}

Shapes BroadcastPair::dataShapeFrom(const Shapes& inShapes) const {
    return {broadcastOf(*this, inShapes[0], inShapes[1])};
}

Shapes BroadcastPair::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors Sub::updateData(const Tensors& data) {
    if (broadcasting(data)) return {broadcastOp(BinaryOp::sub, data[0], data[1])};
    Tensor y = Tensor::empty(data[0].shape(), DType::float32, data[0].device());
    backendOf(y).axpbyz(-1.0f, data[1].plain(), 1.0f, data[0].plain(), y);
    return {y};
}

Tensors Sub::updateGrad(const Tensors& grad) {
    const Tensors& x = inDataList();
    return {sumToShape(grad[0], x[0].shape()), sumToShape(grad[0], x[1].shape(), -1.0f)};
}

Tensors Div::updateData(const Tensors& data) { return {broadcastOp(BinaryOp::div, data[0], data[1])}; }

// t = dy / b: da = t summed to a's shape; db = -(t * y) summed to b's shape (y = a / b).
Tensors Div::updateGrad(const Tensors& grad) {
    const Tensors& x = inDataList();
    const Tensor t = broadcastOp(BinaryOp::div, grad[0], x[1]);
    return {sumToShape(t, x[0].shape()), sumToShape(broadcastOp(BinaryOp::mul, t, data()), x[1].shape(), -1.0f)};
}

// ---- Sum ------------------------------------------------------------------------------------

namespace {

// x's shape with dim `axis` as 1 (where the sum lands before the dim goes).
Shape keptShape(const Shape& x, int64_t axis) {
    std::vector<int64_t> d = x.dims();
    d[static_cast<size_t>(axis)] = 1;
    return Shape(d);
}

// v [d0, ..., d_axis] as [d0, ..., d_axis, 1, ...] of x's rank (so that it broadcasts).
Shape weightView(const Shape& v, const Shape& x) {
    std::vector<int64_t> d = v.dims();
    d.resize(static_cast<size_t>(x.rank()), 1);
    return Shape(d);
}

} // namespace

Sum::Sum(int64_t axis, bool useWeights, std::string name)
    : Module(std::move(name)), axis_(axis), useWeights_(useWeights) {
    if (axis < 1) throw ModuleError("Sum: axis must be 1 or more (dim 0 is the batch), got " + std::to_string(axis));
}

void Sum::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, useWeights_ ? 2 : 1, useWeights_ ? "input (data and weights)" : "input");
    const Shape& x = inShapes[0];
    if (static_cast<int64_t>(x.rank()) <= axis_) {
        throw shapeError("the data needs a dim " + std::to_string(axis_) + " to sum over, got " + x.str());
    }
    if (x.rank() > 8) throw shapeError("at most 8 dims, got " + x.str());
    if (useWeights_) {
        const std::vector<int64_t> lead(x.dims().begin(), x.dims().begin() + axis_ + 1);
        if (inShapes[1] != Shape(lead)) {
            throw shapeError("the weights must have the data's dims through axis " + std::to_string(axis_) + ", " +
                             Shape(lead).str() + ", got " + inShapes[1].str() + " for data " + x.str());
        }
    }
}

Shapes Sum::dataShapeFrom(const Shapes& inShapes) const {
    std::vector<int64_t> d = inShapes[0].dims();
    d.erase(d.begin() + axis_);
    return {Shape(d)};
}

Shapes Sum::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors Sum::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const Shape kept = keptShape(x.shape(), axis_);
    Tensor y =
        useWeights_
            ? sumToShape(broadcastOp(BinaryOp::mul, x, data[1].reshape(weightView(data[1].shape(), x.shape()))), kept)
            : sumToShape(x, kept);
    if (y.sharesStorage(x)) y = y.clone(); // a dim of 1 summed: never the input itself
    std::vector<int64_t> out = x.shape().dims();
    out.erase(out.begin() + axis_);
    return {y.reshape(Shape(out))};
}

Tensors Sum::updateGrad(const Tensors& grad) {
    const Tensors& in = inDataList();
    const Tensor& x = in[0];
    const Tensor dy = grad[0].plain().reshape(keptShape(x.shape(), axis_));
    if (!useWeights_) {
        std::vector<int64_t> ones(static_cast<size_t>(x.shape().rank()), 1);
        ones[static_cast<size_t>(axis_)] = x.shape()[axis_];
        return {broadcastOp(BinaryOp::mul, dy, Tensor::full(Shape(ones), 1.0f, dy.device()))};
    }
    const Tensor v = in[1].reshape(weightView(in[1].shape(), x.shape()));
    Tensor dv = sumToShape(broadcastOp(BinaryOp::mul, x, dy), v.shape());
    if (dv.sharesStorage(x)) dv = dv.clone();
    return {broadcastOp(BinaryOp::mul, dy, v), dv.reshape(in[1].shape())};
}

Blueprint Sum::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("axis", axis_);
    bp.scheme.emplace_back("useWeights", useWeights_);
    return bp;
}

} // namespace tessera
