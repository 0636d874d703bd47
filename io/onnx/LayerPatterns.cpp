// The forms exporters write for layers ONNX has no one op for (or had none before opsets
// 17, 18 and 21), each read back as one layer at its last node:
// - Linear over the last axis of data of any rank: MatMul(x, W) -> Add(b);
// - SiLU: Sigmoid(x) -> Mul(x, that);
// - Mish: Softplus(x) -> Tanh -> Mul(x, that);
// - LayerNorm: ReduceMean(x) -> Sub(x, mean) -> Pow(d, 2) (or Mul(d, d)) -> ReduceMean ->
//   Add(eps) -> Sqrt -> Div(d, that), over the trailing axes, then Mul(weight) and
//   Add(bias) when their constants fit; without the first ReduceMean and the Sub, RMSNorm;
// - GroupNorm: Reshape(x, [N, G, -1]) -> InstanceNormalization(ones, zeros) -> Reshape back
//   (to Shape(x) or x's own dims), then a per-channel Mul and Add when they fit;
// - attention (no Attention op before opset 23): MatMul(q, Transpose(k)) (or an Einsum of
//   q and k), scaled, masked, Softmax, MatMul(v) (or an Einsum), as one
//   ScaledDotProductAttention (findAttention: Importer.h's AttentionMatch says which forms).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

#include "io/onnx/Importer.h"
#include "modules/Activation.h"
#include "modules/Attention.h"
#include "modules/Cast.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Transpose.h"

namespace tessera::onnx_io {

namespace {

// Producers, consumers and constants of a graph, for matching.
class Index {
public:
    Index(const onnx::GraphProto& g, const std::unordered_map<std::string, Constant>& constants)
        : g_(g), constants_(constants) {
        for (int i = 0; i < g.node_size(); ++i) {
            const onnx::NodeProto& n = g.node(i);
            for (const std::string& o : n.output()) producer_[o] = i;
            for (const std::string& in : n.input()) consumers_[in].push_back(i);
            if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value") {
                constantNodes_[n.output(0)] = &n.attribute(0).t();
            }
        }
        for (const onnx::ValueInfoProto& v : g.output()) consumers_[v.name()].push_back(-1); // a graph output
    }

    // The node producing `value`, or -1 (an input or a constant).
    int producer(const std::string& value) const {
        auto p = producer_.find(value);
        return p == producer_.end() ? -1 : p->second;
    }
    // The node producing `value` with op `op`, or -1.
    int from(const std::string& value, const char* op) const {
        auto p = producer_.find(value);
        return p != producer_.end() && g_.node(p->second).op_type() == op ? p->second : -1;
    }
    // The consumers of `value` (-1: a graph output).
    const std::vector<int>& users(const std::string& value) const {
        static const std::vector<int> none;
        auto c = consumers_.find(value);
        return c == consumers_.end() ? none : c->second;
    }
    // The one consumer of `value` when it has op `op`, or -1.
    int only(const std::string& value, const char* op) const {
        const std::vector<int>& u = users(value);
        return u.size() == 1 && u[0] >= 0 && g_.node(u[0]).op_type() == op ? u[0] : -1;
    }
    // A constant's value: an initializer, a Constant node, or an Identity of one (PyTorch
    // writes one initializer for equal ones, such as zero biases, and Identity nodes for the
    // others).
    std::optional<Constant> constant(const std::string& name) const {
        if (auto c = constants_.find(name); c != constants_.end()) return c->second;
        if (const int id = from(name, "Identity"); id >= 0 && g_.node(id).input_size() == 1) {
            return constant(g_.node(id).input(0));
        }
        if (auto c = constantNodes_.find(name); c != constantNodes_.end()) {
            try {
                return constantOf(*c->second, name);
            } catch (const Error&) {}
        }
        return std::nullopt;
    }
    // The float values of a constant, or nullopt.
    std::optional<std::vector<float>> floats(const std::string& name) const {
        std::optional<Constant> c = constant(name);
        if (!c || c->isInt || c->zeros || !c->tensor.defined()) return std::nullopt;
        return c->tensor.toVector<float>();
    }
    std::optional<float> scalar(const std::string& name) const {
        std::optional<std::vector<float>> v = floats(name);
        return v && v->size() == 1 ? std::optional<float>((*v)[0]) : std::nullopt;
    }
    std::optional<std::vector<int64_t>> ints(const std::string& name) const {
        std::optional<Constant> c = constant(name);
        if (!c || !c->isInt) return std::nullopt;
        return c->ints;
    }
    // Node n's other input when one of its two inputs is `value`, else "".
    std::string otherInput(int n, const std::string& value) const {
        const onnx::NodeProto& node = g_.node(n);
        if (node.input_size() != 2) return "";
        if (node.input(0) == value) return node.input(1);
        if (node.input(1) == value) return node.input(0);
        return "";
    }
    const onnx::NodeProto& node(int i) const { return g_.node(i); }

private:
    const onnx::GraphProto& g_;
    const std::unordered_map<std::string, Constant>& constants_;
    std::unordered_map<std::string, int> producer_;
    std::unordered_map<std::string, std::vector<int>> consumers_;
    std::unordered_map<std::string, const onnx::TensorProto*> constantNodes_;
};

// The axes a ReduceMean node reduces (attribute, or input 1 from opset 18), when it keeps them.
std::optional<std::vector<int64_t>> meanAxes(const Index& ix, int n) {
    const onnx::NodeProto& node = ix.node(n);
    const Attributes a(node);
    if (a.i("keepdims", 1) != 1) return std::nullopt;
    if (node.input_size() > 1 && !node.input(1).empty()) return ix.ints(node.input(1));
    std::vector<int64_t> axes = a.ints("axes");
    if (axes.empty()) return std::nullopt;
    return axes;
}

// The count k when `axes` are the last k dims, written from the end (-k .. -1, as
// exporters write them), else 0.
int64_t trailingCount(std::vector<int64_t> axes) {
    std::sort(axes.begin(), axes.end());
    const auto k = static_cast<int64_t>(axes.size());
    for (int64_t i = 0; i < k; ++i) {
        if (axes[static_cast<size_t>(i)] != i - k) return 0;
    }
    return k;
}

// True when `values` hold only `v`.
bool all(const std::vector<float>& values, float v) {
    return std::all_of(values.begin(), values.end(), [&](float x) { return x == v; });
}

// A constant operand that may be a LayerNorm's weight or bias over the last k dims (of
// rank k or less after its leading 1s) or a GroupNorm's per-channel one ([C, 1, ...]).
struct Operand {
    std::vector<int64_t> dims; // less leading 1s
    std::vector<float> values;
};
std::optional<Operand> operand(const Index& ix, const std::string& name) {
    std::optional<Constant> c = ix.constant(name);
    if (!c || c->isInt || c->zeros || !c->tensor.defined()) return std::nullopt;
    std::vector<int64_t> dims = c->dims;
    while (!dims.empty() && dims.front() == 1) dims.erase(dims.begin());
    return Operand{dims, c->tensor.toVector<float>()};
}

// The constant operand of an `op` node ("Mul", "Add") that is the one consumer of node
// `last`'s output, when `fits` takes it: `last` joins `nodes` and that node becomes `last`.
template <class Fits>
std::optional<Operand> follow(const Index& ix, const char* op, int& last, std::vector<int>& nodes, Fits fits) {
    const int next = ix.only(ix.node(last).output(0), op);
    if (next < 0) return std::nullopt;
    std::optional<Operand> o = operand(ix, ix.otherInput(next, ix.node(last).output(0)));
    if (!o || !fits(*o)) return std::nullopt;
    nodes.push_back(last);
    last = next;
    return o;
}

// Whether a Transpose node swaps the last two axes alone (perm 0, 1, ..., r - 1, r - 2).
bool swapsLastTwo(const onnx::NodeProto& t) {
    const std::vector<int64_t> perm = Attributes(t).ints("perm");
    const size_t r = perm.size();
    if (r < 2 || perm[r - 1] != static_cast<int64_t>(r - 2) || perm[r - 2] != static_cast<int64_t>(r - 1)) return false;
    for (size_t j = 0; j + 2 < r; ++j) {
        if (perm[j] != static_cast<int64_t>(j)) return false;
    }
    return true;
}

} // namespace

void Importer::findLayerPatterns() {
    const onnx::GraphProto& g = model_.graph();
    const Index ix(g, constants_);
    auto isData = [&](const std::string& v) { return !ix.constant(v).has_value(); };
    auto claim = [&](int last, std::function<ModulePtr()> make, const std::string& x,
                     const std::vector<int>& absorbed) {
        patternLayers_[last] = {std::move(make), {x}};
        for (int k : absorbed) absorbed_[k] = last;
    };
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& n = g.node(i);
        if (absorbed_.count(i) || patternLayers_.count(i) || gelus_.count(i)) continue;
        if (n.op_type() == "MatMul" && n.input_size() == 2 && isData(n.input(0))) { // Linear with a bias
            const std::string w = n.input(1);
            const int transpose = ix.from(w, "Transpose");
            const bool constantWeight =
                ix.constant(w).has_value() || (transpose >= 0 && ix.constant(ix.node(transpose).input(0)).has_value());
            const int plus = ix.only(n.output(0), "Add");
            if (!constantWeight || plus < 0) continue;
            const std::string b = ix.otherInput(plus, n.output(0));
            const std::optional<Operand> bias = operand(ix, b);
            if (!bias || bias->dims.size() != 1) continue;
            claim(plus,
                  [this, w, bias]() -> ModulePtr {
                      const Constant* c = constant(w); // a Transpose of a constant is folded by now
                      if (!c || c->isInt || !c->tensor.defined() || c->tensor.shape().rank() != 2) {
                          throw Unsupported{"a MatMul whose weight is not a constant matrix"};
                      }
                      const int64_t in = c->tensor.shape()[0], out = c->tensor.shape()[1];
                      if (static_cast<int64_t>(bias->values.size()) != out) {
                          throw Unsupported{"a bias of " + std::to_string(bias->values.size()) +
                                            " values after a MatMul of " + std::to_string(out) + " outputs"};
                      }
                      auto lin = std::make_shared<Linear>(in, out, LinearOptions{.initscheme = InitScheme::none});
                      lin->getVar("W")->data.copyFrom(c->tensor);
                      lin->getVar("b")->data.copyFrom(Tensor::fromVector({out}, bias->values));
                      return lin;
                  },
                  n.input(0), {i});
            continue;
        }
        if (n.op_type() == "Sigmoid" && n.input_size() == 1 && isData(n.input(0))) { // SiLU
            const int mul = ix.only(n.output(0), "Mul");
            if (mul >= 0 && ix.otherInput(mul, n.output(0)) == n.input(0)) {
                claim(mul, [] { return std::make_shared<Activation>(ActivationKind::silu); }, n.input(0), {i});
            }
            continue;
        }
        if (n.op_type() == "Softplus" && n.input_size() == 1 && isData(n.input(0))) { // Mish
            const int tanh = ix.only(n.output(0), "Tanh");
            const int mul = tanh >= 0 ? ix.only(ix.node(tanh).output(0), "Mul") : -1;
            if (mul >= 0 && ix.otherInput(mul, ix.node(tanh).output(0)) == n.input(0)) {
                claim(mul, [] { return std::make_shared<Activation>(ActivationKind::mish); }, n.input(0), {i, tanh});
            }
            continue;
        }
        if (n.op_type() == "Sqrt" && n.input_size() == 1) { // LayerNorm, RMSNorm
            const int add = ix.from(n.input(0), "Add");
            if (add < 0 || ix.users(n.input(0)).size() != 1) continue;
            const onnx::NodeProto& addNode = ix.node(add);
            const int var = ix.from(addNode.input(0), "ReduceMean") >= 0 ? ix.from(addNode.input(0), "ReduceMean")
                                                                         : ix.from(addNode.input(1), "ReduceMean");
            if (var < 0 || ix.users(ix.node(var).output(0)).size() != 1) continue;
            const std::optional<float> eps = ix.scalar(ix.otherInput(add, ix.node(var).output(0)));
            const std::optional<std::vector<int64_t>> axes = meanAxes(ix, var);
            if (!eps || !(*eps > 0.0f) || !axes) continue;
            const int64_t k = trailingCount(*axes);
            if (k == 0) continue;
            const std::string sq = ix.node(var).input(0);
            std::string d;
            int square = ix.from(sq, "Pow");
            if (square >= 0) {
                const std::optional<float> p = ix.scalar(ix.node(square).input(1));
                if (p && *p == 2.0f) d = ix.node(square).input(0);
            } else if ((square = ix.from(sq, "Mul")) >= 0 && ix.node(square).input(0) == ix.node(square).input(1)) {
                d = ix.node(square).input(0);
            }
            if (d.empty() || ix.users(sq).size() != 1 || !isData(d)) continue;
            const int div = ix.only(n.output(0), "Div");
            if (div < 0 || ix.node(div).input(0) != d || ix.node(div).input(1) != n.output(0)) continue;
            // LayerNorm when d = x - mean(x) over the same axes and used by the square and the division only.
            std::string x = d;
            std::vector<int> nodes{square, var, add, i};
            bool centred = false;
            const int sub = ix.from(d, "Sub");
            if (sub >= 0 && ix.users(d).size() == 2) {
                const int mean = ix.from(ix.node(sub).input(1), "ReduceMean");
                if (mean >= 0 && ix.node(mean).input(0) == ix.node(sub).input(0) && meanAxes(ix, mean) == axes &&
                    ix.users(ix.node(mean).output(0)).size() == 1) {
                    x = ix.node(sub).input(0);
                    centred = true;
                    nodes.insert(nodes.end(), {mean, sub});
                }
            }
            // Mul(weight) and Add(bias) after it, constants over at most the normalised dims.
            int last = div;
            auto fits = [k](const Operand& o) { return static_cast<int64_t>(o.dims.size()) <= k; };
            const std::optional<Operand> weight = follow(ix, "Mul", last, nodes, fits);
            const std::optional<Operand> bias = centred ? follow(ix, "Add", last, nodes, fits) : std::nullopt;
            const float epsilon = *eps;
            claim(
                last,
                [this, x, k, centred, weight, bias, epsilon]() -> ModulePtr {
                    std::vector<int64_t> shape; // x's last k dims, as the layers before it give them
                    auto it = shapes_.find(x);
                    if (it != shapes_.end() && static_cast<int64_t>(it->second.size()) >= k) {
                        for (size_t j = it->second.size() - static_cast<size_t>(k); j < it->second.size(); ++j) {
                            shape.push_back(it->second[j].value);
                        }
                    }
                    if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](int64_t v) { return v < 1; })) {
                        throw Unsupported{"the normalised dims of its input are not known"};
                    }
                    const int64_t D = Shape(shape).numel();
                    for (const std::optional<Operand>* o : {&weight, &bias}) {
                        if (*o && static_cast<int64_t>((*o)->values.size()) != D) {
                            throw Unsupported{"a constant " + Shape((*o)->dims).str() +
                                              " does not have the normalised shape " + Shape(shape).str()};
                        }
                    }
                    ModulePtr m;
                    if (centred) {
                        m = std::make_shared<LayerNorm>(shape, LayerNormOptions{.epsilon = epsilon,
                                                                                .affine = weight || bias,
                                                                                .useBias = bias.has_value()});
                    } else {
                        m = std::make_shared<RMSNorm>(shape,
                                                      RMSNormOptions{.epsilon = epsilon, .affine = weight.has_value()});
                    }
                    if (weight) m->getVar("weight")->data.copyFrom(Tensor::fromVector(Shape(shape), weight->values));
                    if (bias) m->getVar("bias")->data.copyFrom(Tensor::fromVector(Shape(shape), bias->values));
                    return m;
                },
                x, nodes);
            continue;
        }
        if (n.op_type() == "InstanceNormalization" && n.input_size() == 3) { // GroupNorm
            const int before = ix.from(n.input(0), "Reshape");
            const int after = ix.only(n.output(0), "Reshape");
            if (before < 0 || after < 0 || ix.users(n.input(0)).size() != 1) continue;
            const std::string x = ix.node(before).input(0);
            const std::optional<std::vector<int64_t>> to = ix.ints(ix.node(before).input(1));
            const std::optional<std::vector<float>> scale = ix.floats(n.input(1)), shift = ix.floats(n.input(2));
            if (!to || to->size() != 3 || (*to)[2] != -1 || !scale || !shift || !all(*scale, 1.0f) ||
                !all(*shift, 0.0f)) {
                continue;
            }
            const int64_t groups = (*to)[1];
            if (groups < 1 || static_cast<int64_t>(scale->size()) != groups) continue;
            // back to x's shape: Shape(x), or x's dims (checked when the layer is made)
            std::vector<int> nodes{before, i};
            const std::string backTo = ix.node(after).input(1);
            std::optional<std::vector<int64_t>> backDims;
            if (const int shapeOp = ix.from(backTo, "Shape"); shapeOp >= 0 && ix.node(shapeOp).input(0) == x) {
                if (ix.users(backTo).size() == 1) nodes.push_back(shapeOp);
            } else if (!(backDims = ix.ints(backTo))) {
                continue;
            }
            // a per-channel Mul and Add after it: [C, 1, ...]
            auto perChannel = [groups](const Operand& o) {
                return !o.dims.empty() && o.dims[0] % groups == 0 &&
                       std::all_of(o.dims.begin() + 1, o.dims.end(), [](int64_t v) { return v == 1; });
            };
            int last = after;
            const std::optional<Operand> weight = follow(ix, "Mul", last, nodes, perChannel);
            const std::optional<Operand> bias = follow(ix, "Add", last, nodes, perChannel);
            const float epsilon = Attributes(n).f("epsilon", 1e-5f);
            claim(
                last,
                [this, x, groups, backDims, weight, bias, epsilon]() -> ModulePtr {
                    auto it = shapes_.find(x);
                    if (it == shapes_.end() || it->second.size() < 2 || it->second[1].value < 1) {
                        throw Unsupported{"the channels (dim 1) of its input are not known"};
                    }
                    const std::vector<Dim>& xd = it->second;
                    const int64_t maps = xd[1].value;
                    bool same = !backDims || backDims->size() == xd.size();
                    for (size_t j = 1; same && backDims && j < xd.size(); ++j) same = (*backDims)[j] == xd[j].value;
                    if (!same || maps % groups != 0) {
                        throw Unsupported{"a GroupNorm's reshapes do not fit its input of " + std::to_string(maps) +
                                          " channels in " + std::to_string(groups) + " groups"};
                    }
                    for (const std::optional<Operand>* o : {&weight, &bias}) {
                        if (*o && static_cast<int64_t>((*o)->values.size()) != maps) {
                            throw Unsupported{"a per-channel constant " + Shape((*o)->dims).str() + " does not have " +
                                              std::to_string(maps) + " channels"};
                        }
                    }
                    auto m = std::make_shared<GroupNorm>(
                        groups, maps, GroupNormOptions{.epsilon = epsilon, .affine = weight || bias});
                    if (weight) m->getVar("weight")->data.copyFrom(Tensor::fromVector({maps}, weight->values));
                    if (bias) m->getVar("bias")->data.copyFrom(Tensor::fromVector({maps}, bias->values));
                    return m;
                },
                x, nodes);
        }
    }
}

void Importer::findAttention() {
    const onnx::GraphProto& g = model_.graph();
    const Index ix(g, constants_);
    auto taken = [&](int i) {
        return absorbed_.count(i) || patternLayers_.count(i) || gelus_.count(i) || attentions_.count(i);
    };
    // Whether a value is computed from constants and shapes alone (it folds when imported):
    // a scale PyTorch computes from q's shape. Deep computations count as data.
    std::unordered_map<std::string, bool> folds;
    std::function<bool(const std::string&, int)> foldable = [&](const std::string& v, int depth) {
        if (ix.constant(v)) return true;
        if (auto f = folds.find(v); f != folds.end()) return f->second;
        const int p = ix.producer(v);
        bool yes = p >= 0 && depth < 32 && !taken(p);
        if (yes && ix.node(p).op_type() != "Shape") {
            for (const std::string& in : ix.node(p).input()) yes = yes && (in.empty() || foldable(in, depth + 1));
        }
        folds[v] = yes;
        return yes;
    };
    // `value` times or divided by a foldable scalar, read only there: the node, its data
    // input and its factor; or -1.
    auto scaling = [&](const std::string& value, std::string& data, std::string& factor, bool& divides) {
        const int p = ix.producer(value);
        if (p < 0 || taken(p) || ix.users(value).size() != 1 || ix.node(p).input_size() != 2) return -1;
        const onnx::NodeProto& n = ix.node(p);
        divides = n.op_type() == "Div";
        if (n.op_type() != "Mul" && !divides) return -1;
        for (int side = 0; side < (divides ? 1 : 2); ++side) {
            if (foldable(n.input(1 - side), 0) && !foldable(n.input(side), 0)) {
                data = n.input(side);
                factor = n.input(1 - side);
                return p;
            }
        }
        return -1;
    };
    auto scaled = [&](std::string& value, AttentionMatch& m) { // strips scalings off `value`
        std::string data, factor;
        bool divides = false;
        for (int p; (p = scaling(value, data, factor, divides)) >= 0; value = data) {
            (divides ? m.divides : m.multiplies).push_back(factor);
            m.nodes.push_back(p);
        }
    };
    // q and k from the MatMul of the scores.
    auto operands = [&](int qk, AttentionMatch& m) {
        const onnx::NodeProto& n = ix.node(qk);
        if (n.input_size() != 2) return false;
        std::string q = n.input(0), kT = n.input(1);
        scaled(q, m);
        scaled(kT, m);
        if (n.op_type() == "Einsum" && einsumProduct(Attributes(n).s("equation", "")) == true) {
            m.q = q; // "...id,...jd->...ij": k as it comes
            m.kFrom = kT;
            return true;
        }
        const int t = ix.from(kT, "Transpose");
        if (t < 0 || taken(t) || ix.users(kT).size() != 1) { // k^T as it came: k is it with its last axes swapped
            m.q = q;
            m.kFrom = kT;
            m.kSwapped = true;
            return true;
        }
        std::vector<int64_t> perm = Attributes(ix.node(t)).ints("perm");
        if (perm.size() < 2) return false;
        std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
        bool identity = true;
        for (size_t j = 0; j < perm.size(); ++j) identity = identity && perm[j] == static_cast<int64_t>(j);
        if (!identity) m.kPerm = perm;
        m.transpose = t;
        m.nodes.push_back(t);
        std::string k = ix.node(t).input(0);
        scaled(k, m);
        m.q = q;
        m.kFrom = k;
        return true;
    };
    // The scores before the softmax, back to their MatMul: masks nearest the softmax, then
    // scalings (a scaling after a mask would scale the mask too).
    std::function<bool(const std::string&, bool, int, AttentionMatch&)> scores = [&](const std::string& s, bool masks,
                                                                                     int depth, AttentionMatch& m) {
        const int p = ix.producer(s);
        if (p < 0 || taken(p) || ix.users(s).size() != 1 || depth > 8) return false;
        const onnx::NodeProto& n = ix.node(p);
        const std::string& op = n.op_type();
        if (op == "MatMul" || (op == "Einsum" && einsumProduct(Attributes(n).s("equation", "")))) {
            m.nodes.push_back(p);
            return operands(p, m);
        }
        auto attempt = [&](const std::string& from, bool stillMasks, auto&& note) {
            AttentionMatch t = m;
            note(t);
            t.nodes.push_back(p);
            if (!scores(from, stillMasks, depth + 1, t)) return false;
            m = std::move(t);
            return true;
        };
        if (op == "Add" && masks && n.input_size() == 2) {
            for (int side = 0; side < 2; ++side) {
                if (attempt(n.input(side), true, [&](AttentionMatch& t) { t.masks.push_back(n.input(1 - side)); }))
                    return true;
            }
            return false;
        }
        if (op == "Where" && masks && n.input_size() == 3) {
            for (int side = 1; side < 3; ++side) {
                auto note = [&](AttentionMatch& t) { t.fills.push_back({n.input(0), n.input(3 - side), side == 2}); };
                if (attempt(n.input(side), true, note)) return true;
            }
            return false;
        }
        // Swin's shifted windows: Reshape(Add(Reshape(scores, [B, nW, nH, Tq, Tk]), mask), back).
        if (op == "Reshape" && masks && m.windowMask.empty() && n.input_size() == 2) {
            const int a = ix.from(n.input(0), "Add");
            if (a < 0 || taken(a) || ix.users(n.input(0)).size() != 1 || ix.node(a).input_size() != 2) return false;
            const onnx::NodeProto& add = ix.node(a);
            for (int side = 0; side < 2; ++side) {
                const int r = ix.from(add.input(side), "Reshape");
                if (r < 0 || taken(r) || ix.users(add.input(side)).size() != 1 || ix.node(r).input_size() != 2)
                    continue;
                auto note = [&](AttentionMatch& t) {
                    t.windowMask = add.input(1 - side);
                    t.windowShape = ix.node(r).input(1);
                    t.viewBack = n.input(1);
                    t.nodes.push_back(a);
                    t.nodes.push_back(r);
                };
                if (attempt(ix.node(r).input(0), true, note)) return true;
            }
            return false;
        }
        if ((op == "Mul" || op == "Div") && n.input_size() == 2) {
            std::string data, factor;
            bool divides = false;
            if (scaling(s, data, factor, divides) != p) return false;
            return attempt(data, false,
                           [&](AttentionMatch& t) { (divides ? t.divides : t.multiplies).push_back(factor); });
        }
        return false;
    };
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& n = g.node(i);
        if (n.op_type() != "Softmax" || n.input_size() != 1 || n.output_size() != 1 || taken(i)) continue;
        AttentionMatch m;
        m.softmax = i;
        std::string weights = n.output(0);
        if (const int d = ix.only(weights, "Dropout"); d >= 0 && !taken(d)) {
            const onnx::NodeProto& dn = ix.node(d);
            if (dn.output_size() > 1 && !dn.output(1).empty() && !ix.users(dn.output(1)).empty()) continue;
            m.dropout = d;
            weights = dn.output(0);
        }
        // weights @ v (a MatMul, or an Einsum "...ij,...jd->...id"), or v @ weights^T (the
        // attention over positions of DDPM's and latent diffusion's AttnBlock: [N, C, HW]
        // values, the output [N, C, HW] too).
        int last = ix.only(weights, "MatMul");
        if (const int e = ix.only(weights, "Einsum");
            e >= 0 && einsumProduct(Attributes(ix.node(e)).s("equation", "")) == false)
            last = e;
        if (const int t = ix.only(weights, "Transpose"); t >= 0 && !taken(t) && swapsLastTwo(ix.node(t))) {
            m.weightsTranspose = t;
            weights = ix.node(t).output(0);
            last = ix.only(weights, "MatMul");
        }
        const int side = m.weightsTranspose >= 0 ? 1 : 0;
        if (last < 0 || taken(last) || ix.node(last).input_size() != 2 || ix.node(last).input(side) != weights ||
            ix.node(last).input(1 - side) == weights || !scores(n.input(0), true, 0, m)) {
            continue;
        }
        m.v = ix.node(last).input(1 - side);
        m.nodes.push_back(i);
        if (m.dropout >= 0) m.nodes.push_back(m.dropout);
        if (m.weightsTranspose >= 0) m.nodes.push_back(m.weightsTranspose);
        std::sort(m.nodes.begin(), m.nodes.end());
        for (int k : m.nodes) absorbed_[k] = last;
        attentions_[last] = std::move(m);
    }
}

bool Importer::importAttention(const onnx::NodeProto& last, const AttentionMatch& m) {
    const onnx::GraphProto& g = model_.graph();
    auto data = [&](const std::string& v) { return values_.count(v) && !constants_.count(v); };
    if (!data(m.q) || !data(m.kFrom) || !data(m.v)) return false;
    for (const std::string& v : {m.q, m.kFrom, m.v}) {
        if (isIntegerData(v)) return false;
    }
    // A constant holding one number (any value but NaN), or nullopt.
    auto number = [&](const std::string& name) -> std::optional<double> {
        auto c = constants_.find(name);
        if (c == constants_.end() || c->second.zeros || c->second.symbolic()) return std::nullopt;
        const Constant& k = c->second;
        double v = 0.0;
        if (k.isInt) {
            if (k.ints.size() != 1) return std::nullopt;
            v = static_cast<double>(k.ints[0]);
        } else {
            if (!k.tensor.defined() || k.tensor.numel() != 1) return std::nullopt;
            v = k.tensor.toVector<float>()[0];
        }
        return std::isnan(v) ? std::nullopt : std::optional<double>(v);
    };
    auto scalar = [&](const std::string& name) -> std::optional<double> { // a finite nonzero factor
        const std::optional<double> v = number(name);
        return v && std::isfinite(*v) && *v != 0.0 ? v : std::nullopt;
    };
    // The scale: the product of the scalars.
    double scale = 1.0;
    for (const std::string& f : m.multiplies) {
        const std::optional<double> v = scalar(f);
        if (!v) return false;
        scale *= *v;
    }
    for (const std::string& f : m.divides) {
        const std::optional<double> v = scalar(f);
        if (!v) return false;
        scale /= *v;
    }
    if (!(scale > 0.0) || !std::isfinite(static_cast<float>(scale))) return false;
    // The shapes: q [..., Tq, d], k [..., Tk, d] (kFrom permuted), v [..., Tk, dv].
    auto dimsOf = [&](const std::string& v) -> std::optional<std::vector<Dim>> {
        auto it = shapes_.find(v);
        if (it == shapes_.end()) return std::nullopt;
        for (const Dim& d : it->second) {
            if (d.value < 0 && d.symbol.empty()) return std::nullopt;
        }
        return it->second;
    };
    std::optional<std::vector<Dim>> qd = dimsOf(m.q), kd = dimsOf(m.kFrom), vd = dimsOf(m.v);
    if (!qd || !kd || !vd || qd->size() < 3 || kd->size() != qd->size()) return false;
    if (!m.kPerm.empty()) {
        if (m.kPerm.size() != kd->size()) return false;
        std::vector<Dim> permuted;
        for (int64_t j : m.kPerm) {
            if (j < 0 || j >= static_cast<int64_t>(kd->size())) return false;
            permuted.push_back((*kd)[static_cast<size_t>(j)]);
        }
        kd = permuted;
    }
    auto swapLastTwo = [](std::vector<Dim>& d) { std::swap(d[d.size() - 1], d[d.size() - 2]); };
    if (m.kSwapped) swapLastTwo(*kd);
    const bool vSwapped = m.weightsTranspose >= 0;
    if (vSwapped) {
        if (vd->size() < 2 || !m.windowMask.empty()) return false;
        swapLastTwo(*vd);
    }
    auto shapeOfDims = [&](const std::vector<Dim>& d) {
        std::vector<int64_t> s;
        for (const Dim& x : d) s.push_back(x.value >= 0 ? x.value : standIn(x.symbol));
        return Shape(s);
    };
    const Shape qs = shapeOfDims(*qd), ks = shapeOfDims(*kd);
    const int64_t r = static_cast<int64_t>(qs.rank()), Tq = qs[r - 2], Tk = ks[r - 2];
    // Softmax over the last axis (before opset 13 it flattens from its axis on: the same only then).
    const int64_t axis = Attributes(g.node(m.softmax)).i("axis", opset_ >= 13 ? -1 : 1);
    if (axis != -1 && axis != r - 1) return false;
    float dropout = 0.0f;
    if (m.dropout >= 0) {
        const onnx::NodeProto& d = g.node(m.dropout);
        const Attributes a(d);
        dropout = a.f("ratio", 0.5f);
        if (d.input_size() > 1 && !d.input(1).empty()) {
            const std::optional<double> v = number(d.input(1));
            if (!v) return false;
            dropout = static_cast<float>(*v);
        }
        if (d.input_size() > 2 && !d.input(2).empty() && !constants_.count(d.input(2))) return false;
        if (!(dropout >= 0.0f && dropout < 1.0f)) return false;
    }
    // The masks: a constant one the causal mask, at most one of data; or alone, a learned
    // bias (a weight [1, ...] of q's rank holding no infinity: Swin's relative position
    // biases, folded by the export), which becomes a Parameter over the batch, as an Add of
    // such a weight does.
    bool causal = false;
    std::string dataMask;
    const Constant* bias = nullptr;
    auto isCausal = [&](const std::vector<double>& table, const std::vector<int64_t>& dims) {
        if (dims.size() < 2 || dims[dims.size() - 2] != Tq || dims.back() != Tk) return false;
        for (size_t j = 0; j + 2 < dims.size(); ++j) {
            if (dims[j] != 1) return false;
        }
        for (int64_t a = 0; a < Tq; ++a) {
            for (int64_t b = 0; b < Tk; ++b) {
                const double x = table[static_cast<size_t>(a * Tk + b)];
                if (b <= a ? x != 0.0 : !(x <= -1e4)) return false;
            }
        }
        return true;
    };
    std::vector<Dim> scores(qd->begin(), qd->end() - 1); // [..., Tq, Tk]
    scores.push_back({Tk, {}});
    for (const std::string& mask : m.masks) {
        auto c = constants_.find(mask);
        if (c == constants_.end()) {
            if (!values_.count(mask) || isIntegerData(mask) || !dataMask.empty()) return false;
            dataMask = mask;
            continue;
        }
        const Constant& k = c->second;
        if (!initializers_.count(mask) && zerosInto(k, scores)) continue; // torch.baddbmm's input at beta 0
        if (causal || bias || k.isInt || k.zeros || k.symbolic() || !k.tensor.defined()) return false;
        const std::vector<float> f = k.tensor.toVector<float>();
        if (isCausal(std::vector<double>(f.begin(), f.end()), k.dims)) {
            causal = true;
            continue;
        }
        const bool finite = std::all_of(f.begin(), f.end(), [](float e) { return std::isfinite(e); });
        if (!initializers_.count(mask) || !finite || k.dims.size() != qs.rank() || k.dims[0] != 1) return false;
        bias = &k;
    }
    if (bias && (causal || !dataMask.empty() || !m.fills.empty())) return false;
    // A fill where a condition of data holds (masked_fill(pad[:, None, None, :], -inf)): the
    // mask log(1 - c) for -inf (0 where c is 0, -inf where 1), c F for a finite F of at most
    // -1e30, which a score added to rounds to (c: the condition in float; 1 - c where the
    // fill is taken where it does not hold). A higher fill replaces scores; adding it would not.
    const AttentionMatch::Fill* dataFill = nullptr;
    double dataFillValue = 0.0;
    for (const AttentionMatch::Fill& fill : m.fills) {
        auto c = constants_.find(fill.condition);
        const std::optional<double> v = number(fill.fill);
        if (!v) return false;
        if (c == constants_.end()) {
            // a finite fill so low that any score added to it rounds to it (float's lowest)
            const bool lowest = std::isfinite(static_cast<float>(*v)) && *v <= -1e30;
            if (!values_.count(fill.condition) || isConstant(fill.condition) ||
                !isIntegerType(elemTypeOf(fill.condition)) || !dataMask.empty() || dataFill ||
                !(lowest || *v == -std::numeric_limits<double>::infinity())) {
                return false;
            }
            dataFill = &fill;
            dataFillValue = *v;
            continue;
        }
        if (causal || !c->second.isInt || c->second.symbolic()) return false;
        std::vector<double> table;
        for (int64_t x : c->second.ints) table.push_back((x != 0) == fill.whereTrue ? *v : 0.0);
        if (!isCausal(table, c->second.dims)) return false;
        causal = true;
    }
    // Swin's shifted windows (with its bias alone): q, k, v and the bias viewed per window,
    // [B, nW, nH, T, d], the window mask added to the bias: a constant [1, nW, 1 or nH, Tq, Tk]
    // of finite values computed in the model (a weight of the file, which an Add of it would
    // learn, is not such a mask); both views of the scores with every size known but the
    // batch's.
    const Constant* window = nullptr;
    int64_t windows = 0;
    if (!m.windowMask.empty()) {
        auto w = constants_.find(m.windowMask);
        auto there = constants_.find(m.windowShape), back = constants_.find(m.viewBack);
        if (!bias || causal || r != 4 || w == constants_.end() || initializers_.count(m.windowMask) ||
            there == constants_.end() || back == constants_.end()) {
            return false;
        }
        for (const std::vector<Dim>* d : {&*qd, &*kd, &*vd}) {
            for (size_t j = 1; j < 4; ++j) {
                if ((*d)[j].value < 0) return false;
            }
        }
        const Constant& c = w->second;
        if (c.isInt || c.zeros || c.symbolic() || !c.tensor.defined() || c.dims.size() != 5 || c.dims[0] != 1) {
            return false;
        }
        windows = c.dims[1];
        const int64_t heads = qs[1];
        if (windows < 1 || (c.dims[2] != 1 && c.dims[2] != heads) || (c.dims[3] != 1 && c.dims[3] != Tq) ||
            (c.dims[4] != 1 && c.dims[4] != Tk)) {
            return false;
        }
        const std::vector<float> f = c.tensor.toVector<float>();
        if (!std::all_of(f.begin(), f.end(), [](float e) { return std::isfinite(e); })) return false;
        // The views' sizes, their first (the batch, or the windows of the batch) -1, a symbol or
        // the size q's batch gives.
        const Dim& batch = (*qd)[0];
        if (batch.value >= 0 && batch.value % windows != 0) return false;
        auto views = [&](const Constant& v, const std::vector<int64_t>& sizes, int64_t first) {
            if (!v.isInt || v.ints.size() != sizes.size() + 1) return false;
            for (size_t j = 0; j < sizes.size(); ++j) {
                if (!v.symbol(j + 1).empty() || v.ints[j + 1] != sizes[j]) return false;
            }
            return !v.symbol(0).empty() || v.ints[0] == -1 || (batch.value >= 0 && v.ints[0] == first);
        };
        if (!views(there->second, {windows, heads, Tq, Tk}, batch.value / windows) ||
            !views(back->second, {heads, Tq, Tk}, batch.value)) {
            return false;
        }
        window = &c;
    }
    auto sdpa = std::make_shared<ScaledDotProductAttention>(
        AttentionOptions{.causal = causal, .scale = static_cast<float>(scale), .dropout = dropout});
    Shapes in{qs, ks, shapeOfDims(*vd)};
    std::optional<std::vector<Dim>> md;
    std::vector<int64_t> biasDims; // the bias's dims but the batch's, as the Parameter holds them
    if (!dataMask.empty() || dataFill) {
        if (!(md = dimsOf(dataFill ? dataFill->condition : dataMask))) return false;
        in.push_back(shapeOfDims(*md));
    } else if (bias) {
        biasDims.assign(bias->dims.begin() + 1, bias->dims.end());
        md = std::vector<Dim>{(*qd)[0]};
        for (int64_t d : biasDims) md->push_back({d, {}});
        in.push_back(shapeOfDims(*md));
    }
    const Dim windowBatch = !window               ? Dim{}
                            : (*qd)[0].value >= 0 ? Dim{(*qd)[0].value / windows, {}}
                                                  : Dim{-1, newSymbol()};
    if (window) {
        for (Shape& s : in) s = Shape{windowBatch.value >= 0 ? windowBatch.value : 1, windows, s[1], s[2], s[3]};
    }
    try {
        sdpa->checkDataShape(in);
    } catch (const Error&) {
        return false;
    }
    // It fits. `made`: a value the layer reads that no ONNX node computes, under a new name.
    auto made = [&](std::string name, const NodePtr& nd, const std::vector<Dim>& dims) {
        while (values_.count(name) || shapes_.count(name)) name += "'";
        values_[name] = {nd, 0};
        shapes_[name] = dims;
        ranks_[name] = static_cast<int64_t>(dims.size());
        return name;
    };
    // k made where the transpose also permuted its leading dims, or where the scores' MatMul
    // took k^T with no Transpose; v where the output is v @ weights^T.
    const std::string lastName = last.name().empty() ? last.output(0) : last.name();
    std::string k = m.kFrom;
    if (!m.kPerm.empty()) {
        const onnx::NodeProto& t = g.node(m.transpose);
        const Source from = value(m.kFrom, 1);
        NodePtr kn = node(std::make_shared<Transpose>(m.kPerm), Parent(from.node, from.slot),
                          nodeName((t.name().empty() ? t.output(0) : t.name()) + "_k"));
        k = made(t.output(0) + ":k", kn, *kd);
    } else if (m.kSwapped) {
        const Source from = value(m.kFrom, 1);
        k = made(m.kFrom + ":k",
                 node(std::make_shared<SwapAxes>(-2, -1), Parent(from.node, from.slot), nodeName(lastName + "_k")),
                 *kd);
    }
    std::string v = m.v;
    if (vSwapped) {
        const Source from = value(m.v, 2);
        v = made(m.v + ":v",
                 node(std::make_shared<SwapAxes>(-2, -1), Parent(from.node, from.slot), nodeName(lastName + "_v")),
                 *vd);
    }
    if (dataFill) { // the mask from the condition
        const std::string base = nodeName(std::string(last.name().empty() ? last.output(0) : last.name()) + "_mask");
        const Source from = value(dataFill->condition, 3);
        NodePtr c = node(std::make_shared<Cast>(DType::int32, DType::float32), Parent(from.node, from.slot),
                         nodeName(base + "_float"));
        const bool infinite = std::isinf(dataFillValue);
        const auto F = static_cast<float>(dataFillValue);
        if (dataFill->whereTrue == infinite)
            c = node(std::make_shared<MulAddConst>(-1.0f, 1.0f), c, nodeName(base + "_not"));
        if (infinite) {
            c = node(std::make_shared<Activation>(ActivationKind::log), c, base);
        } else {
            c = node(std::make_shared<MulAddConst>(F, 0.0f), c, base);
        }
        dataMask = made(base + ":mask", c, *md);
    }
    if (bias) { // the bias over q's batch
        auto table = std::make_shared<Parameter>(biasDims);
        table->getVar("weight")->data.copyFrom(bias->tensor.reshape(Shape(biasDims)));
        const std::string base = nodeName(std::string(last.name().empty() ? last.output(0) : last.name()) + "_bias");
        const Source from = value(m.q, 0);
        dataMask = made(base + ":bias", node(table, Parent(from.node, from.slot), base), *md);
    }
    std::vector<std::string> inputs{m.q, k, v};
    if (!dataMask.empty()) inputs.push_back(dataMask);
    if (vSwapped) { // the output [..., dv, Tq], as v @ weights^T gives it
        std::vector<Dim> od(qd->begin(), qd->end() - 1);
        od.push_back(vd->back());
        const std::string out =
            made(last.output(0) + ":attention", node(sdpa, dataInputs(inputs), nodeName(lastName + "_attention")), od);
        define(last, std::make_shared<SwapAxes>(-2, -1), dataInputs({out}), {out});
        return true;
    }
    if (!window) {
        define(last, sdpa, dataInputs(inputs), inputs);
        return true;
    }
    // Per window: each input viewed as [B, nW, ...], the window mask added to the bias, the
    // output viewed back as [B nW, nH, Tq, dv].
    const std::string base = nodeName(std::string(last.name().empty() ? last.output(0) : last.name()) + "_windows");
    auto perWindow = [&](const std::string& v, const std::string& what) {
        const std::vector<Dim> d = shapes_.at(v);
        const Source from = value(v, 0);
        NodePtr nd = node(std::make_shared<Reshape>(Shape{-1, windows, d[1].value, d[2].value, d[3].value}),
                          Parent(from.node, from.slot), nodeName(base + "_" + what));
        return made(v + ":windows", nd, {windowBatch, {windows, {}}, d[1], d[2], d[3]});
    };
    for (size_t j = 0; j < inputs.size(); ++j)
        inputs[j] = perWindow(inputs[j], j < 3 ? "qkv"[j] + std::string() : "bias");
    const Source biases = value(inputs[3], 3);
    NodePtr masked = node(std::make_shared<MulAddConst>(Tensor(), window->tensor.reshape(Shape(window->dims))),
                          Parent(biases.node, biases.slot), nodeName(base + "_mask"));
    inputs[3] = made(inputs[3] + ":masked", masked, shapes_.at(inputs[3]));
    const std::vector<Dim> vw = shapes_.at(inputs[2]);
    const std::string out = made(last.output(0) + ":windows", node(sdpa, dataInputs(inputs), base),
                                 {windowBatch, {windows, {}}, vw[2], {Tq, {}}, vw[4]});
    shapes_[last.output(0)] = {(*qd)[0], (*qd)[1], {Tq, {}}, vw[4]}; // q's batch, not a size computed from it
    ranks_[last.output(0)] = 4;
    define(last, std::make_shared<Reshape>(Shape{-1, qs[1], Tq, vw[4].value}), dataInputs({out}), {out});
    return true;
}

} // namespace tessera::onnx_io
