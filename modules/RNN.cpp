#include "modules/RNN.h"

#include <cmath>
#include <functional>
#include <map>
#include <tuple>

#include "modules/AxisUtil.h"
#include "modules/Init.h"

namespace tessera {

namespace {
constexpr std::pair<RnnMode, const char*> kModes[] = {
    {RnnMode::relu, "relu"}, {RnnMode::tanh, "tanh"}, {RnnMode::lstm, "lstm"}, {RnnMode::gru, "gru"}};

std::string suffix(int64_t layer, int64_t dir) { return "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : ""); }

using axis::swap01;

// Layer k's rows [k D, (k + 1) D) of a state tensor [layers D, N, H] (undefined stays so).
Tensor layerRows(const Tensor& t, int64_t k, int64_t D) { return t.defined() ? t.slice(k * D, (k + 1) * D) : t; }
// part [steps, members, C] <- full[t, members[j], :] for t < steps (full [>= steps, N, C]).
Tensor gatherRows(const Tensor& full, int64_t steps, const std::vector<int64_t>& members) {
    const int64_t N = full.shape()[1], C = full.shape()[2], n = static_cast<int64_t>(members.size());
    Tensor part = Tensor::empty({steps, n, C}, DType::float32, full.device());
    Backend& be = backendOf(full);
    for (int64_t j = 0; j < n; ++j) {
        be.copyStrided(full, members[static_cast<size_t>(j)] * C, N * C, part, j * C, n * C, steps, C);
    }
    return part;
}

// full[t, members[j], :] <- part[t, j, :] for t < part's steps.
void scatterRows(const Tensor& part, const std::vector<int64_t>& members, const Tensor& full) {
    const int64_t N = full.shape()[1], C = full.shape()[2], n = static_cast<int64_t>(members.size());
    Backend& be = backendOf(full);
    for (int64_t j = 0; j < n; ++j) {
        be.copyStrided(part, j * C, n * C, full, members[static_cast<size_t>(j)] * C, N * C, part.shape()[0], C);
    }
}

// The groups' workspaces one after another (each starting on a 256-byte boundary, as cuDNN wants its reserve space) and
// where each starts: int32 [groups + 1] on the host.
std::pair<Tensor, Tensor> concatenate(const std::vector<Tensor>& parts) {
    std::vector<int32_t> offsets{0};
    for (const Tensor& t : parts) offsets.push_back(offsets.back() + static_cast<int32_t>((t.numel() + 63) / 64 * 64));
    Tensor all = Tensor::empty({offsets.back()}, DType::int32, parts.at(0).device());
    for (size_t k = 0; k < parts.size(); ++k) {
        backendOf(all).copyStrided(parts[k], 0, 0, all, offsets[k], 0, 1, parts[k].numel());
    }
    return {all, Tensor::fromVector({static_cast<int64_t>(offsets.size())}, offsets)};
}

RnnWeights emptyLike(const RnnWeights& w) {
    RnnWeights g;
    for (size_t dir = 0; dir < w.wIh.size(); ++dir) {
        for (auto [from, to] : {std::pair{&w.wIh, &g.wIh}, {&w.wHh, &g.wHh}, {&w.bIh, &g.bIh}, {&w.bHh, &g.bHh}}) {
            to->push_back(Tensor::empty((*from)[dir].shape(), DType::float32, (*from)[dir].device()));
        }
    }
    return g;
}

// sum += part, tensor by tensor.
void addInto(const RnnWeights& part, const RnnWeights& sum) {
    for (size_t dir = 0; dir < part.wIh.size(); ++dir) {
        for (auto [from, to] :
             {std::pair{&part.wIh, &sum.wIh}, {&part.wHh, &sum.wHh}, {&part.bIh, &sum.bIh}, {&part.bHh, &sum.bHh}}) {
            backendOf((*to)[dir]).axpby(1.0f, (*from)[dir], 1.0f, (*to)[dir]);
        }
    }
}
} // namespace

std::string str(RnnMode mode) {
    for (auto [m, n] : kModes) {
        if (m == mode) return n;
    }
    return "?";
}

RnnMode rnnModeFromString(const std::string& name) {
    std::string known;
    for (auto [m, n] : kModes) {
        if (name == n) return m;
        known += (known.empty() ? "" : ", ") + std::string(n);
    }
    throw ModuleError("unknown RNN mode '" + name + "'; expected one of: " + known);
}

RNN::RNN(int64_t insize, int64_t hsize, const RNNOptions& options)
    : Module(options.name), insize_(insize), hsize_(hsize), options_(options) {
    if (insize <= 0 || hsize <= 0 || options.layers <= 0) {
        throw ModuleError("RNN: insize, hsize and layers must be positive, got " + std::to_string(insize) + ", " +
                          std::to_string(hsize) + " and " + std::to_string(options.layers));
    }
    // A bound that no real stack reaches, so a damaged blueprint cannot make one that takes
    // forever to build (each layer's weights are made here).
    if (options.layers > kMaxRnnLayers) {
        throw ModuleError("RNN: layers must be at most " + std::to_string(kMaxRnnLayers) + ", got " +
                          std::to_string(options.layers));
    }
    if (!options.linearBeforeReset && options.mode != RnnMode::gru) {
        throw ModuleError("RNN: linearBeforeReset false is a GRU's option, not " + tessera::str(options.mode) + "'s");
    }
    if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
        throw ModuleError("RNN: dropout must be in [0, 1), got " + std::to_string(options.dropout));
    }
    const int64_t G = rnnGates(options.mode), D = directions();
    const float bound = 1.0f / std::sqrt(static_cast<float>(hsize));
    for (int64_t k = 0; k < options.layers; ++k) {
        const int64_t in = k == 0 ? insize : D * hsize;
        for (int64_t dir = 0; dir < D; ++dir) {
            for (const auto& [name, shape] : {std::pair<std::string, Shape>{"weight_ih", Shape{G * hsize, in}},
                                              {"weight_hh", Shape{G * hsize, hsize}},
                                              {"bias_ih", Shape{G * hsize}},
                                              {"bias_hh", Shape{G * hsize}}}) {
                Tensor t = Tensor::empty(shape);
                initTensor(t, InitScheme::uniform, in, hsize, bound);
                setVar(name + suffix(k, dir), Variable::of(t));
            }
        }
    }
    const auto L = static_cast<size_t>(options.layers);
    for (auto* v : {&layerIn_, &layerOut_, &hN_, &cN_, &h0_, &c0_, &workspace_, &wsOffsets_, &masks_}) v->resize(L);
    // After the weights, so that dropout leaves the initial weights of a seeded build alone.
    if (options.dropout > 0.0f) gen_.manualSeed(resolveSeed(options.seed));
}

RnnParams RNN::paramsOf() const { return {options_.mode, directions(), hsize_, options_.linearBeforeReset}; }

RnnWeights RNN::weightsOf(int64_t layer) const {
    RnnWeights w;
    for (int64_t dir = 0; dir < directions(); ++dir) {
        w.wIh.push_back(getVar("weight_ih" + suffix(layer, dir))->data);
        w.wHh.push_back(getVar("weight_hh" + suffix(layer, dir))->data);
        w.bIh.push_back(getVar("bias_ih" + suffix(layer, dir))->data);
        w.bHh.push_back(getVar("bias_hh" + suffix(layer, dir))->data);
    }
    return w;
}

void RNN::checkDataShape(const Shapes& inShapes) const {
    const int64_t states = options_.initialStates ? stateCount() : 0;
    requireCount(inShapes, static_cast<size_t>(1 + states + (options_.lengths ? 1 : 0)), "input");
    const Shape& s = inShapes[0];
    const char* layout = options_.batchFirst ? "[N, T, " : "[T, N, ";
    if (s.rank() != 3 || s[2] != insize_) {
        throw shapeError("expects input " + std::string(layout) + std::to_string(insize_) + "], got " + s.str());
    }
    const int64_t N = options_.batchFirst ? s[0] : s[1];
    const Shape state{options_.layers * directions(), N, hsize_};
    for (int64_t k = 0; k < states; ++k) {
        const Shape& h = inShapes[static_cast<size_t>(1 + k)];
        if (h != state) {
            throw shapeError(std::string(k == 0 ? "initial hidden state" : "initial cell state") + " (input " +
                             std::to_string(1 + k) + ") must be [layers D, N, hsize] = " + state.str() + ", got " +
                             h.str());
        }
    }
    if (options_.lengths && inShapes.back() != Shape{N}) {
        throw shapeError("lengths (input " + std::to_string(inShapes.size() - 1) + ") must be [N] = " + Shape{N}.str() +
                         ", got " + inShapes.back().str());
    }
}

void RNN::checkDataType(const std::vector<DType>& dtypes) const {
    for (size_t i = 0; i < dtypes.size(); ++i) {
        const bool lengths = options_.lengths && i + 1 == dtypes.size();
        const DType want = lengths ? DType::int32 : DType::float32;
        if (dtypes[i] != want) {
            throw shapeError(std::string(lengths ? "lengths" : "input ") + (lengths ? "" : std::to_string(i)) +
                             " has dtype " + tessera::str(dtypes[i]) + ", expected " + tessera::str(want));
        }
    }
}

Shapes RNN::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& s = inShapes[0];
    const int64_t features = directions() * hsize_, N = options_.batchFirst ? s[0] : s[1];
    Shapes out{options_.getSequences ? Shape{s[0], s[1], features} : Shape{N, features}};
    if (options_.finalStates) {
        for (int64_t k = 0; k < stateCount(); ++k) out.push_back(Shape{options_.layers * directions(), N, hsize_});
    }
    return out;
}

Shapes RNN::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

std::vector<Tensor*> RNN::keptTensors() {
    std::vector<Tensor*> kept;
    for (auto* v : {&layerIn_, &layerOut_, &hN_, &cN_, &h0_, &c0_, &workspace_, &wsOffsets_, &masks_}) {
        for (Tensor& t : *v) kept.push_back(&t);
    }
    return kept;
}

std::vector<RNN::Group> RNN::groupsOf(const Tensors& data, int64_t T) const {
    if (!options_.lengths) return {};
    const std::vector<int32_t> lengths = data.back().toVector<int32_t>();
    std::map<int64_t, std::vector<int64_t>, std::greater<>> byLength;
    for (size_t n = 0; n < lengths.size(); ++n) {
        if (lengths[n] < 1 || lengths[n] > T) {
            throw shapeError("lengths[" + std::to_string(n) + "] = " + std::to_string(lengths[n]) + " is outside [1, " +
                             std::to_string(T) + "] (T, the steps of the input)");
        }
        byLength[lengths[n]].push_back(static_cast<int64_t>(n));
    }
    std::vector<Group> groups;
    for (auto& [steps, members] : byLength) groups.push_back({steps, std::move(members)});
    return groups;
}

void RNN::layerForward(int64_t layer, const std::vector<Group>& groups, const Tensor& x, const Tensor& h0,
                       const Tensor& c0, const Tensor& y, const Tensor& hN, const Tensor& cN, bool keep) {
    Backend& be = backendOf(x);
    const RnnParams p = paramsOf();
    const RnnWeights w = weightsOf(layer);
    const auto i = static_cast<size_t>(layer);
    Tensor ws, offsets;
    if (groups.empty()) {
        be.rnnForward(p, w, x, h0, c0, keep, y, hN, cN, ws);
    } else {
        std::vector<Tensor> parts;
        for (const Group& g : groups) {
            const int64_t n = static_cast<int64_t>(g.members.size());
            const Tensor xg = gatherRows(x, g.steps, g.members), h0g = gatherRows(h0, h0.shape()[0], g.members);
            const Tensor c0g = c0.defined() ? gatherRows(c0, c0.shape()[0], g.members) : Tensor();
            const Tensor yg = Tensor::empty({g.steps, n, y.shape()[2]}, DType::float32, x.device());
            const Tensor hNg = Tensor::empty({hN.shape()[0], n, hsize_}, DType::float32, x.device());
            const Tensor cNg = cN.defined() ? Tensor::empty(hNg.shape(), DType::float32, x.device()) : Tensor();
            Tensor wsg;
            be.rnnForward(p, w, xg, h0g, c0g, keep, yg, hNg, cNg, wsg);
            scatterRows(yg, g.members, y);
            scatterRows(hNg, g.members, hN);
            if (cN.defined()) scatterRows(cNg, g.members, cN);
            parts.push_back(wsg);
        }
        if (keep) std::tie(ws, offsets) = concatenate(parts);
    }
    if (keep) {
        layerIn_[i] = x;
        layerOut_[i] = y;
        hN_[i] = hN;
        cN_[i] = cN;
        h0_[i] = h0;
        c0_[i] = c0;
        workspace_[i] = ws;
        wsOffsets_[i] = offsets;
    }
}

void RNN::lastSteps(const Tensor& seq, const std::vector<Group>& groups, const Tensor& last, bool toLast) {
    const int64_t T = seq.shape()[0], N = seq.shape()[1], F = seq.shape()[2];
    Backend& be = backendOf(seq);
    auto copy = [&](int64_t seqAt, int64_t lastAt, int64_t width) {
        if (toLast) {
            be.copyStrided(seq, seqAt, width, last, lastAt, width, 1, width);
        } else {
            be.copyStrided(last, lastAt, width, seq, seqAt, width, 1, width);
        }
    };
    if (groups.empty()) return copy((T - 1) * N * F, 0, N * F); // every sequence ends at T - 1
    for (const Group& g : groups) {
        for (int64_t n : g.members) copy(((g.steps - 1) * N + n) * F, n * F, F);
    }
}

Tensors RNN::updateData(const Tensors& data) {
    const Tensor x = options_.batchFirst ? swap01(data[0]) : data[0];
    const int64_t T = x.shape()[0], N = x.shape()[1], D = directions(), L = options_.layers;
    const bool lstm = options_.mode == RnnMode::lstm;
    const std::vector<Group> groups = groupsOf(data, T);
    for (Tensor* t : keptTensors()) *t = Tensor(); // nothing from an earlier forward survives
    const Shape stateShape{L * D, N, hsize_};
    const Tensor zeros = options_.initialStates ? Tensor() : Tensor::zeros(stateShape, DType::float32, x.device());
    const Tensor h0 = options_.initialStates ? data[1] : zeros;
    const Tensor c0 = !lstm ? Tensor() : options_.initialStates ? data[2] : zeros;
    const Tensor hN = Tensor::empty(stateShape, DType::float32, x.device());
    const Tensor cN = lstm ? Tensor::empty(stateShape, DType::float32, x.device()) : Tensor();
    auto layerOf = [D](const Tensor& t, int64_t k) { return layerRows(t, k, D); };
    Tensor cur = x;
    for (int64_t k = 0; k < L; ++k) {
        const Shape yShape{T, N, D * hsize_};
        // With lengths, the steps past a sequence's end stay zero.
        const Tensor y = groups.empty() ? Tensor::empty(yShape, DType::float32, x.device())
                                        : Tensor::zeros(yShape, DType::float32, x.device());
        layerForward(k, groups, cur, layerOf(h0, k), layerOf(c0, k), y, layerOf(hN, k), layerOf(cN, k), isTrain());
        cur = y;
        if (isTrain() && options_.dropout > 0.0f && k + 1 < L) { // the next layer reads a dropped-out copy
            const auto i = static_cast<size_t>(k);
            masks_[i] = Tensor::empty(yShape, DType::float32, x.device());
            cur = Tensor::empty(yShape, DType::float32, x.device());
            backendOf(y).dropoutForward(y, options_.dropout, gen_, masks_[i], cur);
        }
    }
    Tensors out;
    if (options_.getSequences) {
        out.push_back(options_.batchFirst ? swap01(cur) : cur);
    } else {
        Tensor last = Tensor::empty({N, D * hsize_}, DType::float32, cur.device());
        lastSteps(cur, groups, last, true);
        out.push_back(last);
    }
    if (options_.finalStates) {
        out.push_back(hN);
        if (lstm) out.push_back(cN);
    }
    return out;
}

void RNN::layerBackward(int64_t layer, const std::vector<Group>& groups, const Tensor& dy, const Tensor& dhN,
                        const Tensor& dcN, const Tensor& dx, const Tensor& dh0, const Tensor& dc0,
                        const RnnWeights& g) {
    const auto i = static_cast<size_t>(layer);
    const Tensor &x = layerIn_[i], &y = layerOut_[i], &h0 = h0_[i], &c0 = c0_[i], &hN = hN_[i], &cN = cN_[i];
    Backend& be = backendOf(x);
    const RnnParams p = paramsOf();
    const RnnWeights w = weightsOf(layer);
    if (groups.empty()) {
        be.rnnBackward(p, w, x, h0, c0, y, hN, cN, dy, dhN, dcN, workspace_[i], dx, dh0, dc0, g);
        return;
    }
    be.fill(dx, 0.0f); // the steps past each sequence's end
    const std::vector<int32_t> offsets = wsOffsets_[i].toVector<int32_t>();
    const RnnWeights part = emptyLike(g);
    for (size_t k = 0; k < groups.size(); ++k) {
        const Group& grp = groups[k];
        const auto n = static_cast<int64_t>(grp.members.size());
        auto rows = [&](const Tensor& t, int64_t steps) { return t.defined() ? gatherRows(t, steps, grp.members) : t; };
        auto like = [&](const Tensor& t) {
            return t.defined() ? Tensor::empty(t.shape(), DType::float32, t.device()) : t;
        };
        const int64_t S = h0.shape()[0];
        const Tensor xg = rows(x, grp.steps), dxg = like(xg),
                     dh0g = Tensor::empty({S, n, hsize_}, DType::float32, x.device());
        const Tensor dc0g = c0.defined() ? like(dh0g) : Tensor();
        const RnnWeights& gg = k == 0 ? g : part;
        be.rnnBackward(p, w, xg, rows(h0, S), rows(c0, S), rows(y, grp.steps), rows(hN, S), rows(cN, S),
                       rows(dy, grp.steps), rows(dhN, S), rows(dcN, S), workspace_[i].slice(offsets[k], offsets[k + 1]),
                       dxg, dh0g, dc0g, gg);
        scatterRows(dxg, grp.members, dx);
        scatterRows(dh0g, grp.members, dh0);
        if (dc0.defined()) scatterRows(dc0g, grp.members, dc0);
        if (k > 0) addInto(part, g);
    }
}

Tensors RNN::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    if (!workspace_[0].defined()) {
        throw moduleError("backward needs a forward in train mode (the recurrent primitives keep a workspace)");
    }
    const Tensor& x0 = layerIn_[0];
    const int64_t T = x0.shape()[0], N = x0.shape()[1], D = directions(), L = options_.layers;
    const int64_t F = D * hsize_;
    Backend& be = backendOf(x0);
    const bool lstm = options_.mode == RnnMode::lstm;
    const std::vector<Group> groups = groupsOf(inDataList(), T);
    // The gradient of the last layer's whole output sequence.
    Tensor dy;
    if (options_.getSequences) {
        dy = options_.batchFirst ? swap01(grad[0].plain()) : grad[0].plain();
    } else {
        dy = Tensor::zeros({T, N, F}, DType::float32, x0.device());
        lastSteps(dy, groups, grad[0].plain(), false);
    }
    const Shape stateShape{L * D, N, hsize_};
    auto stateGrad = [&](size_t slot) { // the final states' gradients, zero when not outputs
        if (!options_.finalStates) return Tensor::zeros(stateShape, DType::float32, x0.device());
        return grad[slot].plain();
    };
    const Tensor dhN = stateGrad(1), dcN = lstm ? stateGrad(2) : Tensor();
    const Tensor dh0 = Tensor::empty(stateShape, DType::float32, x0.device());
    const Tensor dc0 = lstm ? Tensor::empty(stateShape, DType::float32, x0.device()) : Tensor();
    auto layerOf = [D](const Tensor& t, int64_t k) { return layerRows(t, k, D); };
    for (int64_t k = L - 1; k >= 0; --k) {
        const Tensor& in = layerIn_[static_cast<size_t>(k)];
        const Tensor dx = Tensor::empty(in.shape(), DType::float32, in.device());
        const RnnWeights w = weightsOf(k);
        const RnnWeights g = emptyLike(w);
        layerBackward(k, groups, dy, layerOf(dhN, k), layerOf(dcN, k), dx, layerOf(dh0, k), layerOf(dc0, k), g);
        if (updParamGrads && isTrain()) {
            for (int64_t dir = 0; dir < D; ++dir) {
                const auto di = static_cast<size_t>(dir);
                for (const auto& [name, t] : {std::pair<std::string, const Tensor*>{"weight_ih", &g.wIh[di]},
                                              {"weight_hh", &g.wHh[di]},
                                              {"bias_ih", &g.bIh[di]},
                                              {"bias_hh", &g.bHh[di]}}) {
                    be.axpby(scale, *t, momentum, getVar(name + suffix(k, dir))->grad);
                }
            }
        }
        dy = dx;
        if (k > 0 && masks_[static_cast<size_t>(k - 1)].defined()) { // through the dropout before layer k
            dy = Tensor::empty(dx.shape(), DType::float32, dx.device());
            be.mul(dx, masks_[static_cast<size_t>(k - 1)], dy);
        }
    }
    if (!updGrad) return {};
    Tensors out{options_.batchFirst ? swap01(dy) : dy};
    if (options_.initialStates) {
        out.push_back(dh0);
        if (lstm) out.push_back(dc0);
    }
    if (options_.lengths) out.push_back(Tensor()); // lengths have no gradient
    return out;
}

Tensors RNN::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

void RNN::accGradParams(const Tensors& grad, float scale, float momentum) {
    backwardFrom(grad, true, false, scale, momentum);
}

MemoryUse RNN::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                         Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (!train) return use;
    const Shape& s = inShapes[0];
    const int64_t T = options_.batchFirst ? s[1] : s[0], N = options_.batchFirst ? s[0] : s[1], D = directions();
    Backend& be = backendFor(device);
    const int64_t states = (options_.mode == RnnMode::lstm ? 4 : 2) * be.allocationBytes(D * N * hsize_ * 4);
    for (int64_t k = 0; k < options_.layers; ++k) {
        const int64_t in = k == 0 ? insize_ : D * hsize_;
        use.keptBytes +=
            be.allocationBytes(T * N * D * hsize_ * 4) + states + be.rnnWorkspaceBytes(paramsOf(), Shape{T, N, in});
        // With dropout, each layer but the last keeps its mask and the next layer's input.
        if (options_.dropout > 0.0f && k + 1 < options_.layers)
            use.keptBytes += 2 * be.allocationBytes(T * N * D * hsize_ * 4);
    }
    return use;
}

Blueprint RNN::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("insize", insize_);
    bp.scheme.emplace_back("hsize", hsize_);
    bp.scheme.emplace_back("layers", options_.layers);
    bp.scheme.emplace_back("mode", tessera::str(options_.mode));
    if (!options_.linearBeforeReset) bp.scheme.emplace_back("linearBeforeReset", false);
    bp.scheme.emplace_back("bidirectional", options_.bidirectional);
    bp.scheme.emplace_back("getSequences", options_.getSequences);
    bp.scheme.emplace_back("batchFirst", options_.batchFirst);
    bp.scheme.emplace_back("initialStates", options_.initialStates);
    bp.scheme.emplace_back("finalStates", options_.finalStates);
    bp.scheme.emplace_back("lengths", options_.lengths);
    if (options_.dropout > 0.0f) bp.scheme.emplace_back("dropout", static_cast<double>(options_.dropout));
    return bp;
}

} // namespace tessera
