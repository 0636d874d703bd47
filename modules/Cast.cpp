#include "modules/Cast.h"

#include "backend/Backend.h"

namespace tessera {

void Cast::checkDataType(const std::vector<DType>& dtypes) const {
    if (dtypes.size() == 1 && dtypes[0] != intype_) {
        throw shapeError("expects " + tessera::str(intype_) + " input, got " + tessera::str(dtypes[0]));
    }
}

Tensors Cast::updateData(const Tensors& data) {
    Tensor y = Tensor::empty(data[0].shape(), outtype_, data[0].device());
    backendOf(y).cast(data[0], y);
    return {y};
}

Tensors Cast::updateGrad(const Tensors& grad) {
    if (!isFloating(intype_) || !isFloating(outtype_)) return {Tensor()};
    if (grad[0].dtype() == intype_) return {grad[0]};
    Tensor dx = Tensor::empty(grad[0].shape(), intype_, grad[0].device());
    backendOf(dx).cast(grad[0], dx);
    return {dx};
}

Blueprint Cast::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("intype", tessera::str(intype_));
    bp.scheme.emplace_back("outtype", tessera::str(outtype_));
    return bp;
}

} // namespace tessera
