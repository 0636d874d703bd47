#include "io/onnx/Importer.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "backend/ElementMath.h"
#include "backend/Errors.h"
#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"
#include "modules/Linear.h"
#include "modules/MatMul.h"
#include "modules/MulAddConst.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/Tile.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera::onnx_io {

// LSTM, GRU (linear before reset or not) and RNN (relu or tanh), forward or bidirectional,
// either layout: one Tessera RNN layer (weights back in PyTorch's gate order) that
// returns every step, reshaped (and for layout 0 transposed) to ONNX's Y [T, D, N, H]
// or [N, T, D, H]. Initial states and sequence_lens given as data are its extra inputs,
// and the final states Y_h, Y_c its extra outputs (layout 1 transposes them from and to
// [N, D, H]); zero initial states are its default.
void Importer::importRnn(const onnx::NodeProto& n, const Attributes& a) {
    const std::string& op = n.op_type();
    a.only({"hidden_size", "direction", "activations", "linear_before_reset", "layout", "clip", "input_forget",
            "activation_alpha", "activation_beta"});
    if (a.has("clip")) throw Unsupported{"clip is not supported"};
    if (a.i("input_forget", 0) != 0) throw Unsupported{"input_forget 1 is not supported"};
    const int64_t layout = a.i("layout", 0);
    if (layout != 0 && layout != 1) throw Unsupported{"layout " + std::to_string(layout)};
    const bool batchFirst = layout == 1;
    if (a.has("activation_alpha") || a.has("activation_beta"))
        throw Unsupported{"activation_alpha/beta are not supported"};
    const std::string direction = a.s("direction", "forward");
    if (direction != "forward" && direction != "bidirectional")
        throw Unsupported{"direction " + direction + " (forward and bidirectional are supported)"};
    const bool bi = direction == "bidirectional";
    RnnMode mode = op == "LSTM" ? RnnMode::lstm : op == "GRU" ? RnnMode::gru : RnnMode::tanh;
    std::vector<std::string> acts;
    if (const onnx::AttributeProto* at = a.get("activations")) acts.assign(at->strings().begin(), at->strings().end());
    if (op == "RNN") {
        const std::string first = acts.empty() ? "Tanh" : acts[0];
        if (first != "Tanh" && first != "Relu") throw Unsupported{"activation " + first + " (Tanh and Relu are)"};
        for (const std::string& act : acts) {
            if (act != first) throw Unsupported{"different activations per direction"};
        }
        mode = first == "Relu" ? RnnMode::relu : RnnMode::tanh;
    } else if (!acts.empty()) {
        throw Unsupported{"activations other than the defaults are not supported"};
    }
    const int64_t linearBeforeReset = a.i("linear_before_reset", 0);
    if (linearBeforeReset != 0 && linearBeforeReset != 1)
        throw Unsupported{"linear_before_reset " + std::to_string(linearBeforeReset) + " (0 and 1 are)"};
    auto given = [&](int k) { return n.input_size() > k && !n.input(k).empty(); };
    if (given(7)) throw Unsupported{"peepholes are not supported"};
    if (given(4) && isConstant(n.input(4))) throw Unsupported{"a constant sequence_lens (data is supported)"};
    const bool lengths = given(4);
    bool stateData[2] = {false, false}; // initial_h, initial_c given as data
    for (int k : {5, 6}) {
        if (!given(k)) continue;
        if (!isConstant(n.input(k))) {
            stateData[k - 5] = true;
            continue;
        }
        const Constant& c = constants_.at(n.input(k));
        if (c.zeros) continue;
        for (float v : c.tensor.defined() ? c.tensor.toVector<float>() : std::vector<float>{1.0f}) {
            if (v != 0.0f) throw Unsupported{"constant initial states other than zeros are not supported"};
        }
    }
    const bool lstm = op == "LSTM";
    if (lstm ? stateData[0] != stateData[1] : stateData[1])
        throw Unsupported{"initial_h and initial_c given one as data, the other not"};
    const bool initialStates = stateData[0];
    bool finalStates = false;
    for (int k = 1; k < n.output_size(); ++k) {
        finalStates = finalStates || (!n.output(k).empty() && usedValues_.count(n.output(k)));
    }
    const Constant& w = requireConstant(n, 1, "W");
    const Constant& r = requireConstant(n, 2, "R");
    const int64_t D = bi ? 2 : 1, G = rnnGates(mode), H = a.i("hidden_size", r.tensor.shape()[2]);
    if (w.tensor.shape().rank() != 3 || w.tensor.shape()[0] != D || w.tensor.shape()[1] != G * H)
        throw Unsupported{"W of shape " + w.tensor.shape().str()};
    const int64_t I = w.tensor.shape()[2];
    std::vector<float> b(static_cast<size_t>(D * 2 * G * H), 0.0f);
    if (n.input_size() > 3 && !n.input(3).empty()) b = requireConstant(n, 3, "B").tensor.toVector<float>();
    auto rnn = std::make_shared<RNN>(I, H,
                                     RNNOptions{.layers = 1,
                                                .mode = mode,
                                                .linearBeforeReset = op != "GRU" || linearBeforeReset == 1,
                                                .bidirectional = bi,
                                                .getSequences = true,
                                                .batchFirst = batchFirst,
                                                .initialStates = initialStates,
                                                .finalStates = finalStates,
                                                .lengths = lengths});
    const std::vector<int64_t> order = onnxGateOrder(mode);
    const std::vector<float> wv = w.tensor.toVector<float>(), rv = r.tensor.toVector<float>();
    for (int64_t dir = 0; dir < D; ++dir) {
        const std::string sfx = std::string("_l0") + (dir ? "_reverse" : "");
        auto fill = [&](const std::string& name, const float* src, int64_t cols) {
            std::vector<float> v(static_cast<size_t>(G * H * cols));
            for (int64_t j = 0; j < G; ++j) {
                std::copy(src + j * H * cols, src + (j + 1) * H * cols, v.begin() + order[j] * H * cols);
            }
            rnn->getVar(name + sfx)
                ->data.copyFrom(Tensor::fromVector(cols == 1 ? Shape{G * H} : Shape{G * H, cols}, v));
        };
        fill("weight_ih", wv.data() + dir * G * H * I, I);
        fill("weight_hh", rv.data() + dir * G * H * H, H);
        fill("bias_ih", b.data() + dir * 2 * G * H, 1);
        fill("bias_hh", b.data() + dir * 2 * G * H + G * H, 1);
    }
    Parents parents = dataInputs(n, 1);
    if (!initialStates && !finalStates && !lengths && !batchFirst) {
        auto seq = std::make_shared<Sequential>();
        seq->append(rnn)
            .append(std::make_shared<Reshape>(Shape{0, 0, D, H}))
            .append(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1, 3}));
        return define(n, seq, parents);
    }
    // A graph of its own: x, [initial_h, initial_c], [sequence_lens] -> Y, [Y_h, Y_c].
    auto swapND = [] { return std::make_shared<Transpose>(std::vector<int64_t>{1, 0, 2}); };
    std::vector<NodePtr> ins{tessera::node(std::make_shared<Identity>(), {}, "X")};
    Parents rnnParents{ins[0]};
    for (int k = 5; k < (lstm ? 7 : 6) && initialStates; ++k) {
        Source src = value(n, k);
        parents.push_back(Parent(src.node, src.slot));
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, k == 5 ? "initial_h" : "initial_c"));
        // layout 1 states are [N, D, H]; Tessera's [D, N, H]
        rnnParents.push_back(batchFirst ? tessera::node(swapND(), ins.back(), ins.back()->name() + "_dnh")
                                        : ins.back());
    }
    if (lengths) {
        Source src = value(n, 4);
        parents.push_back(Parent(src.node, src.slot));
        ins.push_back(tessera::node(std::make_shared<Identity>(), {}, "sequence_lens"));
        rnnParents.push_back(ins.back());
    }
    NodePtr cell = tessera::node(rnn, rnnParents, "rnn");
    auto y = std::make_shared<Sequential>();
    y->append(std::make_shared<Reshape>(Shape{0, 0, D, H}));
    if (!batchFirst) y->append(std::make_shared<Transpose>(std::vector<int64_t>{0, 2, 1, 3}));
    std::vector<NodePtr> outs{tessera::node(y, Parent(cell, 0), "Y")};
    for (int k = 1; k <= (lstm ? 2 : 1) && finalStates; ++k) {
        outs.push_back(tessera::node(batchFirst ? ModulePtr(swapND()) : ModulePtr(std::make_shared<Identity>()),
                                     Parent(cell, k), k == 1 ? "Y_h" : "Y_c"));
    }
    return define(n, std::make_shared<Graph>(ins, outs), parents);
}

namespace {
// A max or average pool of 1 to 3 spatial dims.
ModulePtr poolOf(bool isMax, size_t dims, const std::vector<int64_t>& kernel, const PoolOptions& o) {
    if (isMax) {
        if (dims == 1) return std::make_shared<MaxPool1D>(kernel, o);
        if (dims == 2) return std::make_shared<MaxPool2D>(kernel, o);
        return std::make_shared<MaxPool3D>(kernel, o);
    }
    if (dims == 1) return std::make_shared<AvgPool1D>(kernel, o);
    if (dims == 2) return std::make_shared<AvgPool2D>(kernel, o);
    return std::make_shared<AvgPool3D>(kernel, o);
}

// A Pad1D/2D of `loHi` ((lo, hi) per spatial dim) with `options`, then `m`: one Sequential.
std::shared_ptr<Sequential> afterPad(size_t dims, const std::vector<int64_t>& loHi, const PadOptions& options,
                                     const ModulePtr& m) {
    if (dims < 1 || dims > 2) {
        throw Unsupported{"asymmetric padding of " + std::to_string(dims) + " spatial dims (1 and 2 are supported)"};
    }
    auto seq = std::make_shared<Sequential>();
    if (dims == 1) seq->append(std::make_shared<Pad1D>(loHi, options));
    if (dims == 2) seq->append(std::make_shared<Pad2D>(loHi, options));
    seq->append(m);
    return seq;
}
} // namespace

// ConvTranspose's output_shape: the total padding t = s (in - 1) + q + (k - 1) d + 1 - out
// per spatial dim (q: output_padding), split as ONNX splits it without auto_pad, ceil(t / 2)
// before and floor(t / 2) after (negative: outputs beyond the full transposed convolution).
// That is the symmetric pad ceil(t / 2) with t mod 2 more outputs at the end, which join
// `outputPadding` (filled in when not given); returns the symmetric pads.
std::vector<int64_t> Importer::outputShapePads(const onnx::NodeProto& n, const Attributes& a,
                                               const std::vector<int64_t>& kernel, const ConvOptions& o,
                                               std::vector<int64_t>& outputPadding) const {
    const size_t dims = kernel.size();
    const std::vector<int64_t> out = a.ints("output_shape");
    if (out.size() != dims) {
        throw Unsupported{"output_shape of " + std::to_string(out.size()) + " values for " + std::to_string(dims) +
                          " spatial dims"};
    }
    const std::vector<int64_t> given = a.ints("pads");
    if (std::any_of(given.begin(), given.end(), [](int64_t p) { return p != 0; }))
        throw Unsupported{"pads with output_shape (the pads are computed from it)"};
    const std::vector<int64_t> in = spatialDimsOf(n, 0, dims);
    if (outputPadding.empty()) outputPadding.assign(dims, 0);
    std::vector<int64_t> pads(dims);
    for (size_t d = 0; d < dims; ++d) {
        if (in[d] < 1) throw Unsupported{"output_shape on an input whose spatial dims are not known at import"};
        const int64_t total =
            o.stride[d] * (in[d] - 1) + outputPadding[d] + (kernel[d] - 1) * o.dilation[d] + 1 - out[d];
        const int64_t after = total >= 0 ? total / 2 : -((-total + 1) / 2); // floor(total / 2)
        pads[d] = total - after;
        if (pads[d] < 0) {
            throw Unsupported{"output_shape " + std::to_string(out[d]) + " beyond the full transposed convolution's " +
                              std::to_string(out[d] + total - outputPadding[d])};
        }
        outputPadding[d] += pads[d] - after;
    }
    return pads;
}

void Importer::importConv(const onnx::NodeProto& n, const Attributes& a) {
    const bool transposed = n.op_type() == "ConvTranspose";
    std::vector<int64_t> outputPadding;
    if (transposed) {
        a.only({"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad", "output_padding", "output_shape"});
        outputPadding = a.ints("output_padding");
    } else {
        a.only({"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"});
    }
    if (transposed) autoPadNotSet(a);
    const Constant& w = requireConstant(n, 1, "the weight");
    const Shape& ws = w.tensor.shape();
    if (ws.rank() < 3 || ws.rank() > 5) throw Unsupported{"a weight of rank " + std::to_string(ws.rank())};
    const size_t dims = ws.rank() - 2;
    std::vector<int64_t> kernel(ws.dims().begin() + 2, ws.dims().end());
    if (a.has("kernel_shape") && a.ints("kernel_shape") != kernel) throw Unsupported{"kernel_shape differs from W"};
    const int64_t groups = a.i("group", 1);
    ConvOptions o;
    o.stride = a.ints("strides", std::vector<int64_t>(dims, 1));
    o.dilation = a.ints("dilations", std::vector<int64_t>(dims, 1));
    // A convolution pads both sides alike: what one side has beyond the other (auto_pad
    // SAME with an odd total, or asymmetric pads) is a zero Pad in front of it.
    WindowPads pads{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
    if (transposed && a.has("output_shape")) {
        o.pad = outputShapePads(n, a, kernel, o, outputPadding);
    } else if (transposed) {
        o.pad = symmetricPads(a.ints("pads"), dims);
    } else {
        pads = windowPads(a, kernel, o.stride, o.dilation, spatialDimsOf(n, 0, dims));
        o.pad = pads.symmetric();
    }
    o.groups = groups;
    // output_padding q adds q outputs at the end of a dim: the deconvolution's postpad
    // when q < stride. ONNX also allows q < dilation; such a q up to the pad is the
    // full deconvolution's [p, F - p + q): the deconvolution padded by p - q on both
    // sides ([p - q, F - p + q)) less its first q.
    std::vector<int64_t> trimFront(dims, 0);
    if (!outputPadding.empty() && outputPadding.size() != dims) {
        throw Unsupported{"output_padding of " + std::to_string(outputPadding.size()) + " values for " +
                          std::to_string(dims) + " spatial dims"};
    }
    if (!outputPadding.empty()) o.postpad.assign(dims, 0);
    for (size_t d = 0; d < outputPadding.size(); ++d) {
        const int64_t q = outputPadding[d];
        if (q < 0 || q >= std::max(o.stride[d], o.dilation[d])) {
            throw Unsupported{"output_padding " + std::to_string(q) + " (ONNX allows 0 to max(stride, dilation) - 1)"};
        }
        if (q < o.stride[d]) {
            o.postpad[d] = q;
            continue;
        }
        if (q > o.pad[d]) {
            throw Unsupported{"output_padding " + std::to_string(q) + " at stride " + std::to_string(o.stride[d]) +
                              " beyond the pad " + std::to_string(o.pad[d]) +
                              " (outputs the deconvolution does not reach)"};
        }
        o.pad[d] -= q;
        trimFront[d] = q;
    }
    const bool bias = n.input_size() > 2 && !n.input(2).empty();
    o.useBias = bias;
    o.initscheme = InitScheme::none;
    // W: [out, in / g, k...] for Conv, [in, out / g, k...] for ConvTranspose, as in Tessera.
    const int64_t outmaps = transposed ? ws[1] * groups : ws[0];
    const int64_t inmaps = transposed ? ws[0] : ws[1] * groups;
    ModulePtr m;
    if (transposed) {
        if (dims == 1) m = std::make_shared<Deconv1D>(inmaps, outmaps, kernel, o);
        if (dims == 2) m = std::make_shared<Deconv2D>(inmaps, outmaps, kernel, o);
        if (dims == 3) m = std::make_shared<Deconv3D>(inmaps, outmaps, kernel, o);
    } else {
        if (dims == 1) m = std::make_shared<Conv1D>(inmaps, outmaps, kernel, o);
        if (dims == 2) m = std::make_shared<Conv2D>(inmaps, outmaps, kernel, o);
        if (dims == 3) m = std::make_shared<Conv3D>(inmaps, outmaps, kernel, o);
    }
    m->getVar("W")->data.copyFrom(w.tensor);
    if (bias) m->getVar("b")->data.copyFrom(requireConstant(n, 2, "the bias").tensor.reshape({outmaps}));
    if (std::any_of(trimFront.begin(), trimFront.end(), [](int64_t q) { return q > 0; })) {
        std::vector<int> axes;
        std::vector<int64_t> starts;
        for (size_t d = 0; d < dims; ++d) {
            if (trimFront[d] == 0) continue;
            axes.push_back(static_cast<int>(d + 2));
            starts.push_back(trimFront[d]);
        }
        auto seq = std::make_shared<Sequential>();
        seq->append(m);
        seq->append(std::make_shared<Slice>(axes, starts, std::vector<int64_t>(axes.size(), 0)));
        m = seq;
    }
    if (pads.asymmetric()) m = afterPad(dims, pads.extra(), {}, m);
    return define(n, m, dataInputs(n, 1));
}

// Y = alpha op(A) op(B) + beta C: a Linear with W = alpha op(B) (as [in, out]) and b = beta C;
// with transA, a Transpose of A's two dims in front.
void Importer::importGemm(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"alpha", "beta", "transA", "transB", "broadcast"});
    const bool transA = a.i("transA", 0) != 0;
    const Constant& b = requireConstant(n, 1, "B");
    if (b.tensor.shape().rank() != 2) throw Unsupported{"B of rank " + std::to_string(b.tensor.shape().rank())};
    const bool transB = a.i("transB", 0) != 0;
    const int64_t in = transB ? b.tensor.shape()[1] : b.tensor.shape()[0];
    const int64_t out = transB ? b.tensor.shape()[0] : b.tensor.shape()[1];
    const float alpha = a.f("alpha", 1.0f), beta = a.f("beta", 1.0f);
    // C: a number or a row of `out` is the Linear's bias; a matrix [M, out] (one row per
    // sample of a batch of M) is added after it by a MulAddConst; data (torch.addmm of a
    // computed input) by an Add, after a MulAddConst of beta.
    const bool dataC =
        n.input_size() > 2 && !n.input(2).empty() && !isConstant(n.input(2)) && !options_.inputValues.count(n.input(2));
    const Constant* c = n.input_size() > 2 && !n.input(2).empty() && !dataC ? &requireConstant(n, 2, "C") : nullptr;
    const int64_t cn = c ? c->tensor.numel() : 0;
    const bool matrixBias = c && c->tensor.shape().rank() == 2 && c->tensor.shape()[1] == out && cn != out && cn > 1;
    const bool bias = c && !matrixBias;
    auto lin = std::make_shared<Linear>(in, out, LinearOptions{.useBias = bias, .initscheme = InitScheme::none});
    // W [in, out] = alpha B, or alpha B^T: written in place, transposed in 64 x 64 tiles.
    Tensor& W = lin->getVar("W")->data;
    const float* bv = b.tensor.data<float>();
    float* w = W.data<float>();
    constexpr int64_t kTile = 64;
    for (int64_t i0 = 0; i0 < in; i0 += kTile) {
        for (int64_t o0 = 0; o0 < out; o0 += kTile) {
            for (int64_t i = i0; i < std::min(in, i0 + kTile); ++i) {
                for (int64_t o = o0; o < std::min(out, o0 + kTile); ++o) {
                    w[i * out + o] = alpha * bv[transB ? o * in + i : i * out + o];
                }
            }
        }
    }
    std::vector<float> cv = c ? c->tensor.toVector<float>() : std::vector<float>();
    for (float& x : cv) x *= beta;
    if (bias) {
        if (static_cast<int64_t>(cv.size()) == 1) cv.assign(static_cast<size_t>(out), cv[0]);
        if (static_cast<int64_t>(cv.size()) != out) {
            throw Unsupported{"C of shape " + c->tensor.shape().str() + " (a number, a row of " + std::to_string(out) +
                              " or a matrix [M, " + std::to_string(out) + "] is supported)"};
        }
        lin->getVar("b")->data.copyFrom(Tensor::fromVector({out}, cv));
    }
    if (dataC) {
        auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
        auto given = tessera::node(std::make_shared<Identity>(), {}, "c");
        NodePtr h = x;
        if (transA) h = tessera::node(std::make_shared<Transpose>(std::vector<int64_t>{1, 0}), {h}, "transposed");
        h = tessera::node(tiedHead(lin), {h}, "product");
        const NodePtr added =
            beta == 1.0f ? given : tessera::node(std::make_shared<MulAddConst>(beta, 0.0f), {given}, "scaled");
        auto y = tessera::node(std::make_shared<Add>(), {h, added}, "sum");
        return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x, given}, std::vector<NodePtr>{y}),
                      dataInputs(n, {0, 2}));
    }
    if (!transA && !matrixBias) return define(n, tiedHead(lin), dataInputs(n, 1));
    auto seq = std::make_shared<Sequential>();
    if (transA) seq->append(std::make_shared<Transpose>(std::vector<int64_t>{1, 0}));
    seq->append(tiedHead(lin));
    if (matrixBias) seq->append(std::make_shared<MulAddConst>(Tensor(), Tensor::fromVector(c->tensor.shape(), cv)));
    return define(n, seq, dataInputs(n, 1));
}

void Importer::importMatMul(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    if (n.input_size() == 2 && !isConstant(n.input(1)) && !isConstant(n.input(0))) { // two data inputs
        return define(n, std::make_shared<MatMul>(), dataInputs(n, 2));
    }
    const Constant& b = requireConstant(n, 1, "the second input (a weight)");
    if (b.tensor.shape().rank() != 2) throw Unsupported{"a weight of rank " + std::to_string(b.tensor.shape().rank())};
    const int64_t in = b.tensor.shape()[0], out = b.tensor.shape()[1];
    auto lin = std::make_shared<Linear>(in, out, LinearOptions{.useBias = false, .initscheme = InitScheme::none});
    lin->getVar("W")->data.copyFrom(b.tensor);
    return define(n, tiedHead(lin), dataInputs(n, 1));
}

ModulePtr Importer::tiedHead(ModulePtr lin) const {
    if (embedders_.empty()) return lin; // no table to tie to
    const Tensor& W = lin->getVar("W")->data;
    const int64_t in = W.shape()[0], out = W.shape()[1];
    W.data<float>();                                       // float32 on the host, or it throws
    const auto* w = static_cast<const uint32_t*>(W.raw()); // its bits: equal values, bit for bit
    bool distinctive = false;                              // not one value repeated (a zeroed layer ties to nothing)
    for (int64_t k = 1; !distinctive && k < in * out; ++k) distinctive = w[k] != w[0];
    if (!distinctive) return lin;
    for (const ModulePtr& e : embedders_) {
        const VariablePtr& table = e->getVar("W");
        if (table->data.shape() != Shape{out, in} || table->data.dtype() != DType::float32) continue;
        const auto* t = static_cast<const uint32_t*>(table->data.raw());
        bool same = true;
        for (int64_t o = 0; same && o < out; ++o) {
            for (int64_t i = 0; same && i < in; ++i) same = t[o * in + i] == w[i * out + o];
        }
        if (!same) continue;
        auto tied = std::make_shared<Linear>(
            in, out, LinearOptions{.useBias = lin->hasVar("b"), .initscheme = InitScheme::none, .transposed = true});
        tied->setVar("W", table);
        if (lin->hasVar("b")) tied->setVar("b", lin->getVar("b"));
        return tied;
    }
    return lin;
}

std::optional<bool> Importer::einsumProduct(const std::string& equation) {
    std::string compact; // without spaces
    for (char c : equation) {
        if (c != ' ') compact += c;
    }
    std::string eq; // and the ellipsis as one batch token '*'
    for (size_t i = 0; i < compact.size(); ++i) {
        const bool ellipsis = compact.compare(i, 3, "...") == 0;
        eq += ellipsis ? '*' : compact[i];
        if (ellipsis) i += 2;
    }
    const size_t arrow = eq.find("->"), comma = eq.find(',');
    if (arrow == std::string::npos || comma == std::string::npos || comma > arrow ||
        eq.find(',', comma + 1) != std::string::npos) {
        return std::nullopt;
    }
    const std::string x = eq.substr(0, comma), y = eq.substr(comma + 1, arrow - comma - 1), out = eq.substr(arrow + 2);
    const size_t r = out.size();
    const std::string batch = r >= 2 ? out.substr(0, r - 2) : std::string();
    auto distinct = [](const std::string& t) {
        for (size_t i = 0; i < t.size(); ++i) {
            if (t.find(t[i], i + 1) != std::string::npos) return false;
        }
        return true;
    };
    bool ok = r >= 2 && x.size() == r && y.size() == r && distinct(x) && distinct(y) && distinct(out) &&
              x.compare(0, r - 2, batch) == 0 && y.compare(0, r - 2, batch) == 0;
    const char i = ok ? out[r - 2] : 0, j = ok ? out[r - 1] : 0, k = ok ? x[r - 1] : 0;
    ok = ok && x[r - 2] == i && k != i && k != j && out.find(k) == std::string::npos;
    if (ok && y[r - 2] == k && y[r - 1] == j) return false;
    if (ok && y[r - 2] == j && y[r - 1] == k) return true;
    return std::nullopt;
}

// Einsum of two data inputs that is a batched matrix product: "...ik,...kj->...ij" (MatMul)
// or "...ik,...jk->...ij" (MatMul with transB), the batch letters (or an ellipsis) the
// same leading ones in both inputs and the output, as attention's q k^T and weights v.
void Importer::importEinsum(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"equation"});
    onlyOutputs(n, 1);
    const std::string e = a.s("equation", ""), said = "equation '" + e + "'";
    const size_t arrow = e.find("->"), comma = e.find(',');
    if (arrow == std::string::npos || comma == std::string::npos || comma > arrow ||
        e.find(',', comma + 1) != std::string::npos || n.input_size() != 2) {
        throw Unsupported{said + " (two inputs and an explicit output, such as 'bik,bkj->bij', are supported)"};
    }
    const std::optional<bool> transposed = einsumProduct(e);
    if (!transposed) {
        throw Unsupported{said + " (a batched matrix product, '...ik,...kj->...ij' or '...ik,...jk->...ij', "
                                 "is supported)"};
    }
    if (isConstant(n.input(0)) || isConstant(n.input(1)))
        throw Unsupported{"an Einsum of a constant (of data is supported)"};
    return define(n, std::make_shared<MatMul>(MatMulOptions{.transB = *transposed}), dataInputs(n, 2));
}

void Importer::importPool(const onnx::NodeProto& n, const Attributes& a) {
    const bool isMax = n.op_type() == "MaxPool";
    if (isMax) {
        a.only({"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations", "storage_order"});
    } else {
        a.only({"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad"});
    }
    onlyOutputs(n, 1);
    const bool ceil = a.i("ceil_mode", 0) != 0;
    const std::vector<int64_t> kernel = a.ints("kernel_shape");
    const size_t dims = kernel.size();
    if (dims < 1 || dims > 3) throw Unsupported{"kernel_shape of " + std::to_string(dims) + " dims"};
    const std::vector<int64_t> dil = a.ints("dilations", std::vector<int64_t>(dims, 1));
    for (int64_t d : dil) {
        if (d != 1) throw Unsupported{"dilations other than 1 are not supported"};
    }
    PoolOptions o;
    o.stride = a.ints("strides", std::vector<int64_t>(dims, 1));
    // Pooling pads both sides alike: what one side has beyond the other (auto_pad SAME with
    // an odd total, or asymmetric pads) is a Pad in front of it, of -FLT_MAX for a max (never
    // a window's maximum, as every window holds a real element) and of zeros for an average.
    // An average that does not count padding (TensorFlow's "same") is then the average over
    // the whole window times kernel size / real elements in it, a constant per position.
    const WindowPads pads = windowPads(a, kernel, o.stride, dil, spatialDimsOf(n, 0, dims));
    o.pad = pads.symmetric();
    for (size_t d = 0; d < dims; ++d) {
        if (std::max(pads.lo[d], pads.hi[d]) >= kernel[d]) {
            throw Unsupported{"a pad as large as the kernel is not supported"};
        }
    }
    o.includePad = a.i("count_include_pad", 0) != 0;
    if (pads.asymmetric()) {
        if (ceil) throw Unsupported{"ceil_mode 1 with asymmetric padding"};
        Tensor rescale; // [*out]: kernel size / real elements per window, for an average that does not count padding
        if (!isMax && !o.includePad) {
            const std::vector<int64_t> in = spatialDimsOf(n, 0, dims);
            std::vector<int64_t> outDims;
            std::vector<std::vector<float>> counts(dims); // real elements per window position, per dim
            for (size_t d = 0; d < dims; ++d) {
                if (in[d] < 0)
                    throw Unsupported{"asymmetric padding of an average over spatial dims not known at import"};
                const int64_t out = (in[d] + pads.lo[d] + pads.hi[d] - kernel[d]) / o.stride[d] + 1;
                outDims.push_back(out);
                for (int64_t i = 0; i < out; ++i) {
                    const int64_t start = i * o.stride[d] - pads.lo[d];
                    const int64_t real = std::min(start + kernel[d], in[d]) - std::max<int64_t>(start, 0);
                    counts[d].push_back(static_cast<float>(kernel[d]) / static_cast<float>(real));
                }
            }
            std::vector<float> factor(counts[0]);
            for (size_t d = 1; d < dims; ++d) {
                std::vector<float> next;
                for (float f : factor) {
                    for (float g : counts[d]) next.push_back(f * g);
                }
                factor = std::move(next);
            }
            rescale = Tensor::fromVector(Shape(outDims), factor);
            o.includePad = true;
        }
        const PadOptions padOptions{.mode = PadMode::constant,
                                    .fillValue = isMax ? -std::numeric_limits<float>::max() : 0.0f};
        auto seq = afterPad(dims, pads.extra(), padOptions, poolOf(isMax, dims, kernel, o));
        if (rescale.defined()) seq->append(std::make_shared<MulAddConst>(rescale, Tensor()));
        return define(n, seq, dataInputs(n, 1));
    }
    if (ceil) return importCeilPool(n, isMax, kernel, o);
    return define(n, poolOf(isMax, dims, kernel, o), dataInputs(n, 1));
}

// ceil_mode 1: the windows the ceiling adds reach past the high edge, so the input is
// padded there (and by its pads) and pooled without padding: Pad1D/2D, then the pool. A max
// pads with -FLT_MAX (never the max of a window that holds a real element, as every window
// does). An average pads with zeros, sums over whole windows and divides each sum by the
// elements its window covers: of the input (count_include_pad 0), or of the input and its
// pads (1; the ceiling's part is never counted), as PyTorch and ONNX count them.
void Importer::importCeilPool(const onnx::NodeProto& n, bool isMax, const std::vector<int64_t>& kernel, PoolOptions o) {
    const size_t dims = kernel.size();
    if (dims > 2) throw Unsupported{"ceil_mode 1 on a 3-D pool is not supported"};
    auto in = shapes_.find(n.input(0));
    if (in == shapes_.end() || in->second.size() != dims + 2)
        throw Unsupported{"ceil_mode 1 on an input whose shape is not known at import"};
    std::vector<int64_t> loHi, outDims;
    std::vector<float> factor{1.0f}; // kernel size / elements covered, per output position
    bool extra = false;
    for (size_t d = 0; d < dims; ++d) {
        const int64_t size = in->second[2 + d].value, k = kernel[d], st = o.stride[d], p = o.pad[d];
        if (size < 0) throw Unsupported{"ceil_mode 1 on a spatial dim not known at import"};
        int64_t out = (size + 2 * p - k + st - 1) / st + 1;
        if ((out - 1) * st >= size + p) --out; // the last window must start inside the input or its left pad
        const int64_t high = std::max<int64_t>(0, (out - 1) * st + k - (size + 2 * p));
        extra = extra || high > 0;
        loHi.push_back(p);
        loHi.push_back(p + high);
        outDims.push_back(out);
        std::vector<float> next;
        for (float f : factor) {
            for (int64_t i = 0; i < out; ++i) {
                const int64_t start = i * st - p, end = start + k;
                const int64_t covered = o.includePad ? std::min(end, size + p) - std::max(start, -p)
                                                     : std::min(end, size) - std::max<int64_t>(start, 0);
                next.push_back(f * static_cast<float>(k) / static_cast<float>(covered));
            }
        }
        factor = std::move(next);
    }
    // the ceiling adds no window here: a plain pool
    if (!extra) return define(n, poolOf(isMax, dims, kernel, o), dataInputs(n, 1));
    const PadOptions padOptions{.mode = PadMode::constant,
                                .fillValue = isMax ? -std::numeric_limits<float>::max() : 0.0f};
    const bool rescaled = !isMax && std::any_of(factor.begin(), factor.end(), [](float f) { return f != 1.0f; });
    o.pad.assign(dims, 0);
    o.includePad = true; // nothing to exclude: the pads are the Pad's, and the rescale divides
    auto seq = afterPad(dims, loHi, padOptions, poolOf(isMax, dims, kernel, o));
    if (rescaled) seq->append(std::make_shared<MulAddConst>(Tensor::fromVector(Shape(outDims), factor), Tensor()));
    return define(n, seq, dataInputs(n, 1));
}

void Importer::importBatchNorm(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"epsilon", "momentum", "spatial", "training_mode", "is_test"});
    onlyOutputs(n, 1);
    if (a.i("spatial", 1) != 1) throw Unsupported{"spatial 0 is not supported"};
    if (a.i("training_mode", 0) != 0) throw Unsupported{"training_mode 1 is not supported (Tessera's mode decides)"};
    const Constant& scale = requireConstant(n, 1, "scale");
    const Constant& bias = requireConstant(n, 2, "B");
    const Constant& mean = requireConstant(n, 3, "the mean");
    const Constant& var = requireConstant(n, 4, "the variance");
    const int64_t maps = scale.tensor.numel();
    const float momentum = a.f("momentum", 0.9f);
    BatchNormOptions o{.epsilon = a.f("epsilon", 1e-5f), .initFactor = 1.0f - momentum, .minFactor = 1.0f - momentum};
    // The module by the input's declared rank: [N, C] or [N, C, L], [N, C, H, W], [N, C, D, H, W].
    const int64_t rank = rankOf(n, 0);
    std::shared_ptr<BatchNormND> bn;
    if (rank == 2 || rank == 3) {
        bn = std::make_shared<BatchNorm1D>(maps, o);
    } else if (rank == 5) {
        bn = std::make_shared<BatchNorm3D>(maps, o);
    } else {
        bn = std::make_shared<BatchNorm2D>(maps, o);
    }
    bn->getVar("scale")->data.copyFrom(scale.tensor.reshape({maps}));
    bn->getVar("bias")->data.copyFrom(bias.tensor.reshape({maps}));
    bn->setAttr("mean", mean.tensor.reshape({maps}).clone());
    bn->setAttr("var", var.tensor.reshape({maps}).clone());
    return define(n, bn, dataInputs(n, 1));
}

} // namespace tessera::onnx_io
