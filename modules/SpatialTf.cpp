#include "modules/SpatialTf.h"

#include "backend/Backend.h"

namespace tessera {

SpatialTf::SpatialTf(const SpatialTfOptions& options) : Module(options.name), options_(options) {
    if (options.height < 0 || options.width < 0) {
        throw ModuleError("SpatialTf: output height and width must not be negative (0: the input's)");
    }
}

void SpatialTf::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 2, "input");
    const Shape &x = inShapes[0], &t = inShapes[1];
    if (x.rank() != 4) throw shapeError("expects data [N, C, H, W] as input 0, got " + x.str());
    if (t != Shape{x[0], 2, 3}) {
        throw shapeError("expects the transform [N, 2, 3] = " + Shape{x[0], 2, 3}.str() + " as input 1, got " +
                         t.str());
    }
}

Shapes SpatialTf::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& x = inShapes[0];
    return {Shape{x[0], x[1], options_.height ? options_.height : x[2], options_.width ? options_.width : x[3]}};
}

Shapes SpatialTf::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors SpatialTf::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(dataShapeFrom(shapesOf(data))[0], DType::float32, data[0].device());
    backendOf(y).spatialTfForward(data[0], data[1], y);
    return {y};
}

Tensors SpatialTf::updateGrad(const Tensors& grad) {
    const Tensors& in = inDataList();
    Tensor dx = Tensor::empty(in[0].shape(), DType::float32, in[0].device());
    Tensor dtheta = Tensor::empty(in[1].shape(), DType::float32, in[1].device());
    backendOf(dx).spatialTfBackward(in[0], in[1], grad[0], dx, dtheta);
    return {dx, dtheta};
}

Blueprint SpatialTf::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("height", options_.height);
    bp.scheme.emplace_back("width", options_.width);
    return bp;
}

} // namespace tessera
