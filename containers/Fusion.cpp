#include "containers/Fusion.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/FusedRelu.h"

namespace tessera {

namespace {
std::atomic<bool>& enabled() {
    static std::atomic<bool> on{[] {
        const char* v = std::getenv("TESSERA_FUSION");
        return !(v && std::strcmp(v, "0") == 0);
    }()};
    return on;
}

Activation* reluOf(Module& m) {
    auto* a = dynamic_cast<Activation*>(&m);
    return a && a->kind() == ActivationKind::relu ? a : nullptr;
}
} // namespace

void setFusion(bool on) { enabled().store(on); }
bool fusionEnabled() { return enabled().load(); }

namespace fusion {

std::vector<Pair> pairsOf(const Graph& graph) {
    std::vector<Pair> pairs;
    if (!fusionEnabled()) return pairs;
    for (Node* n : graph.order()) {
        auto* source = dynamic_cast<FusedRelu*>(&n->module());
        if (!source || n->sharesModule() || n->fwds().size() != 1) continue;
        bool isOutput = false;
        for (const NodePtr& o : graph.outputs()) isOutput = isOutput || o.get() == n;
        if (isOutput) continue;
        Node* c = n->fwds()[0].node;
        Activation* relu = reluOf(c->module());
        if (!relu || c->sharesModule() || c->bwds().size() != 1) continue;
        const std::vector<int>& slots = c->bwds()[0].slots;
        if (!(slots.empty() || (slots.size() == 1 && slots[0] == 0))) continue;
        pairs.push_back({source, relu});
    }
    return pairs;
}

std::vector<Pair> pairsOf(const Sequential& seq) {
    std::vector<Pair> pairs;
    if (!fusionEnabled()) return pairs;
    const auto children = seq.namedChildren(); // each module once (Sequential refuses repeats)
    for (size_t i = 0; i + 1 < children.size(); ++i) {
        auto* source = dynamic_cast<FusedRelu*>(children[i].second);
        Activation* relu = reluOf(*children[i + 1].second);
        if (source && relu) pairs.push_back({source, relu});
    }
    return pairs;
}

Scope::Scope(std::vector<Pair> pairs) : pairs_(std::move(pairs)) {
    for (const Pair& p : pairs_) {
        p.source->setFuseRelu(true);
        p.relu->setFusedInto(p.source);
    }
}

Scope::~Scope() {
    for (const Pair& p : pairs_) {
        p.source->setFuseRelu(false);
        p.relu->setFusedInto(nullptr);
    }
}

} // namespace fusion
} // namespace tessera
