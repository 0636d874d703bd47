#pragma once
/// \file Trainer, Validator and Calculator: run a network over a whole data set in
/// batches. Data sets are host tensors whose dim 0 indexes samples; every batch is
/// copied to the network's device.

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>

#include "modules/Module.h"
#include "training/Cost.h"
#include "training/GradientSync.h"
#include "training/Optimizer.h"

namespace tessera {

class Loader;
class WeightAverage;

/// Where a handler is in its pass, for callbacks and the progress line.
struct BatchInfo {
    int64_t epoch = 0;   ///< 0-based
    int64_t batch = 0;   ///< 0-based, within the epoch
    int64_t batches = 0; ///< per epoch
    double error = 0.0;  ///< this batch's
    double meanError = 0.0;
    double seconds = 0.0; ///< since the pass began
    int64_t samples = 0;  ///< done in this pass
    /// Trainer: whether this batch ended with an optimizer update (with accumulation, the
    /// last batch of its group): a checkpoint is whole only then.
    bool updated = true;
};

struct HandlerOptions {
    int64_t batchsize = 128;
    bool shuffle = true;  ///< Trainer: a fresh random order each epoch
    uint64_t seed = 0;    ///< of the order
    bool progress = true; ///< a progress line on `out`
    std::FILE* out = stderr;
    /// When set, the progress text goes here instead of `out`, a line at a time (~10% of
    /// an epoch apart): Python's sys.stderr, say, which a notebook shows and fd 2 is not.
    std::function<void(const std::string&)> write = {};
    Device device = {}; ///< where batches go
    /// Trainer: gradient accumulation. The gradients of this many batches in a row (a
    /// group; the epoch's last group may be shorter) add up, each batch's mean weighing
    /// 1 / (the group's batches), and one optimizer update follows the group: a step as of
    /// a batch this many times larger, in the memory of one. Groups start at the epoch's
    /// batch 0; a stop request takes effect at a group's end. With data parallelism the
    /// ranks reduce a group's gradients once, after its last backward (each batch weighed
    /// by its rank's share of it).
    int64_t accumulate = 1;
};

/// Where a Trainer is: the epoch in progress, the next batch of it, and its cost
/// accumulator over the batches done (for the epoch's mean error). A checkpoint saves it.
struct TrainerPosition {
    int64_t epoch = 0;
    int64_t batch = 0;
    double errorSum = 0.0;
    int64_t errorSamples = 0;
};

/// One training pass = for each batch: forward, cost, zeroed gradients, backward,
/// optimizer update.
class Trainer {
public:
    Trainer(Module& net, Cost& cost, Optimizer& optimizer, const HandlerOptions& options = {});
    /// One epoch over (data, targets); returns the mean training error. Every train() ends
    /// its epoch with a check that each parameter (and, unless loss scaling skipped steps,
    /// the mean loss) is finite: NumericsError naming the parameter otherwise.
    double train(const Tensor& data, const Tensor& targets);
    /// The same for a network with several inputs (one data set per input, in the order
    /// the network takes them) or a cost with several targets (`Multi`): sample i of every
    /// set goes into the same batch. All sets have the same number of samples.
    double train(const Tensors& data, const Tensors& targets);
    /// One epoch of a Loader's batches (images as the network's input, labels as the
    /// cost's target), in the loader's order, made by its workers while steps run. The
    /// loader's batch size, shuffle and seed rule; the options' are not used.
    double train(Loader& loader);
    /// Data-parallel training (distributed/DataParallel.h): each step's gradients are
    /// averaged over the ranks between backward and the update. Give each rank a Loader
    /// with its rank and the number of ranks; every rank then makes the same updates.
    /// nullptr (the default): one process.
    void setDataParallel(GradientSync* parallel) { parallel_ = parallel; }
    /// A weight average (training/Average.h) of the network, updated after each applied
    /// optimizer update (not after a step loss scaling skipped). nullptr (the default): none.
    void setWeightAverage(WeightAverage* average) { average_ = average; }
    std::function<void(const BatchInfo&)> onBatchFinish;
    std::function<void(const BatchInfo&)> onEpochFinish;
    int64_t epoch() const { return position_.epoch; }
    /// Samples per second of the last epoch (over all ranks in data-parallel training).
    double samplesPerSecond() const { return rate_; }
    /// Seconds of the last epoch the loop spent waiting for batches (a Loader's workers
    /// not done yet, or making them itself) and copying them to the device.
    double dataSeconds() const { return dataSeconds_; }
    /// Seconds the last epoch took.
    double epochSeconds() const { return epochSeconds_; }
    /// Where training is. After a whole epoch: the next epoch's batch 0.
    const TrainerPosition& position() const { return position_; }
    /// Continue from `position` (a checkpoint's): the next train() runs the rest of that
    /// epoch, in the same order, with the epoch's mean error counting the batches before.
    /// ModuleError for a position inside a group of accumulated batches.
    void setPosition(const TrainerPosition& position);
    /// Asks the pass in progress to return after the batch it is running (its epoch not
    /// finished: position() says where it stopped). Only sets an atomic flag, so a signal
    /// handler may call it; the flag stays set until clearStop().
    void requestStop() { stop_ = true; }
    bool stopRequested() const { return stop_; }
    void clearStop() { stop_ = false; }
    const HandlerOptions& options() const { return options_; }
    Module& net() const { return net_; }
    Optimizer& optimizer() const { return optimizer_; }
    WeightAverage* weightAverage() const { return average_; }

private:
    // The epoch's loop over `batches` batches; `fetch(b)` gives batch b's inputs and
    // targets on the device, and the batch's samples over all ranks.
    struct Fetched {
        Tensors inputs, targets;
        int64_t globalSamples = 0;
    };
    using Fetch = std::function<Fetched(int64_t)>;
    double runEpoch(int64_t batches, const Fetch& fetch);
    // NumericsError, naming the parameter, when a parameter or the epoch's loss is not finite.
    void requireFinite(double error, int64_t skippedBefore) const;
    // ModuleError when the position is past an epoch of `batches`.
    void checkPosition(int64_t batches) const;

    Module& net_;
    Cost& cost_;
    Optimizer& optimizer_;
    HandlerOptions options_;
    TrainerPosition position_;
    double rate_ = 0.0, dataSeconds_ = 0.0, epochSeconds_ = 0.0;
    GradientSync* parallel_ = nullptr;
    WeightAverage* average_ = nullptr;
    std::atomic<bool> stop_{false};
};

/// Runs the network in eval mode and returns the cost's mean validation error (for
/// CrossEntropy: 1 - accuracy).
class Validator {
public:
    Validator(Module& net, Cost& cost, const HandlerOptions& options = {});
    double validate(const Tensor& data, const Tensor& targets);
    /// Several inputs and/or targets, as Trainer::train.
    double validate(const Tensors& data, const Tensors& targets);
    /// Every batch of `loader` (epoch 0 of its order; make it with train = false and
    /// shuffle = false for the usual evaluation).
    double validate(Loader& loader);
    /// The last validate's mean error of each output: one per cost of a Multi (each
    /// output's own error), else the one error validate returned.
    const std::vector<double>& errors() const { return errors_; }

private:
    void begin();
    double finish();
    Module& net_;
    Cost& cost_;
    HandlerOptions options_;
    std::vector<double> errors_;
};

/// Runs the network in eval mode and returns its outputs for every sample, on the host.
class Calculator {
public:
    explicit Calculator(Module& net, const HandlerOptions& options = {});
    Tensor calc(const Tensor& data);
    /// Several inputs; returns every output of the network.
    Tensors calc(const Tensors& data);

private:
    Module& net_;
    HandlerOptions options_;
};

/// Rows `order[begin, end)` of a host tensor, copied into one tensor on `device`.
Tensor gatherBatch(const Tensor& data, const std::vector<int64_t>& order, int64_t begin, int64_t end, Device device);

} // namespace tessera
