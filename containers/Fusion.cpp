#include "containers/Fusion.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/ConvND.h"
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

// m as an activation `source` can run inside its own forward: a ReLU, or another kind the
// source takes now (both in eval mode: a Linear's GEMM post-op).
// `train`: the mode assumed for both (a plan's), else their own.
Activation* activationFor(FusedRelu& source, Module& m, std::optional<bool> train) {
    auto* a = dynamic_cast<Activation*>(&m);
    if (!a) return nullptr;
    if (a->kind() == ActivationKind::relu) return a;
    const auto* s = dynamic_cast<const Module*>(&source);
    const bool t = train.value_or(a->isTrain() || (s && s->isTrain()));
    return !t && source.takesActivation(a->params(), t) ? a : nullptr;
}
} // namespace

void setFusion(bool on) { enabled().store(on); }
bool fusionEnabled() { return enabled().load(); }

namespace fusion {

std::vector<Pair> pairsOf(const Graph& graph, std::optional<bool> train) {
    std::vector<Pair> pairs;
    if (!fusionEnabled() || Module::checkNumerics()) return pairs;
    for (Node* n : graph.order()) {
        auto* source = dynamic_cast<FusedRelu*>(&n->module());
        if (!source || n->sharesModule() || n->fwds().size() != 1) continue;
        bool isOutput = false;
        for (const NodePtr& o : graph.outputs()) isOutput = isOutput || o.get() == n;
        if (isOutput) continue;
        Node* c = n->fwds()[0].node;
        Activation* relu = activationFor(*source, c->module(), train);
        if (!relu || c->sharesModule() || c->bwds().size() != 1) continue;
        const std::vector<int>& slots = c->bwds()[0].slots;
        if (!(slots.empty() || (slots.size() == 1 && slots[0] == 0))) continue;
        pairs.push_back({source, relu});
    }
    return pairs;
}

std::vector<NormSum> normSumsOf(const Graph& graph) {
    std::vector<NormSum> sums;
    if (!fusionEnabled()) return sums;
    std::unordered_set<const Node*> outputs, taken;
    for (const NodePtr& o : graph.outputs()) outputs.insert(o.get());
    for (Node* n : graph.order()) {
        auto* norm = dynamic_cast<SumFusedNorm*>(&n->module());
        if (!norm || n->sharesModule() || outputs.count(n) || n->fwds().size() != 1) continue;
        Node* a = n->fwds()[0].node;
        auto* sum = dynamic_cast<Add*>(&a->module());
        if (!sum || a->sharesModule() || !sum->plainSum() || taken.count(a)) continue;
        int slot = -1, inputs = 0;
        for (const Edge& e : a->bwds()) {
            if (e.node == n && e.slots.size() == 1) slot = inputs;
            if (e.node == n && e.slots.size() != 1) slot = -2; // the sum takes it twice
            inputs += static_cast<int>(e.slots.size());
        }
        if (inputs != 2 || slot < 0) continue;
        taken.insert(a);
        sums.push_back({norm, sum, slot});
    }
    return sums;
}

namespace {
// The fold of conv into the module `m` consuming it alone, if it can take it.
std::optional<ConvNorm> foldOf(Module& conv, Module& m) {
    auto* c = dynamic_cast<ConvND*>(&conv);
    auto* norm = dynamic_cast<ConvFoldedNorm*>(&m);
    if (!c || !norm || !c->canFold(*norm) || !m.weightsPacked()) return std::nullopt;
    return ConvNorm{c, norm};
}
} // namespace

std::vector<ConvNorm> foldsOf(const Graph& graph) {
    std::vector<ConvNorm> folds;
    if (!fusionEnabled()) return folds;
    std::unordered_set<const Node*> outputs;
    for (const NodePtr& o : graph.outputs()) outputs.insert(o.get());
    for (Node* n : graph.order()) {
        if (n->sharesModule() || outputs.count(n) || n->fwds().size() != 1) continue;
        Node* c = n->fwds()[0].node;
        if (c->sharesModule() || c->bwds().size() != 1) continue;
        const std::vector<int>& slots = c->bwds()[0].slots;
        if (!(slots.empty() || (slots.size() == 1 && slots[0] == 0))) continue;
        if (const std::optional<ConvNorm> f = foldOf(n->module(), c->module())) folds.push_back(*f);
    }
    return folds;
}

std::vector<ConvNorm> foldsOf(const Sequential& seq) {
    std::vector<ConvNorm> folds;
    if (!fusionEnabled()) return folds;
    const auto children = seq.namedChildren();
    for (size_t i = 0; i + 1 < children.size(); ++i) {
        if (const std::optional<ConvNorm> f = foldOf(*children[i].second, *children[i + 1].second)) folds.push_back(*f);
    }
    return folds;
}

std::vector<ConvNorm> evalOnly(std::vector<ConvNorm> folds) {
    std::erase_if(
        folds, [](const ConvNorm& f) { return f.conv->isTrain() || dynamic_cast<const Module*>(f.norm)->isTrain(); });
    return folds;
}

std::vector<Pair> pairsOf(const Sequential& seq, std::optional<bool> train) {
    std::vector<Pair> pairs;
    if (!fusionEnabled() || Module::checkNumerics()) return pairs;
    const auto children = seq.namedChildren(); // each module once (Sequential refuses repeats)
    for (size_t i = 0; i + 1 < children.size(); ++i) {
        auto* source = dynamic_cast<FusedRelu*>(children[i].second);
        Activation* act = source ? activationFor(*source, *children[i + 1].second, train) : nullptr;
        if (act) pairs.push_back({source, act});
    }
    return pairs;
}

namespace {
// Sets a pair up (`on`) or clears it: a ReLU through setFuseRelu, another kind through
// setFuseActivation.
void setPair(const Pair& p, bool on) {
    if (p.activation->kind() == ActivationKind::relu) {
        p.source->setFuseRelu(on);
    } else {
        p.source->setFuseActivation(on ? &p.activation->params() : nullptr);
    }
    p.activation->setFusedInto(on ? p.source : nullptr);
}
} // namespace

Scope::Scope(std::vector<Pair> pairs, std::vector<NormSum> sums, std::vector<ConvNorm> folds)
    : pairs_(std::move(pairs)), sums_(std::move(sums)), folds_(std::move(folds)) {
    for (const ConvNorm& f : folds_) {
        f.conv->setFoldedNorm(f.norm);
        f.norm->setFoldIntoConv(true);
    }
    for (const Pair& p : pairs_) setPair(p, true);
    for (const NormSum& s : sums_) {
        s.norm->setFuseIntoSum(true, s.sum->fuseRelu());
        s.sum->setFusedNorm(s.norm, s.slot);
    }
}

Scope::~Scope() {
    for (const Pair& p : pairs_) setPair(p, false);
    for (const NormSum& s : sums_) {
        s.norm->setFuseIntoSum(false, false);
        s.sum->setFusedNorm(nullptr, 0);
    }
    for (const ConvNorm& f : folds_) {
        f.conv->setFoldedNorm(nullptr);
        f.norm->setFoldIntoConv(false);
    }
}

} // namespace fusion
} // namespace tessera
