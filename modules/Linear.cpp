#include "modules/Linear.h"

#include "backend/Backend.h"

namespace tessera {

Linear::Linear(int64_t insize, int64_t outsize, const LinearOptions& options)
    : Module(options.name), insize_(insize), outsize_(outsize), options_(options) {
    if (insize <= 0 || outsize <= 0) {
        throw ShapeError("Linear: insize and outsize must be positive, got " + std::to_string(insize) + " and " +
                         std::to_string(outsize));
    }
    const Shape w = options.transposed ? Shape{outsize, insize} : Shape{insize, outsize};
    setVar("W", Variable::of(newWeights(w, options.initscheme, insize, outsize, options.wscale)));
    if (options.useBias) setVar("b", Variable::of(Tensor::zeros({outsize})));
}

namespace {
// s with its last dim replaced by `last`.
Shape withLast(const Shape& s, int64_t last) {
    std::vector<int64_t> d = s.dims();
    d.back() = last;
    return Shape(d);
}
// t as the matrix [rows, its last dim].
Tensor rowsOf(const Tensor& t) {
    return t.reshape({t.numel() / t.shape()[t.shape().rank() - 1], t.shape()[t.shape().rank() - 1]});
}
} // namespace

void Linear::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() < 1 || s[s.rank() - 1] != insize_) {
        const bool flatten = s.rank() > 2 && s.numel() / s[0] == insize_;
        throw shapeError("expects input [..., " + std::to_string(insize_) + "], got " + s.str() +
                         (flatten ? " (put a Flatten before it)" : ""));
    }
}

void Linear::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    if (s.rank() < 1 || s[s.rank() - 1] != outsize_) {
        throw shapeError("expects gradient [..., " + std::to_string(outsize_) + "], got " + s.str());
    }
}

Shapes Linear::dataShapeFrom(const Shapes& inShapes) const { return {withLast(inShapes[0], outsize_)}; }

Shapes Linear::gradShapeFrom(const Shapes& outGradShapes) const { return {withLast(outGradShapes[0], insize_)}; }

bool Linear::takes16Bit(const Tensors& data) const { return backendCarries(data) && data[0].dtype() == computeDType(); }

std::vector<DType> Linear::outputDTypes(const Shapes&, const std::vector<DType>&, Device device) const {
    return {backendFor(device).gemmOutputDType(computeDType())};
}

// x: [..., in] as [M, in], W: [in, out] (transposed: [out, in]), b: [out] -> y: [M, out] as
// [..., out], in the dtype the backend's GEMMs write in this compute type (16-bit ones
// rounded once, the bias added before).
Tensors Linear::updateData(const Tensors& data) {
    const Tensor x = rowsOf(data[0]);
    Backend& be = backendOf(x);
    Tensor y = Tensor::empty({x.shape()[0], outsize_}, be.gemmOutputDType(computeDType()), x.device());
    const Tensor& W = getVar("W")->data;
    stepW_ = Tensor();
    if (convertsWeightsPerStep(isTrain(), x.device()) && W.dtype() == DType::float32) {
        stepW_ = Tensor::empty(W.shape(), DType::bfloat16, W.device());
        be.cast(W, stepW_);
    }
    const Tensor& b = options_.useBias ? getVar("b")->data : Tensor();
    applied_ = fused_ && appliesActivation(*fused_, isTrain(), x.device()) ? fused_ : std::nullopt;
    if (applied_) {
        be.gemmWeightsActivation(false, options_.transposed, x, stepW_.defined() ? stepW_ : W, b, y, computeDType(),
                                 *applied_, packSlot());
    } else {
        be.gemmWeights(false, options_.transposed, 1.0f, x, stepW_.defined() ? stepW_ : W, b, 0.0f, y, computeDType(),
                       packSlot());
    }
    return {y.reshape(withLast(data[0].shape(), outsize_))};
}

// dy: [..., out] -> dx = dy W^T (transposed: dy W): [..., in], in the input's dtype. After
// an eval-mode forward that applied an activation other than ReLU (whose gradient comes
// through unmasked), dy is first taken through it: its input x W + b is computed again.
Tensors Linear::updateGrad(const Tensors& grad) {
    Tensor dy = rowsOf(grad[0]);
    Backend& be = backendOf(dy);
    const Tensor& W = stepW_.defined() ? stepW_ : getVar("W")->data;
    if (applied_ && applied_->kind != ActivationKind::relu) {
        const Tensor x = rowsOf(inData());
        const Tensor z = Tensor::empty({x.shape()[0], outsize_}, be.gemmOutputDType(computeDType()), x.device());
        be.gemmWeights(false, options_.transposed, 1.0f, x, W, options_.useBias ? getVar("b")->data : Tensor(), 0.0f, z,
                       computeDType(), packSlot());
        const Tensor dz = Tensor::empty(z.shape(), dy.dtype(), dy.device());
        be.activationBackward(*applied_, z, rowsOf(data()), dy, dz);
        dy = dz;
    }
    Tensor dx = Tensor::empty({dy.shape()[0], insize_}, inData().dtype(), dy.device());
    be.gemm(false, !options_.transposed, 1.0f, dy, W, 0.0f, dx, computeDType());
    return {dx.reshape(withLast(grad[0].shape(), insize_))};
}

void Linear::setFuseRelu(bool on) {
    fused_ = on ? std::optional<ActivationParams>(ActivationParams{ActivationKind::relu}) : std::nullopt;
}

void Linear::setFuseActivation(const ActivationParams* act) {
    fused_ = act ? std::optional<ActivationParams>(*act) : std::nullopt;
}

bool Linear::takesActivation(const ActivationParams&, bool train) const { return !train; }

bool Linear::appliesActivation(const ActivationParams& act, bool train, Device device) const {
    return (act.kind == ActivationKind::relu || !train) && backendFor(device).gemmFusesActivation(act, computeDType());
}

bool Linear::fusesReluOn(Device device) const { return fuseRelu() && appliesActivation(*fused_, isTrain(), device); }

bool Linear::fusesActivationOn(const ActivationParams& act, Device device) const {
    return fused_ && *fused_ == act && appliesActivation(act, false, device);
}

Tensors Linear::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    Tensors dx = Module::backwardFrom(grad, updParamGrads, updGrad, scale, momentum);
    stepW_ = Tensor(); // the step's weights are done with (the memory plan frees them here too)
    return dx;
}

bool Linear::convertsWeightsPerStep(bool train, Device device) const {
    return train && computeDType() == DType::bfloat16 && device.isCpu() &&
           backendFor(device).gemmOutputDType(DType::bfloat16) == DType::bfloat16;
}

MemoryUse Linear::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                            Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (convertsWeightsPerStep(train, device) && getVar("W")->data.dtype() == DType::float32) {
        use.reservedUntilBackwardBytes =
            static_cast<int64_t>(Tensor::storageBytes(Shape({insize_, outsize_}), DType::bfloat16, Layout::plain));
    }
    return use;
}

// dW = scale * x^T dy + momentum * dW (transposed: scale * dy^T x + momentum * dW);
// db = scale * sum_n dy + momentum * db
void Linear::accGradParams(const Tensors& grad, float scale, float momentum) {
    const Tensor dy = rowsOf(grad[0]);
    Backend& be = backendOf(dy);
    if (options_.transposed) {
        be.gemm(true, false, scale, dy, rowsOf(inData()), momentum, getVar("W")->grad, computeDType());
    } else {
        be.gemm(true, false, scale, rowsOf(inData()), dy, momentum, getVar("W")->grad, computeDType());
    }
    if (options_.useBias) be.sumRows(dy, scale, momentum, getVar("b")->grad);
}

Blueprint Linear::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("insize", insize_);
    bp.scheme.emplace_back("outsize", outsize_);
    bp.scheme.emplace_back("wscale", static_cast<double>(options_.wscale));
    bp.scheme.emplace_back("useBias", options_.useBias);
    bp.scheme.emplace_back("initscheme", tessera::str(options_.initscheme));
    if (options_.transposed) bp.scheme.emplace_back("transposed", true);
    return bp;
}

} // namespace tessera
