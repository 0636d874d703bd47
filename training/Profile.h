#pragma once
/// \file Where a step's time goes, layer by layer: what `tessera profile` prints, as a
/// library.
///
///   auto adam = makeOptimizer("adam");
///   adam->setupOn(*net, true);
///   ProfileOptions options;
///   options.optimizer = adam.get();
///   Profile p = profile(*net, {input}, options);
///   std::printf("%s", profileTable(p, /*depth=*/1, /*byTime=*/true).c_str());
///
/// A profile runs whole steps (forward; in training also backward with a fixed output
/// gradient and the optimizer's update) and times each row of the model's summary
/// (io/Summary.h: a graph node or a Sequential child) through Module::CallObserver. On a
/// device that computes asynchronously (CUDA), the device is synchronised around each
/// timed layer, so the times are the layers' own and the profiled step is slower than a
/// plain one; the profile measures plain steps as well, interleaved with the timed ones,
/// and reports both.

#include <functional>
#include <string>
#include <vector>

#include "io/Summary.h"
#include "training/Optimizer.h"

namespace tessera {

struct ProfileOptions {
    /// Training steps (train mode: forward, backward, update); false: inference (eval
    /// mode, forward only).
    bool train = true;
    /// Untimed steps first (caches, algorithm choices, the allocator's pools).
    int warmup = 2;
    /// Timed steps: as many plain as profiled ones, alternating; the figures are medians.
    int steps = 5;
    /// Training: the update after each backward, already set up on the model (null: no
    /// update). Its state moves with every step, as in training.
    Optimizer* optimizer = nullptr;
    /// Called after each step, warm-up included, with the steps done and the total
    /// (progress on long runs). Empty: none.
    std::function<void(int done, int total)> progress;
};

/// One row of the summary with its times: medians over the profiled steps, in seconds.
/// A batch norm that runs the ReLU after it (containers/Fusion.h) holds both layers' time:
/// its module reads "BatchNorm2D+ReLU", the ReLU's "Activation (fused)".
struct ProfileRow : SummaryRow {
    double forward = 0;
    double backward = 0;
    /// A ReLU that the batch norm before it runs: its time is in that row.
    bool fused = false;
    /// Bytes its forward left allocated on the device (in the last profiled step): its
    /// outputs and what it keeps for backward. 0 for a view; less than the outputs when it
    /// frees what it took in (a layer that converts its input in place of keeping it).
    int64_t kept = 0;
};

struct Profile {
    std::vector<ProfileRow> rows;
    bool train = true;
    int steps = 0;
    /// Medians over the profiled steps, in seconds: each phase, and the whole step (which
    /// also holds what no row does: the graph's sums of gradients, the copies between
    /// steps).
    double forward = 0, backward = 0, update = 0, step = 0;
    /// The median whole step without layer timers.
    double plainStep = 0;
    /// The rows' kept bytes together: what a forward holds for backward (training) or
    /// makes (inference; a graph in eval mode releases values as it goes, so its peak is
    /// lower).
    int64_t kept = 0;
    /// Per profiled step: its time, and the sum of its rows' times (never more than it).
    std::vector<double> stepSamples, layerSamples;
};

/// Profiles `model` on `inputs` (one tensor per model input, on the model's device).
/// The model's shapes are checked first (its ShapeError as check reports it); a bad
/// option is a ModuleError. The model is left in the mode the profile ran in.
Profile profile(Module& model, const Tensors& inputs, const ProfileOptions& options = {});

/// The table `tessera profile` prints: per row (grouped at `depth` as groupRows does; 0:
/// every row) the output shape, forward FLOPs, the bytes its forward keeps, forward and
/// backward milliseconds, share of the step and forward GFLOP/s; rows in model order, or slowest first with `byTime`;
/// then the step's split into layers, update and the rest, and the plain step.
std::string profileTable(const Profile& profile, int depth = 0, bool byTime = false);

/// The rows as CSV (name, module, output, flops, kept_bytes, forward_ms, backward_ms), one line
/// per row of `profile` (not grouped), with a header line.
std::string profileCsv(const Profile& profile);

} // namespace tessera
