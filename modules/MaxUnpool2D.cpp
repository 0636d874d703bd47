#include "modules/MaxUnpool2D.h"

#include <stdexcept>

namespace tessera {

namespace {
// [N, C, *spatial] viewed as [N * C, positions, 1] for the axis gathers and scatters.
Tensor planes(const Tensor& t) {
    const Shape& s = t.shape();
    return t.reshape({s[0] * s[1], -1, 1});
}
} // namespace

MaxUnpool2D::MaxUnpool2D(std::shared_ptr<MaxPool2D> maxpool, std::string name)
    : Module(std::move(name)), pool_(std::move(maxpool)) {
    if (!pool_) throw ModuleError("MaxUnpool2D: needs a MaxPool2D");
}

void MaxUnpool2D::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (pool_->inDataList().empty()) throw shapeError("its " + pool_->str() + " has not run forward yet");
    const Shape pooled = pool_->data().shape();
    if (inShapes[0] != pooled) {
        throw shapeError("expects the shape of " + pool_->str() + "'s last output " + pooled.str() + ", got " +
                         inShapes[0].str());
    }
}

Shapes MaxUnpool2D::dataShapeFrom(const Shapes& inShapes) const {
    if (pool_->inDataList().empty()) return pool_->gradShapeFrom(inShapes);
    return {pool_->inData().shape()};
}

Shapes MaxUnpool2D::gradShapeFrom(const Shapes& outGradShapes) const { return pool_->dataShapeFrom(outGradShapes); }

Tensors MaxUnpool2D::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const Tensor poolIn = pool_->inData().plain();
    indices_ = Tensor::empty(x.shape(), DType::int32, x.device());
    Backend& be = backendOf(x);
    be.maxPoolIndices(pool_->params(), poolIn, indices_);
    Tensor y = Tensor::zeros(poolIn.shape(), DType::float32, x.device());
    be.scatterAddAxis(planes(x), planes(indices_), planes(y));
    return {y};
}

Tensors MaxUnpool2D::updateGrad(const Tensors& grad) {
    Tensor dx = Tensor::empty(indices_.shape(), DType::float32, grad[0].device());
    backendOf(dx).gatherAxis(planes(grad[0]), planes(indices_), planes(dx));
    return {dx};
}

} // namespace tessera
