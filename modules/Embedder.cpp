#include "modules/Embedder.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

Embedder::Embedder(int64_t vocabulary, int64_t sentlength, int64_t embsize, const EmbedderOptions& options)
    : Module(options.name), vocabulary_(vocabulary), sentlength_(sentlength), embsize_(embsize), options_(options) {
    if (vocabulary <= 0 || sentlength <= 0 || embsize <= 0) {
        throw ModuleError("Embedder: vocabulary, sentlength and embsize must be positive");
    }
    Tensor w = newWeights({vocabulary, embsize}, options.initscheme, vocabulary, embsize, options.wscale);
    if (options.paddingIdx) {
        padding_ = *options.paddingIdx < 0 ? *options.paddingIdx + vocabulary : *options.paddingIdx;
        if (padding_ < 0 || padding_ >= vocabulary) {
            throw ModuleError("Embedder: paddingIdx " + std::to_string(*options.paddingIdx) +
                              " is outside the vocabulary of " + std::to_string(vocabulary));
        }
        backendOf(w).fill(w.slice(padding_, padding_ + 1), 0.0f);
    }
    setVar("W", Variable::of(w));
}

void Embedder::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() != 2 || s[1] != sentlength_) {
        throw shapeError("expects ids [N, " + std::to_string(sentlength_) + "], got " + s.str());
    }
}

void Embedder::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    if (s.rank() != 3 || s[1] != sentlength_ || s[2] != embsize_) {
        throw shapeError("expects gradient [N, " + std::to_string(sentlength_) + ", " + std::to_string(embsize_) +
                         "], got " + s.str());
    }
}

void Embedder::checkDataType(const std::vector<DType>& dtypes) const {
    if (dtypes.size() == 1 && dtypes[0] != DType::int32) {
        throw shapeError("expects int32 ids, got " + tessera::str(dtypes[0]));
    }
}

Shapes Embedder::dataShapeFrom(const Shapes& inShapes) const { return {Shape{inShapes[0][0], sentlength_, embsize_}}; }
Shapes Embedder::gradShapeFrom(const Shapes& outGradShapes) const { return {Shape{outGradShapes[0][0], sentlength_}}; }

Tensors Embedder::updateData(const Tensors& data) {
    const Tensor& ids = data[0];
    Tensor y = Tensor::empty(dataShapeFrom(Shapes{ids.shape()})[0], DType::float32, ids.device());
    try {
        backendOf(y).gatherRows(getVar("W")->data, ids.reshape({-1}), y.reshape({-1, embsize_}));
    } catch (const ShapeError& e) {
        throw shapeError(std::string("token id out of the vocabulary of ") + std::to_string(vocabulary_) + ": " +
                         e.what());
    }
    return {y};
}

Tensors Embedder::updateGrad(const Tensors&) { return {Tensor()}; }

void Embedder::accGradParams(const Tensors& grad, float scale, float momentum) {
    if (!options_.learnable) return;
    const auto& w = getVar("W");
    Backend& be = backendOf(grad[0]);
    if (momentum != 1.0f) be.axpby(0.0f, w->grad, momentum, w->grad);
    be.scatterAddRows(grad[0].reshape({-1, embsize_}), inData().reshape({-1}), scale, w->grad);
    if (padding_ >= 0) be.fill(w->grad.slice(padding_, padding_ + 1), 0.0f); // the padding row learns nothing
}

Blueprint Embedder::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("vocabulary", vocabulary_);
    bp.scheme.emplace_back("sentlength", sentlength_);
    bp.scheme.emplace_back("embsize", embsize_);
    bp.scheme.emplace_back("initscheme", tessera::str(options_.initscheme));
    bp.scheme.emplace_back("wscale", static_cast<double>(options_.wscale));
    bp.scheme.emplace_back("learnable", options_.learnable);
    if (options_.paddingIdx) bp.scheme.emplace_back("paddingIdx", *options_.paddingIdx);
    return bp;
}

} // namespace tessera
