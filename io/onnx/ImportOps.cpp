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
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Cast.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/GridSample.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/KMaxPool.h"
#include "modules/LRN.h"
#include "modules/LearnedTensors.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/Pow.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/RowNorm.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/Tile.h"
#include "modules/TopK.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera::onnx_io {

// The importers by ONNX op type: one row per op (ops that differ only in a parameter share
// a function, which reads the op type; the plain activations come from kPlainActivationOps).
// An op with no row is reported as not supported.
const std::unordered_map<std::string, Importer::ImportFn>& Importer::importers() {
    static const std::unordered_map<std::string, ImportFn> table = [] {
        std::unordered_map<std::string, ImportFn> rows = {
            {"Add", &Importer::importBinary},
            {"ArgMax", &Importer::importArgMax},
            {"ArgMin", &Importer::importArgMax},
            {"AveragePool", &Importer::importPool},
            {"BatchNormalization", &Importer::importBatchNorm},
            {"Cast", &Importer::importCast},
            {"Ceil", &Importer::importRounding},
            {"Clip", &Importer::importClip},
            {"Concat", &Importer::importConcat},
            {"CumSum", &Importer::importCumSum},
            {"DepthToSpace", &Importer::importDepthToSpace},
            {"Constant", &Importer::importConstant},
            {"Conv", &Importer::importConv},
            {"ConvTranspose", &Importer::importConv},
            {"Div", &Importer::importBinary},
            {"Dropout", &Importer::importDropout},
            {"Einsum", &Importer::importEinsum},
            {"Celu", &Importer::importElu},
            {"Elu", &Importer::importElu},
            {"Scatter", &Importer::importScatterElements},
            {"ScatterElements", &Importer::importScatterElements},
            {"ScatterND", &Importer::importScatterND},
            {"Selu", &Importer::importElu},
            {"And", &Importer::importMaskOp},
            {"Equal", &Importer::importMaskOp},
            {"Expand", &Importer::importExpand},
            {"Flatten", &Importer::importFlatten},
            {"Floor", &Importer::importRounding},
            {"GRU", &Importer::importRnn},
            {"Greater", &Importer::importMaskOp},
            {"GreaterOrEqual", &Importer::importMaskOp},
            {"Gather", &Importer::importGather},
            {"GatherElements", &Importer::importGatherElements},
            {"Gemm", &Importer::importGemm},
            {"GlobalAveragePool", &Importer::importGlobalAveragePool},
            {"GlobalMaxPool", &Importer::importMaxOver},
            {"GridSample", &Importer::importGridSample},
            {"Hardmax", &Importer::importHardmax},
            {"HardSigmoid", &Importer::importHardSigmoid},
            {"HardSwish", &Importer::importHardSwish},
            {"Identity", &Importer::importIdentity},
            {"InstanceNormalization", &Importer::importInstanceNormalization},
            {"LRN", &Importer::importLRN},
            {"LayerNormalization", &Importer::importLayerNormalization},
            {"LSTM", &Importer::importRnn},
            {"LeakyRelu", &Importer::importLeakyRelu},
            {"Less", &Importer::importMaskOp},
            {"LessOrEqual", &Importer::importMaskOp},
            {"LogSoftmax", &Importer::importSoftmax},
            {"MatMul", &Importer::importMatMul},
            {"Max", &Importer::importMaxMin},
            {"MaxPool", &Importer::importPool},
            {"Mean", &Importer::importMean},
            {"Min", &Importer::importMaxMin},
            {"Mod", &Importer::importMod},
            {"Mul", &Importer::importBinary},
            {"Neg", &Importer::importNeg},
            {"NegativeLogLikelihoodLoss", &Importer::importLoss},
            {"Not", &Importer::importMaskOp},
            {"OneHot", &Importer::importOneHot},
            {"Or", &Importer::importMaskOp},
            {"PRelu", &Importer::importPRelu},
            {"Pad", &Importer::importPad},
            {"Pow", &Importer::importPow},
            {"RNN", &Importer::importRnn},
            {"Reciprocal", &Importer::importPow},
            {"ReduceL1", &Importer::importReduceSum},
            {"ReduceL2", &Importer::importReduceSum},
            {"ReduceLogSum", &Importer::importReduceSum},
            {"ReduceLogSumExp", &Importer::importReduceLogSumExp},
            {"ReduceMax", &Importer::importMaxOver},
            {"ReduceMean", &Importer::importReduceMean},
            {"ReduceMin", &Importer::importMaxOver},
            {"ReduceSum", &Importer::importReduceSum},
            {"ReduceSumSquare", &Importer::importReduceSum},
            {"Reshape", &Importer::importReshape},
            {"Resize", &Importer::importResize},
            {"Round", &Importer::importRounding},
            {"Slice", &Importer::importSlice},
            {"Softmax", &Importer::importSoftmax},
            {"SoftmaxCrossEntropyLoss", &Importer::importLoss},
            {"SpaceToDepth", &Importer::importDepthToSpace},
            {"Split", &Importer::importSplit},
            {"Sqrt", &Importer::importPow},
            {"Squeeze", &Importer::importSqueeze},
            {"Sub", &Importer::importBinary},
            {"Sum", &Importer::importBinary},
            {"Shrink", &Importer::importThresholdedRelu},
            {"ThresholdedRelu", &Importer::importThresholdedRelu},
            {"Tile", &Importer::importTile},
            {"TopK", &Importer::importTopK},
            {"Transpose", &Importer::importTranspose},
            {"Trilu", &Importer::importTrilu},
            {"Unsqueeze", &Importer::importSqueeze},
            {"Upsample", &Importer::importResize},
            {"Where", &Importer::importWhere},
            {"Xor", &Importer::importMaskOp},
        };
        for (const PlainActivationOp& p : kPlainActivationOps) rows.emplace(p.op, &Importer::importPlainActivation);
        return rows;
    }();
    return table;
}

void Importer::importNode(const onnx::NodeProto& n) {
    const Attributes a(n);
    // CastLike: a Cast to the type of its second input, which it reads for its type only.
    if (n.op_type() == "CastLike") {
        a.only({});
        if (n.input_size() != 2) throw Unsupported{"CastLike takes 2 inputs, got " + std::to_string(n.input_size())};
        int32_t to = elemTypeOf(n.input(1)); // declared or inferred; else a constant's kind
        if (to == 0 && isConstant(n.input(1))) {
            const Constant& like = constants_.at(n.input(1));
            to = like.isBool  ? onnx::TensorProto::BOOL
                 : like.isInt ? onnx::TensorProto::INT64
                              : onnx::TensorProto::FLOAT;
        }
        if (to == 0) throw Unsupported{"the type of input 2 ('" + n.input(1) + "') is not known at import"};
        onnx::NodeProto cast = n;
        cast.set_op_type("Cast");
        cast.mutable_input()->RemoveLast();
        onnx::AttributeProto* attr = cast.add_attribute();
        attr->set_name("to");
        attr->set_type(onnx::AttributeProto::INT);
        attr->set_i(to);
        return importNode(cast);
    }
    // Shape computations fold to constants first (a Constant node is one already).
    if (n.op_type() != "Constant" && (importSymbolicRange(n, a) || fold(n, a))) return;
    const auto& table = importers();
    const auto it = table.find(n.op_type());
    if (it == table.end()) throw Unsupported{"op " + n.op_type() + " is not supported"};
    (this->*it->second)(n, a);
}

// Constant
void Importer::importConstant(const onnx::NodeProto& n, const Attributes& a) {
    const onnx::AttributeProto* v = a.get("value");
    if (!v) throw Unsupported{"only the 'value' attribute is supported"};
    constants_[n.output(0)] = constantOf(v->t(), "Constant '" + n.output(0) + "'");
}

// Cast
void Importer::importCast(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"to"});
    requireInputsImported(n);
    const int64_t to = a.i("to", 0);
    const int32_t from = rankOf(n, 0) >= 0 ? elemTypeOf(n.input(0)) : 0;
    const bool fromInt = isIntegerType(from);
    // Integers to integers (int32 in Tessera, whatever their width in the file): the indices
    // an ArgMax exported by Tessera casts to int32.
    if (fromInt && (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32)) {
        return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    }
    // Bool to bool (a mask cast again before a Where): the same 0s and 1s.
    if (from == onnx::TensorProto::BOOL && to == onnx::TensorProto::BOOL) {
        return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    }
    // Float to integers (int32 in Tessera, truncated toward zero): a mask computed in float,
    // as Tessera writes Equal and Not of data.
    if (from == onnx::TensorProto::FLOAT && (to == onnx::TensorProto::INT32 || to == onnx::TensorProto::INT64)) {
        return define(n, std::make_shared<Cast>(DType::float32, DType::int32), dataInputs(n, 1));
    }
    if (to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::FLOAT16 && to != onnx::TensorProto::BFLOAT16) {
        throw Unsupported{"a cast of data to " + typeName(static_cast<int32_t>(to)) +
                          " (to float, float16 and bfloat16 are supported, integers to integers and float to "
                          "integers)"};
    }
    auto dtypeOf = [](int64_t t) {
        return t == onnx::TensorProto::FLOAT16    ? DType::float16
               : t == onnx::TensorProto::BFLOAT16 ? DType::bfloat16
                                                  : DType::float32;
    };
    const bool from16 = from == onnx::TensorProto::FLOAT16 || from == onnx::TensorProto::BFLOAT16;
    // Integers (int32 in Tessera: a graph's int64 inputs are read as int32) to float: an
    // attention mask of ones and zeros made additive (BERT's (1 - mask) * min).
    if (fromInt) {
        return define(n, std::make_shared<Cast>(DType::int32, dtypeOf(to)), dataInputs(n, 1));
    }
    if (from != onnx::TensorProto::FLOAT && from != 0 && !from16) {
        throw Unsupported{"a cast of " + typeName(from) + " data" +
                          " (float, 16-bit floats and integers are supported)"};
    }
    // 16-bit graph inputs are read as float32 (exactly, as 16-bit constants are): only the
    // values a Cast made are 16-bit in the graph.
    const bool madeByCast = from16 && !value(n, 0).node->bwds().empty();
    const DType in = madeByCast ? dtypeOf(from) : DType::float32, out = dtypeOf(to);
    if (in == out) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    return define(n, std::make_shared<Cast>(in, out), dataInputs(n, 1));
}

// Unsqueeze, Squeeze
void Importer::importSqueeze(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axes"});
    std::vector<int64_t> axes = a.ints("axes");
    if (n.input_size() > 1 && !n.input(1).empty()) {
        const Constant& c = requireConstant(n, 1, "the axes");
        if (c.isInt) axes = c.ints;
    }
    // Dims ONNX's inference left open (of a value whose shape was computed at run time, as an
    // expanded constant compared with data is) come from the input's, with 1s in or out.
    const auto in = shapes_.find(n.input(0));
    const auto out = shapes_.find(n.output(0));
    if (!axes.empty() && in != shapes_.end() && known(in->second) && (out == shapes_.end() || !known(out->second))) {
        const bool unsqueeze = n.op_type() == "Unsqueeze";
        const auto rank = static_cast<int64_t>(in->second.size() + (unsqueeze ? axes.size() : 0));
        std::vector<bool> at(static_cast<size_t>(rank), false);
        bool valid = true;
        for (int64_t x : axes) {
            x = x < 0 ? x + rank : x;
            valid = valid && x >= 0 && x < rank && !at[static_cast<size_t>(x)]; // each axis once
            if (valid) at[static_cast<size_t>(x)] = true;
        }
        std::vector<Dim> dims;
        for (int64_t k = 0, j = 0; valid && k < rank; ++k) {
            if (unsqueeze && at[static_cast<size_t>(k)]) {
                dims.push_back(Dim{1, {}});
            } else if (!at[static_cast<size_t>(k)]) {
                dims.push_back(in->second[static_cast<size_t>(unsqueeze ? j++ : k)]);
            }
        }
        if (valid) shapes_[n.output(0)] = std::move(dims);
    }
    return define(n, reshapeTo(n), dataInputs(n, 1));
}

// HardSigmoid
void Importer::importHardSigmoid(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"alpha", "beta"});
    return define(
        n,
        std::make_shared<Activation>(ActivationKind::hardSigmoid, ActivationOptions{.hardSlope = a.f("alpha", 0.2f),
                                                                                    .hardOffset = a.f("beta", 0.5f)}),
        dataInputs(n, 1));
}

// HardSwish
void Importer::importHardSwish(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    return define(n, std::make_shared<Activation>(ActivationKind::hardSwish), dataInputs(n, 1));
}

// Sub, Div, Add, Sum, Mul. Before opset 7, `broadcast` 1 lets input 1 broadcast to input 0
// aligned at `axis` (by default at the end, which is NumPy's rule; Caffe's per-channel scales
// and biases give axis 1): a constant input 1 then has 1s appended to its dims, so that it
// broadcasts by NumPy's rule (data, only where it aligns at the end).
void Importer::importBinary(const onnx::NodeProto& n, const Attributes& a) {
    const std::string& op = n.op_type();
    if (opset_ < 7 && op != "Sum" && (a.has("broadcast") || a.has("axis"))) {
        a.only({"broadcast", "axis"});
        onnx::NodeProto numpy = n;
        numpy.clear_attribute();
        if (a.i("broadcast", 0) != 0 && a.has("axis") && n.input_size() == 2) {
            auto rank = ranks_.find(n.input(0));
            if (rank == ranks_.end()) throw Unsupported{"broadcast at an axis of an input whose rank is not known"};
            const int64_t axis = a.i("axis", 0) < 0 ? a.i("axis", 0) + rank->second : a.i("axis", 0);
            if (isConstant(n.input(1))) {
                Constant c = constants_.at(n.input(1));
                const int64_t pad = rank->second - axis - static_cast<int64_t>(c.dims.size());
                if (pad < 0 || axis < 0 || c.symbolic() || c.zeros) {
                    throw Unsupported{"a constant of " + std::to_string(c.dims.size()) + " dims broadcast at axis " +
                                      std::to_string(axis) + " of an input of " + std::to_string(rank->second)};
                }
                c.dims.insert(c.dims.end(), static_cast<size_t>(pad), 1);
                if (c.tensor.defined()) c.tensor = c.tensor.reshape(Shape(c.dims));
                const std::string aligned = n.input(1) + ":aligned";
                constants_[aligned] = std::move(c);
                if (initializers_.count(n.input(1))) initializers_.insert(aligned); // a weight still
                numpy.set_input(1, aligned);
            } else {
                auto other = ranks_.find(n.input(1));
                if (other == ranks_.end() || axis + other->second != rank->second) {
                    throw Unsupported{"data broadcast at axis " + std::to_string(axis) +
                                      " before the end of input 0 (data aligned at its end is supported)"};
                }
            }
        }
        return importBinary(numpy, Attributes(numpy));
    }
    if (op != "Sum" && n.input_size() == 2 && (isConstant(n.input(0)) || isConstant(n.input(1)))) {
        return importScalarArithmetic(n, a);
    }
    a.only({});
    if (n.input_size() == 2 && op == "Div" && isIntegerData(n.input(0)) && isIntegerData(n.input(1))) {
        return importIntegerDivision(n, std::nullopt);
    }
    if (n.input_size() == 2 && op != "Div" && isIntegerData(n.input(0)) && isIntegerData(n.input(1))) {
        ModulePtr m = op == "Sub"   ? ModulePtr(std::make_shared<Sub>())
                      : op == "Mul" ? ModulePtr(std::make_shared<Mul>())
                                    : ModulePtr(std::make_shared<Add>());
        return defineOverIntegers(n, m, {0, 1});
    }
    if (op == "Sub") return define(n, std::make_shared<Sub>(), dataInputs(n, 2));
    if (op == "Div") return define(n, std::make_shared<Div>(), dataInputs(n, 2));
    for (int k = 0; k < n.input_size(); ++k) {
        if (constants_.count(n.input(k)) && !takenAsConstant_.count(n.input(k))) {
            throw Unsupported{"input " + std::to_string(k) + " is a constant (broadcasting " + op +
                              " with a constant is not supported)"};
        }
    }
    if (op == "Mul") return define(n, std::make_shared<Mul>(), dataInputs(n, n.input_size()));
    return define(n, std::make_shared<Add>(), dataInputs(n, n.input_size()));
}

// x op c or c op x with a scalar constant c: an affine map (MulAddConst).
void Importer::importScalarArithmetic(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    const std::string& op = n.op_type();
    const int k = isConstant(n.input(1)) ? 1 : 0;
    if (isConstant(n.input(1 - k))) throw Unsupported{"both inputs are constants"};
    const Constant& c = requireConstant(n, k, "the constant operand");
    const bool integers = isIntegerData(n.input(1 - k)) && c.isInt && c.ints.size() == 1 && !c.symbolic();
    if (integers && op == "Div" && k == 1) return importIntegerDivision(n, c.ints[0]); // lengths // 2
    if (integers && op != "Div") {                                                     // T - lengths
        const auto v = static_cast<float>(c.ints[0]);
        const float scale = op == "Mul" ? v : op == "Sub" && k == 0 ? -1.0f : 1.0f;
        const float shift = op == "Add" ? v : op == "Sub" ? (k == 0 ? v : -v) : 0.0f;
        return defineOverIntegers(n, std::make_shared<MulAddConst>(scale, shift), {1 - k});
    }
    // Integer data and a tensor of integers (offsets per row: x[torch.arange(N), last] at a fixed N
    // adds row * T to each row's index), exact below 2^24: MulAddConst with tensor constants.
    if (isIntegerData(n.input(1 - k)) && c.isInt && !c.symbolic() && c.ints.size() > 1 && op != "Div") {
        std::vector<float> v;
        for (int64_t e : c.ints) {
            if (std::llabs(e) >= (int64_t{1} << 24)) throw Unsupported{"an integer constant beyond 2^24"};
            v.push_back(static_cast<float>(op == "Sub" && k == 1 ? -e : e));
        }
        const Tensor t = Tensor::fromVector(Shape(c.dims), v);
        Tensor scale, shift;
        (op == "Mul" ? scale : shift) = t;
        if (op == "Sub" && k == 0) scale = Tensor::full({1}, -1.0f); // C - x
        return defineOverIntegers(n, std::make_shared<MulAddConst>(scale, shift), {1 - k});
    }
    auto x = shapes_.find(n.input(1 - k)); // x + 0, x - 0 (not a weight): torch.baddbmm's input at beta 0
    if ((op == "Add" || (op == "Sub" && k == 1)) && x != shapes_.end() && !initializers_.count(n.input(k)) &&
        zerosInto(c, x->second))
        return define(n, std::make_shared<Identity>(), dataInputs(n, std::vector<int>{1 - k}), {n.input(1 - k)});
    if (c.isInt || !c.tensor.defined())
        throw Unsupported{"input " + std::to_string(k) + " is a constant of " +
                          (c.isInt ? "integers" : "a shape known only at run time") +
                          " (float constants are supported)"};
    Source s = value(n, 1 - k);
    if (c.tensor.numel() != 1) return importTensorArithmetic(n, c, k, Parent(s.node, s.slot));
    const float v = c.tensor.toVector<float>()[0];
    float scale = 1.0f, shift = 0.0f;
    if (op == "Add") shift = v;
    if (op == "Mul") scale = v;
    if (op == "Sub") {
        scale = k == 1 ? 1.0f : -1.0f;
        shift = k == 1 ? -v : v;
    }
    if (op == "Div") {
        if (k == 0) return define(n, std::make_shared<Pow>(-1.0f, v), Parents{Parent(s.node, s.slot)}); // v / x
        if (v == 0.0f) throw Unsupported{"a division by the constant 0"};
        scale = 1.0f / v;
    }
    return define(n, std::make_shared<MulAddConst>(scale, shift), Parents{Parent(s.node, s.slot)});
}

// x op C or C op x with a constant tensor C that broadcasts to x (a per-channel [1, C, 1, 1]
// mean or scale): MulAddConst with tensor constants. Where C enlarges x along dims after the
// batch where x has a known 1 (timesteps [N, 1] times frequencies [F]), x is tiled there first.
// A Mul by a weight of the file (an initializer, not a Constant node or a folded value) is
// a learned factor, as PyTorch's layer scales are parameters: a Scale. Not one selected from
// a weight (rows of a rotary embedding's cos and sin tables, sliced to the length: buffers).
void Importer::importTensorArithmetic(const onnx::NodeProto& n, const Constant& c, int k, const Parent& x) {
    const std::string& op = n.op_type();
    if (op == "Mul" && initializers_.count(n.input(k)) && !selectedWeights_.count(n.input(k))) {
        auto scale = std::make_shared<Scale>(c.dims);
        scale->getVar("weight")->data.copyFrom(c.tensor.reshape(Shape(c.dims)));
        return define(n, scale, Parents{x});
    }
    // An Add of a weight [1, ...] of the data's rank (a positional table) is learned too: a
    // Parameter of the data's batch, then an Add. So is one of fewer dims (aligned from the
    // right) that rows selected from a weight made (positional rows gathered by an arange, a
    // bias sliced from a joint one: nn.MultiheadAttention's cross-attention projections).
    // A weight of the file itself that is not [1, ...] may be a mask, and stays a constant,
    // as does one holding infinities (a mask's fill).
    const auto data = shapes_.find(n.input(1 - k));
    const bool rows =
        selectedWeights_.count(n.input(k)) && data != shapes_.end() && data->second.size() > c.dims.size();
    const auto finite = [&] {
        const std::vector<float> v = c.tensor.toVector<float>();
        return std::all_of(v.begin(), v.end(), [](float e) { return std::isfinite(e); });
    };
    if (op == "Add" && initializers_.count(n.input(k)) && (c.dims.size() >= 2 || rows) && data != shapes_.end() &&
        (rows || (data->second.size() == c.dims.size() && c.dims[0] == 1)) && finite()) {
        std::vector<int64_t> rest(data->second.size() - c.dims.size(), 1);
        rest.insert(rest.end(), c.dims.begin(), c.dims.end());
        rest.erase(rest.begin()); // the batch's 1
        auto table = std::make_shared<Parameter>(rest);
        table->getVar("weight")->data.copyFrom(c.tensor.reshape(Shape(rest)));
        const std::string value = n.output(0) + "#table"; // the table over the batch, a value of its own
        std::vector<Dim> dims = {data->second[0]};
        for (int64_t d : rest) dims.push_back({d, {}});
        NodePtr t = node(table, Parents{x}, nodeName((n.name().empty() ? n.output(0) : n.name()) + "_table"));
        values_[value] = {t, 0};
        ranks_[value] = static_cast<int64_t>(dims.size());
        shapes_[value] = std::move(dims);
        return define(n, std::make_shared<Add>(), Parents{x, Parent(t, 0)}, {n.input(1 - k), value});
    }
    Parent in = x;
    if (data != shapes_.end() && c.dims.size() <= data->second.size()) {
        const size_t off = data->second.size() - c.dims.size();
        for (size_t j = 0; j < c.dims.size(); ++j) {
            const size_t axis = off + j;
            if (axis == 0 || c.dims[j] <= 1 || data->second[axis].value != 1) continue;
            const std::string base = (n.name().empty() ? n.output(0) : n.name()) + "_tiled_" + std::to_string(axis);
            in =
                Parent(node(std::make_shared<Tile>(static_cast<int>(axis), c.dims[j]), Parents{in}, nodeName(base)), 0);
        }
    }
    std::vector<float> v = c.tensor.toVector<float>();
    const Shape shape = Shape(c.dims);
    Tensor a, b;
    if (op == "Add") b = Tensor::fromVector(shape, v);
    if (op == "Mul") a = Tensor::fromVector(shape, v);
    if (op == "Sub") {
        if (k == 1) { // x - C
            for (float& e : v) e = -e;
            b = Tensor::fromVector(shape, v);
        } else { // C - x
            a = Tensor::full({1}, -1.0f);
            b = Tensor::fromVector(shape, v);
        }
    }
    if (op == "Div") {
        if (k == 0)
            throw Unsupported{"a constant tensor divided by data is not supported (a number divided by data is)"};
        for (float& e : v) {
            if (e == 0.0f) throw Unsupported{"a division by a constant holding 0"};
            e = 1.0f / e;
        }
        a = Tensor::fromVector(shape, v);
    }
    return define(n, std::make_shared<MulAddConst>(a, b), Parents{in});
}

// Pow by a constant exponent (one number), Sqrt, Reciprocal: Pow.
void Importer::importPow(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    const std::string& op = n.op_type();
    float exponent = op == "Sqrt" ? 0.5f : -1.0f;
    if (op == "Pow") {
        requireInputsImported(n);
        const Constant& c = requireConstant(n, 1, "the exponent");
        const size_t count = c.isInt ? c.ints.size() : c.tensor.defined() ? static_cast<size_t>(c.tensor.numel()) : 0;
        if (count != 1) throw Unsupported{"an exponent of " + std::to_string(count) + " values (one is supported)"};
        exponent = c.isInt ? static_cast<float>(c.ints[0]) : c.tensor.toVector<float>()[0];
    }
    return define(n, std::make_shared<Pow>(exponent), dataInputs(n, 1));
}

// Identity
void Importer::importIdentity(const onnx::NodeProto& n, const Attributes&) {
    define(n, std::make_shared<Identity>(), dataInputs(n, 1));
}

// Relu, Sigmoid, Tanh, Softplus, Exp, Log, Abs, Sin, Cos, Tan, Asin, ..., Erf, Sign (kPlainActivationOps)
void Importer::importPlainActivation(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    for (const PlainActivationOp& p : kPlainActivationOps) {
        if (n.op_type() == p.op) return define(n, std::make_shared<Activation>(p.kind), dataInputs(n, 1));
    }
    throw Unsupported{"op " + n.op_type() + " is no activation"};
}

// ArgMax, ArgMin: int32 indices where ONNX has int64 (Tessera's integer type).
void Importer::importArgMax(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis", "keepdims", "select_last_index"});
    const int64_t axis = a.i("axis", 0);
    const ArgMaxOptions options{.keepDims = a.i("keepdims", 1) != 0, .lastIndex = a.i("select_last_index", 0) != 0};
    ModulePtr m = n.op_type() == "ArgMin" ? std::make_shared<ArgMin>(static_cast<int>(axis), options)
                                          : std::make_shared<ArgMax>(static_cast<int>(axis), options);
    // Of integer data (a mask's first 1: `(ids == pad).int().argmax(-1)`, as Hugging Face's
    // sequence classifiers find each sequence's end): its values as float, exact below 2^24.
    if (isIntegerData(n.input(0))) {
        auto seq = std::make_shared<Sequential>();
        seq->append(std::make_shared<Cast>(DType::int32, DType::float32)).append(m);
        m = seq;
    }
    return define(n, m, dataInputs(n, 1));
}

// TopK: Tessera's TopK (its positions int32 where ONNX has int64); k a constant (an input
// from opset 10, an attribute before).
void Importer::importTopK(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis", "largest", "sorted", "k"});
    requireInputsImported(n);
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    int64_t k = a.i("k", -1);
    if (opset_ >= 10) k = static_cast<int64_t>(requireScalar(n, 1, "k"));
    if (k < 1) throw Unsupported{"k = " + std::to_string(k) + " (at least 1 is supported)"};
    const TopKOptions options{.largest = a.i("largest", 1) != 0, .sorted = a.i("sorted", 1) != 0};
    return define(n, std::make_shared<TopK>(k, static_cast<int>(a.i("axis", -1)), options), dataInputs(n, 1),
                  {n.input(0)});
}

// Neg: -x, an affine map (MulAddConst(-1)).
void Importer::importNeg(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    requireInputsImported(n);
    return define(n, std::make_shared<MulAddConst>(-1.0f, 0.0f), dataInputs(n, 1));
}

// LeakyRelu
void Importer::importLeakyRelu(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"alpha"});
    return define(
        n, std::make_shared<Activation>(ActivationKind::leakyRelu, ActivationOptions{.slope = a.f("alpha", 0.01f)}),
        dataInputs(n, 1));
}

// Elu; Selu: gamma elu_alpha(x), an Elu and a MulAddConst (nn.SELU: ONNX's defaults); Celu:
// alpha elu_1(x / alpha), which is x above 0 and alpha (exp(x / alpha) - 1) below (nn.CELU).
void Importer::importElu(const onnx::NodeProto& n, const Attributes& a) {
    if (n.op_type() == "Celu") {
        a.only({"alpha"});
        const float alpha = a.f("alpha", 1.0f);
        if (!(alpha > 0.0f) || !std::isfinite(alpha)) {
            throw Unsupported{"Celu's alpha " + std::to_string(alpha) + " (a positive alpha is supported)"};
        }
        auto seq = std::make_shared<Sequential>();
        seq->append(std::make_shared<MulAddConst>(1.0f / alpha, 0.0f))
            .append(std::make_shared<Activation>(ActivationKind::elu, ActivationOptions{.alpha = 1.0f}))
            .append(std::make_shared<MulAddConst>(alpha, 0.0f));
        return define(n, seq, dataInputs(n, 1));
    }
    if (n.op_type() == "Selu") {
        a.only({"alpha", "gamma"});
        auto seq = std::make_shared<Sequential>();
        seq->append(std::make_shared<Activation>(ActivationKind::elu,
                                                 ActivationOptions{.alpha = a.f("alpha", 1.67326319217681884765625f)}))
            .append(std::make_shared<MulAddConst>(a.f("gamma", 1.05070102214813232421875f), 0.0f));
        return define(n, seq, dataInputs(n, 1));
    }
    a.only({"alpha"});
    return define(n, std::make_shared<Activation>(ActivationKind::elu, ActivationOptions{.alpha = a.f("alpha", 1.0f)}),
                  dataInputs(n, 1));
}

// GlobalAveragePool
void Importer::importGlobalAveragePool(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    return define(n, std::make_shared<GlobalAvgPool>(), dataInputs(n, 1));
}

// LRN
void Importer::importLRN(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"size", "alpha", "beta", "bias"});
    if (!a.has("size")) throw Unsupported{"the size attribute is missing"};
    LRNOptions o{.N = a.i("size", 5), .alpha = a.f("alpha", 1e-4f), .beta = a.f("beta", 0.75f), .K = a.f("bias", 1.0f)};
    if (o.N % 2 == 0) throw Unsupported{"an even size " + std::to_string(o.N) + " (Tessera's window is centred)"};
    return define(n, std::make_shared<CrossMapLRN>(o), dataInputs(n, 1));
}

// PRelu
void Importer::importPRelu(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    const Constant& slope = requireConstant(n, 1, "the slope");
    // One slope, or one per channel ([C], [C, 1, 1] or [1, C, 1, 1]).
    int64_t maps = 0;
    const Shape& ss = slope.tensor.shape();
    int64_t nontrivial = 0;
    for (size_t d = 0; d < ss.rank(); ++d) {
        if (ss[static_cast<int64_t>(d)] != 1) {
            ++nontrivial;
            maps = ss[static_cast<int64_t>(d)];
        }
    }
    if (nontrivial > 1) throw Unsupported{"a slope of shape " + ss.str() + " (one per channel is supported)"};
    if (maps > 1 && !(opset_ < 7 && ss.rank() == 1)) { // before opset 7 a [C] slope is per channel
        // numpy broadcasting: the slope's dims align with the input's last ones
        const int64_t rank = rankOf(n, 0);
        if (rank < 0) throw Unsupported{"a per-channel slope on an input whose rank the model does not declare"};
        int64_t at = -1; // the input dim the slope's one non-1 dim falls on
        for (size_t d = 0; d < ss.rank(); ++d) {
            if (ss[static_cast<int64_t>(d)] != 1) {
                at = rank - static_cast<int64_t>(ss.rank()) + static_cast<int64_t>(d);
            }
        }
        if (at != 1) {
            throw Unsupported{"a slope of shape " + ss.str() + " varies along dim " + std::to_string(at) +
                              ", not the channels (dim 1)"};
        }
    }
    auto m = std::make_shared<PRelu>(maps > 1 ? maps : 1, PReluOptions{.sharedMaps = maps <= 1});
    m->getVar("slopes")->data.copyFrom(slope.tensor.reshape({maps > 1 ? maps : 1}));
    return define(n, m, dataInputs(n, 1));
}

// InstanceNormalization
void Importer::importInstanceNormalization(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"epsilon"});
    const Constant& scale = requireConstant(n, 1, "scale");
    const Constant& bias = requireConstant(n, 2, "B");
    const int64_t maps = scale.tensor.numel();
    auto m = std::make_shared<InstanceNorm2D>(maps, InstanceNormOptions{.epsilon = a.f("epsilon", 1e-5f)});
    m->getVar("scale")->data.copyFrom(scale.tensor.reshape({maps}));
    m->getVar("bias")->data.copyFrom(bias.tensor.reshape({maps}));
    return define(n, m, dataInputs(n, 1));
}

// LayerNormalization (opset 17): the dims from `axis` on normalised together. Its Mean and
// InvStdDev outputs, where something reads them, are nodes of their own beside the
// LayerNorm: mean = ReduceMean(x), InvStdDev = (ReduceMean((x - mean)^2) + epsilon)^-1/2
// over those dims, kept (ONNX's shapes: x's with the normalised dims 1).
void Importer::importLayerNormalization(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis", "epsilon", "stash_type"});
    const int64_t rank = rankOf(n, 0);
    if (rank <= 0) throw Unsupported{"the rank of its input is not known"};
    const int64_t axis = resolveAxis(n, 0, a.i("axis", -1));
    if (axis < 0 || axis >= rank) {
        throw Unsupported{"axis " + std::to_string(a.i("axis", -1)) + " is outside a rank-" + std::to_string(rank) +
                          " input"};
    }
    const Constant& scale = requireConstant(n, 1, "Scale");
    std::vector<int64_t> shape; // the normalised dims: x's from axis on
    if (auto x = shapes_.find(n.input(0)); x != shapes_.end() && static_cast<int64_t>(x->second.size()) == rank) {
        for (int64_t j = axis; j < rank; ++j) shape.push_back(x->second[static_cast<size_t>(j)].value);
    }
    if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](int64_t v) { return v < 1; })) {
        throw Unsupported{"the normalised dims of its input are not known"};
    }
    if (scale.tensor.numel() != Shape(shape).numel()) {
        throw Unsupported{"Scale " + Shape(scale.dims).str() + " does not hold one value per normalised element " +
                          Shape(shape).str()};
    }
    const bool hasBias = n.input_size() > 2 && !n.input(2).empty();
    auto m = std::make_shared<LayerNorm>(shape, LayerNormOptions{.epsilon = a.f("epsilon", 1e-5f), .useBias = hasBias});
    m->getVar("weight")->data.copyFrom(scale.tensor.reshape(Shape(shape)));
    if (hasBias) {
        const Constant& bias = requireConstant(n, 2, "B");
        if (bias.tensor.numel() != scale.tensor.numel()) throw Unsupported{"B and Scale differ in size"};
        m->getVar("bias")->data.copyFrom(bias.tensor.reshape(Shape(shape)));
    }
    const Parents x = dataInputs(n, 1);
    define(n, m, x);
    auto used = [&](int k) { return n.output_size() > k && !n.output(k).empty() && usedValues_.count(n.output(k)); };
    for (int k = 1; k < n.output_size(); ++k) values_.erase(n.output(k)); // not the LayerNorm's
    if (!used(1) && !used(2)) return;
    std::vector<int64_t> axes;
    for (int64_t j = axis; j < rank; ++j) axes.push_back(j);
    const std::string base = n.name().empty() ? n.output(0) : n.name();
    const NodePtr mean = node(std::make_shared<ReduceMean>(axes, true), x, nodeName(base + "_mean"));
    if (used(1)) values_[n.output(1)] = {mean, 0};
    if (!used(2)) return;
    const NodePtr centred = node(std::make_shared<Sub>(), Parents{x[0], Parent(mean, 0)}, nodeName(base + "_centred"));
    const NodePtr square = node(std::make_shared<Pow>(2.0f), centred, nodeName(base + "_square"));
    const NodePtr var = node(std::make_shared<ReduceMean>(axes, true), square, nodeName(base + "_var"));
    const NodePtr eps = node(std::make_shared<MulAddConst>(1.0f, a.f("epsilon", 1e-5f)), var, nodeName(base + "_eps"));
    values_[n.output(2)] = {node(std::make_shared<Pow>(-0.5f), eps, nodeName(base + "_invstd")), 0};
}

// Split
// Without sizes, one part per output (or `num_outputs`, opset 18) of a dim known at import:
// equal parts, the last one smaller where the dim does not divide (opset 18's rule; before
// it, the dim had to divide).
void Importer::importSplit(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis", "split", "num_outputs"});
    std::vector<int64_t> sizes = a.ints("split");
    if (n.input_size() > 1 && !n.input(1).empty()) sizes = requireInts(n, 1, "the split sizes");
    const int64_t axis = resolveAxis(n, 0, a.i("axis", 0));
    if (sizes.empty()) {
        const int64_t parts = a.i("num_outputs", n.output_size());
        if (parts != n.output_size()) {
            throw Unsupported{"num_outputs " + std::to_string(parts) + " with " + std::to_string(n.output_size()) +
                              " outputs"};
        }
        const int64_t dim = dimOf(n, 0, axis);
        if (dim < 0) {
            throw Unsupported{"equal splits of a dim not known at import (axis " + std::to_string(axis) + ")"};
        }
        const int64_t part = parts > 0 ? (dim + parts - 1) / parts : 0;
        if (parts < 1 || part * (parts - 1) >= dim) {
            throw Unsupported{"a dim of " + std::to_string(dim) + " in " + std::to_string(parts) + " nonempty parts"};
        }
        sizes.assign(static_cast<size_t>(parts), part);
        sizes.back() = dim - part * (parts - 1);
    }
    if (static_cast<int>(sizes.size()) != n.output_size()) throw Unsupported{"split sizes do not match the outputs"};
    return define(n, std::make_shared<Split>(static_cast<int>(axis), sizes), dataInputs(n, 1));
}

// Tile: one Tile layer per dim repeated (in a Sequential where there are several).
void Importer::importTile(const onnx::NodeProto& n, const Attributes& a) {
    a.only({});
    const Constant& reps = requireConstant(n, 1, "the repeats");
    std::vector<ModulePtr> tiles;
    for (size_t d = 0; d < reps.ints.size(); ++d) {
        if (reps.ints[d] < 1) throw Unsupported{"a repeat count of " + std::to_string(reps.ints[d])};
        if (reps.ints[d] > 1) tiles.push_back(std::make_shared<Tile>(static_cast<int>(d), reps.ints[d]));
    }
    if (tiles.empty()) return define(n, std::make_shared<Identity>(), dataInputs(n, 1));
    if (tiles.size() == 1) return define(n, tiles[0], dataInputs(n, 1));
    auto seq = std::make_shared<Sequential>();
    for (const ModulePtr& t : tiles) seq->append(t);
    return define(n, seq, dataInputs(n, 1));
}

// GridSample of data [N, C, H, W] at a grid that is data [N, Ho, Wo, 2] (F.grid_sample: flow
// warping, deformable sampling): Tessera's GridSample. An affine grid made from a transform
// (as Tessera exports a SpatialTf) was read as one SpatialTf before (Patterns.cpp).
void Importer::importGridSample(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"align_corners", "mode", "padding_mode"});
    requireInputsImported(n);
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    if (isConstant(n.input(1))) throw Unsupported{"the grid is a constant (a grid that is data is supported)"};
    GridSampleOptions o{.alignCorners = a.i("align_corners", 0) != 0};
    try {
        o.mode = gridSampleModeFromString(a.s("mode", "bilinear"));
        o.padding = gridPaddingFromString(a.s("padding_mode", "zeros"));
    } catch (const ModuleError& e) {
        throw Unsupported{e.what()};
    }
    return define(n, std::make_shared<GridSample>(o), dataInputs(n, {0, 1}));
}

// Transpose
void Importer::importTranspose(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"perm"});
    std::vector<int64_t> perm = a.ints("perm");
    const Constant* c = constants_.count(n.input(0)) ? &constants_.at(n.input(0)) : nullptr;
    if (c && !c->isInt && c->tensor.shape().rank() == 2 && (perm.empty() || perm == std::vector<int64_t>{1, 0})) {
        // A transposed constant (PyTorch exports a Linear's weight so): folded.
        const Shape& cs = c->tensor.shape();
        const std::vector<float> v = c->tensor.toVector<float>();
        std::vector<float> t(v.size());
        for (int64_t i = 0; i < cs[0]; ++i) {
            for (int64_t j = 0; j < cs[1]; ++j) {
                t[static_cast<size_t>(j * cs[0] + i)] = v[static_cast<size_t>(i * cs[1] + j)];
            }
        }
        constants_[n.output(0)] = Constant{Tensor::fromVector({cs[1], cs[0]}, t), {}, false, {cs[1], cs[0]}, {}};
        return;
    }
    if (perm.empty()) { // the default reverses the dims
        const int64_t rank = rankOf(n, 0);
        if (rank < 0) throw Unsupported{"no perm, on an input whose rank the model does not declare"};
        for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    }
    return define(n, std::make_shared<Transpose>(perm), dataInputs(n, 1));
}

// Flatten
void Importer::importFlatten(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    if (a.i("axis", 1) != 1) { // another axis: a reshape to the inferred [a, b]
        if (shapes_.count(n.output(0))) return define(n, reshapeTo(n), dataInputs(n, 1));
        // ONNX's inference lost the shape: the input's, as the layers before it give it; the
        // dims from the axis on multiplied where all are known (the rest inferred: any batch),
        // else those before it
        const auto in = shapes_.find(n.input(0));
        const auto rank = in == shapes_.end() ? int64_t{0} : static_cast<int64_t>(in->second.size());
        const int64_t axis = a.i("axis", 1) < 0 ? a.i("axis", 1) + rank : a.i("axis", 1);
        std::optional<int64_t> sides[2] = {1, 1};
        for (int64_t d = 0; d < rank; ++d) {
            auto& side = sides[d >= axis ? 1 : 0];
            const int64_t v = in->second[static_cast<size_t>(d)].value;
            if (side && v >= 0)
                *side *= v;
            else
                side.reset();
        }
        if (rank == 0 || axis < 0 || axis > rank || (!sides[0] && !sides[1])) {
            throw Unsupported{"axis " + std::to_string(a.i("axis", 1)) +
                              " on an input whose shape is not known at import (axis 1 is supported)"};
        }
        return define(n, std::make_shared<Reshape>(sides[1] ? Shape{-1, *sides[1]} : Shape{*sides[0], -1}),
                      dataInputs(n, 1));
    }
    return define(n, std::make_shared<Flatten>(), dataInputs(n, 1));
}

// Reshape
void Importer::importReshape(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"allowzero"});
    if (a.i("allowzero", 0) != 0) throw Unsupported{"allowzero 1 is not supported"};
    const Constant& shape = requireConstant(n, 1, "the shape");
    if (!shape.isInt) throw Unsupported{"the shape must be int64"};
    std::vector<int64_t> target = shape.ints;
    if (shape.symbolic()) { // dims computed from the input's shape: kept (0) or inferred (-1)
        const auto in = shapes_.find(n.input(0));
        int64_t inferred = 0;
        for (size_t d = 0; d < target.size(); ++d) {
            if (shape.symbol(d).empty()) continue;
            const bool kept = in != shapes_.end() && d < in->second.size() && in->second[d].symbol == shape.symbol(d);
            target[d] = kept ? 0 : -1;
            if (!kept) ++inferred;
        }
        for (size_t d = 0; d < shape.ints.size(); ++d) inferred += shape.symbol(d).empty() && shape.ints[d] == -1;
        const std::optional<int64_t> rest = inferred > 1 ? reshapeRest(n.input(0), shape) : std::nullopt;
        for (size_t d = 0; rest && d < shape.ints.size(); ++d) {
            if (!shape.symbol(d).empty() || shape.ints[d] != -1) continue;
            target[d] = *rest; // [batch * heads, T, -1]: the -1 known
            --inferred;
        }
        if (inferred > 1) throw Unsupported{"a shape with " + std::to_string(inferred) + " dims not known at import"};
    }
    return define(n, std::make_shared<Reshape>(Shape(target)), dataInputs(n, 1));
}

// Concat
void Importer::importConcat(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    const int64_t axis = resolveAxis(n, 0, a.i("axis", 1));
    return define(n, std::make_shared<Concat>(static_cast<int>(axis)), dataInputs(n, n.input_size()));
}

// Softmax
void Importer::importSoftmax(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"axis"});
    const std::string& op = n.op_type();
    const int64_t given = a.i("axis", opset_ >= 13 ? -1 : 1);
    const int64_t axis = resolveAxis(n, 0, given); // negative where the rank is not known
    const int64_t rank = rankOf(n, 0);
    if (opset_ < 13 && !(rank > 0 && axis == rank - 1)) {
        // Before opset 13 Softmax flattens from the axis on: one axis only when it is the last.
        throw Unsupported{"opset " + std::to_string(opset_) + " " + op + " on axis " + std::to_string(given) +
                          " of an input whose rank is " + (rank > 0 ? std::to_string(rank) : "not known") +
                          " (it flattens from the axis on; Tessera's runs over one axis)"};
    }
    if (op == "LogSoftmax") return define(n, std::make_shared<LogSoftMax>(static_cast<int>(axis)), dataInputs(n, 1));
    return define(n, std::make_shared<SoftMax>(static_cast<int>(axis)), dataInputs(n, 1));
}

} // namespace tessera::onnx_io
