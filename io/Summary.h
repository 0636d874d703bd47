#pragma once
/// \file A model's summary and drawing, computed from shapes alone (nothing runs, weights
/// are not read): what `tessera summary` and `tessera draw` print, as a library.
///
///   auto rows = summarize(*net, {Shape{1, 3, 224, 224}});   // one row per layer
///   std::string table = summaryTable(groupRows(rows, 2));    // grouped, as text
///   std::string dot = toDot(rows, "resnet50");               // Graphviz

#include <string>
#include <vector>

#include "modules/Module.h"

namespace tessera {

/// One layer: a graph node or a container's child (nested containers are walked through).
struct SummaryRow {
    std::string name;   ///< the dotted path (`stage.block1_fc1`)
    std::string module; ///< class name, or "k layers" for a group
    /// Where each input comes from: a row's name (`split:1` for one output of several) and
    /// the shape on that edge; `input` (or `input:k`) for the model's inputs.
    std::vector<std::pair<std::string, Shape>> from;
    Shapes in, out;
    int64_t trainable = 0;      ///< parameter elements (a parameter shared by rows counts in the first)
    int64_t nonTrainable = 0;   ///< attribute elements: batch-norm running statistics
    double flops = 0;           ///< forward FLOPs (a multiply-add counts two)
    double activationBytes = 0; ///< of its outputs
    std::string attributes; ///< kernel, stride, padding, groups where the layer has them; causal attention's "causal"
    bool isInput = false;   ///< a graph input (or the first layer of a Sequential)
    bool isOutput = false;  ///< a graph output (or the last layer of a Sequential)
    /// The row's module (valid while the model lives); null for a group of rows.
    const Module* layer = nullptr;
};

/// The rows of `model` for `inputs` (one shape per model input). Throws the model's
/// ShapeError when the shapes do not fit; `partial`, when given, receives the rows up to
/// the failure.
std::vector<SummaryRow> summarize(Module& model, const Shapes& inputs, std::vector<SummaryRow>* partial = nullptr);

/// Consecutive rows whose names share their first `depth` parts merged into one row
/// (parts are separated by '.' and '_': `layer1_0_a_conv` is layer1 / 0 / a / conv at
/// depths 1 to 4); a group sums its parameters and FLOPs and shows its last output.
/// depth <= 0 keeps every row. `groupOf`, when given, receives for each row the index of
/// the returned row it went into.
std::vector<SummaryRow> groupRows(const std::vector<SummaryRow>& rows, int depth,
                                  std::vector<size_t>* groupOf = nullptr);

/// The table `tessera summary` prints: name, module, output, attributes, connected to
/// (for graphs), trainable and non-trainable parameters, FLOPs; then the totals.
std::string summaryTable(const std::vector<SummaryRow>& rows, bool connections);

/// 12,345,678.
std::string thousands(int64_t n);
/// 3.63 GFLOPs, 412.5 kFLOPs, 12 FLOPs.
std::string flopsText(double flops);
/// 97.5 MiB, 3.1 KiB, 12.0 B.
std::string bytesText(double bytes);

/// A Graphviz graph of the rows: one ellipse per model input with its shape, a box per
/// row with its attributes and parameters, the shapes on the edges, and one ellipse per
/// model output with its shape.
std::string toDot(const std::vector<SummaryRow>& rows, const std::string& title);

} // namespace tessera
