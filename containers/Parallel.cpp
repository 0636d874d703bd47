#include "containers/Parallel.h"

namespace tessera {

Parallel& Parallel::append(ModulePtr mod) {
    insertChild(children_.size(), std::move(mod), "append");
    return *this;
}

void Parallel::checkDataShape(const Shapes& inShapes) const {
    if (children_.empty()) throw moduleError("is empty; append modules before running it");
    requireCount(inShapes, children_.size(), "input");
    dataShapeFrom(inShapes);
}

Shapes Parallel::dataShapeFrom(const Shapes& inShapes) const {
    Shapes out;
    for (size_t i = 0; i < children_.size(); ++i) {
        try {
            const Shapes o = children_[i].second->inferDataShape({inShapes.at(i)});
            if (o.size() != 1) throw shapeError("branch '" + children_[i].first + "' must give one output");
            out.push_back(o[0]);
        } catch (const Error&) {
            rethrowWithContext(str() + ": branch " + std::to_string(i) + " '" + children_[i].first + "': ");
        }
    }
    return out;
}

Shapes Parallel::gradShapeFrom(const Shapes& outGradShapes) const {
    Shapes in;
    for (size_t i = 0; i < children_.size(); ++i) {
        children_[i].second->checkGradShape({outGradShapes.at(i)});
        in.push_back(children_[i].second->gradShapeFrom(outGradShapes.at(i)));
    }
    return in;
}

Tensors Parallel::updateData(const Tensors& data) {
    beginForward();
    Tensors out;
    // The shapes were checked where the call entered (checkDataShape runs every branch's).
    for (size_t i = 0; i < children_.size(); ++i) {
        try {
            const Tensors& y = children_[i].second->runPlanned({data[i]});
            out.push_back(y.at(0));
        } catch (const Error&) {
            rethrowWithContext(str() + ": branch " + std::to_string(i) + " '" + children_[i].first + "': ");
        }
    }
    return out;
}

Tensors Parallel::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    beginBackward();
    std::unordered_set<const Module*> summing; // branches sharing a Variable sum into it
    if (updParamGrads) {
        std::vector<const Module*> kids;
        for (const auto& [name, child] : children_) kids.push_back(child.get());
        summing = prepareSharedGrads(kids, momentum);
    }
    Tensors in;
    for (size_t i = 0; i < children_.size(); ++i) {
        Module& child = *children_[i].second;
        Tensor g = child.backward(grad[i], updParamGrads, updGrad, scale, summing.count(&child) ? 1.0f : momentum);
        if (updGrad) in.push_back(g);
        if (releaseInBackward_) child.releaseSaved();
    }
    return in;
}

} // namespace tessera
