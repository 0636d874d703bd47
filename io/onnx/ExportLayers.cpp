#include "io/onnx/Exporter.h"

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
#include "backend/Files.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Attention.h"
#include "modules/BatchNormND.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/DropPath.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/MultiheadAttention.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/PositionalEncoding.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/Tile.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

#include <nlohmann/json.hpp>

namespace tessera::onnx_io {

// No Gelu op before opset 20: its erf form, which the import reads back as one Gelu.
void Exporter::emitGelu(const std::vector<std::string>& in, const std::vector<std::string>& out,
                        const std::string& path) {
    const std::string d = valueName(path + "_scaled"), e = valueName(path + "_erf"), a = valueName(path + "_erf1"),
                      m2 = valueName(path + "_xerf1");
    node("Div", {in[0], initScalar(path + ".sqrt2", 1.41421356f)}, {d}, path + "_div");
    node("Erf", {d}, {e}, path + "_erf");
    node("Add", {e, initScalar(path + ".one", 1.0f)}, {a}, path + "_add");
    node("Mul", {in[0], a}, {m2}, path + "_mul");
    node("Mul", {m2, initScalar(path + ".half", 0.5f)}, out, path);
}

// No AffineGrid before opset 20: the grid as a product with a constant base grid, rows
// (x_t, y_t, 1) of the output's pixels, Transpose(theta) -> MatMul(base) -> Reshape to
// [N, Ho, Wo, 2], then GridSample (opset 16) with Tessera's sampling: bilinear, zero
// outside, -1 and 1 at the corner pixels' centres (align_corners 1). Read back as one
// SpatialTf.
void Exporter::emitSpatialTf(const Blueprint& bp, const std::vector<std::string>& in, const Shapes& inShapes,
                             const std::vector<std::string>& out, const std::string& path) {
    if (opset_ < 16) {
        throw Unsupported{"SpatialTf needs GridSample, in opsets 16 and later (this export writes opset " +
                          std::to_string(opset_) + ")"};
    }
    const int64_t Ho = schemeInt(bp, "height", 0) ? schemeInt(bp, "height", 0) : inShapes[0][2];
    const int64_t Wo = schemeInt(bp, "width", 0) ? schemeInt(bp, "width", 0) : inShapes[0][3];
    std::vector<float> base;
    for (int64_t i = 0; i < Ho; ++i) {
        for (int64_t j = 0; j < Wo; ++j)
            base.insert(base.end(), {element::gridCoord(j, Wo), element::gridCoord(i, Ho), 1.0f});
    }
    const std::string t = valueName(path + "_thetaT"), g = valueName(path + "_grid2"), grid = valueName(path + "_grid");
    attr(node("Transpose", {in[1]}, {t}, path + "_transpose"), "perm", std::vector<int64_t>{0, 2, 1});
    node("MatMul", {init(path + ".base", Tensor::fromVector({Ho * Wo, 3}, base)), t}, {g}, path + "_grid");
    node("Reshape", {g, initInts(path + ".shape", {0, Ho, Wo, 2})}, {grid}, path + "_reshape");
    onnx::NodeProto* n = node("GridSample", {in[0], grid}, out, path);
    attr(n, "align_corners", int64_t{1});
    attr(n, "mode", std::string("bilinear"));
    attr(n, "padding_mode", std::string("zeros"));
}

// An RNN as one ONNX LSTM / GRU / RNN node per layer (weights in ONNX's gate order,
// biases as [Wb, Rb]), each output Y [T, D, N, H] transposed and reshaped back to
// Tessera's [T, N, D H]; batch-first data transposed around them; the last step sliced
// out unless getSequences.
void Exporter::emitRnn(RNN& m, const Blueprint& bp, const std::vector<std::string>& in, const Shapes& inShapes,
                       const std::vector<std::string>& out, const std::string& path) {
    const RnnMode mode = rnnModeFromString(schemeString(bp, "mode"));
    const bool bi = schemeBool(bp, "bidirectional"), batchFirst = schemeBool(bp, "batchFirst");
    const bool sequences = schemeBool(bp, "getSequences");
    const bool linearBeforeReset = m.options().linearBeforeReset;
    const int64_t H = schemeInt(bp, "hsize", 1), layers = schemeInt(bp, "layers", 1), D = bi ? 2 : 1;
    const int64_t G = rnnGates(mode);
    const std::vector<int64_t> order = onnxGateOrder(mode);
    (void)inShapes;
    if (schemeBool(bp, "lengths"))
        throw Unsupported{"an RNN with a lengths input is not exported (the export declares float inputs; "
                          "ONNX's sequence_lens is int32)"};
    const bool initial = schemeBool(bp, "initialStates"), final = schemeBool(bp, "finalStates");
    const bool lstm = mode == RnnMode::lstm;
    // Layer k's rows [k D, (k + 1) D) of a state input [layers D, N, H] (the input itself
    // for one layer).
    auto stateOf = [&](size_t input, int64_t k, const std::string& lp) {
        if (layers == 1) return in[input];
        const std::string v = valueName(lp + (input == 1 ? "_h0" : "_c0"));
        node("Slice",
             {in[input], initInts(v + ".starts", {k * D}), initInts(v + ".ends", {(k + 1) * D}),
              initInts(v + ".axes", {0})},
             {v}, v);
        return v;
    };
    std::vector<std::string> finals[2]; // each layer's Y_h, Y_c
    std::string x = in[0];
    if (batchFirst) {
        const std::string t = valueName(path + "_time_major");
        attr(node("Transpose", {x}, {t}, path + "_time_major"), "perm", std::vector<int64_t>{1, 0, 2});
        x = t;
    }
    auto gates = [&](const Tensor& t, int64_t cols) { // [G H, cols] in ONNX's gate order
        const std::vector<float> v = t.toHost().toVector<float>();
        std::vector<float> r(v.size());
        for (int64_t j = 0; j < G; ++j) {
            std::copy(v.begin() + order[j] * H * cols, v.begin() + (order[j] + 1) * H * cols, r.begin() + j * H * cols);
        }
        return r;
    };
    for (int64_t k = 0; k < layers; ++k) {
        std::vector<float> w, r, b;
        int64_t inSize = 0;
        for (int64_t dir = 0; dir < D; ++dir) {
            const std::string sfx = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
            const Tensor& wih = m.getVar("weight_ih" + sfx)->data;
            inSize = wih.shape()[1];
            const auto wv = gates(wih, inSize), rv = gates(m.getVar("weight_hh" + sfx)->data, H);
            w.insert(w.end(), wv.begin(), wv.end());
            r.insert(r.end(), rv.begin(), rv.end());
            const auto bi_ = gates(m.getVar("bias_ih" + sfx)->data, 1), bh = gates(m.getVar("bias_hh" + sfx)->data, 1);
            b.insert(b.end(), bi_.begin(), bi_.end());
            b.insert(b.end(), bh.begin(), bh.end());
        }
        const std::string lp = path + "_l" + std::to_string(k);
        const std::string y = valueName(lp + "_Y");
        std::vector<std::string> states; // initial_h (, initial_c), sliced before the node that reads them
        for (size_t i = 1; i <= (lstm ? 2u : 1u) && initial; ++i) states.push_back(stateOf(i, k, lp));
        onnx::NodeProto* n = node(mode == RnnMode::lstm  ? "LSTM"
                                  : mode == RnnMode::gru ? "GRU"
                                                         : "RNN",
                                  {x, init(lp + ".W", Tensor::fromVector({D, G * H, inSize}, w)),
                                   init(lp + ".R", Tensor::fromVector({D, G * H, H}, r)),
                                   init(lp + ".B", Tensor::fromVector({D, 2 * G * H}, b))},
                                  {y}, lp);
        if (initial) n->add_input(""); // no sequence_lens
        for (const std::string& v : states) n->add_input(v);
        for (int s = 0; s < (lstm ? 2 : 1) && final; ++s) {
            const std::string v =
                layers == 1 ? out[static_cast<size_t>(1 + s)] : valueName(lp + (s == 0 ? "_Y_h" : "_Y_c"));
            n->add_output(v);
            finals[s].push_back(v);
        }
        attr(n, "hidden_size", H);
        attr(n, "direction", std::string(bi ? "bidirectional" : "forward"));
        if (mode == RnnMode::gru) attr(n, "linear_before_reset", int64_t{linearBeforeReset ? 1 : 0});
        if (mode == RnnMode::relu || mode == RnnMode::tanh) {
            attr(n, "activations",
                 std::vector<std::string>(static_cast<size_t>(D), mode == RnnMode::relu ? "Relu" : "Tanh"));
        }
        const std::string t = valueName(lp + "_TNDH");
        attr(node("Transpose", {y}, {t}, lp + "_TNDH"), "perm", std::vector<int64_t>{0, 2, 1, 3});
        const bool lastOut = k == layers - 1 && sequences && !batchFirst;
        x = lastOut ? out[0] : valueName(lp + "_out");
        node("Reshape", {t, initInts(lp + ".shape", {0, 0, D * H})}, {x}, lp + "_out");
    }
    for (int s = 0; s < 2 && final && layers > 1; ++s) { // the layers' states, layer after layer
        if (!finals[s].empty())
            attr(node("Concat", finals[s], {out[static_cast<size_t>(1 + s)]}, path + (s ? "_cN" : "_hN")), "axis",
                 int64_t{0});
    }
    if (sequences) {
        if (batchFirst)
            attr(node("Transpose", {x}, {out[0]}, path + "_batch_major"), "perm", std::vector<int64_t>{1, 0, 2});
        return;
    }
    const std::string last = valueName(path + "_last");
    node("Slice",
         {x, initInts(path + ".starts", {-1}), initInts(path + ".ends", {std::numeric_limits<int64_t>::max()}),
          initInts(path + ".axes", {0})},
         {last}, path + "_last");
    node("Squeeze", {last, initInts(path + ".axes0", {0})}, {out[0]}, path);
}

// Attention (no Attention op before opset 23): MatMul(q, Transpose(k)) -> Mul(scale) ->
// Add(mask) -> Add(causal mask) -> Softmax(-1) -> MatMul(v); the import reads it back as
// those layers. q [..., Tq, d] and k [..., Tk, d] of rank `rank`.
void Exporter::attentionNodes(const std::string& q, const std::string& k, const std::string& v, const std::string& mask,
                              size_t rank, int64_t Tq, int64_t Tk, int64_t d, bool causal, float scale,
                              const std::string& out, const std::string& path) {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < static_cast<int64_t>(rank); ++i) perm.push_back(i);
    std::swap(perm[rank - 1], perm[rank - 2]);
    const std::string kT = valueName(path + "_kT"), qk = valueName(path + "_qk");
    attr(node("Transpose", {k}, {kT}, path + "_transpose"), "perm", perm);
    node("MatMul", {q, kT}, {qk}, path + "_qk");
    std::string scores = valueName(path + "_scores");
    if (scale <= 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(d));
    node("Mul", {qk, initScalar(path + ".scale", scale)}, {scores}, path + "_scale");
    if (!mask.empty()) {
        const std::string masked = valueName(path + "_masked");
        node("Add", {scores, mask}, {masked}, path + "_mask");
        scores = masked;
    }
    if (causal) {
        const std::string causalOut = valueName(path + "_causal");
        node("Add", {scores, init(path + ".causal", AttentionKernel::causalTable(Tq, Tk))}, {causalOut},
             path + "_causal");
        scores = causalOut;
    }
    const std::string weights = valueName(path + "_weights");
    attr(node("Softmax", {scores}, {weights}, path + "_softmax"), "axis", int64_t{-1});
    node("MatMul", {weights, v}, {out}, path);
}

// ScaledDotProductAttention: the nodes above (dropout is a training form: none here).
void Exporter::emitAttention(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const AttentionOptions& o = static_cast<const ScaledDotProductAttention&>(m).options();
    const Shape& q = inShapes[0];
    const size_t r = q.rank();
    attentionNodes(in[0], in[1], in[2], in.size() == 4 ? in[3] : std::string(), r, q[r - 2], inShapes[1][r - 2],
                   q[r - 1], o.causal, o.scale, out[0], path);
}

// MultiheadAttention: per projection MatMul(x, W_i^T) + b_i (read back as Linear layers),
// Reshape to [N, T, H, d] and Transpose to heads; the masks reshaped to broadcast over the
// heads and added into one; the attention nodes; the heads joined back (Transpose,
// Reshape) and out_proj as MatMul + Add. Time-major inputs and the output are transposed
// at the edges.
void Exporter::emitMultiheadAttention(const Layer& l) {
    // Plain references, not a structured binding: the lambdas below capture them (clang 14
    // cannot capture structured bindings).
    const Module& m = l.m;
    const auto& in = l.in;
    const Shapes& inShapes = l.inShapes;
    const auto& out = l.out;
    const std::string& path = l.path;
    const auto& mha = static_cast<const MultiheadAttention&>(m);
    const MultiheadAttentionOptions& o = mha.options();
    const int64_t E = mha.embedDim(), H = mha.numHeads(), d = E / H;
    const size_t masks = (o.keyPaddingMask ? 1 : 0) + (o.attnMask ? 1 : 0), seqs = in.size() - masks;
    const size_t nDim = o.batchFirst ? 0 : 1;
    const int64_t L = inShapes[0][1 - nDim], S = inShapes[seqs == 3 ? 1 : 0][1 - nDim];
    auto batchFirst = [&](const std::string& x, const std::string& name) {
        if (o.batchFirst) return x;
        const std::string t = valueName(path + "_" + name + "_batch_first");
        attr(node("Transpose", {x}, {t}, path + "_" + name + "_batch_first"), "perm", std::vector<int64_t>{1, 0, 2});
        return t;
    };
    // W^T [E, E] of part i of a [parts * E, E] weight, and bias part i
    auto part = [](const Tensor& w, int64_t i) {
        const std::vector<float> all = w.toVector<float>();
        const int64_t E = w.shape()[1];
        std::vector<float> t(static_cast<size_t>(E * E));
        for (int64_t r = 0; r < E; ++r)
            for (int64_t c = 0; c < E; ++c)
                t[static_cast<size_t>(c * E + r)] = all[static_cast<size_t>((i * E + r) * E + c)];
        return Tensor::fromVector({E, E}, t);
    };
    auto linear = [&](const std::string& x, const Tensor& wT, const Tensor& b, const std::string& name) {
        const std::string product = valueName(path + "_" + name + "_matmul");
        node("MatMul", {x, init(path + "." + name + ".W", wT)}, {product}, path + "_" + name + "_matmul");
        if (!b.defined()) return product;
        const std::string y = valueName(path + "_" + name);
        node("Add", {product, init(path + "." + name + ".b", b)}, {y}, path + "_" + name);
        return y;
    };
    const Tensor W = l.var("in_proj_weight");
    const Tensor b = o.bias ? l.var("in_proj_bias") : Tensor();
    const char* names[] = {"q", "k", "v"};
    std::string heads[3];
    std::string x[3];
    for (size_t i = 0; i < 3; ++i) {
        const size_t input = seqs == 3 ? i : 0;
        x[i] = i == input || i == 0 ? batchFirst(in[input], names[i]) : x[0];
        const Tensor bi =
            b.defined() ? b.slice(static_cast<int64_t>(i) * E, static_cast<int64_t>(i + 1) * E).clone() : Tensor();
        const std::string p = linear(x[i], part(W, static_cast<int64_t>(i)), bi, std::string(names[i]) + "_proj");
        const std::string split = valueName(path + "_" + names[i] + "_split");
        node("Reshape", {p, initInts(path + "." + names[i] + "_split", {0, 0, H, d})}, {split},
             path + "_" + names[i] + "_split");
        heads[i] = valueName(path + "_" + names[i] + "_heads");
        attr(node("Transpose", {split}, {heads[i]}, path + "_" + names[i] + "_heads"), "perm",
             std::vector<int64_t>{0, 2, 1, 3});
    }
    std::string mask;
    size_t at = seqs;
    if (o.keyPaddingMask) {
        mask = valueName(path + "_padding");
        // 0: the batch dim copied, free as the export writes it
        node("Reshape", {in[at++], initInts(path + ".padding_shape", {0, 1, 1, S})}, {mask}, path + "_padding");
    }
    if (o.attnMask) {
        std::string a = in[at];
        if (inShapes[at].rank() == 3) {
            a = valueName(path + "_attn_mask");
            node("Reshape", {in[at], initInts(path + ".attn_mask_shape", {-1, H, L, S})}, {a}, path + "_attn_mask");
        }
        if (mask.empty()) {
            mask = a;
        } else {
            const std::string both = valueName(path + "_masks");
            node("Add", {mask, a}, {both}, path + "_masks");
            mask = both;
        }
    }
    const std::string attended = valueName(path + "_attended");
    attentionNodes(heads[0], heads[1], heads[2], mask, 4, L, S, d, o.causal, 0.0f, attended, path + "_attention");
    const std::string back = valueName(path + "_join_t"), joined = valueName(path + "_join");
    attr(node("Transpose", {attended}, {back}, path + "_join_t"), "perm", std::vector<int64_t>{0, 2, 1, 3});
    node("Reshape", {back, initInts(path + ".join", {0, 0, E})}, {joined}, path + "_join");
    const Tensor Wo = l.var("out_proj_weight");
    const std::string y = linear(joined, part(Wo, 0), o.bias ? l.var("out_proj_bias") : Tensor(), "out_proj");
    if (o.batchFirst) return void(node("Identity", {y}, out, path));
    attr(node("Transpose", {y}, out, path), "perm", std::vector<int64_t>{1, 0, 2});
}

// Parameter: its weight [1, *shape] expanded over the batch of its input,
// Expand(weight, Concat(Shape(x)[0], shape)); the import reads an initializer expanded
// along a batch dim of a graph input back as a Parameter.
void Exporter::emitParameter(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const Tensor w = l.var("weight");
    std::vector<int64_t> dims = w.shape().dims();
    dims.insert(dims.begin(), 1);
    const std::string shape = valueName(path + "_input_shape"), batch = valueName(path + "_batch"),
                      target = valueName(path + "_target");
    node("Shape", {in[0]}, {shape}, path + "_input_shape");
    node("Gather", {shape, initInts(path + ".first", {0})}, {batch}, path + "_batch");
    const std::vector<int64_t> rest(dims.begin() + 1, dims.end());
    attr(node("Concat", {batch, initInts(path + ".shape", rest)}, {target}, path + "_target"), "axis", int64_t{0});
    node("Expand", {init(path + ".weight", w, Shape(dims)), target}, out, path);
}

// Embedder: Gather of its table's rows by the ids (int32; the import reads a Gather from a
// table by data ids back as an Embedder).
void Exporter::emitEmbedder(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string table = init(path + ".W", l.var("W"));
    if (schemeValue(bp, "paddingIdx")) paddingIdx[table] = schemeInt(bp, "paddingIdx", 0);
    attr(node("Gather", {table, in[0]}, out, path), "axis", int64_t{0});
}

// PositionalEncoding: Add of its table for the input's length (a constant).
void Exporter::emitPositionalEncoding(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const Shape& s = inShapes[0];
    const double base = std::get<double>(*schemeValue(bp, "base"));
    const Tensor table = PositionalEncoding::table(s[s.rank() - 2], s[s.rank() - 1], static_cast<float>(base));
    node("Add", {in[0], init(path + ".table", table)}, out, path);
}

// Scale: Mul by its factors (read back as a MulAddConst of them)
void Exporter::emitScale(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    node("Mul", {in[0], init(path + ".weight", l.var("weight"))}, out, path);
}

// LayerNorm, RMSNorm: the decomposed form (ONNX has no RMSNormalization before opset 23).
void Exporter::emitNormDecomposed(const std::string& x, int64_t axes, float eps, bool centred,
                                  const std::string& weight, const std::string& bias,
                                  const std::vector<std::string>& out, const std::string& path) {
    std::vector<int64_t> over;
    for (int64_t k = -axes; k < 0; ++k) over.push_back(k);
    auto reduceMean = [&](const std::string& in, const std::string& name) {
        const std::string y = valueName(path + "_" + name);
        onnx::NodeProto* n = node("ReduceMean", {in}, {y}, path + "_" + name);
        attr(n, "axes", over);
        attr(n, "keepdims", int64_t{1});
        return y;
    };
    std::string d = x;
    if (centred) {
        d = valueName(path + "_centred");
        node("Sub", {x, reduceMean(x, "mean")}, {d}, path + "_sub");
    }
    const std::string sq = valueName(path + "_square"), ve = valueName(path + "_var_eps"),
                      sd = valueName(path + "_std");
    node("Pow", {d, initScalar(path + ".two", 2.0f)}, {sq}, path + "_pow");
    node("Add", {reduceMean(sq, "var"), initScalar(path + ".epsilon", eps)}, {ve}, path + "_add_eps");
    node("Sqrt", {ve}, {sd}, path + "_sqrt");
    std::vector<std::pair<std::string, std::string>> steps{{"Div", sd}}; // op, second input
    if (!weight.empty()) steps.emplace_back("Mul", weight);
    if (!bias.empty()) steps.emplace_back("Add", bias);
    std::string v = d;
    for (size_t k = 0; k < steps.size(); ++k) {
        const bool last = k + 1 == steps.size();
        const std::vector<std::string> to =
            last ? out : std::vector<std::string>{valueName(path + "_" + steps[k].first)};
        node(steps[k].first, {v, steps[k].second}, to, last ? path : path + "_" + steps[k].first);
        v = to[0];
    }
}

// LayerNorm: LayerNormalization from opset 17, its decomposition before.
void Exporter::emitLayerNorm(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const auto& ln = static_cast<const LayerNorm&>(m);
    const auto k = static_cast<int64_t>(ln.normalizedShape().size());
    const float eps = ln.options().epsilon;
    const std::string w = m.hasVar("weight") ? init(path + ".weight", l.var("weight")) : "";
    const std::string b = m.hasVar("bias") ? init(path + ".bias", l.var("bias")) : "";
    if (opset_ < 17) return emitNormDecomposed(in[0], k, eps, true, w, b, out, path);
    std::vector<std::string> ins{
        in[0], w.empty() ? init(path + ".weight", Tensor::full(Shape(ln.normalizedShape()), 1.0f)) : w};
    if (!b.empty()) ins.push_back(b);
    onnx::NodeProto* n = node("LayerNormalization", ins, out, path);
    attr(n, "axis", -k);
    attr(n, "epsilon", eps);
}

// RMSNorm
void Exporter::emitRMSNorm(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const auto& rms = static_cast<const RMSNorm&>(m);
    const std::string w = m.hasVar("weight") ? init(path + ".weight", l.var("weight")) : "";
    emitNormDecomposed(in[0], static_cast<int64_t>(rms.normalizedShape().size()), rms.options().epsilon, false, w, "",
                       out, path);
}

// GroupNorm: no GroupNormalization with per-channel parameters before opset 21. As
// PyTorch writes it: Reshape to [N, G, -1], InstanceNormalization, Reshape back, then the
// per-channel weight and bias.
void Exporter::emitGroupNorm(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const auto& gn = static_cast<const GroupNorm&>(m);
    const int64_t groups = gn.groups();
    const std::string grouped = valueName(path + "_grouped"), normed = valueName(path + "_normed");
    node("Reshape", {in[0], initInts(path + ".grouped_shape", {0, groups, -1})}, {grouped}, path + "_group");
    onnx::NodeProto* n = node(
        "InstanceNormalization",
        {grouped, init(path + ".ones", Tensor::full({groups}, 1.0f)), init(path + ".zeros", Tensor::zeros({groups}))},
        {normed}, path + "_instance_norm");
    attr(n, "epsilon", gn.options().epsilon);
    std::vector<int64_t> back = inShapes[0].dims(), perChannel{gn.maps()};
    back[0] = 0; // the batch, as the input has it
    for (size_t k = 2; k < back.size(); ++k) perChannel.push_back(1);
    if (!m.hasVar("weight")) return void(node("Reshape", {normed, initInts(path + ".shape", back)}, out, path));
    const std::string shaped = valueName(path + "_shaped"), scaled = valueName(path + "_scaled");
    node("Reshape", {normed, initInts(path + ".shape", back)}, {shaped}, path + "_ungroup");
    node("Mul", {shaped, init(path + ".weight", l.var("weight"), Shape(perChannel))}, {scaled}, path + "_weight");
    node("Add", {scaled, init(path + ".bias", l.var("bias"), Shape(perChannel))}, out, path);
}

} // namespace tessera::onnx_io
