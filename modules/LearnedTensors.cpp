#include "modules/LearnedTensors.h"

#include "backend/Backend.h"
#include "modules/Init.h"

namespace tessera {

namespace {
void checkShape(const char* cls, const std::vector<int64_t>& shape) {
    if (shape.empty()) throw ModuleError(std::string(cls) + ": the shape is empty; give its dims");
    for (int64_t d : shape) {
        if (d < 1)
            throw ModuleError(std::string(cls) + ": the shape has dims of at least 1, got " + Shape(shape).str());
    }
}
} // namespace

// ---- Parameter --------------------------------------------------------------------------

Parameter::Parameter(std::vector<int64_t> shape, const ParameterOptions& options)
    : Module(options.name), shape_(std::move(shape)), options_(options) {
    checkShape("Parameter", shape_);
    if (!(options.std >= 0.0f))
        throw ModuleError("Parameter: std must be 0 or more, got " + std::to_string(options.std));
    Tensor w = Tensor::empty(Shape(shape_));
    initTensor(w, options.std > 0.0f ? InitScheme::gaussian : InitScheme::none, 1, 1, options.std);
    setVar("weight", Variable::of(w));
}

void Parameter::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() < 1)
        throw shapeError("expects an input [N, ...] for its batch size, got " + inShapes[0].str());
}

Shapes Parameter::dataShapeFrom(const Shapes& inShapes) const {
    std::vector<int64_t> d{inShapes[0][0]};
    d.insert(d.end(), shape_.begin(), shape_.end());
    return {Shape(d)};
}

Shapes Parameter::gradShapeFrom(const Shapes&) const { return lastInShapes("gradShapeFrom"); }

Tensors Parameter::updateData(const Tensors& data) {
    const Tensor& w = getVar("weight")->data;
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{data[0].shape()})[0], DType::float32, data[0].device());
    backendOf(y).broadcastRows(w.reshape({w.numel()}), y.reshape({data[0].shape()[0], w.numel()}));
    return {y};
}

Tensors Parameter::updateGrad(const Tensors&) {
    if (inData().dtype() == DType::int32) return {Tensor()}; // ids have no gradient
    return {Tensor::zeros(inData().shape(), DType::float32, inData().device())};
}

// dweight = scale * sum_n dy[n] + momentum * dweight
void Parameter::accGradParams(const Tensors& grad, float scale, float momentum) {
    const Tensor& g = getVar("weight")->grad;
    backendOf(grad[0]).sumRows(grad[0].plain().reshape({grad[0].shape()[0], g.numel()}), scale, momentum,
                               g.reshape({g.numel()}));
}

Blueprint Parameter::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("shape", shape_);
    bp.scheme.emplace_back("std", static_cast<double>(options_.std));
    return bp;
}

// ---- Scale ------------------------------------------------------------------------------

Scale::Scale(std::vector<int64_t> shape, const ScaleOptions& options)
    : Module(options.name), shape_(std::move(shape)), options_(options) {
    checkShape("Scale", shape_);
    setVar("weight", Variable::of(Tensor::full(Shape(shape_), options.init)));
}

void Scale::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& x = inShapes[0];
    bool fits = x.rank() >= shape_.size();
    for (size_t i = 0; fits && i < shape_.size(); ++i) {
        const int64_t w = shape_[shape_.size() - 1 - i], d = x[x.rank() - 1 - i];
        fits = w == d || w == 1;
    }
    if (!fits) {
        throw shapeError("has factors " + Shape(shape_).str() + ", which do not broadcast to the input " + x.str() +
                         " without changing its shape");
    }
}

Tensors Scale::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    backendOf(x).binaryBroadcast(BinaryOp::mul, x, getVar("weight")->data, y);
    return {y};
}

Tensors Scale::updateGrad(const Tensors& grad) {
    const Tensor dy = grad[0].plain();
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    backendOf(dy).binaryBroadcast(BinaryOp::mul, dy, getVar("weight")->data, dx);
    return {dx};
}

// dweight = scale * (dy * x summed to weight's shape) + momentum * dweight
void Scale::accGradParams(const Tensors& grad, float scale, float momentum) {
    const Tensor dy = grad[0].plain(), x = inData().plain();
    Backend& be = backendOf(dy);
    Tensor prod = Tensor::empty(dy.shape(), DType::float32, dy.device());
    be.binaryBroadcast(BinaryOp::mul, dy, x, prod);
    Tensor sum = Tensor::empty(Shape(shape_), DType::float32, dy.device());
    be.sumTo(prod, scale, sum);
    be.axpby(1.0f, sum, momentum, getVar("weight")->grad);
}

Blueprint Scale::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("shape", shape_);
    bp.scheme.emplace_back("init", static_cast<double>(options_.init));
    return bp;
}

} // namespace tessera
