#pragma once
/// \file ONNX models in: an ONNX file becomes a Graph of ordinary Tessera modules, its
/// initializers their parameters, ready to shape-check, train, save as HDF5 or run.
///
/// Imported ops (default domain, opsets 6 to 17; docs/onnx.md has the table and the
/// attributes each supports): Conv, ConvTranspose, Gemm, MatMul (with a constant weight), MaxPool,
/// AveragePool, GlobalAveragePool, BatchNormalization, InstanceNormalization, LRN, Relu,
/// LeakyRelu, Elu, Selu, Sigmoid, Tanh, Softplus, Clip, HardSigmoid, HardSwish, PRelu, Softmax,
/// Dropout, Identity, Flatten, Reshape, Unsqueeze, Squeeze, Transpose, Concat, Split, Slice,
/// Pad, Tile, Resize and Upsample (nearest, integer scales), Add, Sum, Mul, Sub, Div
/// (broadcasting), Max, Min and Mean (element-wise), Trilu, GatherElements, ScatterElements, CumSum, TopK, Hardmax,
/// ReduceMean, ReduceSum (L1, L2, SumSquare, LogSum, LogSumExp), NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss,
/// Gather (from a constant table: an Embedder; from a constant vector), Cast (to float), GELU's erf pattern (one Gelu),
/// GridSample (on an affine grid: one SpatialTf). Shape computations (Shape, Gather, Unsqueeze, Concat, Slice, integer
/// arithmetic) fold into constants, a free batch dim staying a symbol. Constant nodes feed the inputs that must be
/// constant.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/Tensor.h"
#include "modules/Module.h"

namespace tessera {

class Graph;

struct OnnxImportOptions {
    /// Values for graph inputs, by ONNX name: an input an op needs as a constant (a weight,
    /// a shape, a clip bound) takes its value from here and is no graph input any more;
    /// inputs used as data stay inputs. (ONNX's test cases give weights as inputs.)
    std::map<std::string, Tensor> inputValues;
    /// Attention in the forms exporters write it (MatMul(q, k^T), scaled, masked, Softmax,
    /// MatMul(v): ONNX has none before opset 23) read back as one ScaledDotProductAttention,
    /// which holds no more than a block of heads' scores at a time; false: its nodes as
    /// separate layers (MatMul, MulAddConst, SoftMax, ...), as exported.
    bool attention = true;
    /// The most values the import may read and write computing on constants, in all: the
    /// shape computations, masks and tables exporters build from static sizes (a weight
    /// transposed or sliced at import counts too). A file past it stops the import with an
    /// error naming the node, so that no file keeps it computing for long (2^30 values take
    /// some 15 s on a Zen 5 core; the networks in the test suite need under 2^20).
    int64_t foldLimit = int64_t{1} << 30;
    /// Sizes for the graph inputs' named free dims (ONNX's dim_param): every dim of that name
    /// is that size at import, as if the model declared it. A text model exported with a free
    /// sequence length as well as a free batch (dynamic axes {0: "batch", 1: "seq"}) imports
    /// with {{"seq", 128}}: its reshapes to heads need every size but the batch's. The graph
    /// then takes that size only. IoError for a name no input's dim has.
    std::map<std::string, int64_t> dims;
};

/// Reads the ONNX model in `path` into a Graph: one input node (an Identity named after the
/// graph input) per non-initializer graph input, one node per ONNX node, the graph's
/// outputs in order. Throws IoError naming the file when it cannot be read or parsed, and
/// one IoError listing every node that cannot be imported (its name, op type and the
/// reason: the op, or the attribute value, Tessera does not support).
std::shared_ptr<Graph> importOnnx(const std::string& path, const OnnxImportOptions& options = {});

/// The names of the model's graph inputs that are not initializers, in order (the order of
/// the imported Graph's inputs, less those taken as constants).
std::vector<std::string> onnxInputNames(const std::string& path);

/// The shapes the model declares for those inputs; a dim without a fixed size (a named or
/// missing dim, such as a symbolic batch) is -1. Empty when an input declares no shape.
std::vector<std::vector<int64_t>> onnxInputShapes(const std::string& path);

/// The sizes inputs of these shapes give the model's named free dims (dim_param) besides the
/// batch: OnnxImportOptions::dims for them. A dim named as an input's dim 0 is a batch and
/// stays free; so does every input's dim 0. ShapeError when the inputs give one name two sizes.
std::map<std::string, int64_t> onnxDimSizes(const std::string& path, const Shapes& inputs);

struct OnnxExportOptions {
    int64_t opset = 13; ///< the default domain's opset version written (13 to 17)
    /// The names of the classes a classifier's outputs score, kept in the model's
    /// metadata_props as "classes" (a JSON array, as HDF5 files keep them); none when empty.
    std::vector<std::string> classes = {};
    /// The transforms that make an image the model's input (SaveOptions::transforms), kept
    /// in metadata_props as "transforms"; none when empty.
    std::string transforms = {};
};

/// Writes `model` (a Graph, a Sequential or Parallel, or a single layer, nested containers
/// included) to an ONNX file that `onnx.checker` accepts: its parameters and running
/// statistics as initializers, one ONNX node per layer, and every value's shape for
/// `inputShapes`, dim 0 of the inputs (the batch) left free: where the model also takes another
/// batch, each value's dims that follow it are named "batch" (or "batch*c", c times it: the
/// batch folded with another dim) wherever layers moved them, the others are their sizes; where
/// it does not, the values declare their ranks alone. The inference form: batch norm with its
/// running statistics, dropout as ONNX's Dropout. Throws IoError listing every layer that
/// has no ONNX counterpart here (docs/onnx.md), or when the file cannot be written.
void exportOnnx(Module& model, const Shapes& inputShapes, const std::string& path,
                const OnnxExportOptions& options = {});

/// The class names an ONNX model keeps in its metadata_props "classes" (exportOnnx's
/// OnnxExportOptions::classes); empty when it keeps none. IoError naming the file for one
/// that cannot be read, or names that are not a JSON array of strings.
std::vector<std::string> onnxClassNames(const std::string& path);

/// The transforms an ONNX model keeps in its metadata_props "transforms"
/// (OnnxExportOptions::transforms); empty when it keeps none. IoError naming the file for
/// one that cannot be read.
std::string onnxTransforms(const std::string& path);

/// One serialized ONNX TensorProto (the `input_0.pb` files of ONNX's test data) as a host
/// tensor: float32, or int32 for int32 and int64 data (IoError for other types).
Tensor readOnnxTensor(const std::string& path);

/// True when `path` ends in `.onnx`.
bool isOnnxPath(const std::string& path);

} // namespace tessera
