#include "modules/Linear.h"

#include "backend/Backend.h"

namespace tessera {

Linear::Linear(int64_t insize, int64_t outsize, const LinearOptions& options)
    : Module(options.name), insize_(insize), outsize_(outsize), options_(options) {
    if (insize <= 0 || outsize <= 0) {
        throw ShapeError("Linear: insize and outsize must be positive, got " + std::to_string(insize) + " and " +
                         std::to_string(outsize));
    }
    Tensor w = Tensor::empty({insize, outsize});
    initTensor(w, options.initscheme, insize, outsize, options.wscale);
    setVar("W", Variable::of(w));
    if (options.useBias) setVar("b", Variable::of(Tensor::zeros({outsize})));
}

void Linear::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() != 2 || s[1] != insize_) {
        throw shapeError("expects input [N, " + std::to_string(insize_) + "], got " + s.str() +
                         (s.rank() > 2 ? " (put a Flatten before it)" : ""));
    }
}

void Linear::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    if (s.rank() != 2 || s[1] != outsize_) {
        throw shapeError("expects gradient [N, " + std::to_string(outsize_) + "], got " + s.str());
    }
}

Shapes Linear::dataShapeFrom(const Shapes& inShapes) const { return {Shape{inShapes[0][0], outsize_}}; }

Shapes Linear::gradShapeFrom(const Shapes& outGradShapes) const { return {Shape{outGradShapes[0][0], insize_}}; }

// x: [N, in], W: [in, out], b: [out] -> y: [N, out]
Tensors Linear::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Backend& be = backendOf(x);
    Tensor y = Tensor::empty({x.shape()[0], outsize_}, DType::float32, x.device());
    if (options_.useBias) be.broadcastRows(getVar("b")->data, y);
    be.gemmWeights(false, false, 1.0f, x, getVar("W")->data, options_.useBias ? 1.0f : 0.0f, y, computeDType(),
                   packSlot());
    return {y};
}

// dy: [N, out] -> dx = dy W^T: [N, in]
Tensors Linear::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Tensor dx = Tensor::empty({dy.shape()[0], insize_}, DType::float32, dy.device());
    backendOf(dy).gemm(false, true, 1.0f, dy, getVar("W")->data, 0.0f, dx, computeDType());
    return {dx};
}

// dW = scale * x^T dy + momentum * dW; db = scale * sum_n dy + momentum * db
void Linear::accGradParams(const Tensors& grad, float scale, float momentum) {
    const Tensor& dy = grad[0];
    Backend& be = backendOf(dy);
    be.gemm(true, false, scale, inData(), dy, momentum, getVar("W")->grad, computeDType());
    if (options_.useBias) be.sumRows(dy, scale, momentum, getVar("b")->grad);
}

Blueprint Linear::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("insize", insize_);
    bp.scheme.emplace_back("outsize", outsize_);
    bp.scheme.emplace_back("wscale", static_cast<double>(options_.wscale));
    bp.scheme.emplace_back("useBias", options_.useBias);
    bp.scheme.emplace_back("initscheme", tessera::str(options_.initscheme));
    return bp;
}

} // namespace tessera
