#include "containers/Sequential.h"

namespace tessera {

Sequential& Sequential::append(ModulePtr mod) {
    insertChild(children_.size(), std::move(mod), "append");
    return *this;
}

Sequential& Sequential::extend(const std::vector<ModulePtr>& mods) {
    const size_t before = children_.size();
    try {
        for (const ModulePtr& m : mods) insertChild(children_.size(), m, "extend");
    } catch (...) {
        children_.resize(before);
        throw;
    }
    return *this;
}

Sequential& Sequential::insert(size_t pos, ModulePtr mod) {
    insertChild(pos, std::move(mod), "insert");
    return *this;
}

ModulePtr Sequential::pop() {
    if (children_.empty()) throw ContainerError(str() + ".pop: the container is empty");
    return removeChild(children_.size() - 1, "pop");
}

ModulePtr Sequential::pop(size_t pos) { return removeChild(pos, "pop"); }

void Sequential::checkDataShape(const Shapes& inShapes) const { dataShapeFrom(inShapes); }

Shapes Sequential::dataShapeFrom(const Shapes& inShapes) const {
    if (children_.empty()) throw shapeError("is empty; append modules before running it");
    Shapes shapes = inShapes;
    std::string path = "input";
    for (const auto& [n, child] : children_) {
        path += " -> " + n;
        try {
            shapes = child->inferDataShape(shapes);
        } catch (const ShapeError& e) {
            throw shapeError(path + ": " + e.what());
        }
    }
    return shapes;
}

void Sequential::checkDataType(const std::vector<DType>& dtypes) const {
    if (children_.empty()) throw shapeError("is empty; append modules before running it");
    try {
        children_.front().second->checkDataType(dtypes);
    } catch (const ShapeError& e) {
        throw shapeError("input -> " + children_.front().first + ": " + e.what());
    }
}

Shapes Sequential::gradShapeFrom(const Shapes& outGradShapes) const {
    Shapes shapes = outGradShapes;
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
        try {
            it->second->checkGradShape(shapes);
            shapes = it->second->gradShapeFrom(shapes);
        } catch (const ShapeError& e) {
            throw shapeError("gradient at " + it->first + ": " + e.what());
        }
    }
    return shapes;
}

Tensors Sequential::updateData(const Tensors& data) {
    Tensors x = data;
    for (const auto& [n, child] : children_) x = (*child)(x);
    return x;
}

Tensors Sequential::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    Tensors g = grad;
    for (size_t i = children_.size(); i-- > 0;) {
        // The first child's input gradient is only needed when the caller asked for it.
        g = children_[i].second->backward(g, updParamGrads, i > 0 || updGrad, scale, momentum);
    }
    return g;
}

void Sequential::optimizeForShape(const Shapes& inShapes, size_t memlimit) {
    Shapes shapes = inShapes;
    for (const auto& [n, child] : children_) {
        child->optimizeForShape(shapes, memlimit);
        shapes = child->inferDataShape(shapes);
    }
}

} // namespace tessera
