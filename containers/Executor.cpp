#include "containers/Executor.h"

#include "containers/Container.h"

namespace tessera::exec {

namespace {
bool allChildrenRan(const Node& n) {
    for (const Edge& e : n.fwds()) {
        if (!e.node->fwdVisited) return false;
    }
    return true;
}

bool allParentsRan(const Node& n) {
    for (const Edge& e : n.bwds()) {
        if (!e.node->bwdVisited) return false;
    }
    return true;
}
} // namespace

void forward(const std::vector<Node*>& order, const std::function<std::optional<Tensors>(const Node&)>& feed,
             const ForwardOptions& options) {
    for (Node* n : order) {
        try {
            std::optional<Tensors> fed = feed ? feed(*n) : std::nullopt;
            const Tensors in = fed ? std::move(*fed) : n->gatherInputs();
            if (options.planned) {
                n->runPlanned(in);
            } else {
                n->updateData(in);
            }
        } catch (const Error&) {
            if (!options.where) throw;
            rethrowWithContext(options.where(*n));
        }
        n->fwdVisited = true; // before the release: n counts as a consumer that has run
        if (!options.release) continue;
        // nnsight's listener counting: a value goes once its last consumer has run.
        for (const Edge& e : n->bwds()) {
            Node* p = e.node;
            if (p->outputs().empty() || (options.keep && options.keep(*p))) continue;
            if (allChildrenRan(*p)) p->releaseValues();
        }
    }
}

std::unordered_map<const Node*, bool> needed(const std::vector<Node*>& order, bool updParamGrads, bool updGrad,
                                             const std::function<bool(const Node&)>& hasParams) {
    std::unordered_map<const Node*, bool> need;
    need.reserve(order.size());
    for (const Node* n : order) {
        bool v = (updParamGrads && hasParams(*n)) || (n->bwds().empty() && updGrad);
        for (const Edge& e : n->bwds()) {
            auto p = need.find(e.node);
            v = v || (p != need.end() && p->second);
        }
        need[n] = v;
    }
    return need;
}

void backward(const std::vector<Node*>& order, const std::function<std::optional<Tensors>(const Node&)>& given,
              const std::unordered_map<const Node*, bool>& need, const std::function<bool(const Node&)>& hasParams,
              const BackwardOptions& options) {
    std::unordered_set<const Module*> summing;
    if (options.updParamGrads) {
        std::vector<const Module*> updaters; // one entry per node: a module in two nodes counts twice
        for (const Node* n : order) {
            auto it = need.find(n);
            if (it != need.end() && it->second && hasParams(*n)) updaters.push_back(&n->module());
        }
        summing = prepareSharedGrads(updaters, options.momentum);
    }
    auto isNeeded = [&need](const Node* n) {
        auto it = need.find(n);
        return it != need.end() && it->second;
    };
    // A node's input gradient lives until every parent has summed it into its own output
    // gradient; then it goes, so a step holds the frontier of gradients, not all of them
    // (listener counting, run backwards). Entry nodes keep theirs: they are the result.
    auto releaseSpentChildren = [](const Node& n) {
        for (const Edge& e : n.fwds()) {
            Node* c = e.node;
            if (c->bwdVisited && !c->bwds().empty() && allParentsRan(*c)) c->releaseInputGrads();
        }
    };
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Node* n = *it;
        // Once n's backward has run (or is not needed), what n kept for it goes.
        auto releaseSaved = [&options](Node& node) {
            if (options.release && options.release(node)) node.releaseSaved();
        };
        if (!isNeeded(n)) {
            if (n->hasOutGrad()) n->buildOutGrad({}); // drop contributions nobody will use
            n->bwdVisited = true;
            releaseSaved(*n);
            releaseSpentChildren(*n);
            continue;
        }
        bool parentsNeed = n->bwds().empty() && options.updGrad;
        for (const Edge& e : n->bwds()) parentsNeed = parentsNeed || isNeeded(e.node);
        try {
            std::optional<Tensors> g = given ? given(*n) : std::nullopt;
            const Tensors outGrad = g ? std::move(*g) : n->buildOutGrad({});
            n->updateGrad(outGrad, options.updParamGrads, parentsNeed, options.scale,
                          summing.count(&n->module()) ? 1.0f : options.momentum);
        } catch (const Error&) {
            if (!options.where) throw;
            rethrowWithContext(options.where(*n));
        }
        n->bwdVisited = true;
        releaseSaved(*n);
        releaseSpentChildren(*n);
    }
}

} // namespace tessera::exec
