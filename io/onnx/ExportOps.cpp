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

#include <nlohmann/json.hpp>

namespace tessera::onnx_io {

// The writers by layer class: one row per class (classes that differ only in a parameter
// share a function, which reads the class name). A class with no row is reported as having
// no ONNX counterpart, with the other layers' reports.
const std::unordered_map<std::string, Exporter::EmitFn>& Exporter::emitters() {
    static const std::unordered_map<std::string, EmitFn> table = {
        {"Activation", &Exporter::emitActivation},
        {"Add", &Exporter::emitAdd},
        {"AvgPool1D", &Exporter::emitPool},
        {"AvgPool2D", &Exporter::emitPool},
        {"AvgPool3D", &Exporter::emitPool},
        {"BatchNorm", &Exporter::emitBatchNorm},
        {"BatchNorm1D", &Exporter::emitBatchNorm},
        {"BatchNorm2D", &Exporter::emitBatchNorm},
        {"BatchNorm3D", &Exporter::emitBatchNorm},
        {"Concat", &Exporter::emitConcat},
        {"Conv1D", &Exporter::emitConv},
        {"Conv2D", &Exporter::emitConv},
        {"Conv3D", &Exporter::emitConv},
        {"CrossMapLRN", &Exporter::emitCrossMapLRN},
        {"Deconv1D", &Exporter::emitConv},
        {"Deconv2D", &Exporter::emitConv},
        {"Deconv3D", &Exporter::emitConv},
        {"ArgMax", &Exporter::emitArgMax},
        {"ArgMin", &Exporter::emitArgMax},
        {"Cast", &Exporter::emitCast},
        {"Div", &Exporter::emitSubOrDiv},
        {"Dropout", &Exporter::emitDropout},
        {"DropPath", &Exporter::emitInferenceIdentity},
        {"Dropout2D", &Exporter::emitInferenceIdentity},
        {"Embedder", &Exporter::emitEmbedder},
        {"Flatten", &Exporter::emitFlatten},
        {"Gelu", &Exporter::emitGeluLayer},
        {"GlobalAvgPool", &Exporter::emitGlobalAvgPool},
        {"Identity", &Exporter::emitIdentity},
        {"GroupNorm", &Exporter::emitGroupNorm},
        {"InstanceNorm2D", &Exporter::emitInstanceNorm2D},
        {"LayerNorm", &Exporter::emitLayerNorm},
        {"Linear", &Exporter::emitLinear},
        {"MatMul", &Exporter::emitMatMul},
        {"MaxPool1D", &Exporter::emitPool},
        {"MaxPool2D", &Exporter::emitPool},
        {"MaxPool3D", &Exporter::emitPool},
        {"MoveAxis", &Exporter::emitTranspose},
        {"Mul", &Exporter::emitMul},
        {"MulAddConst", &Exporter::emitMulAddConst},
        {"MultiheadAttention", &Exporter::emitMultiheadAttention},
        {"NoiseInjector", &Exporter::emitInferenceIdentity},
        {"PRelu", &Exporter::emitPRelu},
        {"Pow", &Exporter::emitPow},
        {"Pad1D", &Exporter::emitPad},
        {"Parameter", &Exporter::emitParameter},
        {"PositionalEncoding", &Exporter::emitPositionalEncoding},
        {"Pad2D", &Exporter::emitPad},
        {"RMSNorm", &Exporter::emitRMSNorm},
        {"RNN", &Exporter::emitRNN},
        {"ReduceMean", &Exporter::emitReduceMean},
        {"ReduceSum", &Exporter::emitReduceSum},
        {"GatherElements", &Exporter::emitGatherElements},
        {"CumSum", &Exporter::emitCumSum},
        {"GridSample", &Exporter::emitGridSample},
        {"ScatterElements", &Exporter::emitScatterElements},
        {"TopK", &Exporter::emitTopK},
        {"Replicate", &Exporter::emitReplicate},
        {"Reshape", &Exporter::emitReshape},
        {"Slice", &Exporter::emitSlice},
        {"SoftMax", &Exporter::emitSoftMax},
        {"LogSoftMax", &Exporter::emitSoftMax},
        {"Scale", &Exporter::emitScale},
        {"ScaledDotProductAttention", &Exporter::emitAttention},
        {"SpatialTf", &Exporter::emitSpatialTfLayer},
        {"Split", &Exporter::emitSplit},
        {"Sub", &Exporter::emitSubOrDiv},
        {"SwapAxes", &Exporter::emitTranspose},
        {"Tile", &Exporter::emitTile},
        {"Transpose", &Exporter::emitTranspose},
        {"Upsample2D", &Exporter::emitUpsample},
        {"Upsample3D", &Exporter::emitUpsample},
        {"Resize2D", &Exporter::emitUpsample},
        {"Resize3D", &Exporter::emitUpsample},
    };
    return table;
}

void Exporter::emitLayer(Module& m, const std::vector<std::string>& in, const Shapes& inShapes,
                         const std::vector<std::string>& out, const std::string& path) {
    const std::string cls = m.classname();
    const auto& table = emitters();
    const auto it = table.find(cls);
    if (it == table.end()) throw Unsupported{"no ONNX counterpart is exported for " + cls};
    const Blueprint bp = m.blueprint();
    (this->*it->second)(Layer{m, bp, in, inShapes, out, path});
}

// Cast: the exported graph's values are float, so a Cast to float16 or bfloat16 is that Cast
// and one back to float (the rounding stays; what follows reads float, as Tessera's layers
// read a 16-bit value as float32); a Cast to float32 is an Identity. Casts to int32 are not
// exported.
void Exporter::emitCast(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string from = schemeString(bp, "intype"), to = schemeString(bp, "outtype");
    // int32 to float and float to int32 (a mask of 0 and 1, or ids): ONNX's Cast, which
    // truncates toward zero as Tessera's does
    if ((from == "int32") != (to == "int32")) {
        return void(attr(node("Cast", in, out, path), "to",
                         static_cast<int64_t>(to == "int32"      ? onnx::TensorProto::INT32
                                              : to == "float16"  ? onnx::TensorProto::FLOAT16
                                              : to == "bfloat16" ? onnx::TensorProto::BFLOAT16
                                                                 : onnx::TensorProto::FLOAT)));
    }
    if (to == "float32") return void(node("Identity", in, out, path));
    if (to != "float16" && to != "bfloat16") {
        throw Unsupported{"a Cast to " + to + " (to float32, float16 and bfloat16 are exported)"};
    }
    const std::string rounded = path + "_" + to;
    attr(node("Cast", in, {rounded}, path), "to",
         static_cast<int64_t>(to == "float16" ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::BFLOAT16));
    attr(node("Cast", {rounded}, out, path + "_back"), "to", static_cast<int64_t>(onnx::TensorProto::FLOAT));
}

// Identity
void Exporter::emitIdentity(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    return void(node("Identity", in, out, path));
}

// Linear. W stored [out, in] (transposed) is one initializer with what shares it (an
// Embedder's table, which the import ties the head to again): Gemm's transB, or before a
// MatMul a Transpose of it.
void Exporter::emitLinear(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const bool transposed = static_cast<const Linear&>(m).transposed();
    if (inShapes[0].rank() != 2) { // over the last axis of any rank: MatMul, then Add of the bias
        std::string w = init(path + ".W", l.var("W"));
        if (transposed) {
            const std::string wT = valueName(path + "_WT");
            attr(node("Transpose", {w}, {wT}, path + "_transpose"), "perm", std::vector<int64_t>{1, 0});
            w = wT;
        }
        if (!m.hasVar("b")) return void(node("MatMul", {in[0], w}, out, path));
        const std::string product = valueName(path + "_matmul");
        node("MatMul", {in[0], w}, {product}, path + "_matmul");
        return void(node("Add", {product, init(path + ".b", l.var("b"))}, out, path));
    }
    std::vector<std::string> ins = {in[0], init(path + ".W", l.var("W"))};
    if (m.hasVar("b")) ins.push_back(init(path + ".b", l.var("b")));
    onnx::NodeProto* gemm = node("Gemm", ins, out, path);
    if (transposed) attr(gemm, "transB", int64_t{1});
}

// MatMul: a Transpose of b's last two dims first with transB, a Mul by alpha after when not 1.
void Exporter::emitMatMul(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const MatMulOptions& o = static_cast<const MatMul&>(m).options();
    std::string b = in[1];
    if (o.transB) {
        std::vector<int64_t> perm;
        for (int64_t k = 0; k < static_cast<int64_t>(inShapes[1].rank()); ++k) perm.push_back(k);
        std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
        b = valueName(path + "_bT");
        attr(node("Transpose", {in[1]}, {b}, path + "_transpose"), "perm", perm);
    }
    if (o.alpha == 1.0f) return void(node("MatMul", {in[0], b}, out, path));
    const std::string product = valueName(path + "_product");
    node("MatMul", {in[0], b}, {product}, path + "_matmul");
    node("Mul", {product, initScalar(path + ".alpha", o.alpha)}, out, path);
}

// Conv1D, Conv2D, Conv3D, Deconv1D, Deconv2D, Deconv3D
void Exporter::emitConv(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string cls = m.classname();
    std::vector<std::string> ins = {in[0], init(path + ".W", l.var("W"))};
    if (m.hasVar("b")) ins.push_back(init(path + ".b", l.var("b")));
    onnx::NodeProto* n = node(cls.rfind("Deconv", 0) == 0 ? "ConvTranspose" : "Conv", ins, out, path);
    attr(n, "kernel_shape", schemeInts(bp, "size"));
    attr(n, "strides", schemeInts(bp, "stride"));
    attr(n, "pads", pads(schemeInts(bp, "pad")));
    attr(n, "dilations", schemeInts(bp, "dilation"));
    attr(n, "group", schemeInt(bp, "groups", 1));
    if (auto* conv = dynamic_cast<const ConvND*>(&m)) {
        const std::vector<int64_t> q = conv->postpad();
        if (std::any_of(q.begin(), q.end(), [](int64_t v) { return v != 0; })) attr(n, "output_padding", q);
    }
}

// MaxPool1D, MaxPool2D, MaxPool3D, AvgPool1D, AvgPool2D, AvgPool3D
void Exporter::emitPool(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string cls = m.classname();
    const bool isMax = cls.rfind("MaxPool", 0) == 0;
    onnx::NodeProto* n = node(isMax ? "MaxPool" : "AveragePool", {in[0]}, out, path);
    attr(n, "kernel_shape", schemeInts(bp, "size"));
    attr(n, "strides", schemeInts(bp, "stride"));
    attr(n, "pads", pads(schemeInts(bp, "pad")));
    if (!isMax) attr(n, "count_include_pad", schemeInt(bp, "includePad", 1));
}

// GlobalAvgPool
void Exporter::emitGlobalAvgPool(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    return void(node("GlobalAveragePool", in, out, path));
}

// BatchNorm, BatchNorm1D, BatchNorm2D, BatchNorm3D
void Exporter::emitBatchNorm(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const int64_t maps = l.var("scale").numel();
    onnx::NodeProto* n =
        node("BatchNormalization",
             {in[0], init(path + ".scale", l.var("scale")), init(path + ".bias", l.var("bias")),
              init(path + ".mean", m.getAttr("mean"), Shape{maps}), init(path + ".var", m.getAttr("var"), Shape{maps})},
             out, path);
    attr(n, "epsilon", schemeFloat(bp, "epsilon", 1e-5f));
    attr(n, "momentum", 1.0f - schemeFloat(bp, "minFactor", 0.1f));
}

// InstanceNorm2D
void Exporter::emitInstanceNorm2D(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    onnx::NodeProto* n =
        node("InstanceNormalization",
             {in[0], init(path + ".scale", l.var("scale")), init(path + ".bias", l.var("bias"))}, out, path);
    attr(n, "epsilon", schemeFloat(bp, "epsilon", 1e-5f));
}

// CrossMapLRN
void Exporter::emitCrossMapLRN(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    onnx::NodeProto* n = node("LRN", in, out, path);
    attr(n, "size", schemeInt(bp, "N", 5));
    attr(n, "alpha", schemeFloat(bp, "alpha", 1e-4f));
    attr(n, "beta", schemeFloat(bp, "beta", 0.75f));
    attr(n, "bias", schemeFloat(bp, "K", 2.0f));
}

// Activation
void Exporter::emitActivation(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string kind = schemeString(bp, "activation");
    for (const PlainActivationOp& p : kPlainActivationOps) {
        if (kind == str(p.kind)) return void(node(p.op, in, out, path));
    }
    if (kind == "leakyRelu") return attr(node("LeakyRelu", in, out, path), "alpha", schemeFloat(bp, "slope", 0.01f));
    if (kind == "elu") return attr(node("Elu", in, out, path), "alpha", schemeFloat(bp, "alpha", 1.0f));
    if (kind == "clip") {
        node("Clip",
             {in[0], initScalar(path + ".min", schemeFloat(bp, "min", 0.0f)),
              initScalar(path + ".max", schemeFloat(bp, "max", 6.0f))},
             out, path);
        return;
    }
    if (kind == "hardSigmoid") {
        onnx::NodeProto* n = node("HardSigmoid", in, out, path);
        attr(n, "alpha", schemeFloat(bp, "hardSlope", 1.0f / 6.0f));
        attr(n, "beta", schemeFloat(bp, "hardOffset", 0.5f));
        return;
    }
    if (kind == "hardSwish" && opset_ >= 14) return void(node("HardSwish", in, out, path));
    if (kind == "hardSwish") { // before opset 14: x * HardSigmoid(x) with PyTorch's constants
        const std::string gate = valueName(path + "_gate");
        onnx::NodeProto* h = node("HardSigmoid", in, {gate}, path + "_gate");
        attr(h, "alpha", 1.0f / 6.0f);
        attr(h, "beta", 0.5f);
        return void(node("Mul", {in[0], gate}, out, path));
    }
    if (kind == "gelu") return emitGelu(in, out, path);
    if (kind == "silu") { // no op before opset 24: x * Sigmoid(x), read back as one silu
        const std::string gate = valueName(path + "_sigmoid");
        node("Sigmoid", in, {gate}, path + "_sigmoid");
        return void(node("Mul", {in[0], gate}, out, path));
    }
    if (kind == "mish") { // Mish is opset 18's: x * Tanh(Softplus(x)), read back as one mish
        const std::string sp = valueName(path + "_softplus"), t = valueName(path + "_tanh");
        node("Softplus", in, {sp}, path + "_softplus");
        node("Tanh", {sp}, {t}, path + "_tanh");
        return void(node("Mul", {in[0], t}, out, path));
    }
    throw Unsupported{"activation " + kind + " has no ONNX op at this opset"};
}

// PRelu
void Exporter::emitPRelu(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    Shape s{l.var("slopes").numel()};
    if (l.var("slopes").numel() > 1) { // per channel: [C, 1, ...] against [N, C, ...]
        std::vector<int64_t> d{l.var("slopes").numel()};
        for (size_t r = 2; r < inShapes[0].rank(); ++r) d.push_back(1);
        s = Shape(d);
    }
    node("PRelu", {in[0], init(path + ".slopes", l.var("slopes"), s)}, out, path);
}

// SoftMax, LogSoftMax
void Exporter::emitSoftMax(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const char* op = m.classname() == "LogSoftMax" ? "LogSoftmax" : "Softmax";
    return attr(node(op, in, out, path), "axis", int64_t{static_cast<const SoftMax&>(m).axis()});
}

// Flatten
void Exporter::emitFlatten(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    return attr(node("Flatten", in, out, path), "axis", int64_t{1});
}

// Reshape
void Exporter::emitReshape(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    node("Reshape", {in[0], initInts(path + ".shape", schemeInts(bp, "shape"))}, out, path);
}

// Concat
void Exporter::emitConcat(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    return attr(node("Concat", in, out, path), "axis", schemeInt(bp, "axis", 1));
}

// Add
void Exporter::emitAdd(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    if (const BlueprintValue* c = schemeValue(bp, "coefficients")) {
        const auto* w = std::get_if<std::vector<double>>(c);
        if (!w || *w != std::vector<double>{1.0, -1.0})
            throw Unsupported{"weighted sums are not exported (a difference, coefficients [1, -1], is)"};
        return void(node("Sub", in, out, path));
    }
    node(in.size() == 2 ? "Add" : "Sum", in, out, path);
}

// MulAddConst
void Exporter::emitMulAddConst(const Layer& l) {
    // Plain references, not a structured binding: the lambdas below capture them (clang 14
    // cannot capture structured bindings).
    Module& m = l.m;
    const std::string& path = l.path;
    const auto& in = l.in;
    const auto& out = l.out;
    const Blueprint& bp = l.bp;
    // a x + b: Mul, then Add, each left out when it is the identity
    const auto& mac = dynamic_cast<const MulAddConst&>(m);
    const float a = schemeFloat(bp, "a", 1.0f), b = schemeFloat(bp, "b", 0.0f);
    // The constants: scalar initializers, or the module's tensors (NumPy broadcasting, as ONNX's).
    // Tensors as Constant nodes: the import reads a Mul by an initializer as a learned Scale.
    auto scale = [&] {
        return mac.tensorScale() ? constantNode(path + "_a", m.getAttr("a")) : initScalar(path + ".a", a);
    };
    auto shift = [&] {
        return mac.tensorShift() ? constantNode(path + "_b", m.getAttr("b")) : initScalar(path + ".b", b);
    };
    const bool mul = mac.tensorScale() || a != 1.0f, add = mac.tensorShift() || b != 0.0f;
    if (!add) return void(node("Mul", {in[0], scale()}, out, path));
    std::string x = in[0];
    if (mul) {
        const std::string scaled = valueName(path + "_scaled");
        node("Mul", {x, scale()}, {scaled}, path + "_mul");
        x = scaled;
    }
    node("Add", {x, shift()}, out, path);
}

// Pow: scale * x^exponent as Pow by a scalar, then a Mul where the scale is not 1
void Exporter::emitPow(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const float exponent = schemeFloat(bp, "exponent", 1.0f), scale = schemeFloat(bp, "scale", 1.0f);
    const std::string e = initScalar(path + ".exponent", exponent);
    if (scale == 1.0f) return void(node("Pow", {in[0], e}, out, path));
    const std::string raised = valueName(path + "_raised");
    node("Pow", {in[0], e}, {raised}, path + "_pow");
    node("Mul", {raised, initScalar(path + ".scale", scale)}, out, path);
}

// Slice
void Exporter::emitSlice(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    std::vector<int64_t> ends = schemeInts(bp, "end");
    const std::vector<int64_t> steps = bp.find("step") ? schemeInts(bp, "step") : std::vector<int64_t>();
    for (size_t k = 0; k < ends.size(); ++k) { // Tessera's "to the end": ONNX's past either end
        const bool backward = k < steps.size() && steps[k] < 0;
        if (ends[k] == 0)
            ends[k] = backward ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
    }
    std::vector<std::string> inputs = {in[0], initInts(path + ".starts", schemeInts(bp, "start")),
                                       initInts(path + ".ends", ends),
                                       initInts(path + ".axes", schemeInts(bp, "axis"))};
    if (bp.find("step")) inputs.push_back(initInts(path + ".steps", schemeInts(bp, "step")));
    node("Slice", inputs, out, path);
}

// Gelu
void Exporter::emitGeluLayer(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    return emitGelu(in, out, path);
}

// SpatialTf
void Exporter::emitSpatialTfLayer(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    return emitSpatialTf(bp, in, inShapes, out, path);
}

// Mul
void Exporter::emitMul(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    if (in.size() != 2) throw Unsupported{"products of more than two inputs are not exported"};
    node("Mul", in, out, path);
}

// Sub, Div
void Exporter::emitSubOrDiv(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string cls = m.classname();
    return void(node(cls, in, out, path));
}

// RNN
void Exporter::emitRNN(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    auto* rnn = dynamic_cast<RNN*>(&m);
    if (!rnn) throw Unsupported{"a class named RNN that is not Tessera's RNN"};
    emitRnn(*rnn, bp, in, inShapes, out, path);
}

// ReduceMean and ReduceSum: no axes are every dim, written out; every dim reduced without
// keepDims is Tessera's [1] and ONNX's scalar, so the dims are kept and a Reshape makes [1].
void Exporter::emitReduction(const Layer& l, const std::string& op) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    std::vector<int64_t> axes = schemeInts(bp, "axes");
    const size_t rank = inShapes[0].rank();
    if (axes.empty()) { // every dim, written out
        for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    }
    const BlueprintValue* keepValue = schemeValue(bp, "keepDims");
    const bool keep = !(keepValue && std::get_if<bool>(keepValue) && !*std::get_if<bool>(keepValue));
    const bool scalar = !keep && axes.size() == rank; // the module's checks: no axis twice
    std::vector<std::string> inputs = {in[0]};
    if (op == "ReduceSum") inputs.push_back(initInts(path + ".axes", axes)); // an input from opset 13
    const std::vector<std::string> reduced = scalar ? std::vector<std::string>{valueName(path + "_kept")} : out;
    onnx::NodeProto* n = node(op, inputs, reduced, path);
    if (op != "ReduceSum") attr(n, "axes", axes);
    attr(n, "keepdims", int64_t{keep || scalar ? 1 : 0});
    if (scalar) node("Reshape", {reduced[0], initInts(path + ".shape", {1})}, out, path + "_shape");
}

void Exporter::emitReduceMean(const Layer& l) { emitReduction(l, "ReduceMean"); }

void Exporter::emitReduceSum(const Layer& l) { emitReduction(l, "ReduceSum"); }

// GatherElements: ONNX's, its positions int32 (which it takes as int64 too).
void Exporter::emitGatherElements(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    attr(node("GatherElements", in, out, path), "axis", schemeInt(bp, "axis", 0));
}

// ScatterElements: ONNX's (opset 11; with add, its reduction attribute from opset 16).
void Exporter::emitScatterElements(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const bool add = schemeBool(bp, "add");
    if (opset_ < (add ? 16 : 11)) {
        throw Unsupported{std::string("ScatterElements") + (add ? " adding" : "") + " needs opset " +
                          (add ? "16" : "11") + " or later (exporting at " + std::to_string(opset_) + ")"};
    }
    onnx::NodeProto* n = node("ScatterElements", in, out, path);
    attr(n, "axis", schemeInt(bp, "axis", 0));
    if (add) attr(n, "reduction", std::string("add"));
}

// CumSum: ONNX's (opset 11), the axis a 0-D int64 input.
void Exporter::emitGridSample(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    if (opset_ < 16) {
        throw Unsupported{"GridSample needs opset 16 or later (exporting at " + std::to_string(opset_) + ")"};
    }
    onnx::NodeProto* n = node("GridSample", {in[0], in[1]}, out, path);
    attr(n, "align_corners", int64_t{schemeBool(bp, "alignCorners") ? 1 : 0});
    attr(n, "mode", schemeString(bp, "mode"));
    attr(n, "padding_mode", schemeString(bp, "padding"));
}

void Exporter::emitCumSum(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    if (opset_ < 11) throw Unsupported{"CumSum needs opset 11 or later (exporting at " + std::to_string(opset_) + ")"};
    onnx::TensorProto* axis = g_.add_initializer();
    const std::string axisName = valueName(path + ".axis");
    axis->set_name(axisName);
    axis->set_data_type(onnx::TensorProto::INT64);
    axis->add_int64_data(schemeInt(bp, "axis", 0));
    onnx::NodeProto* n = node("CumSum", {in[0], axisName}, out, path);
    if (schemeBool(bp, "exclusive")) attr(n, "exclusive", int64_t{1});
    if (schemeBool(bp, "reverse")) attr(n, "reverse", int64_t{1});
}

// ArgMax, ArgMin: ONNX's indices are int64, Tessera's int32 (a Cast to int32 after, which
// the import reads back as an Identity).
void Exporter::emitArgMax(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const auto* arg = dynamic_cast<const ArgMax*>(&m);
    if (!arg) throw Unsupported{"a class named " + m.classname() + " that is not Tessera's"};
    const std::string indices = valueName(path + "_int64");
    onnx::NodeProto* n = node(m.classname(), in, {indices}, path);
    const auto rank = static_cast<int64_t>(inShapes[0].rank());
    attr(n, "axis", arg->axis() < 0 ? arg->axis() + rank : int64_t{arg->axis()});
    attr(n, "keepdims", int64_t{arg->keepDims() ? 1 : 0});
    if (arg->lastIndex()) attr(n, "select_last_index", int64_t{1});
    attr(node("Cast", {indices}, out, path + "_int32"), "to", static_cast<int64_t>(onnx::TensorProto::INT32));
}

// TopK (opset 11: largest, sorted): ONNX's positions are int64, Tessera's int32 (a Cast to
// int32 after, as for ArgMax).
void Exporter::emitTopK(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    if (opset_ < 11) throw Unsupported{"TopK needs opset 11 or later (exporting at " + std::to_string(opset_) + ")"};
    const std::string indices = valueName(path + "_int64");
    onnx::NodeProto* n = node("TopK", {in[0], initInts(path + ".k", {schemeInt(bp, "k", 1)})}, {out[0], indices}, path);
    const auto rank = static_cast<int64_t>(inShapes[0].rank());
    const int64_t axis = schemeInt(bp, "axis", -1);
    attr(n, "axis", axis < 0 ? axis + rank : axis);
    attr(n, "largest", int64_t{schemeBool(bp, "largest") ? 1 : 0});
    attr(n, "sorted", int64_t{schemeBool(bp, "sorted") ? 1 : 0});
    attr(node("Cast", {indices}, {out[1]}, path + "_int32"), "to", static_cast<int64_t>(onnx::TensorProto::INT32));
}

// Dropout
void Exporter::emitDropout(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    node("Dropout", {in[0], initScalar(path + ".ratio", schemeFloat(bp, "p", 0.5f))}, out, path);
}

// Transpose, SwapAxes, MoveAxis
void Exporter::emitTranspose(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    // Transpose, SwapAxes, MoveAxis
    auto* perm = dynamic_cast<AxisPermutation*>(&m);
    if (!perm) throw Unsupported{"a class named " + m.classname() + " that is not Tessera's"};
    return attr(node("Transpose", in, out, path), "perm", perm->permutation(inShapes[0].rank()));
}

// Replicate
void Exporter::emitReplicate(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    // one Identity per copy
    for (size_t k = 0; k < out.size(); ++k) node("Identity", in, {out[k]}, path + "_" + std::to_string(k));
}

// NoiseInjector, Dropout2D
void Exporter::emitInferenceIdentity(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    // Train-time noise: the inference form, written as Identity (read back as Identity).
    return void(node("Identity", in, out, path));
}

// Pad1D, Pad2D
void Exporter::emitPad(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::vector<int64_t> loHi = schemeInts(bp, "pad"); // (lo, hi) per spatial dim
    const size_t rank = inShapes[0].rank();
    std::vector<int64_t> pads(2 * rank, 0); // ONNX: every dim's begin, then every dim's end
    for (size_t d = 2; d < rank; ++d) {
        pads[d] = loHi.at(2 * (d - 2));
        pads[rank + d] = loHi.at(2 * (d - 2) + 1);
    }
    const std::string mode = schemeString(bp, "mode");
    onnx::NodeProto* n = node(
        "Pad", {in[0], initInts(path + ".pads", pads), initScalar(path + ".value", schemeFloat(bp, "fillValue", 0.0f))},
        out, path);
    auto* a = n->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode.empty() ? "constant" : mode);
}

// Split
void Exporter::emitSplit(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    onnx::NodeProto* n = node("Split", {in[0], initInts(path + ".split", schemeInts(bp, "sections"))}, out, path);
    attr(n, "axis", schemeInt(bp, "axis", 1));
}

// Tile
void Exporter::emitTile(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const size_t rank = inShapes[0].rank();
    int64_t axis = schemeInt(bp, "axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(rank);
    std::vector<int64_t> reps(rank, 1);
    reps.at(static_cast<size_t>(axis)) = schemeInt(bp, "times", 1);
    node("Tile", {in[0], initInts(path + ".repeats", reps)}, out, path);
}

// Upsample2D, Upsample3D: Resize by the scale; Resize2D, Resize3D: Resize to the sizes
// Concat(Shape(x)[0:2], size), the batch free. Nearest is asymmetric/floor, nearest-exact
// half_pixel/round_prefer_ceil; linear and cubic (cubic_coeff_a -0.75, edges repeated) have
// half-pixel centres or the corners aligned.
void Exporter::emitUpsample(const Layer& l) {
    const auto& [m, bp, in, inShapes, out, path] = l;
    const std::string mode = schemeString(bp, "mode");
    const bool linear = mode == "linear" || mode == "cubic";
    onnx::NodeProto* n = nullptr;
    if (bp.classname.rfind("Resize", 0) == 0) {
        const std::string shape = valueName(path + "_input_shape"), lead = valueName(path + "_batch_and_maps"),
                          sizes = valueName(path + "_sizes");
        node("Shape", {in[0]}, {shape}, path + "_input_shape");
        node("Slice", {shape, initInts(path + ".start", {0}), initInts(path + ".end", {2})}, {lead},
             path + "_batch_and_maps");
        attr(node("Concat", {lead, initInts(path + ".size", schemeInts(bp, "size"))}, {sizes}, path + "_sizes"), "axis",
             int64_t{0});
        n = node("Resize", {in[0], "", "", sizes}, out, path);
    } else {
        const float sc = static_cast<float>(schemeInt(bp, "scale", 2));
        std::vector<float> scales(inShapes[0].rank(), sc);
        scales[0] = scales[1] = 1.0f;
        n = node("Resize",
                 {in[0], "", init(path + ".scales", Tensor::fromVector({static_cast<int64_t>(scales.size())}, scales))},
                 out, path);
    }
    std::vector<std::pair<const char*, const char*>> attrs = {
        {"mode", "nearest"}, {"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", "floor"}};
    if (mode == "nearest-exact") {
        attrs = {{"mode", "nearest"},
                 {"coordinate_transformation_mode", "half_pixel"},
                 {"nearest_mode", "round_prefer_ceil"}};
    } else if (linear) {
        attrs = {{"mode", mode == "cubic" ? "cubic" : "linear"},
                 {"coordinate_transformation_mode", schemeBool(bp, "alignCorners") ? "align_corners" : "half_pixel"}};
    }
    if (mode == "cubic") attr(n, "cubic_coeff_a", -0.75f);
    for (const auto& [k, v] : attrs) {
        auto* a = n->add_attribute();
        a->set_name(k);
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(v);
    }
}

} // namespace tessera::onnx_io
