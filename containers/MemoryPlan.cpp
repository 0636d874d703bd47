#include "containers/MemoryPlan.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "backend/Backend.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"

namespace tessera {
namespace {

// Buffers counted by reference; id -1 is storage from outside (inputs, given gradients).
// Sizes are counted as the device's allocator counts them (its size classes).
class Ledger {
public:
    explicit Ledger(const Backend& backend) : backend_(backend) {}
    int alloc(int64_t requested) {
        const int64_t bytes = backend_.allocationBytes(requested);
        bytes_.push_back(bytes);
        refs_.push_back(1);
        live_ += bytes;
        peak_ = std::max(peak_, live_);
        return static_cast<int>(bytes_.size()) - 1;
    }
    void ref(int id) {
        if (id >= 0) ++refs_[static_cast<size_t>(id)];
    }
    void unref(int id) {
        if (id >= 0 && --refs_[static_cast<size_t>(id)] == 0) live_ -= bytes_[static_cast<size_t>(id)];
    }
    int64_t bytes(int id) const { return id >= 0 ? bytes_[static_cast<size_t>(id)] : 0; }
    int64_t peak() const { return peak_; }
    void resetPeak() { peak_ = live_; }

private:
    const Backend& backend_;
    std::vector<int64_t> bytes_;
    std::vector<int> refs_;
    int64_t live_ = 0, peak_ = 0;
};

struct Value {
    int id = -1;
    Shape shape;
    Layout layout = Layout::plain;
    DType dtype = DType::float32;
};
using Values = std::vector<Value>;

// What one module (leaf or container) holds after its forward.
struct State {
    Values in, out;              // inData_ and data_ (references)
    int kept = -1;               // kept state
    int keptForBackward = -1;    // kept until the module's backward
    Values grad;                 // grad_ after a backward
    MemoryUse use;               // leaves only
    std::vector<DType> inDTypes; // leaves: the inputs' dtypes before any conversion
    bool takes = true;           // leaves: whether it took them as they came (Module::takes16Bit)
    std::vector<State> kids;     // containers: one per child (Sequential) or node (Graph, in order())
};

bool hasParams(Module& m) { return !m.namedParams().empty(); }

class Planner {
public:
    Planner(Ledger& ledger, Device device) : l_(ledger), device_(device) {}

    State forward(Module& m, const Values& ins, bool train) {
        if (auto* g = dynamic_cast<Graph*>(&m)) return forwardGraph(*g, ins, train);
        if (auto* s = dynamic_cast<Sequential*>(&m)) return forwardSequential(*s, ins, train);
        if (auto* p = dynamic_cast<Parallel*>(&m)) return forwardParallel(*p, ins, train);
        return forwardLeaf(m, ins, train);
    }

    // The module's input gradients (held in its state), from the output gradients `g`.
    void backward(Module& m, State& st, const Values& g, bool updGrad) {
        if (auto* gr = dynamic_cast<Graph*>(&m)) return backwardGraph(*gr, st, g, updGrad);
        if (auto* s = dynamic_cast<Sequential*>(&m)) return backwardSequential(*s, st, g, updGrad);
        if (auto* p = dynamic_cast<Parallel*>(&m)) return backwardParallel(*p, st, g, updGrad);
        backwardLeaf(m, st, g, updGrad);
    }

    void release(State& st) {
        for (const Value& v : st.in) l_.unref(v.id);
        for (const Value& v : st.out) l_.unref(v.id);
        l_.unref(st.kept);
        l_.unref(st.keptForBackward);
        releaseGrad(st);
        for (State& k : st.kids) release(k);
        st = State{};
    }
    void releaseGrad(State& st) {
        for (const Value& v : st.grad) l_.unref(v.id);
        st.grad.clear();
    }
    // Module::releaseSaved: all but the input gradient (a container's children lose theirs
    // too; the container holds its own references).
    void releaseSaved(State& st) {
        Values grad = std::move(st.grad);
        st.grad.clear();
        release(st);
        st.grad = std::move(grad);
    }

private:
    Value share(const Value& v) {
        l_.ref(v.id);
        return v;
    }

    // A copy of `v` (whose reference the caller holds) in `dtype` and `layout`.
    Value copyOf(const Value& v, DType dtype, Layout layout) {
        return {l_.alloc(Tensor::storageBytes(v.shape, dtype, layout)), v.shape, layout, dtype};
    }

    // What Module::runChecked and Module::backward hand a module: float32 copies of
    // 16-bit tensors where it does not take them, then plain copies where it does not
    // handle layouts. Each result holds a reference of its own.
    Values asSeen(Module& m, const Values& vs, bool takes) {
        Values out;
        for (const Value& v : vs) {
            Value cur = share(v);
            if (!takes && is16Bit(cur.dtype)) {
                const Value c = copyOf(cur, DType::float32, cur.layout);
                l_.unref(cur.id);
                cur = c;
            }
            if (!m.handlesLayouts() && cur.layout != Layout::plain) {
                const Value c = copyOf(cur, cur.dtype, Layout::plain);
                l_.unref(cur.id);
                cur = c;
            }
            out.push_back(cur);
        }
        return out;
    }

    // A call's transient buffers: counted at its moment, released at once.
    void scratch(int64_t bytes) {
        if (bytes > 0) l_.unref(l_.alloc(bytes));
    }

    State forwardLeaf(Module& m, const Values& ins, bool train) {
        State st;
        Shapes shapes;
        std::vector<Layout> layouts;
        std::vector<DType> seen;
        bool low = false;
        for (const Value& v : ins) {
            st.inDTypes.push_back(v.dtype);
            low = low || is16Bit(v.dtype);
        }
        if (low) { // placeholders of the inputs, for the module's choice
            ShapeOnlyTensors placeholders;
            Tensors ts;
            for (const Value& v : ins) ts.push_back(Tensor::empty(v.shape, v.dtype, device_, v.layout));
            st.takes = m.takes16Bit(ts);
        }
        st.in = asSeen(m, ins, st.takes);
        for (const Value& v : st.in) {
            shapes.push_back(v.shape);
            layouts.push_back(v.layout);
            seen.push_back(v.dtype);
        }
        st.use = m.memoryUse(shapes, layouts, train, device_);
        const Shapes outShapes = m.dataShapeFrom(shapes);
        const std::vector<DType> outTypes = m.outputDTypes(shapes, seen, device_);
        for (size_t o = 0; o < outShapes.size(); ++o) {
            const int view = st.use.outputViews.at(o);
            if (view >= 0) {
                const Value& src = st.in.at(static_cast<size_t>(view));
                st.out.push_back({src.id, outShapes[o], src.layout, src.dtype});
                l_.ref(src.id);
            } else {
                const Layout layout = st.use.outLayouts.at(o);
                st.out.push_back({l_.alloc(Tensor::storageBytes(outShapes[o], outTypes.at(o), layout)), outShapes[o],
                                  layout, outTypes.at(o)});
            }
        }
        // What is kept until backward: a float32 input's 16-bit conversion (none for inputs
        // that come in 16 bits), and what the module reserves whatever its inputs' dtypes.
        const bool lowIn = !seen.empty() && std::all_of(seen.begin(), seen.end(), is16Bit);
        if (st.use.keptBytes > 0) st.kept = l_.alloc(st.use.keptBytes);
        const int64_t untilBackward = (lowIn ? 0 : st.use.keptUntilBackwardBytes) + st.use.reservedUntilBackwardBytes;
        if (untilBackward > 0) st.keptForBackward = l_.alloc(untilBackward);
        scratch(st.use.forwardScratchBytes);
        return st;
    }

    void backwardLeaf(Module& m, State& st, const Values& g, bool updGrad) {
        const Values grads = asSeen(m, g, st.takes);
        releaseGrad(st);
        if (updGrad) {
            for (size_t i = 0; i < st.in.size(); ++i) {
                const int view = st.use.gradViews.at(i);
                Value gi;
                if (view >= 0) {
                    const Value& src = grads.at(static_cast<size_t>(view));
                    gi = share({src.id, st.in[i].shape, src.layout, src.dtype});
                } else {
                    gi = copyOf(st.in[i], st.in[i].dtype, st.in[i].layout);
                }
                // Module::backward: each input's gradient in that input's dtype.
                const DType want = st.inDTypes.at(i);
                if (gi.dtype != want) {
                    const Value c = copyOf(gi, want, want == DType::float16 ? Layout::plain : gi.layout);
                    l_.unref(gi.id);
                    gi = c;
                }
                st.grad.push_back(gi);
            }
            scratch(st.use.backwardScratchBytes);
        }
        for (const Value& v : grads) l_.unref(v.id);
        l_.unref(st.keptForBackward);
        st.keptForBackward = -1;
    }

    State forwardSequential(Sequential& s, const Values& ins, bool train) {
        State st;
        for (const Value& v : ins) st.in.push_back(share(v));
        const fusion::Scope fused(fusion::pairsOf(s, train), {},
                                  train ? std::vector<fusion::ConvNorm>{} : fusion::foldsOf(s));
        Values cur = ins;
        for (const auto& [name, child] : s.namedChildren()) {
            st.kids.push_back(forward(*child, cur, train));
            cur = st.kids.back().out;
        }
        for (const Value& v : cur) st.out.push_back(share(v));
        return st;
    }

    void backwardSequential(Sequential& s, State& st, const Values& g, bool updGrad) {
        const auto kids = s.namedChildren();
        Values cur = g;
        for (const Value& v : cur) l_.ref(v.id); // the loop's local copy
        for (size_t i = kids.size(); i-- > 0;) {
            backward(*kids[i].second, st.kids[i], cur, i > 0 || updGrad);
            for (const Value& v : cur) l_.unref(v.id);
            cur = st.kids[i].grad;
            for (const Value& v : cur) l_.ref(v.id);
            if (i + 1 < kids.size()) releaseGrad(st.kids[i + 1]);
            if (s.releasesInBackward()) releaseSaved(st.kids[i]);
        }
        releaseGrad(st);
        st.grad = cur; // the Sequential's grad_ takes the local's references
    }

    // Parallel::updateData: branch i runs on input i; the outputs are the branches' own.
    State forwardParallel(Parallel& p, const Values& ins, bool train) {
        State st;
        for (const Value& v : ins) st.in.push_back(share(v));
        size_t i = 0;
        for (const auto& [name, child] : p.namedChildren()) {
            st.kids.push_back(forward(*child, {ins.at(i++)}, train));
            st.out.push_back(share(st.kids.back().out.at(0)));
        }
        return st;
    }

    // Parallel::backwardFrom: each branch differentiates its gradient and keeps its input
    // gradient, which the Parallel's gradients are.
    void backwardParallel(Parallel& p, State& st, const Values& g, bool updGrad) {
        const auto kids = p.namedChildren();
        releaseGrad(st);
        for (size_t i = 0; i < kids.size(); ++i) {
            backward(*kids[i].second, st.kids[i], {g.at(i)}, updGrad);
            if (updGrad) st.grad.push_back(share(st.kids[i].grad.at(0)));
            if (p.releasesInBackward()) releaseSaved(st.kids[i]);
        }
    }

    State forwardGraph(Graph& gr, const Values& ins, bool train) {
        const fusion::Scope fused(fusion::pairsOf(gr, train), fusion::normSumsOf(gr),
                                  train ? std::vector<fusion::ConvNorm>{} : fusion::foldsOf(gr));
        State st;
        for (const Value& v : ins) st.in.push_back(share(v));
        const std::vector<Node*>& order = gr.order();
        std::unordered_map<const Node*, size_t> index, inputAt, remaining;
        std::unordered_set<const Node*> outputs;
        for (size_t i = 0; i < order.size(); ++i) index[order[i]] = i;
        for (size_t i = 0; i < gr.inputs().size(); ++i) inputAt[gr.inputs()[i].get()] = i;
        for (const NodePtr& o : gr.outputs()) outputs.insert(o.get());
        for (Node* n : order) {
            for (const Edge& e : n->fwds()) {
                if (index.count(e.node)) ++remaining[n];
            }
        }
        st.kids.resize(order.size());
        for (size_t i = 0; i < order.size(); ++i) {
            Node* n = order[i];
            Values in;
            auto at = inputAt.find(n);
            if (at != inputAt.end()) {
                in.push_back(ins.at(at->second));
            } else {
                for (const Edge& e : n->bwds()) {
                    for (int s : e.slots) in.push_back(st.kids[index.at(e.node)].out.at(static_cast<size_t>(s)));
                }
            }
            st.kids[i] = forward(n->module(), in, train);
            if (train) continue;
            for (const Edge& e : n->bwds()) { // Graph::updateData's release in eval mode
                if (--remaining[e.node] == 0 && !outputs.count(e.node)) release(st.kids[index.at(e.node)]);
            }
        }
        for (const NodePtr& o : gr.outputs()) {
            for (const Value& v : st.kids[index.at(o.get())].out) st.out.push_back(share(v));
        }
        return st;
    }

    void backwardGraph(Graph& gr, State& st, const Values& g, bool updGrad) {
        const std::vector<Node*>& order = gr.order();
        std::unordered_map<const Node*, size_t> index, unusedBy;
        for (size_t i = 0; i < order.size(); ++i) index[order[i]] = i;
        std::unordered_map<const Node*, Values> given;
        size_t k = 0;
        for (const NodePtr& o : gr.outputs()) {
            for (size_t s = 0; s < st.kids[index.at(o.get())].out.size(); ++s) given[o.get()].push_back(g.at(k++));
        }
        std::unordered_set<const Node*> outputs;
        for (const NodePtr& o : gr.outputs()) outputs.insert(o.get());
        // Graph::backwardFrom's release of what a node kept, once its backward has run.
        auto releaseSpent = [&](const Node* n) {
            if (gr.releasesInBackward() && !outputs.count(n)) releaseSaved(st.kids[index.at(n)]);
        };
        std::unordered_map<const Node*, bool> needed;
        for (Node* n : order) {
            bool need = hasParams(n->module()) || (n->bwds().empty() && updGrad);
            for (const Edge& e : n->bwds()) need = need || needed[e.node];
            needed[n] = need;
            unusedBy[n] = n->bwds().size();
        }
        // Per node and output slot: the gradient so far and whether the node owns it.
        std::unordered_map<const Node*, std::vector<std::pair<Value, bool>>> outGrad;
        auto releaseChildren = [&](const Node* n) {
            for (const Edge& e : n->fwds()) {
                auto c = unusedBy.find(e.node);
                if (c != unusedBy.end() && c->second > 0 && --c->second == 0) releaseGrad(st.kids[index.at(e.node)]);
            }
        };
        for (auto it = order.rbegin(); it != order.rend(); ++it) {
            Node* n = *it;
            State& ns = st.kids[index.at(n)];
            std::vector<std::pair<Value, bool>> pending = std::move(outGrad[n]);
            outGrad.erase(n);
            if (!needed[n]) {
                for (auto& [v, owned] : pending) l_.unref(v.id);
                releaseSpent(n);
                releaseChildren(n);
                continue;
            }
            Values gn;
            std::vector<int> zeros;
            auto giv = given.find(n);
            if (giv != given.end()) {
                gn = giv->second;
            } else {
                for (size_t s = 0; s < ns.out.size(); ++s) {
                    if (s < pending.size() && pending[s].first.shape.rank() > 0) {
                        gn.push_back(pending[s].first);
                    } else { // a slot nobody consumed: zeros
                        const Value& o = ns.out[s];
                        zeros.push_back(l_.alloc(Tensor::storageBytes(o.shape, DType::float32, Layout::plain)));
                        gn.push_back({zeros.back(), o.shape, Layout::plain, DType::float32});
                    }
                }
            }
            bool parentsNeed = n->bwds().empty() && updGrad;
            for (const Edge& e : n->bwds()) parentsNeed = parentsNeed || needed[e.node];
            backward(n->module(), ns, gn, parentsNeed);
            if (parentsNeed) { // routeInGrad: each parent sums what it is handed, by slot
                size_t j = 0;
                for (const Edge& e : n->bwds()) {
                    for (int s : e.slots) {
                        auto& slots = outGrad[e.node];
                        if (slots.size() <= static_cast<size_t>(s)) slots.resize(static_cast<size_t>(s) + 1);
                        auto& [acc, owned] = slots[static_cast<size_t>(s)];
                        const Value& add = ns.grad.at(j++);
                        if (acc.shape.rank() == 0) {
                            acc = share(add); // borrowed
                            continue;
                        }
                        if (!owned) {
                            const Value sum = copyOf(acc, acc.dtype, acc.layout);
                            l_.unref(acc.id);
                            acc = sum;
                            owned = true;
                        }
                        // axpby reorders an addend in another layout first: a copy for the call.
                        if (add.layout != acc.layout) {
                            l_.unref(l_.alloc(Tensor::storageBytes(add.shape, add.dtype, acc.layout)));
                        }
                    }
                }
            }
            for (auto& [v, owned] : pending) l_.unref(v.id);
            for (int z : zeros) l_.unref(z);
            releaseSpent(n);
            releaseChildren(n);
        }
        releaseGrad(st);
        if (updGrad) {
            for (const NodePtr& i : gr.inputs()) {
                for (const Value& v : st.kids[index.at(i.get())].grad) st.grad.push_back(share(v));
            }
        }
    }

    Ledger& l_;
    Device device_;
};

} // namespace

MemoryPlan planMemory(Module& model, const Shapes& inShapes, Device device) {
    model.dataShapeFrom(inShapes); // the model's own checks, with its errors
    Values ins;
    for (const Shape& s : inShapes) ins.push_back({-1, s, Layout::plain});
    MemoryPlan plan;
    const Backend& backend = backendFor(device);
    {
        Ledger l(backend);
        Planner p(l, device);
        State st = p.forward(model, ins, false);
        plan.inference = l.peak();
    }
    Ledger l(backend);
    Planner p(l, device);
    State st = p.forward(model, ins, true);
    plan.trainForward = l.peak();
    Values g;
    for (const Value& v : st.out) g.push_back({-1, v.shape, v.layout}); // the cost's gradient, from outside
    p.backward(model, st, g, false);
    plan.training = l.peak();
    return plan;
}

} // namespace tessera
