#include "modules/BatchNormND.h"

#include <algorithm>
#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

BatchNormND::BatchNormND(std::vector<size_t> ranks, int64_t maps, const BatchNormOptions& options)
    : Module(options.name), ranks_(std::move(ranks)), maps_(maps), options_(options) {
    if (maps <= 0) throw ModuleError("BatchNorm: maps must be positive, got " + std::to_string(maps));
    if (!(options.epsilon > 0.0f)) throw ModuleError("BatchNorm: epsilon must be positive");
    setVar("scale", Variable::of(Tensor::full({maps}, 1.0f)));
    setVar("bias", Variable::of(Tensor::zeros({maps})));
    setAttr("mean", Tensor::zeros({maps}));
    setAttr("var", Tensor::full({maps}, 1.0f));
}

void BatchNormND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (std::find(ranks_.begin(), ranks_.end(), s.rank()) == ranks_.end() || s[1] != maps_) {
        std::string want;
        for (size_t r : ranks_) {
            want += (want.empty() ? "" : " or ") + std::string("[N, ") + std::to_string(maps_);
            for (size_t d = 2; d < r; ++d) want += ", " + std::string(1, "DHW"[3 - (r - 2) + (d - 2)]);
            want += "]";
        }
        throw shapeError("expects input " + want + ", got " + s.str());
    }
    if (isTrain() && s.numel() / s[1] < 2) {
        throw shapeError("train mode needs at least 2 values per channel for batch statistics, got " + s.str());
    }
}

void BatchNorm::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() < 2 || s.numel() != s[0] * maps()) {
        throw shapeError("expects input [N, ...] of " + std::to_string(maps()) + " activations per sample, got " +
                         s.str());
    }
    if (isTrain() && s[0] < 2) {
        throw shapeError("needs at least 2 samples in train mode (batch statistics), got " + s.str());
    }
}

// x: [N, maps, ...] -> y
Tensors BatchNormND::updateData(const Tensors& data) {
    const Tensor x = normView(data[0]);
    const Shape& shape = data[0].shape();
    auto back = [&](const Tensor& y) { return y.shape() == shape ? y : y.reshape(shape); };
    Backend& be = backendOf(x);
    const Tensor& scale = getVar("scale")->data;
    const Tensor& bias = getVar("bias")->data;
    if (!isTrain()) {
        // Backward now differentiates this eval-mode function, not an earlier train-mode one.
        batchMean_ = batchVar_ = Tensor();
        return {back(be.batchNormForward(x, scale, bias, getAttr("mean"), getAttr("var"), options_.epsilon, false))};
    }

    batchMean_ = Tensor::empty({maps_}, DType::float32, x.device());
    batchVar_ = Tensor::empty({maps_}, DType::float32, x.device());
    Tensor y = be.batchNormForward(x, scale, bias, batchMean_, batchVar_, options_.epsilon, true);
    const float factor = std::max(options_.initFactor / static_cast<float>(1 + batches_), options_.minFactor);
    const auto count = static_cast<float>(x.numel() / maps_);
    be.axpby(factor, batchMean_, 1.0f - factor, getAttr("mean"));
    be.axpby(factor * count / (count - 1.0f), batchVar_, 1.0f - factor, getAttr("var"));
    ++batches_;
    return {back(y)};
}

Tensor BatchNormND::fusedBackward(const Tensor& dy, Tensor& dscale, Tensor& dbias) const {
    if (!batchMean_.defined()) {
        throw moduleError("parameter gradients need a train-mode forward (batch statistics); the last forward "
                          "ran in eval mode: run it in train mode, or call backward with updParamGrads=false");
    }
    dscale = Tensor::empty({maps_}, DType::float32, dy.device());
    dbias = Tensor::empty({maps_}, DType::float32, dy.device());
    const Tensor dx = backendOf(dy).batchNormBackward(normView(inData()), normView(dy), getVar("scale")->data,
                                                      batchMean_, batchVar_, options_.epsilon, dscale, dbias);
    return dx.shape() == dy.shape() ? dx : dx.reshape(dy.shape());
}

// After an eval-mode forward y = scale * (x - mean) / sqrt(var + eps) + bias with the
// running statistics as constants: dx = scale * dy / sqrt(var + eps), which is the same
// normalisation applied to dy with a zero mean and a zero bias.
Tensor BatchNormND::evalGrad(const Tensor& dy) const {
    const Tensor zeros = Tensor::zeros({maps_}, DType::float32, dy.device());
    const Tensor dx = backendOf(dy).batchNormForward(normView(dy), getVar("scale")->data, zeros, zeros, getAttr("var"),
                                                     options_.epsilon, false);
    return dx.shape() == dy.shape() ? dx : dx.reshape(dy.shape());
}

void BatchNormND::addParamGrads(const Tensor& dscale, const Tensor& dbias, float scale, float momentum) {
    Backend& be = backendOf(dscale);
    be.axpby(scale, dscale, momentum, getVar("scale")->grad);
    be.axpby(scale, dbias, momentum, getVar("bias")->grad);
}

// dy -> dx, dscale, dbias in one primitive; updateGrad alone comes here too.
Tensors BatchNormND::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    const bool params = updParamGrads && isTrain();
    if (!batchMean_.defined() && !params) return updGrad ? Tensors{evalGrad(grad[0])} : Tensors{};
    Tensor dscale, dbias;
    Tensor dx = fusedBackward(grad[0], dscale, dbias);
    if (params) addParamGrads(dscale, dbias, scale, momentum);
    if (!updGrad) return {};
    return {dx};
}

Tensors BatchNormND::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

Blueprint BatchNormND::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("maps", maps_);
    bp.scheme.emplace_back("epsilon", static_cast<double>(options_.epsilon));
    bp.scheme.emplace_back("initFactor", static_cast<double>(options_.initFactor));
    bp.scheme.emplace_back("minFactor", static_cast<double>(options_.minFactor));
    return bp;
}

MemoryUse BatchNormND::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                 Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (train) use.keptBytes = 2 * maps_ * static_cast<int64_t>(sizeof(float)); // the batch mean and variance
    return use;
}

} // namespace tessera
