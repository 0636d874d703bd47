// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (a loss inside the model: PyTorch's
// export of `F.nll_loss` and `F.cross_entropy`, as a model that computes its loss from
// labels given beside its inputs writes them) as a graph of Tessera's layers. With lp the
// log-probabilities [N, C, d...] (the input; for SoftmaxCrossEntropyLoss LogSoftMax of the
// scores over dim 1) and t the targets [N, d...]:
//   loss[n, d...] = -w[t] lp[n, t, d...] (0 where t is ignore_index),
// summed, or summed and divided by the sum of w[t] over the targets not ignored (`mean`, the
// default), or kept per element (`none`). The picking is a GatherElements along dim 1; the
// class weights w (a constant) scale lp per channel before it, and w[t] for the mean is
// gathered from the weights tiled over the targets' shape. An ignored target is replaced by
// 0 before the gather (so that an ignore_index outside [0, C), -100 or 255, gathers within
// the classes) and its loss multiplied by 0: the mask is 1 - [t == ignore_index], computed
// exactly in float (the targets below 2^24). A target outside [0, C) that is not ignored
// fails when the layer runs, naming it, as PyTorch's loss does. The gradient reaches the
// input through the gather (and the LogSoftMax); the targets have none.
#include <cmath>
#include <string>
#include <vector>

#include "containers/Graph.h"
#include "io/onnx/Importer.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/Cast.h"
#include "modules/GatherElements.h"
#include "modules/Identity.h"
#include "modules/MulAddConst.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/SoftMax.h"
#include "modules/Tile.h"

namespace tessera::onnx_io {

void Importer::importLoss(const onnx::NodeProto& n, const Attributes& a) {
    a.only({"reduction", "ignore_index"});
    requireInputsImported(n);
    const bool softmax = n.op_type() == "SoftmaxCrossEntropyLoss";
    if (isConstant(n.input(0))) throw Unsupported{"input 0 is a constant (data is supported)"};
    const int32_t type = elemTypeOf(n.input(0));
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::FLOAT16 && type != onnx::TensorProto::BFLOAT16) {
        throw Unsupported{"input 0 is " + typeName(type) + " data (float data is supported)"};
    }
    if (n.input_size() < 2 || isConstant(n.input(1))) {
        throw Unsupported{"the targets are a constant (targets that are data are supported)"};
    }
    if (!isIntegerType(elemTypeOf(n.input(1)))) {
        throw Unsupported{"the targets are " + typeName(elemTypeOf(n.input(1))) + " (integers are expected)"};
    }
    const std::string reduction = a.s("reduction", "mean");
    if (reduction != "mean" && reduction != "sum" && reduction != "none") {
        throw Unsupported{"reduction '" + reduction + "' (mean, sum and none are ONNX's)"};
    }
    const int64_t rank = rankOf(n, 0);
    if (rank < 2) throw Unsupported{"an input whose rank is not known at import, or below 2 ([N, C, ...] is expected)"};
    const int64_t classes = dimOf(n, 0, 1);
    const bool weighted = n.input_size() > 2 && !n.input(2).empty();
    std::vector<float> weights;
    if (weighted) {
        const Constant& w = requireConstant(n, 2, "the class weights");
        if (w.isInt || w.zeros || w.symbolic() || !w.tensor.defined() || w.dims.size() != 1) {
            throw Unsupported{"class weights that are not a 1-D float constant"};
        }
        if (classes < 0 || w.dims[0] != classes) {
            throw Unsupported{"class weights of shape " + Shape(w.dims).str() + " for an input whose dim 1 is " +
                              (classes < 0 ? std::string("not known at import") : std::to_string(classes))};
        }
        weights = w.tensor.convertedTo(DType::float32).toVector<float>();
    }
    const bool ignore = a.has("ignore_index");
    const int64_t ignored = a.i("ignore_index", 0);
    if (ignore && std::llabs(ignored) >= (int64_t{1} << 24)) {
        throw Unsupported{"ignore_index " + std::to_string(ignored) + " (one below 2^24 in magnitude is supported)"};
    }
    // [N, 1, d...] (the targets with the class dim) and back to [N, d...]: known dims as they
    // are, the batch kept, at most one other dim inferred.
    std::vector<int64_t> withClass = {0, 1}, perElement = {0};
    int unknown = 0;
    for (int64_t d = 2; d < rank; ++d) {
        const int64_t v = dimOf(n, 0, d);
        if (v < 0) ++unknown;
        withClass.push_back(v < 0 ? -1 : v);
        perElement.push_back(v < 0 ? -1 : v);
    }
    if (unknown > 1) throw Unsupported{"an input with more than one dim after [N, C] not known at import"};
    if (rank == 2) perElement = {-1};

    auto x = tessera::node(std::make_shared<Identity>(), {}, "x");
    auto target = tessera::node(std::make_shared<Identity>(), {}, "target");
    NodePtr logProb = softmax ? tessera::node(std::make_shared<LogSoftMax>(1), {x}, "log_prob") : x;
    NodePtr floatTarget = tessera::node(std::make_shared<Cast>(DType::int32, DType::float32), {target}, "float_target");
    NodePtr kept, index = target;
    if (ignore) {
        // kept = min(|t - ignore_index|, 1): 0 for an ignored target, 1 for any other integer.
        auto offset =
            tessera::node(std::make_shared<MulAddConst>(1.0f, -static_cast<float>(ignored)), {floatTarget}, "offset");
        auto distance = tessera::node(std::make_shared<Activation>(ActivationKind::abs), {offset}, "distance");
        kept = tessera::node(
            std::make_shared<Activation>(ActivationKind::clip, ActivationOptions{.min = 0.0f, .max = 1.0f}), {distance},
            "kept");
        auto safe = tessera::node(std::make_shared<Mul>(), {floatTarget, kept}, "safe_target");
        index = tessera::node(std::make_shared<Cast>(DType::float32, DType::int32), {safe}, "safe_index");
    }
    index = tessera::node(std::make_shared<Reshape>(Shape(withClass)), {index}, "index");
    // w[c] per channel: [C, 1, ...] aligned at the end of [N, C, d...].
    std::vector<int64_t> channelDims(static_cast<size_t>(rank - 1), 1);
    channelDims[0] = classes;
    auto perChannel = [&](const NodePtr& v, const char* name) {
        return tessera::node(
            std::make_shared<MulAddConst>(Tensor::fromVector(Shape(channelDims), weights), Tensor::zeros(Shape{1})),
            {v}, name);
    };
    NodePtr source = weighted ? perChannel(logProb, "weighted") : logProb;
    auto picked = tessera::node(std::make_shared<GatherElements>(1), {source, index}, "picked");
    auto element = tessera::node(std::make_shared<Reshape>(Shape(perElement)), {picked}, "per_element");
    NodePtr loss = tessera::node(std::make_shared<MulAddConst>(-1.0f, 0.0f), {element}, "negated");
    if (kept) loss = tessera::node(std::make_shared<Mul>(), {loss, kept}, "loss_per_element");
    NodePtr y = loss;
    if (reduction == "sum") {
        y = tessera::node(std::make_shared<ReduceSum>(std::vector<int64_t>{}, false), {loss}, "loss");
    } else if (reduction == "mean" && !weighted && !kept) {
        y = tessera::node(std::make_shared<ReduceMean>(std::vector<int64_t>{}, false), {loss}, "loss");
    } else if (reduction == "mean") {
        // The divisor: the sum of w[t] (1 without weights) over the targets kept.
        NodePtr count = kept;
        if (weighted) {
            auto ones = tessera::node(std::make_shared<MulAddConst>(0.0f, 1.0f), {floatTarget}, "ones");
            auto onesWithClass = tessera::node(std::make_shared<Reshape>(Shape(withClass)), {ones}, "ones_with_class");
            auto tiled = tessera::node(std::make_shared<Tile>(1, classes), {onesWithClass}, "ones_per_class");
            auto w = tessera::node(std::make_shared<GatherElements>(1), {perChannel(tiled, "class_weights"), index},
                                   "target_weight");
            count = tessera::node(std::make_shared<Reshape>(Shape(perElement)), {w}, "weight_per_element");
            if (kept) count = tessera::node(std::make_shared<Mul>(), {count, kept}, "weight_kept");
        }
        auto sum = tessera::node(std::make_shared<ReduceSum>(std::vector<int64_t>{}, false), {loss}, "loss_sum");
        auto total = tessera::node(std::make_shared<ReduceSum>(std::vector<int64_t>{}, false), {count}, "weight_sum");
        y = tessera::node(std::make_shared<Div>(), {sum, total}, "loss");
    }
    std::vector<NodePtr> outputs = {y};
    if (n.output_size() > 1 && !n.output(1).empty()) {
        if (!softmax) throw Unsupported{"a second output (NegativeLogLikelihoodLoss has one)"};
        // A graph's output ends a branch: the log-probabilities also feed the loss.
        outputs.push_back(tessera::node(std::make_shared<Identity>(), {logProb}, "log_prob_out"));
    }
    for (int k = 2; k < n.output_size(); ++k) {
        if (!n.output(k).empty()) throw Unsupported{"output " + std::to_string(k) + " (there are two at most)"};
    }
    return define(n, std::make_shared<Graph>(std::vector<NodePtr>{x, target}, outputs), dataInputs(n, {0, 1}),
                  {n.input(0), n.input(1)});
}

} // namespace tessera::onnx_io
