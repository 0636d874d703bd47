#include "modules/Reshape.h"

namespace tessera {

Reshape::Reshape(Shape shape, std::string name) : Module(std::move(name)), shape_(std::move(shape)) {
    int inferred = 0;
    for (int64_t d : shape_.dims()) {
        if (d < -1) throw ShapeError("Reshape: dim " + std::to_string(d) + " in " + shape_.str() + " is invalid");
        inferred += d == -1;
    }
    if (inferred > 1) throw ShapeError("Reshape: at most one -1 allowed, got " + shape_.str());
    if (shape_.rank() == 0) throw ShapeError("Reshape: the target shape is empty");
}

// Resolve 0 (copy the input dim) and -1 (infer); returns an empty shape on mismatch (dims
// whose product overflows count as one).
Shape Reshape::resolve(const Shape& in) const {
    std::vector<int64_t> dims = shape_.dims();
    int64_t known = 1;
    int inferred = -1;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] == 0) {
            if (i >= in.rank()) return Shape{};
            dims[i] = in[static_cast<int64_t>(i)];
        }
        if (dims[i] == -1) {
            inferred = static_cast<int>(i);
        } else if (__builtin_mul_overflow(known, dims[i], &known)) {
            return Shape{};
        }
    }
    if (inferred >= 0) {
        if (known == 0 || in.numel() % known != 0) return Shape{};
        dims[inferred] = in.numel() / known;
    }
    Shape out(std::move(dims));
    return out.numel() == in.numel() ? out : Shape{};
}

void Reshape::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (resolve(inShapes[0]).rank() == 0) {
        throw shapeError("cannot view input " + inShapes[0].str() + " (" + std::to_string(inShapes[0].numel()) +
                         " elements) as " + shape_.str());
    }
}

Shapes Reshape::dataShapeFrom(const Shapes& inShapes) const { return {resolve(inShapes[0])}; }

Shapes Reshape::gradShapeFrom(const Shapes& outGradShapes) const {
    Shape in = lastInShapes("gradShapeFrom")[0];
    in[0] = outGradShapes[0][0];
    if (outGradShapes[0] != resolve(in)) {
        throw shapeError("gradient " + outGradShapes[0].str() + " does not match the output " + resolve(in).str());
    }
    return {in};
}

Tensors Reshape::updateData(const Tensors& data) {
    return {data[0].reshape(dataShapeFrom(Shapes{data[0].shape()})[0])};
}

Tensors Reshape::updateGrad(const Tensors& grad) { return {grad[0].reshape(inData().shape())}; }

Blueprint Reshape::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("shape", shape_.dims());
    return bp;
}

} // namespace tessera
