#pragma once
/// \file The ONNX exporter: Export.cpp (the walk over containers and graphs, exportOnnx),
/// ExportOps.cpp (the table: one row per layer class), ExportLayers.cpp (the layers written
/// as several ONNX nodes). Private to io/onnx/.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "containers/Graph.h"
#include "io/Onnx.h"
#include "io/onnx/Proto.h"
#include "modules/Blueprint.h"
#include "modules/RNN.h"

namespace tessera::onnx_io {

// A layer's blueprint arguments (its scheme) by key, `fallback` when absent.
const BlueprintValue* schemeValue(const Blueprint& bp, const std::string& key);
int64_t schemeInt(const Blueprint& bp, const std::string& key, int64_t fallback);
float schemeFloat(const Blueprint& bp, const std::string& key, float fallback);
std::vector<int64_t> schemeInts(const Blueprint& bp, const std::string& key);
bool schemeBool(const Blueprint& bp, const std::string& key);
std::string schemeString(const Blueprint& bp, const std::string& key);

class Exporter {
public:
    Exporter(onnx::GraphProto& g, int64_t opset) : g_(g), opset_(opset) {}

    std::vector<std::string> errors;
    // Values that are int32 (a graph's ids and what passes them on), by name; others are float.
    std::unordered_set<std::string> intValues;
    // Each Embedder's paddingIdx, by its table's initializer (ONNX's Gather has no place for
    // it; the model's metadata "padding_idx" carries it, and the import reads it back).
    std::map<std::string, int64_t> paddingIdx;

    // The output value names of `m` run on `inputs` (value names) of shapes `in`; `path`
    // names its nodes and parameters.
    std::vector<std::string> emit(Module& m, const std::vector<std::string>& inputs, const Shapes& in,
                                  const std::string& path);

    // Run before emit with the inputs' batch changed from `batch` to `otherBatch`: every
    // layer's output shapes then, by path, so that the values emit declares say which dims
    // follow the batch. Throws the model's ShapeError where it cannot take that batch.
    void probeBatch(Module& m, const Shapes& in, int64_t batch, int64_t otherBatch);

private:
    onnx::GraphProto& g_;
    int64_t opset_;
    std::unordered_set<std::string> used_;
    // Initializers written, by the memory of the tensor they came from (held, so that the
    // memory is not reused for another while the export runs): a module in several nodes
    // writes its weights once, and every node reads them, as the import shares them again.
    struct Written {
        Tensor tensor;
        Shape shape;
        std::string name;
    };
    std::unordered_map<const void*, std::vector<Written>> written_;
    // probeBatch's layer output shapes by path, and its two batch sizes (-1: not probed).
    std::unordered_map<std::string, Shapes> otherShapes_;
    int64_t batch_ = -1, otherBatch_ = -1;
    void probe(Module& m, const Shapes& in, const std::string& path);
    // v's type: `dtype` and `shape`, each dim named where it follows the batch (probeBatch).
    void declare(onnx::ValueInfoProto* v, const Shape& shape, DType dtype, const std::string& path, size_t output);

    static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

    std::string valueName(const std::string& base);

    std::vector<std::string> emitGraph(Graph& graph, const std::vector<std::string>& inputs, const Shapes& in,
                                       const std::string& path);

    std::string init(const std::string& name, const Tensor& t, std::optional<Shape> shape = std::nullopt);
    std::string initScalar(const std::string& name, float x);
    // A Constant node's output holding `t`: a fixed value, which the import keeps constant
    // (a Mul by an initializer, a weight, is read back as a learned Scale).
    std::string constantNode(const std::string& name, const Tensor& t);
    std::string initInts(const std::string& name, const std::vector<int64_t>& v);

    onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs, const std::string& name);
    static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, float v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRINGS);
        for (const std::string& x : v) a->add_strings(x);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : v) a->add_ints(x);
    }
    static std::vector<int64_t> pads(const std::vector<int64_t>& pad) { // [b..., e...]
        std::vector<int64_t> p = pad;
        p.insert(p.end(), pad.begin(), pad.end());
        return p;
    }

    // No Gelu op before opset 20: its erf form, which the import reads back as one Gelu.
    void emitGelu(const std::vector<std::string>& in, const std::vector<std::string>& out, const std::string& path);

    // No AffineGrid before opset 20: the grid as a product with a constant base grid, rows
    // (x_t, y_t, 1) of the output's pixels, Transpose(theta) -> MatMul(base) -> Reshape to
    // [N, Ho, Wo, 2], then GridSample (opset 16) with Tessera's sampling: bilinear, zero
    // outside, -1 and 1 at the corner pixels' centres (align_corners 1). Read back as one
    // SpatialTf.
    void emitSpatialTf(const Blueprint& bp, const std::vector<std::string>& in, const Shapes& inShapes,
                       const std::vector<std::string>& out, const std::string& path);

    // An RNN as one ONNX LSTM / GRU / RNN node per layer (weights in ONNX's gate order,
    // biases as [Wb, Rb]), each output Y [T, D, N, H] transposed and reshaped back to
    // Tessera's [T, N, D H]; batch-first data transposed around them; the last step sliced
    // out unless getSequences.
    void emitRnn(RNN& m, const Blueprint& bp, const std::vector<std::string>& in, const Shapes& inShapes,
                 const std::vector<std::string>& out, const std::string& path);

    // One layer, by the row of its class in emitters() (ExportOps.cpp).
    void emitLayer(Module& m, const std::vector<std::string>& in, const Shapes& inShapes,
                   const std::vector<std::string>& out, const std::string& path);

    // What a row's function writes from: the layer, its blueprint, its input values and
    // shapes, its output values, its path (names its nodes and initializers).
    struct Layer {
        Module& m;
        const Blueprint& bp;
        const std::vector<std::string>& in;
        const Shapes& inShapes;
        const std::vector<std::string>& out;
        const std::string& path;
        Tensor var(const char* name) const { return m.getVar(name)->data; }
    };
    using EmitFn = void (Exporter::*)(const Layer&);
    static const std::unordered_map<std::string, EmitFn>& emitters();
    void emitIdentity(const Layer& l);
    void emitCast(const Layer& l);
    void emitArgMax(const Layer& l);
    void emitLinear(const Layer& l);
    void emitMatMul(const Layer& l);
    void emitAttention(const Layer& l);
    void emitMultiheadAttention(const Layer& l);
    void emitEmbedder(const Layer& l);
    void emitParameter(const Layer& l);
    void emitPositionalEncoding(const Layer& l);
    // softmax(q k^T * scale + mask [+ causal]) v into `out` (scale 0: 1 / sqrt(d); mask empty: none).
    void attentionNodes(const std::string& q, const std::string& k, const std::string& v, const std::string& mask,
                        size_t rank, int64_t Tq, int64_t Tk, int64_t d, bool causal, float scale,
                        const std::string& out, const std::string& path);
    void emitScale(const Layer& l);
    void emitConv(const Layer& l);
    void emitPool(const Layer& l);
    void emitGlobalAvgPool(const Layer& l);
    void emitBatchNorm(const Layer& l);
    void emitInstanceNorm2D(const Layer& l);
    void emitLayerNorm(const Layer& l);
    void emitRMSNorm(const Layer& l);
    void emitGroupNorm(const Layer& l);
    // LayerNorm (centred) or RMSNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div,
    // then Mul(weight) and Add(bias) when given (names, or ""): what the import reads back.
    void emitNormDecomposed(const std::string& x, int64_t axes, float eps, bool centred, const std::string& weight,
                            const std::string& bias, const std::vector<std::string>& out, const std::string& path);
    void emitCrossMapLRN(const Layer& l);
    void emitActivation(const Layer& l);
    void emitPRelu(const Layer& l);
    void emitSoftMax(const Layer& l);
    void emitFlatten(const Layer& l);
    void emitReshape(const Layer& l);
    void emitConcat(const Layer& l);
    void emitAdd(const Layer& l);
    void emitMulAddConst(const Layer& l);
    void emitPow(const Layer& l);
    void emitSlice(const Layer& l);
    void emitGeluLayer(const Layer& l);
    void emitSpatialTfLayer(const Layer& l);
    void emitMul(const Layer& l);
    void emitSubOrDiv(const Layer& l);
    void emitRNN(const Layer& l);
    // ReduceMean, ReduceSum (its axes an input from opset 13): emitReduction.
    void emitReduceMean(const Layer& l);
    void emitReduceSum(const Layer& l);
    void emitReduction(const Layer& l, const std::string& op);
    void emitGatherElements(const Layer& l);
    void emitCumSum(const Layer& l);
    void emitGridSample(const Layer& l);
    void emitScatterElements(const Layer& l);
    void emitTopK(const Layer& l);
    void emitDropout(const Layer& l);
    void emitTranspose(const Layer& l);
    void emitReplicate(const Layer& l);
    void emitInferenceIdentity(const Layer& l);
    void emitPad(const Layer& l);
    void emitSplit(const Layer& l);
    void emitTile(const Layer& l);
    void emitUpsample(const Layer& l);
};

} // namespace tessera::onnx_io
