#include "modules/RNN.h"

#include <cmath>

#include "modules/Init.h"

namespace tessera {

namespace {
constexpr std::pair<RnnMode, const char*> kModes[] = {
    {RnnMode::relu, "relu"}, {RnnMode::tanh, "tanh"}, {RnnMode::lstm, "lstm"}, {RnnMode::gru, "gru"}};

std::string suffix(int64_t layer, int64_t dir) { return "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : ""); }

// [A, B, C] -> [B, A, C] (time-major <-> batch-major), on x's device.
Tensor swap01(const Tensor& x) {
    const Shape& s = x.shape();
    Tensor y = Tensor::empty({s[1], s[0], s[2]}, DType::float32, x.device());
    backendOf(y).permute(x, {1, 0, 2}, y);
    return y;
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
    for (auto* v : {&layerIn_, &layerOut_, &hN_, &cN_, &h0_, &c0_, &workspace_}) v->resize(L);
}

RnnParams RNN::paramsOf() const { return {options_.mode, directions(), hsize_}; }

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
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    const char* layout = options_.batchFirst ? "[N, T, " : "[T, N, ";
    if (s.rank() != 3 || s[2] != insize_) {
        throw shapeError("expects input " + std::string(layout) + std::to_string(insize_) + "], got " + s.str());
    }
}

Shapes RNN::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& s = inShapes[0];
    const int64_t features = directions() * hsize_;
    if (!options_.getSequences) return {Shape{options_.batchFirst ? s[0] : s[1], features}};
    return {Shape{s[0], s[1], features}};
}

Shapes RNN::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

std::vector<Tensor*> RNN::keptTensors() {
    std::vector<Tensor*> kept;
    for (auto* v : {&layerIn_, &layerOut_, &hN_, &cN_, &h0_, &c0_, &workspace_}) {
        for (Tensor& t : *v) kept.push_back(&t);
    }
    return kept;
}

Tensors RNN::updateData(const Tensors& data) {
    Tensor cur = options_.batchFirst ? swap01(data[0]) : data[0];
    const int64_t T = cur.shape()[0], N = cur.shape()[1], D = directions();
    Backend& be = backendOf(cur);
    const RnnParams p = paramsOf();
    const bool lstm = options_.mode == RnnMode::lstm;
    const bool keep = isTrain();
    for (Tensor* t : keptTensors()) *t = Tensor(); // nothing from an earlier forward survives
    for (int64_t k = 0; k < options_.layers; ++k) {
        const auto i = static_cast<size_t>(k);
        Tensor y = Tensor::empty({T, N, D * hsize_}, DType::float32, cur.device());
        Tensor h0 = Tensor::zeros({D, N, hsize_}, DType::float32, cur.device());
        Tensor c0 = lstm ? Tensor::zeros({D, N, hsize_}, DType::float32, cur.device()) : Tensor();
        Tensor hN = Tensor::empty({D, N, hsize_}, DType::float32, cur.device());
        Tensor cN = lstm ? Tensor::empty({D, N, hsize_}, DType::float32, cur.device()) : Tensor();
        Tensor ws;
        be.rnnForward(p, weightsOf(k), cur, h0, c0, keep, y, hN, cN, ws);
        if (keep) {
            layerIn_[i] = cur;
            layerOut_[i] = y;
            hN_[i] = hN;
            cN_[i] = cN;
            h0_[i] = h0;
            c0_[i] = c0;
            workspace_[i] = ws;
        }
        cur = y;
    }
    if (options_.getSequences) return {options_.batchFirst ? swap01(cur) : cur};
    const int64_t width = N * D * hsize_;
    Tensor last = Tensor::empty({N, D * hsize_}, DType::float32, cur.device());
    be.copyStrided(cur, (T - 1) * width, width, last, 0, width, 1, width);
    return {last};
}

Tensors RNN::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    if (!workspace_[0].defined()) {
        throw moduleError("backward needs a forward in train mode (the recurrent primitives keep a workspace)");
    }
    const Tensor& x0 = layerIn_[0];
    const int64_t T = x0.shape()[0], N = x0.shape()[1], D = directions();
    Backend& be = backendOf(x0);
    const bool lstm = options_.mode == RnnMode::lstm;
    // The gradient of the last layer's whole output sequence.
    Tensor dy;
    if (options_.getSequences) {
        dy = options_.batchFirst ? swap01(grad[0].plain()) : grad[0].plain();
    } else {
        const int64_t width = N * D * hsize_;
        dy = Tensor::zeros({T, N, D * hsize_}, DType::float32, x0.device());
        be.copyStrided(grad[0].plain(), 0, width, dy, (T - 1) * width, width, 1, width);
    }
    const RnnParams p = paramsOf();
    for (int64_t k = options_.layers - 1; k >= 0; --k) {
        const auto i = static_cast<size_t>(k);
        const Tensor& in = layerIn_[i];
        Tensor dx = Tensor::empty(in.shape(), DType::float32, in.device());
        Tensor dh0 = Tensor::empty({D, N, hsize_}, DType::float32, in.device());
        Tensor dc0 = lstm ? Tensor::empty({D, N, hsize_}, DType::float32, in.device()) : Tensor();
        Tensor dhN = Tensor::zeros({D, N, hsize_}, DType::float32, in.device());
        Tensor dcN = lstm ? Tensor::zeros({D, N, hsize_}, DType::float32, in.device()) : Tensor();
        RnnWeights g;
        const RnnWeights w = weightsOf(k);
        for (size_t dir = 0; dir < w.wIh.size(); ++dir) {
            g.wIh.push_back(Tensor::empty(w.wIh[dir].shape(), DType::float32, in.device()));
            g.wHh.push_back(Tensor::empty(w.wHh[dir].shape(), DType::float32, in.device()));
            g.bIh.push_back(Tensor::empty(w.bIh[dir].shape(), DType::float32, in.device()));
            g.bHh.push_back(Tensor::empty(w.bHh[dir].shape(), DType::float32, in.device()));
        }
        be.rnnBackward(p, w, in, h0_[i], c0_[i], layerOut_[i], hN_[i], cN_[i], dy, dhN, dcN, workspace_[i], dx, dh0,
                       dc0, g);
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
    }
    if (!updGrad) return {};
    return {options_.batchFirst ? swap01(dy) : dy};
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
    }
    return use;
}

Blueprint RNN::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("insize", insize_);
    bp.scheme.emplace_back("hsize", hsize_);
    bp.scheme.emplace_back("layers", options_.layers);
    bp.scheme.emplace_back("mode", tessera::str(options_.mode));
    bp.scheme.emplace_back("bidirectional", options_.bidirectional);
    bp.scheme.emplace_back("getSequences", options_.getSequences);
    bp.scheme.emplace_back("batchFirst", options_.batchFirst);
    return bp;
}

} // namespace tessera
