#include "modules/RowNorm.h"

#include <string>

namespace tessera {

namespace {

std::string dimsText(const std::vector<int64_t>& dims) { return Shape(dims).str(); }

// ModuleError unless every dim of a normalised shape is positive.
void checkNormalizedShape(const char* cls, const std::vector<int64_t>& shape) {
    if (shape.empty())
        throw ModuleError(std::string(cls) + ": the normalised shape is empty; give its dims, [C] or more");
    for (int64_t d : shape) {
        if (d < 1)
            throw ModuleError(std::string(cls) + ": the normalised shape has dims of at least 1, got " +
                              dimsText(shape));
    }
}

void checkEpsilon(const char* cls, float epsilon) {
    if (!(epsilon > 0.0f))
        throw ModuleError(std::string(cls) + ": epsilon must be positive, got " + std::to_string(epsilon));
}

// [rows, D] for x whose last `count` dims are normalised together.
void trailing(const Shape& x, size_t count, int64_t& rows, int64_t& D) {
    rows = 1, D = 1;
    const size_t lead = x.rank() - count;
    for (size_t i = 0; i < x.rank(); ++i) (i < lead ? rows : D) *= x[i];
}

} // namespace

// ---- what the three share ----------------------------------------------------------------

Tensor RowNorm::param(const char* name) const { return hasVar(name) ? getVar(name)->data : Tensor(); }

Tensors RowNorm::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    int64_t rows = 0, D = 0;
    const RowNormParams p = paramsFor(x.shape(), rows, D);
    mean_ = Tensor::empty({rows}, DType::float32, x.device());
    rstd_ = Tensor::empty({rows}, DType::float32, x.device());
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device()); // a 16-bit x only where takes16Bit said so
    backendOf(x).rowNormForward(p, x.reshape({rows, D}), param("weight"), param("bias"), y.reshape({rows, D}), mean_,
                                rstd_);
    return {y};
}

Tensors RowNorm::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    const Tensor x = inData().plain();
    int64_t rows = 0, D = 0;
    const RowNormParams p = paramsFor(x.shape(), rows, D);
    const bool params = updParamGrads && isTrain();
    auto gradOf = [&](const char* name) {
        return params && hasVar(name) ? Tensor::empty(getVar(name)->data.shape(), DType::float32, x.device())
                                      : Tensor();
    };
    Tensor dweight = gradOf("weight"), dbias = gradOf("bias");
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    Backend& be = backendOf(x);
    be.rowNormBackward(p, x.reshape({rows, D}), grad[0].plain().reshape({rows, D}), param("weight"), mean_, rstd_,
                       dx.reshape({rows, D}), dweight.defined() ? dweight.reshape({dweight.numel()}) : dweight,
                       dbias.defined() ? dbias.reshape({dbias.numel()}) : dbias);
    if (dweight.defined()) be.axpby(scale, dweight, momentum, getVar("weight")->grad);
    if (dbias.defined()) be.axpby(scale, dbias, momentum, getVar("bias")->grad);
    if (!updGrad) return {};
    return {dx};
}

void RowNorm::checkTrailing(const Shape& s, const std::vector<int64_t>& shape) const {
    bool fits = s.rank() >= shape.size();
    for (size_t i = 0; fits && i < shape.size(); ++i) fits = s[s.rank() - shape.size() + i] == shape[i];
    if (!fits) throw shapeError("expects an input whose last dims are " + dimsText(shape) + ", got " + s.str());
}

bool RowNorm::takes16Bit(const Tensors& data) const { return backendCarries(data); }

std::vector<DType> RowNorm::outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device device) const {
    const DType t = inDTypes.empty() ? DType::float32 : inDTypes[0];
    return {is16Bit(t) && !backendFor(device).carries16Bit(t) ? DType::float32 : t};
}

Tensors RowNorm::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

// ---- LayerNorm ---------------------------------------------------------------------------

LayerNorm::LayerNorm(std::vector<int64_t> shape, const LayerNormOptions& options)
    : RowNorm(options.name), shape_(std::move(shape)), options_(options) {
    checkNormalizedShape("LayerNorm", shape_);
    checkEpsilon("LayerNorm", options.epsilon);
    if (options.affine) setVar("weight", Variable::of(Tensor::full(Shape(shape_), 1.0f)));
    if (options.affine && options.useBias) setVar("bias", Variable::of(Tensor::zeros(Shape(shape_))));
}

void LayerNorm::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    checkTrailing(inShapes[0], shape_);
}

RowNormParams LayerNorm::paramsFor(const Shape& x, int64_t& rows, int64_t& D) const {
    trailing(x, shape_.size(), rows, D);
    return {.groups = 1, .inner = 1, .eps = options_.epsilon, .subtractMean = true};
}

Blueprint LayerNorm::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("shape", shape_);
    bp.scheme.emplace_back("epsilon", static_cast<double>(options_.epsilon));
    bp.scheme.emplace_back("affine", options_.affine);
    bp.scheme.emplace_back("useBias", options_.useBias);
    return bp;
}

// ---- RMSNorm -----------------------------------------------------------------------------

RMSNorm::RMSNorm(std::vector<int64_t> shape, const RMSNormOptions& options)
    : RowNorm(options.name), shape_(std::move(shape)), options_(options) {
    checkNormalizedShape("RMSNorm", shape_);
    checkEpsilon("RMSNorm", options.epsilon);
    if (options.affine) setVar("weight", Variable::of(Tensor::full(Shape(shape_), 1.0f)));
}

void RMSNorm::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    checkTrailing(inShapes[0], shape_);
}

RowNormParams RMSNorm::paramsFor(const Shape& x, int64_t& rows, int64_t& D) const {
    trailing(x, shape_.size(), rows, D);
    return {.groups = 1, .inner = 1, .eps = options_.epsilon, .subtractMean = false};
}

Blueprint RMSNorm::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("shape", shape_);
    bp.scheme.emplace_back("epsilon", static_cast<double>(options_.epsilon));
    bp.scheme.emplace_back("affine", options_.affine);
    return bp;
}

// ---- GroupNorm ---------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t groups, int64_t maps, const GroupNormOptions& options)
    : RowNorm(options.name), groups_(groups), maps_(maps), options_(options) {
    if (groups < 1 || maps < 1 || maps % groups != 0) {
        throw ModuleError("GroupNorm: maps (" + std::to_string(maps) + ") must be a positive multiple of groups (" +
                          std::to_string(groups) + ")");
    }
    checkEpsilon("GroupNorm", options.epsilon);
    if (options.affine) {
        setVar("weight", Variable::of(Tensor::full({maps}, 1.0f)));
        setVar("bias", Variable::of(Tensor::zeros({maps})));
    }
}

void GroupNorm::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() < 2 || s[1] != maps_) {
        throw shapeError("expects input [N, " + std::to_string(maps_) + ", ...], got " + s.str());
    }
}

RowNormParams GroupNorm::paramsFor(const Shape& x, int64_t& rows, int64_t& D) const {
    int64_t spatial = 1;
    for (size_t i = 2; i < x.rank(); ++i) spatial *= x[i];
    rows = x[0] * groups_;
    D = maps_ / groups_ * spatial;
    return {.groups = groups_, .inner = spatial, .eps = options_.epsilon, .subtractMean = true};
}

Blueprint GroupNorm::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("groups", groups_);
    bp.scheme.emplace_back("maps", maps_);
    bp.scheme.emplace_back("epsilon", static_cast<double>(options_.epsilon));
    bp.scheme.emplace_back("affine", options_.affine);
    return bp;
}

} // namespace tessera
