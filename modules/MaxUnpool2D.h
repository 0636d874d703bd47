#pragma once
/// \file MaxUnpool2D: the partial inverse of a MaxPool2D.

#include "modules/Pool.h"

namespace tessera {

/// x: [N, C, Ho, Wo], the shape of `maxpool`'s last output -> y: [N, C, H, W], the shape of
/// its last input: each value goes to the position that won its pooling window, zeros
/// elsewhere. Run `maxpool` forward first (ShapeError otherwise).
class MaxUnpool2D : public Module {
public:
    explicit MaxUnpool2D(std::shared_ptr<MaxPool2D> maxpool, std::string name = {});
    std::string classname() const override { return "MaxUnpool2D"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&indices_}; }

private:
    std::shared_ptr<MaxPool2D> pool_;
    Tensor indices_;
};

} // namespace tessera
