#pragma once
/// \file The ONNX importer: one Importer per model. Its parts live in io/onnx/: Import.cpp (the
/// driver and its helpers), ShapeInference.cpp, Fold.cpp and Evaluate.cpp (shape subgraphs and
/// constant computations done at import),
/// Patterns.cpp (several nodes read back as one layer), ImportOps.cpp (the table: one row per
/// ONNX op), ImportTensorOps.cpp, ImportWhere.cpp (masks and selections of data),
/// ImportLosses.cpp (losses as ops) and ImportLayers.cpp (the ops with more to them). Private.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "containers/Graph.h"
#include "io/Onnx.h"
#include "io/onnx/Proto.h"
#include "modules/Pool.h"

namespace tessera {
struct ConvOptions;
class Sequential;
} // namespace tessera

namespace tessera::onnx_io {

// Where a value comes from: a node and its output slot.
struct Source {
    NodePtr node;
    int slot = 0;
};

class Importer {
public:
    // `file`, when given, holds the model's large weights (ModelFile::rawData).
    Importer(onnx::ModelProto& model, std::string path, const OnnxImportOptions& options,
             const ModelFile* file = nullptr)
        : model_(model), path_(std::move(path)), options_(options), file_(file) {}

    // ONNX's shape inference on the model, run in a child process (io_detail::onnxShapeInference):
    // adds the value_info it finds and refines the outputs'. Throws IoError when inference
    // crashes or takes over TESSERA_ONNX_SHAPE_TIMEOUT (30 s) on the model. Its exceptions are
    // not errors here: the import then uses the declared shapes.
    void inferShapes();
    // OnnxImportOptions::dims: every dim so named, in the graph's inputs, outputs and value
    // infos, given its size. IoError for a name no input declares, or a size below 1.
    void fixNamedDims();

    std::shared_ptr<Graph> run();

private:
    // A dim of a value's shape: its size, or the symbol of a size not known at import.
    struct Dim {
        int64_t value = -1;
        std::string symbol;
    };

    onnx::ModelProto& model_;
    std::unordered_map<std::string, std::vector<Dim>> shapes_;
    std::unordered_map<std::string, int32_t> elemTypes_; // declared or inferred element types
    int symbolCount_ = 0;
    std::string path_;
    const OnnxImportOptions& options_;
    const ModelFile* file_ = nullptr;
    std::unordered_set<std::string> takenAsConstant_; // graph inputs an op took as a constant
    std::unordered_set<std::string> usedAsData_;
    int64_t opset_ = 0;
    std::unordered_map<std::string, Constant> constants_;
    int64_t folded_ = 0;                              // values read and written by folds so far
    bool foldsStopped_ = false;                       // a fold passed the limit: none after it
    std::unordered_set<std::string> initializers_;    // the model's initializers (its weights) by name
    std::unordered_set<std::string> selectedWeights_; // weights folded from a selection of a weight (Fold.cpp)
    std::unordered_map<std::string, Source> values_;
    // Layers with parameters by op, attributes and constant inputs (sharedLayer).
    std::unordered_map<std::string, std::vector<ModulePtr>> sharedLayers_;
    std::vector<ModulePtr> embedders_; // the Embedders imported so far (tiedHead)
    // Embedders' paddingIdx by their tables' names, from the metadata "padding_idx" a Tessera
    // export writes.
    std::unordered_map<std::string, int64_t> paddingIdx_;
    std::unordered_set<std::string> missing_;
    std::unordered_set<std::string> names_;
    std::unordered_map<std::string, int64_t> ranks_;
    // Range(0, N, 1) of a dim N not known at import (torch.arange over a free batch): no values
    // at import, so kept as start + i delta for i below N (`symbol`), scaled and shifted by
    // integer constants, until integer data of length N adds it (ImportWhere.cpp).
    struct SymbolicRange {
        int64_t start = 0, delta = 1;
        std::string symbol;
    };
    std::unordered_map<std::string, SymbolicRange> symbolicRanges_;

    // `axis` of input `k`, negative ones counted from the end when its rank is declared.
    int64_t resolveAxis(const onnx::NodeProto& n, int k, int64_t axis) const;
    int64_t rankOf(const onnx::NodeProto& n, int k) const;
    // Input k's `dims` spatial dims (after [N, C]) as known at import; -1 where not known.
    std::vector<int64_t> spatialDimsOf(const onnx::NodeProto& n, int k, size_t dims) const;
    std::vector<int64_t> outputShapePads(const onnx::NodeProto& n, const Attributes& a,
                                         const std::vector<int64_t>& kernel, const ConvOptions& o,
                                         std::vector<int64_t>& outputPadding) const;
    // Input k's dim `axis` as known at import; -1 where not known.
    int64_t dimOf(const onnx::NodeProto& n, int k, int64_t axis) const;
    void importNearestPerDim(const onnx::NodeProto& n, const std::vector<float>& scales);
    void importGatherList(const onnx::NodeProto& n, const Attributes& a, const Constant& idx);

    static bool isInput(const NodePtr& n, const std::vector<NodePtr>& inputs);

    // A unique node name without dots (dots separate dotted parameter names).
    std::string nodeName(std::string base);

    const Constant* constant(const std::string& name);

    Source value(const onnx::NodeProto& n, int k);
    Source value(const std::string& name, int k);

    const Constant& requireConstant(const onnx::NodeProto& n, int k, const char* what);

    // The values of input k, a constant of integers.
    const std::vector<int64_t>& requireInts(const onnx::NodeProto& n, int k, const char* what);

    // The one value of input k, a constant holding exactly one number (a scalar or a
    // one-element tensor, integer or floating).
    float requireScalar(const onnx::NodeProto& n, int k, const char* what);

    ModulePtr sharedLayer(const onnx::NodeProto& n, ModulePtr module);
    // `lin` (W [in, out]), or a Linear with W stored [out, in] that shares an imported
    // Embedder's table when W is that table transposed, value for value: a language model's
    // head tied to its token table, which PyTorch's export writes as a transposed copy.
    ModulePtr tiedHead(ModulePtr lin) const;
    void define(const onnx::NodeProto& n, ModulePtr module, const Parents& parents);
    // A pattern's layer at its last node n, its parents being the values `inputs`.
    void define(const onnx::NodeProto& n, ModulePtr module, const Parents& parents,
                const std::vector<std::string>& inputs);

    static bool known(const std::vector<Dim>& dims);

    // Shapes ONNX's inference leaves open (after a Reshape to a computed shape, say) come
    // from the module's own shape inference: each named dim (the batch) stands in as a
    // distinct large size and is read back as its symbol.
    // `inputs`: the values the parents are (n's own inputs, or a pattern's).
    void inferShapes(const onnx::NodeProto& n, Module& m, const Parents& parents,
                     const std::vector<std::string>& inputs);

    static constexpr int64_t kStandIn = 1000003; // above any real dim of an imported model
    std::unordered_map<std::string, int64_t> standIns_;
    std::unordered_map<int64_t, std::string> standInSymbols_;

    int64_t standIn(const std::string& symbol);
    // The symbol of a size computed from stand-ins (batch * heads): one per value, so that
    // two computations of one size agree; its stand-in is the value itself.
    std::string computedSymbol(int64_t standInValue);
    // The size of a Reshape's -1 where its target also holds a size computed from the batch
    // that the input does not hold there (batch * heads): computed on the stand-ins, from
    // the input's sizes and the target's others ([batch * heads, T, -1] of [batch, heads, T,
    // d] is d). nullopt where they do not divide into a size known at import.
    std::optional<int64_t> reshapeRest(const std::string& input, const Constant& shape);

    // A node one of whose inputs comes from a node that was not imported is counted, not listed.
    void requireInputsImported(const onnx::NodeProto& n) const;

    Parents dataInputs(const onnx::NodeProto& n, int count);
    // n's inputs `inputs` (their indices) as data inputs, in that order.
    Parents dataInputs(const onnx::NodeProto& n, const std::vector<int>& inputs);
    // An ONNX element type of integers or bools (int32 in Tessera).
    static bool isIntegerType(int32_t type);

    // The values `names` as data inputs (input k of a pattern's layer being names[k]).
    Parents dataInputs(const std::vector<std::string>& names);

    void onlyOutputs(const onnx::NodeProto& n, int count) const;

    // One node, by the row of its op in importers() (ImportOps.cpp).
    void importNode(const onnx::NodeProto& n);
    using ImportFn = void (Importer::*)(const onnx::NodeProto&, const Attributes&);
    static const std::unordered_map<std::string, ImportFn>& importers();
    // The ops of ImportOps.cpp (the others are in ImportTensorOps.cpp and ImportLayers.cpp).
    void importBinary(const onnx::NodeProto& n, const Attributes& a);
    // x op c or c op x with a scalar constant c: an affine map (MulAddConst).
    void importScalarArithmetic(const onnx::NodeProto& n, const Attributes& a);
    // x op C or C op x with a constant tensor C that broadcasts to x (a per-channel [1, C, 1, 1]
    // mean or scale; x tiled where C enlarges a known 1 of it): MulAddConst with tensor constants.
    void importTensorArithmetic(const onnx::NodeProto& n, const Constant& c, int k, const Parent& x);
    void importCast(const onnx::NodeProto& n, const Attributes& a);
    void importConcat(const onnx::NodeProto& n, const Attributes& a);
    void importConstant(const onnx::NodeProto& n, const Attributes& a);
    void importElu(const onnx::NodeProto& n, const Attributes& a);
    void importFlatten(const onnx::NodeProto& n, const Attributes& a);
    void importGlobalAveragePool(const onnx::NodeProto& n, const Attributes& a);
    void importGridSample(const onnx::NodeProto& n, const Attributes& a);
    void importHardSigmoid(const onnx::NodeProto& n, const Attributes& a);
    void importHardSwish(const onnx::NodeProto& n, const Attributes& a);
    void importIdentity(const onnx::NodeProto& n, const Attributes& a);
    void importInstanceNormalization(const onnx::NodeProto& n, const Attributes& a);
    void importLayerNormalization(const onnx::NodeProto& n, const Attributes& a);
    void importMaxOver(const onnx::NodeProto& n, const Attributes& a);
    void importReduceLogSumExp(const onnx::NodeProto& n, const Attributes& a);
    void importMaxMin(const onnx::NodeProto& n, const Attributes& a);
    void importMean(const onnx::NodeProto& n, const Attributes& a);
    void importOneHot(const onnx::NodeProto& n, const Attributes& a);
    // Floor, Ceil, Round of float data: graphs of Casts, clips and steps (ImportWhere.cpp).
    void importRounding(const onnx::NodeProto& n, const Attributes& a);
    void importThresholdedRelu(const onnx::NodeProto& n, const Attributes& a);
    // Shrink (nn.Hardshrink, nn.Softshrink): steps and products (ImportWhere.cpp).
    void importShrink(const onnx::NodeProto& n, const Attributes& a);
    void importGatherElements(const onnx::NodeProto& n, const Attributes& a);
    // ScatterElements (and Scatter, its name before opset 11): reduction none or add.
    void importScatterElements(const onnx::NodeProto& n, const Attributes& a);
    // ScatterND into data by constant indices writing one box (slice assignments: ImportScatter.cpp).
    void importScatterND(const onnx::NodeProto& n, const Attributes& a);
    // CumSum of float data, or of integer data between Casts to float and back (a mask's
    // running count: position ids); the axis a constant.
    void importCumSum(const onnx::NodeProto& n, const Attributes& a);
    // DepthToSpace and SpaceToDepth: Reshape, Transpose, Reshape.
    void importDepthToSpace(const onnx::NodeProto& n, const Attributes& a);
    void importHardmax(const onnx::NodeProto& n, const Attributes& a);
    void appendMaxOver(Sequential& seq, const onnx::NodeProto& n, const std::vector<int64_t>& axes, bool keep);
    /// Axes from 0 to rank - 1, sorted (none: every dim).
    static std::vector<int64_t> resolvedAxes(std::vector<int64_t> axes, int64_t rank);
    void importLRN(const onnx::NodeProto& n, const Attributes& a);
    void importNeg(const onnx::NodeProto& n, const Attributes& a);
    void importLeakyRelu(const onnx::NodeProto& n, const Attributes& a);
    void importPRelu(const onnx::NodeProto& n, const Attributes& a);
    void importPlainActivation(const onnx::NodeProto& n, const Attributes& a);
    void importPow(const onnx::NodeProto& n, const Attributes& a);
    void importReshape(const onnx::NodeProto& n, const Attributes& a);
    void importSoftmax(const onnx::NodeProto& n, const Attributes& a);
    void importArgMax(const onnx::NodeProto& n, const Attributes& a);
    void importTopK(const onnx::NodeProto& n, const Attributes& a);
    void importSplit(const onnx::NodeProto& n, const Attributes& a);
    void importSqueeze(const onnx::NodeProto& n, const Attributes& a);
    void importTile(const onnx::NodeProto& n, const Attributes& a);
    void importTranspose(const onnx::NodeProto& n, const Attributes& a);

    // The erf form of GELU as exporters write it, 0.5 x (1 + erf(x / sqrt(2))):
    //   Div(x, sqrt 2) or Mul(x, 1 / sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5), or with
    //   the 0.5 taken first: Mul(x, 0.5) -> Mul(that, 1 + erf). Each becomes one Gelu at the
    //   last node of the pattern (gelus_: its index -> x); the others are skipped (absorbed_).
    std::unordered_set<std::string> usedValues_; // every value some node or the graph's outputs take
    std::unordered_map<int, std::string> gelus_;
    // Nodes of a pattern imported as one layer at its last node: index -> the last node's.
    std::unordered_map<int, int> absorbed_;
    // Per node, the values it is the last to read (absorbed nodes read at their pattern's
    // last node): the constants among them are dropped once it is imported.
    std::vector<std::vector<std::string>> constantsByLastReader() const;

    void findGelus();

    // A spatial transformer as Tessera exports it (GridSample has no affine grid before
    // opset 20's AffineGrid): Transpose(theta, perm 0 2 1) -> MatMul(base, that) ->
    // Reshape to [N, Ho, Wo, 2] -> GridSample(x, grid; bilinear, zeros, align_corners 1),
    // base being the constant [Ho Wo, 3] (or [1, Ho Wo, 3]) of rows (x_t, y_t, 1). Each
    // becomes one SpatialTf at the GridSample (spatialTfs_); the others are absorbed_.
    struct SpatialTfMatch {
        std::vector<std::string> inputs; // x, theta
        int64_t height = 0, width = 0;
    };
    std::unordered_map<int, SpatialTfMatch> spatialTfs_;

    void findSpatialTfs();

    // SiLU, Mish, LayerNorm, RMSNorm and GroupNorm in the forms exporters write before ONNX
    // had their ops (LayerPatterns.cpp): each becomes one layer at the pattern's last node
    // (patternLayers_: its index -> the layer and its input); the others are absorbed_.
    // The layer is made when its node is reached, so that it can read the input's shape as
    // the layers before it inferred it (ONNX's inference loses it after a computed reshape).
    struct PatternLayer {
        std::function<ModulePtr()> make; // Unsupported when the input's shape does not fit
        std::vector<std::string> inputs;
    };
    std::unordered_map<int, PatternLayer> patternLayers_;
    void findLayerPatterns();

    // Attention as exporters write it (ONNX has no Attention op before opset 23), read back
    // as one ScaledDotProductAttention at its last node (LayerPatterns.cpp): q and k, each
    // times scalars, k transposed over its last two dims (by a Transpose that may permute its
    // leading dims too: k is then that permutation of its input), MatMul(q, k^T) -> Mul or Div
    // by scalars -> Add of masks, or Where(condition, scores, fill) -> Softmax over the last
    // axis -> Dropout (optional) -> MatMul(weights, v). The scalars fold into its scale; a
    // constant mask that is the causal one (0 on and below the diagonal, -inf or at most -1e4
    // above it) into its causal flag; one float mask of data, or one made from a condition of
    // data (-inf, or a fill of at most -1e30), is its fourth input. The nodes it takes are
    // absorbed_ until it is imported: where it does not fit after all (a factor that is not a
    // constant scalar, another constant mask), they are imported one by one instead
    // (importAttention false).
    struct AttentionMatch {
        std::string q, kFrom, v;
        std::vector<int64_t> kPerm;          // k = Transpose(kFrom, kPerm) when not empty
        bool kSwapped = false;               // k = kFrom with its last two axes swapped (no Transpose read)
        std::vector<std::string> multiplies; // scalars the scores are multiplied by
        std::vector<std::string> divides;    // and divided by
        std::vector<std::string> masks;      // added to the scores
        struct Fill {
            std::string condition, fill;
            bool whereTrue = true; // the fill is taken where the condition holds
        };
        std::vector<Fill> fills;
        // Swin's shifted windows: the scores viewed per window by a Reshape to `windowShape`
        // ([B, nW, nH, Tq, Tk]), `windowMask` added ([1, nW, 1, Tq, Tk]), and viewed back.
        std::string windowMask, windowShape, viewBack;
        int softmax = -1, dropout = -1, transpose = -1;
        // v @ weights^T: the attention of v's last two axes swapped, its output swapped back.
        int weightsTranspose = -1;
        std::vector<int> nodes; // absorbed, in the graph's order
    };
    std::unordered_map<int, AttentionMatch> attentions_;
    void findAttention();
    bool importAttention(const onnx::NodeProto& last, const AttentionMatch& m);

    // A constant of the model (an initializer, a Constant node or a folded value), not a
    // graph input given a value, which stays data unless an op needs it as a constant.
    bool isConstant(const std::string& name) const;

    int32_t elemTypeOf(const std::string& name) const;

    std::string newSymbol();

    // Folds a node whose inputs are all constants, or a Shape of a value whose rank is
    // known, into a constant. False when it does not fold (the node is imported as a layer).
    // The values it read and wrote count against OnnxImportOptions::foldLimit.
    bool fold(const onnx::NodeProto& n, const Attributes& a);
    bool foldNode(const onnx::NodeProto& n, const Attributes& a);
    // The values of a constant (none for a zeros marker).
    int64_t valuesOf(const std::string& name) const;
    // Throws when `more` values computed at import would pass OnnxImportOptions::foldLimit,
    // or once a fold has passed it; the outputs of dropOutputsOf, when given, are dropped first.
    void requireFoldRoom(int64_t more, const onnx::NodeProto* dropOutputsOf = nullptr);

    // Evaluates node n, all of whose inputs are constants with every dim and value known
    // (Evaluate.cpp): arithmetic (Sum too), comparisons and logic with NumPy's broadcast, Cast,
    // Where, Range, ConstantOfShape, Expand, Tile, constant Pad, Reshape, (Un)squeeze, Flatten, Transpose,
    // Concat, Slice (any steps), Gather and ScatterND. False for the ops it does not take.
    bool evaluate(const onnx::NodeProto& n, const Attributes& a);

    // Expand(c, shape) and ConstantOfShape(shape): a constant tensor when the shape is known,
    // a zeros marker when it holds symbols and the value is 0.
    bool foldFill(const onnx::NodeProto& n, const Attributes& a);
    // Whether a constant holds zeros alone (a zeros marker or a float tensor) that add to a
    // value of dims `to` without enlarging it: no more dims than it, each 1 or `to`'s own (the
    // same symbol where that is not known at import). A weight of the file holding zeros is
    // not such (it may be learned from zero): callers exclude initializers.
    bool zerosInto(const Constant& c, const std::vector<Dim>& to) const;

    bool setConstant(const std::string& name, Constant c);
    bool foldZerosSlice(const onnx::NodeProto& n, const Attributes& a, const Constant& x);

    // A Reshape to the shape ONNX infers for the node's output: known dims as they are, a
    // dim not known at import kept (0) where the input has it at the same place, else
    // inferred (-1, at most one).
    ModulePtr reshapeTo(const onnx::NodeProto& n);

    // LSTM, GRU (linear before reset) and RNN (relu or tanh), forward or bidirectional,
    // either layout: one Tessera RNN layer (weights back in PyTorch's gate order) that
    // returns every step, reshaped (and for layout 0 transposed) to ONNX's Y [T, D, N, H]
    // or [N, T, D, H]. Initial states and sequence_lens given as data are its extra inputs,
    // and the final states Y_h, Y_c its extra outputs (layout 1 transposes them from and to
    // [N, D, H]); zero initial states are its default.
    void importRnn(const onnx::NodeProto& n, const Attributes& a);

    // Gather from a constant table [V, E] by data ids [N, L] along axis 0: an Embedder.
    // Expand of a constant [1, *rest] (a class token, a positional table) to [batch, *rest]
    // where the batch is a graph input's: a Parameter, fed that input.
    void importExpand(const onnx::NodeProto& n, const Attributes& a);
    void importExpandOfData(const onnx::NodeProto& n);
    void importGather(const onnx::NodeProto& n, const Attributes& a);
    // Gather from a constant vector [V] by integer data of any shape: a GatherElements along
    // the last dim of the vector laid over the indices' shape.
    void importGatherFromVector(const onnx::NodeProto& n, const Constant& table);

    // Slice on data: any axes, positive steps (Tessera's Slice).
    void importSlice(const onnx::NodeProto& n, const Attributes& a);

    // ReduceMean: over every spatial dim of [N, C, ...] a global average pool (flattened to
    // [N, C] without keepdims); over other dims Tessera's ReduceMean.
    void importReduceMean(const onnx::NodeProto& n, const Attributes& a);
    void importReduceSum(const onnx::NodeProto& n, const Attributes& a);
    void importTrilu(const onnx::NodeProto& n, const Attributes& a);
    std::vector<int64_t> reduceAxes(const onnx::NodeProto& n, const Attributes& a);

    void importWhere(const onnx::NodeProto& n, const Attributes& a);
    // Where of a condition computed from data (bool or integer): arithmetic on the condition
    // made float (ImportWhere.cpp).
    void importWhereOfData(const onnx::NodeProto& n);
    // Comparisons (Equal, Less, Greater, ...) and logic (And, Or, Xor, Not) of integer data
    // with each other or an integer constant: int32 masks (ImportWhere.cpp).
    void importMaskOp(const onnx::NodeProto& n, const Attributes& a);
    // Data of an integer type (int32 or int64 in the file; int32 in Tessera).
    bool isIntegerData(const std::string& name) const;
    // `m` (a float layer of one or two inputs: n's inputs `inputs`) over integer data: a Graph
    // casting each input to float and the output back to int32 (ImportWhere.cpp).
    void defineOverIntegers(const onnx::NodeProto& n, ModulePtr m, const std::vector<int>& inputs);
    // A node that makes or reads a SymbolicRange: a Range over a dim not known at import, a Cast,
    // Neg, Add, Sub or Mul of one by an integer constant (another such range), and an Add or Sub of one
    // and integer data of that length: the data plus the offsets, made by a CumSum along the data
    // (x[torch.arange(N), index] exports index + arange(N) T). False for a node of neither kind;
    // Unsupported for one reading a SymbolicRange otherwise.
    bool importSymbolicRange(const onnx::NodeProto& n, const Attributes& a);
    // Integer data divided by a nonzero integer constant c, or by integer data (c nullopt:
    // n's input 1): the quotient truncated toward zero as ONNX's integer Div is (`(lengths -
    // 3) // 2` of a strided convolution's output lengths), or the remainder (Mod: of the
    // floor division; of the truncated one with fmod) (ImportWhere.cpp).
    void importIntegerDivision(const onnx::NodeProto& n, std::optional<int64_t> c, bool remainder = false,
                               bool fmod = false);
    void importMod(const onnx::NodeProto& n, const Attributes& a);
    // fmod of float data by a nonzero float constant c, or by float data (c nullopt: n's
    // input 1), as a graph (ImportWhere.cpp).
    void importFloatMod(const onnx::NodeProto& n, std::optional<float> c);
    // NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: a graph of LogSoftMax,
    // GatherElements, masks and sums (ImportLosses.cpp).
    void importLoss(const onnx::NodeProto& n, const Attributes& a);

    // Pad: spatial dims only (Tessera's PadND), constant, reflect or edge; float data, or
    // integer data between Casts to float and back.
    void importPad(const onnx::NodeProto& n, const Attributes& a);

    // Upsample (opset 7 to 9) and Resize: nearest or linear; whole scales as Upsample2D/3D,
    // any other target size as Resize2D/3D.
    struct ResizeTarget {
        std::vector<float> scales;    ///< per dim; 0 where the sizes are not a whole multiple
        std::vector<int64_t> spatial; ///< the output's spatial dims, where known at import
        std::string unknown;          ///< why `spatial` is empty
    };
    ResizeTarget resizeTarget(const onnx::NodeProto& n, const Attributes& a, bool resize);
    void importResize(const onnx::NodeProto& n, const Attributes& a);
    bool noHalfwayCentres(const onnx::NodeProto& n, const std::vector<int64_t>& spatial) const;

    void importDropout(const onnx::NodeProto& n, const Attributes& a);

    void importClip(const onnx::NodeProto& n, const Attributes& a);

    void importConv(const onnx::NodeProto& n, const Attributes& a);

    // Y = alpha op(A) op(B) + beta C: a Linear with W = alpha op(B) (as [in, out]) and b = beta C.
    void importGemm(const onnx::NodeProto& n, const Attributes& a);

    void importMatMul(const onnx::NodeProto& n, const Attributes& a);
    void importEinsum(const onnx::NodeProto& n, const Attributes& a);
    // An Einsum equation that is a batched matrix product of two inputs: false for
    // "...ik,...kj->...ij", true for "...ik,...jk->...ij" (the second transposed); nullopt
    // for any other.
    static std::optional<bool> einsumProduct(const std::string& equation);

    void importPool(const onnx::NodeProto& n, const Attributes& a);

    // MaxPool with ceil_mode 1: the windows the ceiling adds reach past the high edge, so
    // the input is padded there with -FLT_MAX (never the max of a window that holds a real
    // element, as every window does) and pooled without padding: Pad1D/2D then MaxPool.
    /// A pool with ceil_mode 1 (`o` its symmetric pads): the input padded past its high edge
    /// for the windows the ceiling adds, then pooled without padding; an average's sums are
    /// rescaled to the elements each window covers.
    void importCeilPool(const onnx::NodeProto& n, bool isMax, const std::vector<int64_t>& kernel, PoolOptions o);

    void importBatchNorm(const onnx::NodeProto& n, const Attributes& a);
};

} // namespace tessera::onnx_io
