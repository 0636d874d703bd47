#include "modules/Flatten.h"

namespace tessera {

void Flatten::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() < 2) throw shapeError("expects input [N, d1, ...] of rank >= 2, got " + inShapes[0].str());
}

Shapes Flatten::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& s = inShapes[0];
    return {Shape{s[0], s.numel() / s[0]}};
}

Shapes Flatten::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape in = lastInShapes("gradShapeFrom")[0];
    in[0] = outGradShapes[0][0];
    return {in};
}

Tensors Flatten::updateData(const Tensors& data) {
    return {data[0].reshape(dataShapeFrom(Shapes{data[0].shape()})[0])};
}

Tensors Flatten::updateGrad(const Tensors& grad) { return {grad[0].reshape(inData().shape())}; }

} // namespace tessera
