#include "containers/Graph.h"

#include <optional>
#include <unordered_map>

#include "containers/Executor.h"
#include "containers/Fusion.h"
#include "modules/Identity.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"
#include "modules/Tile.h"

namespace tessera {

namespace {
std::string names(const std::vector<const Node*>& nodes, size_t max = 10) {
    std::string s;
    for (size_t i = 0; i < nodes.size() && i < max; ++i) s += (i ? ", " : "") + nodes[i]->str();
    if (nodes.size() > max) s += ", ... (" + std::to_string(nodes.size()) + " in all)";
    return s;
}

// Every failing node; the nodes that depend on one (whose input is then unknown) are
// counted, not checked.
std::string errorList(const std::string& what, const std::vector<std::string>& errors, size_t unchecked) {
    std::string s = std::to_string(errors.size()) + " node(s) fail " + what + ":";
    for (const std::string& e : errors) s += "\n  " + e;
    if (unchecked) {
        s += "\n  (" + std::to_string(unchecked) + " node(s) " + (what == "shape checking" ? "below" : "above") +
             " these depend on them and were not checked)";
    }
    return s;
}
} // namespace

Graph::Graph(std::vector<NodePtr> inputs, std::vector<NodePtr> outputs, std::string name)
    : Container(std::move(name)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
    build();
}

void Graph::build() {
    const std::string where = "Graph" + (this->name().empty() ? std::string() : " '" + this->name() + "'");
    if (inputs_.empty() || outputs_.empty()) throw GraphError(where + ": needs at least one input and one output");
    for (const NodePtr& n : inputs_) {
        if (!n) throw GraphError(where + ": an input node is null");
    }
    for (const NodePtr& n : outputs_) {
        if (!n) throw GraphError(where + ": an output node is null");
    }

    // Every ancestor of the outputs, found without recursion.
    std::vector<NodePtr> found;
    std::unordered_set<const Node*> inGraph;
    std::vector<NodePtr> stack(outputs_.rbegin(), outputs_.rend());
    while (!stack.empty()) {
        NodePtr n = std::move(stack.back());
        stack.pop_back();
        if (!inGraph.insert(n.get()).second) continue;
        found.push_back(n);
        for (const NodePtr& p : n->parents()) {
            if (!inGraph.count(p.get())) stack.push_back(p);
        }
    }

    std::unordered_set<const Node*> isInput;
    for (size_t i = 0; i < inputs_.size(); ++i) {
        const Node* in = inputs_[i].get();
        if (!in->bwds().empty()) {
            std::vector<const Node*> ps;
            for (const Edge& e : in->bwds()) ps.push_back(e.node);
            throw GraphError(where + ": input " + in->str() + " has parents (" + names(ps) +
                             "); a graph input takes its data from outside");
        }
        if (!isInput.insert(in).second) throw GraphError(where + ": input " + in->str() + " is listed twice");
        inputIndex_[in] = i;
    }
    std::vector<const Node*> strayRoots;
    for (const NodePtr& n : found) {
        if (n->bwds().empty() && !isInput.count(n.get())) strayRoots.push_back(n.get());
    }
    if (!strayRoots.empty()) {
        throw GraphError(where + ": node(s) " + names(strayRoots) +
                         " have no parents but are not graph inputs; outputs must be reachable from the inputs only");
    }
    for (const NodePtr& in : inputs_) {
        if (!inGraph.count(in.get())) throw GraphError(where + ": input " + in->str() + " does not lead to any output");
    }

    // Execution order (Kahn): a node runs once all its parent edges are done.
    std::unordered_map<const Node*, size_t> pending;
    for (const NodePtr& n : found) pending[n.get()] = n->bwds().size();
    std::unordered_map<const Node*, NodePtr> owner;
    for (const NodePtr& n : found) owner[n.get()] = n;
    std::vector<Node*> ready;
    for (auto it = inputs_.rbegin(); it != inputs_.rend(); ++it) ready.push_back(it->get());
    while (!ready.empty()) {
        Node* n = ready.back();
        ready.pop_back();
        order_.push_back(n);
        nodes_.push_back(owner[n]);
        size_t inside = 0;
        for (auto it = n->fwds().rbegin(); it != n->fwds().rend(); ++it) {
            if (!inGraph.count(it->node)) continue; // a consumer in some other graph
            ++inside;
            if (--pending[it->node] == 0) ready.push_back(it->node);
        }
        consumers_[n] = inside;
        if (!n->module().namedParams().empty()) withParams_.insert(n);
    }
    if (order_.size() != found.size()) {
        std::vector<const Node*> cyclic;
        for (const NodePtr& n : found) {
            if (pending[n.get()] > 0) cyclic.push_back(n.get());
        }
        throw GraphError(where + ": cycle among node(s) " + names(cyclic) + "; a graph must be acyclic");
    }

    for (size_t i = 0; i < outputs_.size(); ++i) {
        const Node* out = outputs_[i].get();
        if (consumers_[out] > 0) {
            std::vector<const Node*> cs;
            for (const Edge& e : out->fwds()) cs.push_back(e.node);
            throw GraphError(where + ": output " + out->str() + " has children (" + names(cs) +
                             "); an output must be the end of a branch");
        }
        if (!outputIndex_.emplace(out, i).second)
            throw GraphError(where + ": output " + out->str() + " is listed twice");
    }

    // Names: unique; the unnamed get <classname>_<k>.
    for (Node* n : order_) {
        if (n->name().empty()) continue;
        if (n->name().find('.') != std::string::npos) {
            throw GraphError(where + ": node name '" + n->name() + "' contains '.', which separates dotted names");
        }
        auto [it, fresh] = byName_.emplace(n->name(), n);
        if (!fresh) {
            throw GraphError(where + ": two nodes are named '" + n->name() + "': " + it->second->str() + " and " +
                             n->str() + "; node names must be unique");
        }
    }
    std::unordered_map<std::string, size_t> counters;
    for (Node* n : order_) {
        if (!n->name().empty()) continue;
        const std::string base = n->module().classname();
        std::string candidate;
        do {
            candidate = base + "_" + std::to_string(counters[base]++);
        } while (byName_.count(candidate));
        n->setName(candidate);
        byName_.emplace(candidate, n);
    }

    // Slots in range (a module may have changed since its node was made).
    for (Node* n : order_) {
        for (const Edge& e : n->bwds()) {
            const size_t count = e.node->module().outputCount();
            for (int s : e.slots) {
                if (s < 0 || static_cast<size_t>(s) >= count) {
                    throw GraphError(where + ": node " + n->str() + " takes slot " + std::to_string(s) + " of " +
                                     e.node->str() + ", which has " + std::to_string(count) + " output(s)");
                }
            }
        }
    }

    // One module in several nodes (shared weights): each such node keeps its own run
    // between forward and backward, and the module's parameter gradients sum over them.
    // A container's runs live in its children's nodes, so a container runs in one node.
    markSharedModules(where);

    std::unordered_map<const Node*, size_t> position;
    for (size_t i = 0; i < order_.size(); ++i) position[order_[i]] = i;
    parentPos_.assign(order_.size(), {});
    childPos_.assign(order_.size(), {});
    inputPos_.assign(order_.size(), -1);
    outputPos_.assign(order_.size(), -1);
    for (size_t i = 0; i < order_.size(); ++i) {
        for (const Edge& e : order_[i]->bwds()) parentPos_[i].push_back(position.at(e.node));
        for (const Edge& e : order_[i]->fwds()) {
            auto c = position.find(e.node);
            if (c != position.end()) childPos_[i].push_back(c->second);
        }
    }
    for (const auto& [n, k] : inputIndex_) inputPos_[position.at(n)] = static_cast<std::ptrdiff_t>(k);
    for (const auto& [n, k] : outputIndex_) outputPos_[position.at(n)] = static_cast<std::ptrdiff_t>(k);

    children_.clear();
    for (Node* n : order_) children_.emplace_back(n->name(), n->modulePtr());
    structureChanged();
}

void Graph::markSharedModules(const std::string& where) {
    std::unordered_map<const Module*, std::vector<Node*>> wrappers;
    for (Node* n : order_) wrappers[&n->module()].push_back(n);
    for (Node* n : order_) {
        const std::vector<Node*>& same = wrappers.at(&n->module());
        if (same.size() > 1 && !n->module().namedChildren().empty()) {
            throw GraphError(where + ": nodes " + same[0]->str() + " and " + same[1]->str() + " wrap the same " +
                             "container " + n->module().str() +
                             "; a container runs in one node only (give the "
                             "layers inside it one module each, or share weights with setVar)");
        }
        if (n->sharesModule() != (same.size() > 1)) n->setSharesModule(same.size() > 1);
    }
}

ModulePtr Graph::replace(const std::string& name, ModulePtr module) {
    const std::string where = str() + ".replace('" + name + "')";
    if (!module) throw GraphError(where + ": the module is null");
    auto it = byName_.find(name);
    if (it == byName_.end()) throw GraphError(where + ": no node named '" + name + "'");
    Node& n = *it->second;
    for (const Edge& e : n.fwds()) { // the slots its children take must exist
        for (int slot : e.slots) {
            if (static_cast<size_t>(slot) >= module->outputCount()) {
                throw GraphError(where + ": " + e.node->str() + " takes output " + std::to_string(slot) + ", but " +
                                 module->str() + " has " + std::to_string(module->outputCount()));
            }
        }
    }
    ModulePtr old = n.modulePtr();
    const Device device = this->device();
    if (numOfParams() > 0 && module->device() != device) module->to(device);
    n.setModule(module);
    try {
        markSharedModules(where);
    } catch (const GraphError&) {
        n.setModule(old);
        markSharedModules(where);
        throw;
    }
    if (module->namedParams().empty()) {
        withParams_.erase(&n);
    } else {
        withParams_.insert(&n);
    }
    for (auto& [childName, child] : children_) {
        if (child == old && childName == n.name()) child = module;
    }
    structureChanged();
    return old;
}

Node& Graph::getNodeByName(const std::string& name) const {
    auto it = byName_.find(name);
    if (it == byName_.end()) throw GraphError(str() + ": no node named '" + name + "'");
    return *it->second;
}

std::string Graph::pathTo(const Node& node) const {
    std::vector<const Node*> path{&node};
    while (!path.back()->bwds().empty()) path.push_back(path.back()->bwds().front().node);
    std::string s;
    const size_t n = path.size();
    for (size_t i = n; i-- > 0;) {
        const size_t fromStart = n - 1 - i;
        if (n > 12 && fromStart == 5) {
            s += " -> ... (" + std::to_string(n - 10) + " nodes)";
            i = 5; // continue with the last five
        }
        s += (s.empty() ? "" : " -> ") + path[i]->name();
    }
    return s;
}

size_t Graph::outputCount() const {
    size_t n = 0;
    for (const NodePtr& o : outputs_) n += o->module().outputCount();
    return n;
}

// ---- shapes ---------------------------------------------------------------------------

void Graph::checkDataShape(const Shapes& inShapes) const { requireCount(inShapes, inputs_.size(), "input"); }

namespace {
// A node's module checks `dtype`; an Identity (a graph's named input, say), a Reshape, a
// Tile or a Slice passes it on to the children that take it as their only input, so that an Embedder
// behind them refuses float ids, and a Cast of int32 a float mask, before any data flows;
// and to the input of a graph child that it feeds (a graph of several inputs, the others
// computed: an imported loss's targets). Errors start with `path` (the nodes passed through).
void checkNodeDataType(const Node& n, DType dtype, const std::string& path) {
    const Module& m = n.module();
    if (const auto* g = dynamic_cast<const Graph*>(&m); !g || g->inputs().size() == 1) {
        try {
            m.checkDataType({dtype});
        } catch (const Error&) {
            rethrowWithContext(path + ": ");
        }
    }
    const bool copies = dynamic_cast<const Tile*>(&m) != nullptr || dynamic_cast<const Slice*>(&m) != nullptr;
    if (!dynamic_cast<const Identity*>(&m) && !dynamic_cast<const Reshape*>(&m) && !copies) return;
    // A Tile or a Slice computes float data in float32.
    const DType next = copies && dtype != DType::int32 ? DType::float32 : dtype;
    for (const Edge& e : n.fwds()) {
        if (e.slots.size() != 1) continue;
        if (e.node->bwds().size() == 1) {
            checkNodeDataType(*e.node, next, path + " -> " + e.node->name());
            continue;
        }
        const auto* g = dynamic_cast<const Graph*>(&e.node->module());
        if (!g) continue;
        size_t position = 0; // n's place among the child's inputs
        for (const Edge& in : e.node->bwds()) {
            if (in.node == &n) break;
            position += in.slots.size();
        }
        if (position < g->inputs().size()) {
            const Node& input = *g->inputs()[position];
            checkNodeDataType(input, next, path + " -> " + e.node->name() + " (input " + input.name() + ")");
        }
    }
}
} // namespace

void Graph::checkDataType(const std::vector<DType>& dtypes) const {
    for (size_t i = 0; i < inputs_.size() && i < dtypes.size(); ++i) {
        checkNodeDataType(*inputs_[i], dtypes[i], str() + ": input " + inputs_[i]->name());
    }
    // A module of several inputs, each one an input's dtype passed on as above, checks them
    // together (GatherElements refuses float positions beside its data).
    auto passedOn = [](const Module& m, DType t) -> std::optional<DType> { // what a pass-through node gives
        if (dynamic_cast<const Identity*>(&m) || dynamic_cast<const Reshape*>(&m)) return t;
        if (dynamic_cast<const Tile*>(&m) || dynamic_cast<const Slice*>(&m)) {
            return t == DType::int32 ? t : DType::float32;
        }
        return std::nullopt;
    };
    std::unordered_map<const Node*, DType> known;
    for (size_t i = 0; i < inputs_.size() && i < dtypes.size(); ++i) {
        if (const auto t = passedOn(inputs_[i]->module(), dtypes[i])) known.emplace(inputs_[i].get(), *t);
    }
    for (const Node* n : order_) {
        std::vector<DType> in;
        bool all = !n->bwds().empty();
        for (const Edge& e : n->bwds()) {
            const auto it = known.find(e.node);
            all = all && it != known.end();
            if (all) in.insert(in.end(), e.slots.size(), it->second);
        }
        if (!all) continue;
        const Module& m = n->module();
        if (in.size() == 1) {
            if (const auto t = passedOn(m, in[0])) known.emplace(n, *t);
        } else {
            try {
                m.checkDataType(in);
            } catch (const Error&) {
                rethrowWithContext(str() + ": " + n->name() + ": ");
            }
        }
    }
}

Shapes Graph::dataShapeFrom(const Shapes& inShapes) const {
    std::lock_guard<std::recursive_mutex> lock(planMutex_);
    if (planned_ && planIn_ == inShapes && planTrain_ == isTrain() && planVersion_ == structureVersion()) {
        return planOut_;
    }
    planned_ = false;
    requireCount(inShapes, inputs_.size(), "input");
    // Walks the order by position: each node reads its parents' shapes from the nodes.
    std::vector<uint8_t> failed(order_.size(), 0);
    std::vector<std::string> errors;
    size_t skipped = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
        Node* n = order_[i];
        bool below = false;
        for (size_t p : parentPos_[i]) below = below || failed[p];
        if (below) { // its input is unknown: only the first failure on a path is reported
            failed[i] = 1;
            ++skipped;
            continue;
        }
        try {
            if (inputPos_[i] >= 0) {
                const Shapes in{inShapes[static_cast<size_t>(inputPos_[i])]};
                n->inferShapes(&in);
            } else {
                n->inferShapes();
            }
        } catch (const ShapeError& e) {
            errors.push_back(pathTo(*n) + ": " + e.what());
            failed[i] = 1;
        } catch (const Error&) { // not a shape problem: report it alone, as what it is
            rethrowWithContext(str() + ": " + pathTo(*n) + ": ");
        }
    }
    if (!errors.empty()) throw shapeError(errorList("shape checking", errors, skipped));
    Shapes out;
    for (const NodePtr& o : outputs_) {
        for (const Shape& s : o->outShapes()) out.push_back(s);
    }
    planIn_ = inShapes;
    planOut_ = out;
    planTrain_ = isTrain();
    planVersion_ = structureVersion();
    planned_ = true;
    return out;
}

Shapes Graph::gradShapeFrom(const Shapes& outGradShapes) const {
    std::lock_guard<std::recursive_mutex> lock(planMutex_);
    for (Node* n : order_) {
        if (n->outShapes().empty()) {
            throw shapeError("gradShapeFrom needs the output shapes of every node; run dataShapeFrom or forward first");
        }
    }
    std::vector<Shapes> given(outputs_.size());
    size_t k = 0;
    for (size_t o = 0; o < outputs_.size(); ++o) {
        const size_t count = outputs_[o]->outShapes().size();
        if (k + count > outGradShapes.size()) break;
        given[o].assign(outGradShapes.begin() + static_cast<std::ptrdiff_t>(k),
                        outGradShapes.begin() + static_cast<std::ptrdiff_t>(k + count));
        k += count;
    }
    if (k != outGradShapes.size() || outGradShapes.size() != outputCount()) {
        throw shapeError("expects " + std::to_string(outputCount()) + " output-gradient shapes, got " +
                         std::to_string(outGradShapes.size()));
    }
    std::vector<uint8_t> failed(order_.size(), 0);
    std::vector<std::string> errors;
    size_t skipped = 0;
    const Shapes none;
    // A node may also feed nodes outside this graph (a zoo model's inner node under a new
    // head built beside it): only this graph's children count here.
    const std::unordered_set<const Node*> members(order_.begin(), order_.end());
    const auto inGraph = [&members](const Node* c) { return members.count(c) > 0; };
    for (size_t i = order_.size(); i-- > 0;) {
        Node* n = order_[i];
        bool above = false;
        for (size_t c : childPos_[i]) above = above || failed[c];
        if (above) {
            failed[i] = 1;
            ++skipped;
            continue;
        }
        try {
            n->inferGradShapes(outputPos_[i] >= 0 ? given[static_cast<size_t>(outputPos_[i])] : none, inGraph);
        } catch (const ShapeError& e) {
            errors.push_back(pathTo(*n) + ": " + e.what());
            failed[i] = 1;
        } catch (const Error&) {
            rethrowWithContext(str() + ": " + pathTo(*n) + ": ");
        }
    }
    if (!errors.empty()) throw shapeError(errorList("gradient-shape checking", errors, skipped));
    Shapes in;
    for (const NodePtr& i : inputs_) {
        for (const Shape& s : i->inGradShapes()) in.push_back(s);
    }
    return in;
}

// ---- data -----------------------------------------------------------------------------

Tensors Graph::updateData(const Tensors& data) {
    dataShapeFrom(shapesOf(data)); // checked here once (cached per input shapes); nodes run unchecked
    beginForward();
    for (Node* n : order_) n->clearTraverse();
    exec::ForwardOptions options;
    options.planned = true;
    options.release = !isTrain();
    options.keep = [this](const Node& n) { return outputIndex_.count(&n) > 0; };
    options.where = [this](const Node& n) { return str() + ": " + pathTo(n) + ": "; };
    const fusion::Scope fused(fusion::pairsOf(*this), fusion::normSumsOf(*this),
                              fusion::evalOnly(fusion::foldsOf(*this)));
    exec::forward(
        order_,
        [this, &data](const Node& n) -> std::optional<Tensors> {
            auto in = inputIndex_.find(&n);
            if (in == inputIndex_.end()) return std::nullopt;
            return Tensors{data[in->second]};
        },
        options);
    released_ = options.release;
    Tensors out;
    for (const NodePtr& o : outputs_) {
        for (const Tensor& t : o->outputs()) out.push_back(t);
    }
    return out;
}

Tensors Graph::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    if (released_) {
        throw moduleError("backward after an eval-mode forward: intermediate values were released; "
                          "run the forward in train mode to differentiate");
    }
    beginBackward();
    size_t k = 0;
    std::unordered_map<const Node*, Tensors> given;
    for (const NodePtr& o : outputs_) {
        Tensors& g = given[o.get()];
        for (size_t s = 0; s < o->outputs().size(); ++s) g.push_back(grad.at(k++));
    }
    for (Node* n : order_) n->bwdVisited = false;
    // A node runs backward only when something needs it: it holds parameters to update, or
    // a node upstream of it does, or it is an input whose gradient was asked for. So the
    // first convolution of a network computes no gradient for the data.
    const auto hasParams = [this](const Node& n) { return withParams_.count(&n) > 0; };
    const auto need = exec::needed(order_, updParamGrads, updGrad, hasParams);
    exec::BackwardOptions options{updParamGrads,
                                  updGrad,
                                  scale,
                                  momentum,
                                  [this](const Node& n) { return str() + ": backward at " + pathTo(n) + ": "; },
                                  {}};
    if (releaseInBackward_) { // a graph's outputs stay readable
        options.release = [this](const Node& n) { return outputIndex_.count(&n) == 0; };
    }
    exec::backward(
        order_,
        [&given](const Node& n) -> std::optional<Tensors> {
            auto it = given.find(&n);
            if (it == given.end()) return std::nullopt;
            return it->second;
        },
        need, hasParams, options);
    Tensors in;
    if (updGrad) {
        for (const NodePtr& i : inputs_) {
            for (const Tensor& t : i->inputGrads()) in.push_back(t);
        }
    }
    return in;
}

Blueprint Graph::blueprint() const {
    Blueprint bp = Module::blueprint();
    std::unordered_map<const Module*, const Node*> first;
    for (const Node* n : order_) {
        bp.modules.push_back(n->module().blueprint());
        NodeBlueprint nb{n->name(), {}, {}};
        auto [it, fresh] = first.emplace(&n->module(), n);
        if (!fresh) nb.sameModuleAs = it->second->name();
        for (const Edge& e : n->bwds())
            nb.parents.emplace_back(e.node->name(), std::vector<int64_t>(e.slots.begin(), e.slots.end()));
        bp.nodes.push_back(std::move(nb));
    }
    for (const NodePtr& i : inputs_) bp.inputs.push_back(i->name());
    for (const NodePtr& o : outputs_) bp.outputs.push_back(o->name());
    return bp;
}

void Graph::reset() {
    Module::reset();
    for (Node* n : order_) n->reset();
    released_ = false;
}

void Graph::optimizeForShape(const Shapes& inShapes, size_t memlimit) {
    ShapeMap inmap, shapes;
    for (size_t i = 0; i < inputs_.size(); ++i) inmap[inputs_[i].get()] = {inShapes.at(i)};
    for (Node* n : order_) {
        n->dataShapeFrom(inmap, shapes,
                         [memlimit](Node& node, const Shapes& in) { node.module().optimizeForShape(in, memlimit); });
    }
}

} // namespace tessera
