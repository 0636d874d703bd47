#include "containers/Node.h"

#include <algorithm>
#include <deque>
#include <unordered_set>

#include "backend/Backend.h"
#include "containers/Executor.h"

namespace tessera {

NodePtr node(ModulePtr mod, const Parents& parents, std::string name) {
    return std::make_shared<Node>(std::move(mod), parents, std::move(name));
}

void Node::detachFromParents() {
    for (const NodePtr& p : parents_) {
        std::vector<Edge>& f = p->fwds_;
        f.erase(std::remove_if(f.begin(), f.end(), [this](const Edge& e) { return e.node == this; }), f.end());
    }
}

Node::~Node() {
    // A node that goes leaves no pointer to itself in its parents' fwds: a parent that
    // lives on in another graph would otherwise walk to a destroyed child.
    detachFromParents();
    // A parent whose last owner is this node would be destroyed inside this destructor and
    // its parents inside its, one stack frame per ancestor. Instead each such parent hands
    // its own parents to this loop before it goes.
    std::vector<NodePtr> pending = std::move(parents_);
    while (!pending.empty()) {
        NodePtr p = std::move(pending.back());
        pending.pop_back();
        if (p.use_count() == 1) {
            p->detachFromParents();
            for (NodePtr& q : p->parents_) pending.push_back(std::move(q));
            p->parents_.clear();
        }
    }
}

Node::Node(ModulePtr mod, const Parents& parents, std::string name) : module_(std::move(mod)), name_(std::move(name)) {
    if (!module_) throw GraphError("Node '" + name_ + "': the module is null");
    // Node and module share one name, as in PuzzleLib: error messages then name both.
    if (name_.empty()) {
        name_ = module_->name();
    } else if (module_->name().empty()) {
        module_->setName(name_);
    }
    addBackwards(parents);
}

void Node::setModule(ModulePtr module) {
    if (!module) throw GraphError("node '" + name_ + "': setModule with a null module");
    module_ = std::move(module);
}

std::string Node::str() const { return (name_.empty() ? "<unnamed>" : name_) + " (" + module_->classname() + ")"; }

namespace {
// The chain of parents from `from` up to `target` (both included), empty when `target` is
// not an ancestor of `from`. Breadth-first, without recursion.
std::vector<const Node*> ancestorPath(const Node* from, const Node* target) {
    std::unordered_map<const Node*, const Node*> child{{from, nullptr}};
    std::deque<const Node*> queue{from};
    while (!queue.empty()) {
        const Node* n = queue.front();
        queue.pop_front();
        if (n == target) {
            std::vector<const Node*> path;
            for (const Node* p = n; p; p = child.at(p)) path.push_back(p);
            return path;
        }
        for (const Edge& e : n->bwds()) {
            if (child.emplace(e.node, n).second) queue.push_back(e.node);
        }
    }
    return {};
}
} // namespace

void Node::addBackwards(const Parents& nodes) {
    for (const Parent& p : nodes) {
        if (!p.node) throw GraphError("node " + str() + ": a parent is null");
        // A node without children cannot close a cycle: only then is the walk needed.
        if (!fwds_.empty() || p.node.get() == this) {
            const std::vector<const Node*> path = ancestorPath(p.node.get(), this);
            if (!path.empty()) {
                // path runs from this node down to the new parent: data flows along it.
                std::string cycle;
                for (const Node* n : path) cycle += n->name() + " -> ";
                cycle += name_;
                throw GraphError("node " + str() + ": adding parent " + p.node->str() + " would make a cycle (" +
                                 cycle + "); a graph must be acyclic");
            }
        }
        const int count = static_cast<int>(p.node->module().outputCount());
        std::vector<int> slots = p.slots;
        if (slots.empty()) {
            for (int s = 0; s < count; ++s) slots.push_back(s);
        }
        for (int s : slots) {
            if (s < 0 || s >= count) {
                throw GraphError("node " + str() + ": parent " + p.node->str() + " has " + std::to_string(count) +
                                 " output(s); slot " + std::to_string(s) + " is out of range");
            }
        }
        bwds_.push_back({p.node.get(), slots});
        parents_.push_back(p.node);
        p.node->addForward(this, std::move(slots));
    }
}

void Node::addForward(Node* node, std::vector<int> slots) { fwds_.push_back({node, std::move(slots)}); }

// ---- data -----------------------------------------------------------------------------

void Node::setSharesModule(bool shares) {
    sharesModule_ = shares;
    run_ = {};
}

const Tensors& Node::outputs() const { return sharesModule_ ? run_.data : module_->dataList(); }

const Tensors& Node::inputGrads() const { return sharesModule_ ? run_.grad : module_->gradList(); }

void Node::releaseValues() {
    if (sharesModule_) {
        run_ = {};
    } else {
        module_->reset();
    }
}

void Node::releaseSaved() {
    if (sharesModule_) {
        Module::RunState spent;
        spent.grad = std::move(run_.grad);
        run_ = std::move(spent);
    } else {
        module_->releaseSaved();
    }
}

void Node::releaseInputGrads() {
    if (sharesModule_) {
        run_.grad.clear();
    } else {
        module_->releaseGrad();
    }
}

void Node::keepRun() {
    if (sharesModule_) run_ = module_->takeRunState();
}

Tensors Node::gatherInputs() const {
    Tensors in;
    for (const Edge& e : bwds_) {
        const Tensors& out = e.node->outputs();
        for (int s : e.slots) {
            if (static_cast<size_t>(s) >= out.size()) {
                throw GraphError("node " + str() + ": parent " + e.node->str() + " has no output " + std::to_string(s) +
                                 " (has it run?)");
            }
            in.push_back(out[static_cast<size_t>(s)]);
        }
    }
    return in;
}

void Node::updateData(const Tensors& data) {
    outShapes_ = shapesOf((*module_)(data));
    inShapes_ = shapesOf(data);
    keepRun();
}

void Node::runPlanned(const Tensors& data) {
    outShapes_ = shapesOf(module_->runPlanned(data));
    inShapes_ = shapesOf(data);
    keepRun();
}

namespace {
// Every ancestor of `from` and `from` itself, parents first (Kahn, without recursion).
std::vector<Node*> ancestorsParentsFirst(Node& from) {
    std::vector<Node*> all{&from};
    std::unordered_set<const Node*> seen{&from};
    for (size_t i = 0; i < all.size(); ++i) {
        for (const Edge& e : all[i]->bwds()) {
            if (seen.insert(e.node).second) all.push_back(e.node);
        }
    }
    std::unordered_map<const Node*, size_t> pending;
    std::vector<Node*> ready, order;
    for (Node* n : all) {
        pending[n] = n->bwds().size();
        if (n->bwds().empty()) ready.push_back(n);
    }
    while (!ready.empty()) {
        Node* n = ready.back();
        ready.pop_back();
        order.push_back(n);
        for (const Edge& e : n->fwds()) {
            auto p = pending.find(e.node);
            if (p != pending.end() && --p->second == 0) ready.push_back(e.node);
        }
    }
    return order;
}
} // namespace

// The seed's traversal picks what runs (this node, then each descendant once all its
// parents have run, in this call or an earlier one); the graph engine runs it, as a
// Graph's forward would: the same checks, and in eval mode the same release of values.
void Node::forward(const Tensors& data) {
    std::vector<Node*> order{this};
    fwdVisited = true;
    traverseForward(*this, [&order](Node& n) { order.push_back(&n); });
    for (Node* n : order) n->fwdVisited = false; // set again as each one runs
    exec::ForwardOptions options;
    options.release = !module_->isTrain();
    exec::forward(
        order,
        [this, &data](const Node& n) -> std::optional<Tensors> {
            if (&n != this) return std::nullopt;
            return data;
        },
        options);
}

// ---- gradients ------------------------------------------------------------------------

// As forward: the traversal picks the nodes (this one, then each ancestor once all its
// children have run backward), the engine runs them as a Graph's backward would, skipping
// nodes no parameter or asked-for gradient needs and releasing spent gradients.
void Node::backward(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    std::vector<Node*> run{this};
    bwdVisited = true;
    traverseBackward(*this, [&run](Node& n) { run.push_back(&n); });
    for (Node* n : run) n->bwdVisited = false;
    std::reverse(run.begin(), run.end()); // parents first, as the engine expects
    const auto hasParams = [](const Node& n) { return !n.module().namedParams().empty(); };
    const auto need = exec::needed(ancestorsParentsFirst(*this), updParamGrads, updGrad, hasParams);
    exec::backward(
        run,
        [this, &grad](const Node& n) -> std::optional<Tensors> {
            if (&n != this) return std::nullopt;
            return buildOutGrad(grad);
        },
        need, hasParams, exec::BackwardOptions{updParamGrads, updGrad, scale, momentum, {}, {}});
}

void Node::updateGrad(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    if (sharesModule_) {
        if (run_.data.empty())
            throw ModuleError(module_->str() + ": backward at node '" + name_ + "' before its forward");
        module_->putRunState(std::move(run_));
        run_ = {};
    }
    const Tensors& inGrad = module_->backward(grad, updParamGrads, updGrad, scale, momentum);
    if (updGrad) routeInGrad(inGrad);
    keepRun();
}

Tensors Node::buildOutGrad(const Tensors& grad) {
    if (fwds_.empty()) return grad;
    const Tensors& out = outputs();
    Tensors g(out.size());
    for (size_t s = 0; s < out.size(); ++s) {
        if (s < outGrad_.size() && outGrad_[s].defined()) {
            g[s] = outGrad_[s];
        } else { // an output nobody consumed contributes nothing
            g[s] = Tensor::zeros(out[s].shape(), DType::float32, out[s].device());
        }
    }
    outGrad_.clear();
    outGradOwned_.clear();
    return g;
}

void Node::routeInGrad(const Tensors& grad) {
    size_t k = 0;
    for (const Edge& e : bwds_) {
        for (int s : e.slots) {
            if (k >= grad.size()) {
                throw GraphError("node " + str() + ": the module returned " + std::to_string(grad.size()) +
                                 " input gradients for more inputs");
            }
            e.node->accumulateGrad(s, grad[k++]);
        }
    }
}

void Node::accumulateGrad(int slot, const Tensor& grad) {
    const auto s = static_cast<size_t>(slot);
    if (outGrad_.size() <= s) {
        outGrad_.resize(s + 1);
        outGradOwned_.resize(s + 1, false);
    }
    if (!grad.defined()) return; // no gradient (an integer value's: ids, positions, indices)
    Tensor& acc = outGrad_[s];
    if (!acc.defined()) {
        acc = grad; // the first contribution is borrowed, not copied
        return;
    }
    if (!outGradOwned_[s]) { // a second one: the sum goes into storage of our own
        Tensor sum = Tensor::empty(acc.shape(), acc.dtype(), acc.device(), acc.layout());
        backendOf(acc).axpbyz(1.0f, grad, 1.0f, acc, sum);
        acc = sum;
        outGradOwned_[s] = true;
        return;
    }
    backendOf(acc).axpby(1.0f, grad, 1.0f, acc);
}

// ---- shapes ---------------------------------------------------------------------------

Shapes Node::dataShapeFrom(const ShapeMap& inshapes, ShapeMap& shapes,
                           const std::function<void(Node&, const Shapes&)>& onmodule) {
    Shapes in;
    if (bwds_.empty()) {
        auto it = inshapes.find(this);
        if (it == inshapes.end()) throw GraphError("node " + str() + " has no parents and no input shape");
        in = it->second;
    } else {
        for (const Edge& e : bwds_) {
            const Shapes& out = shapes.at(e.node);
            for (int s : e.slots) in.push_back(out.at(static_cast<size_t>(s)));
        }
    }
    outShapes_ = module_->inferDataShape(in);
    inShapes_ = std::move(in);
    if (onmodule) onmodule(*this, inShapes_);
    return shapes[this] = outShapes_;
}

const Shapes& Node::inferShapes(const Shapes* in) {
    if (in) {
        inShapes_ = *in;
    } else {
        inShapes_.clear();
        for (const Edge& e : bwds_) {
            const Shapes& out = e.node->outShapes_;
            for (int s : e.slots) inShapes_.push_back(out.at(static_cast<size_t>(s)));
        }
    }
    outShapes_ = module_->inferDataShape(inShapes_);
    return outShapes_;
}

Shapes Node::outGradShapeFrom(const Shapes& outshapes,
                              const std::function<const Shapes*(const Node*)>& childGrads) const {
    if (fwds_.empty()) return outshapes;
    Shapes g(outShapes_.size());
    bool any = false;
    for (const Edge& f : fwds_) {
        const Shapes* found = childGrads(f.node);
        if (!found) continue; // a child outside the graph being checked
        any = true;
        const Shapes& grads = *found;
        // Find where this node's slots sit in the child's input list.
        size_t k = 0;
        for (const Edge& e : f.node->bwds_) {
            for (int s : e.slots) {
                if (e.node == this) {
                    if (k >= grads.size()) {
                        throw ShapeError("no gradient shape for output " + std::to_string(s) + " from " +
                                         f.node->str() + " (its gradient shapes were not inferred)");
                    }
                    const Shape& got = grads[k];
                    Shape& slotShape = g.at(static_cast<size_t>(s));
                    if (slotShape.rank() == 0) {
                        slotShape = got;
                    } else if (slotShape != got) {
                        throw ShapeError("gradients of output " + std::to_string(s) + " disagree: " + slotShape.str() +
                                         " and " + got.str() + " (from " + f.node->str() + ")");
                    }
                }
                ++k;
            }
        }
    }
    if (!any) return outshapes.empty() ? outShapes_ : outshapes; // every child is outside
    for (size_t s = 0; s < g.size(); ++s) {
        if (g[s].rank() == 0) g[s] = outShapes_[s]; // unconsumed output: zero gradient of its shape
    }
    return g;
}

Shapes Node::buildOutGradShape(const Shapes& outshapes, const ShapeMap& shapes) const {
    return outGradShapeFrom(outshapes, [&shapes](const Node* c) -> const Shapes* {
        const auto it = shapes.find(c);
        return it == shapes.end() ? nullptr : &it->second;
    });
}

const Shapes& Node::inferGradShapes(const Shapes& outshapes, const std::function<bool(const Node*)>& inScope) {
    const Shapes outGrad = outGradShapeFrom(outshapes, [&inScope](const Node* c) -> const Shapes* {
        return !inScope || inScope(c) ? &c->inGradShapes_ : nullptr;
    });
    if (outGrad != outShapes_) {
        throw ShapeError(module_->str() + ": output gradient " + tessera::str(outGrad) + " does not match the output " +
                         tessera::str(outShapes_));
    }
    // The pure form: this node's own input shapes, whatever other nodes do with the module.
    inGradShapes_ = module_->gradShapeFrom(inShapes_, outGrad);
    return inGradShapes_;
}

Shapes Node::gradShapeFrom(const Shapes& outshapes, ShapeMap& shapes) {
    const Shapes outGrad = buildOutGradShape(outshapes, shapes);
    if (outGrad != outShapes_) {
        throw ShapeError(module_->str() + ": output gradient " + tessera::str(outGrad) + " does not match the output " +
                         tessera::str(outShapes_));
    }
    inGradShapes_ = module_->gradShapeFrom(inShapes_, outGrad);
    return shapes[this] = inGradShapes_;
}

// ---- state ----------------------------------------------------------------------------

void Node::reset() {
    module_->reset();
    run_ = {};
    outGrad_.clear();
    outGradOwned_.clear();
    clearTraverse();
}

void Node::traverseForward(Node& node, const std::function<void(Node&)>& func) {
    std::deque<Node*> ready;
    for (const Edge& e : node.fwds_) ready.push_back(e.node);
    while (!ready.empty()) {
        Node* n = ready.front();
        ready.pop_front();
        if (n->fwdVisited) continue;
        bool parentsDone = true;
        for (const Edge& e : n->bwds_) parentsDone = parentsDone && e.node->fwdVisited;
        if (!parentsDone) continue; // its last parent will queue it again
        func(*n);
        n->fwdVisited = true;
        for (const Edge& e : n->fwds_) ready.push_back(e.node);
    }
}

void Node::traverseBackward(Node& node, const std::function<void(Node&)>& func) {
    std::deque<Node*> ready;
    for (const Edge& e : node.bwds_) ready.push_back(e.node);
    while (!ready.empty()) {
        Node* n = ready.front();
        ready.pop_front();
        if (n->bwdVisited) continue;
        bool childrenDone = true;
        for (const Edge& e : n->fwds_) childrenDone = childrenDone && e.node->bwdVisited;
        if (!childrenDone) continue;
        func(*n);
        n->bwdVisited = true;
        for (const Edge& e : n->bwds_) ready.push_back(e.node);
    }
}

} // namespace tessera
