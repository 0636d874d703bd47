#pragma once
/// \file DepthConcat: concatenation along the channels of inputs whose spatial sizes
/// differ, each centred in the largest with zero padding. PuzzleLib's DepthConcat.

#include "modules/Module.h"

namespace tessera {

/// x_i: [N, C_i, *s_i] (same N and rank 3 to 5) -> y: [N, sum C_i, *max_i s_i]. Input i
/// sits centred along each spatial dim d: padded with floor((S_d - s_d) / 2) zeros before
/// and the rest after. Backward crops each input's part of the gradient back out.
class DepthConcat : public Module {
public:
    explicit DepthConcat(std::string name = {}) : Module(std::move(name)) {}
    std::string classname() const override { return "DepthConcat"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// At least one input; all [N, C, *spatial] of one rank (3 to 5) and one N.
    void checkDataShape(const Shapes& inShapes) const override;
    /// Inputs of one dtype and one spatial size go through as they are (16-bit ones
    /// included, as Concat's); inputs it pads too where the backend carries their 16-bit
    /// type (Backend::carries16Bit), else they are handed float32 copies.
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// Input i's zero padding before and after per spatial dim, in an output of `out`.
    static void padsOf(const Shape& in, const Shape& out, std::vector<int64_t>& lo, std::vector<int64_t>& hi);
    /// Whether every input has input 0's spatial size (nothing is padded).
    static bool samePlanes(const Shapes& inShapes);
};

} // namespace tessera
