#pragma once
/// \file Embedder: a learned lookup table from token ids to vectors.

#include <optional>

#include "modules/Init.h"
#include "modules/Module.h"

namespace tessera {

struct EmbedderOptions {
    InitScheme initscheme = InitScheme::uniform;
    float wscale = 1.0f;
    bool learnable = true; ///< false: the table is not updated (no gradient accumulated)
    std::string name = {};
    /// PyTorch's padding_idx: this id's row starts at zero and never gets a gradient, so a
    /// padding token embeds to zeros (negative: counted from the vocabulary's end).
    std::optional<int64_t> paddingIdx = std::nullopt;
};

/// x: [N, sentlength] int32 ids in [0, vocabulary) -> y: [N, sentlength, embsize],
/// y[n, t] = W[x[n, t]]. Parameter `W`: [vocabulary, embsize]. An id outside the
/// vocabulary is a ShapeError naming it. There is no input gradient (ids are discrete):
/// backward returns an undefined tensor.
class Embedder : public Module {
public:
    Embedder(int64_t vocabulary, int64_t sentlength, int64_t embsize, const EmbedderOptions& options = {});
    std::string classname() const override { return "Embedder"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    void checkGradShape(const Shapes& outGradShapes) const override;
    /// int32 ids.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;

private:
    int64_t vocabulary_, sentlength_, embsize_;
    EmbedderOptions options_;
    int64_t padding_ = -1; // the padding row, -1 for none
};

} // namespace tessera
