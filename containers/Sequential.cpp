#include "containers/Sequential.h"

#include "containers/Fusion.h"

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

std::string Sequential::pathTo(size_t child) const {
    std::string path = "input";
    for (size_t i = 0; i <= child && i < children_.size(); ++i) path += " -> " + children_[i].first;
    return path;
}

std::shared_ptr<const Sequential::Plan> Sequential::lastPlan() const {
    std::lock_guard<std::mutex> lock(planMutex_);
    return plan_;
}

std::shared_ptr<const Sequential::Plan> Sequential::planFor(const Shapes& inShapes) const {
    if (children_.empty()) throw moduleError("is empty; append modules before running it");
    std::shared_ptr<const Plan> last = lastPlan();
    if (last && last->in == inShapes && last->train == isTrain() && last->version == structureVersion()) return last;
    auto plan = std::make_shared<Plan>();
    plan->in = inShapes;
    plan->train = isTrain();
    plan->version = structureVersion();
    plan->shapes.reserve(children_.size() + 1);
    plan->shapes.push_back(inShapes);
    for (size_t i = 0; i < children_.size(); ++i) {
        try {
            plan->shapes.push_back(children_[i].second->inferDataShape(plan->shapes.back()));
        } catch (const Error&) {
            rethrowWithContext(str() + ": " + pathTo(i) + ": ");
        }
    }
    std::lock_guard<std::mutex> lock(planMutex_);
    plan_ = plan;
    return plan;
}

void Sequential::checkDataShape(const Shapes& inShapes) const { planFor(inShapes); }

Shapes Sequential::dataShapeFrom(const Shapes& inShapes) const { return planFor(inShapes)->shapes.back(); }

void Sequential::checkDataType(const std::vector<DType>& dtypes) const {
    if (children_.empty()) throw moduleError("is empty; append modules before running it");
    try {
        children_.front().second->checkDataType(dtypes);
    } catch (const Error&) {
        rethrowWithContext(str() + ": input -> " + children_.front().first + ": ");
    }
}

Shapes Sequential::gradShapeFrom(const Shapes& outGradShapes) const {
    const std::shared_ptr<const Plan> plan = lastPlan();
    if (!plan || plan->version != structureVersion()) {
        throw moduleError("gradShapeFrom needs the shapes of a run; call dataShapeFrom or forward first");
    }
    if (outGradShapes != plan->shapes.back()) {
        throw shapeError("output gradients " + tessera::str(outGradShapes) + " do not match the outputs " +
                         tessera::str(plan->shapes.back()) + " of the last run (input " + tessera::str(plan->in) + ")");
    }
    for (size_t i = children_.size(); i-- > 0;) {
        try {
            children_[i].second->gradShapeFrom(plan->shapes[i], plan->shapes[i + 1]);
        } catch (const Error&) {
            rethrowWithContext(str() + ": gradient at " + children_[i].first + ": ");
        }
    }
    return plan->in;
}

Tensors Sequential::updateData(const Tensors& data) {
    planFor(shapesOf(data)); // checked here once; the children run unchecked
    beginForward();
    Tensors x = data;
    const fusion::Scope fused(fusion::pairsOf(*this), {}, fusion::evalOnly(fusion::foldsOf(*this)));
    for (size_t i = 0; i < children_.size(); ++i) {
        try {
            x = children_[i].second->runPlanned(x);
        } catch (const Error&) {
            rethrowWithContext(str() + ": " + pathTo(i) + ": ");
        }
    }
    return x;
}

Tensors Sequential::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    beginBackward();
    std::unordered_set<const Module*> summing;
    if (updParamGrads) {
        std::vector<const Module*> kids;
        for (const auto& [name, child] : children_) kids.push_back(child.get());
        summing = prepareSharedGrads(kids, momentum);
    }
    Tensors g = grad;
    for (size_t i = children_.size(); i-- > 0;) {
        Module& child = *children_[i].second;
        // The first child's input gradient is only needed when the caller asked for it.
        try {
            g = child.backward(g, updParamGrads, i > 0 || updGrad, scale, summing.count(&child) ? 1.0f : momentum);
        } catch (const Error&) {
            rethrowWithContext(str() + ": backward at " + children_[i].first + ": ");
        }
        // An integer input's gradient is undefined (a Cast of ArgMax's indices): the child
        // before gets zeros, as a graph's node whose output nobody differentiates does.
        for (size_t k = 0; i > 0 && k < g.size() && k < child.inDataList().size(); ++k) {
            if (!g[k].defined()) {
                const Tensor& in = child.inDataList()[k];
                g[k] = Tensor::zeros(in.shape(), DType::float32, in.device());
            }
        }
        // The next child's input gradient has been used: only the frontier stays live. This
        // child's values have been used too (its outputs are the Sequential's, or the next
        // child's inputs).
        if (i + 1 < children_.size()) children_[i + 1].second->releaseGrad();
        if (releaseInBackward_) child.releaseSaved();
    }
    return g;
}

void Sequential::optimizeForShape(const Shapes& inShapes, size_t memlimit) {
    const std::shared_ptr<const Plan> plan = planFor(inShapes);
    for (size_t i = 0; i < children_.size(); ++i) children_[i].second->optimizeForShape(plan->shapes[i], memlimit);
}

} // namespace tessera
