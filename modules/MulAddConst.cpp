#include "modules/MulAddConst.h"

#include "backend/Backend.h"

namespace tessera {

MulAddConst::MulAddConst(const Tensor& a, const Tensor& b, std::string name) : Module(std::move(name)) {
    for (const auto& [key, t, flag] : {std::tuple<const char*, const Tensor&, bool&>{"a", a, tensorA_},
                                       std::tuple<const char*, const Tensor&, bool&>{"b", b, tensorB_}}) {
        if (!t.defined()) continue;
        if (t.dtype() != DType::float32 || t.numel() == 0) {
            throw moduleError(std::string("constant ") + key + " must be a float32 tensor with elements, got " +
                              tessera::str(t.dtype()) + " " + t.shape().str());
        }
        setAttr(key, t.hasData() ? t.plain().clone() : t); // a shape-only build's placeholder as it is
        flag = true;
    }
}

void MulAddConst::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    for (const auto& [key, on] : {std::pair<const char*, bool>{"a", tensorA_}, {"b", tensorB_}}) {
        if (!on) continue;
        const Shape& c = getAttr(key).shape();
        if (!broadcastsTo(c, inShapes[0])) {
            throw shapeError(std::string("constant ") + key + " " + c.str() + " does not broadcast to the input " +
                             inShapes[0].str() + " without changing its shape");
        }
    }
}

Tensors MulAddConst::updateData(const Tensors& data) {
    const Tensor& x = data[0]; // plain: the module does not handle layouts
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    Backend& be = backendOf(y);
    // With tensor constants the numbers are 1 and 0 (the tensor constructor sets none).
    if (tensorA_) {
        be.binaryBroadcast(BinaryOp::mul, x, getAttr("a"), y);
    } else {
        be.affine(x, a_, b_, y);
    }
    if (tensorB_) be.binaryBroadcast(BinaryOp::add, y, getAttr("b"), y);
    return {y};
}

Tensors MulAddConst::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    Tensor dx = Tensor::empty(dy.shape(), DType::float32, dy.device());
    if (tensorA_) {
        backendOf(dx).binaryBroadcast(BinaryOp::mul, dy, getAttr("a"), dx);
    } else {
        backendOf(dx).affine(dy, a_, 0.0f, dx);
    }
    return {dx};
}

Blueprint MulAddConst::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("a", static_cast<double>(a_));
    bp.scheme.emplace_back("b", static_cast<double>(b_));
    // Tensor constants: their shapes (the values are attributes, in model files).
    if (tensorA_) bp.scheme.emplace_back("aShape", getAttr("a").shape().dims());
    if (tensorB_) bp.scheme.emplace_back("bShape", getAttr("b").shape().dims());
    return bp;
}

} // namespace tessera
