#pragma once
/// \file The whole training recipe of `tessera train`, for any program (and Python's
/// `tessera.fit`): epochs of a Loader through a Trainer, the learning rate of each step (a
/// schedule per epoch, ramped up linearly over the first steps), a weight average (EMA)
/// that evaluation and saving use, a validation set for save-best and early stopping, the
/// test accuracy after each epoch, checkpoints (every N steps, every N epochs, the last
/// epoch, and when stopped) that resume bit for bit, and a metrics CSV rewritten whole
/// after each epoch. Validation and test report accuracy: 1 - CrossEntropy's error.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "data/Loader.h"
#include "io/Hdf5.h"
#include "training/Average.h"
#include "training/Handlers.h"
#include "training/Schedule.h"

namespace tessera {

struct FitOptions {
    int64_t epochs = 10;
    /// The learning rate of each epoch (nullptr: the optimizer's rate throughout).
    const Schedule* schedule = nullptr;
    /// Steps over which the rate ramps up linearly from rate/warmup to the rate (0: none).
    int64_t warmup = 0;
    /// Decay of an exponential moving average of the weights, updated after each applied
    /// update (0: none). Validation, test accuracy and saved models use the averages;
    /// checkpoints keep them.
    float ema = 0.0f;
    /// Held-out data: its accuracy after each epoch chooses the model (saveBest) and stops
    /// training (earlyStop). nullptr: none.
    Loader* validation = nullptr;
    /// Test data: its accuracy after each epoch (nullptr: none).
    Loader* test = nullptr;
    /// Stop after this many epochs without a better validation accuracy (0: never). Needs
    /// `validation`.
    int64_t earlyStop = 0;
    /// Save the model of the best validation accuracy here (empty: not). Needs `validation`.
    std::string saveBest;
    /// What saved models carry (input shapes, class names).
    SaveOptions save;
    /// Write a checkpoint here (empty: none) at the end of every `checkpointEpochs`th epoch
    /// and of the last one, every `checkpointSteps` optimizer steps (0: not by steps), and
    /// when stopped.
    std::string checkpoint;
    int64_t checkpointEpochs = 1;
    int64_t checkpointSteps = 0;
    /// Continue from this checkpoint (empty: a fresh run).
    std::string resume;
    /// The metrics CSV (epoch, training loss, validation and test accuracy, seconds, images
    /// per second), rewritten whole after each epoch; a resumed run appends to the file.
    std::string metrics;
    /// Whether this process writes files (checkpoints, metrics, saved models): rank 0 of a
    /// data-parallel job, the one process otherwise.
    bool writer = true;
    /// Where the epoch lines go (nullptr: nowhere).
    std::FILE* out = stdout;
    /// When set, the epoch lines go here instead of `out` (Python's sys.stdout, say).
    std::function<void(const std::string&)> write = {};
};

/// One epoch's outcome.
struct EpochReport {
    int64_t epoch = 0; ///< from 1
    double loss = 0.0; ///< mean training loss
    /// Accuracies in [0, 1]; NaN without validation or test data.
    double validationAccuracy = std::numeric_limits<double>::quiet_NaN();
    double testAccuracy = std::numeric_limits<double>::quiet_NaN();
    bool best = false;         ///< the best validation accuracy so far
    bool checkpointed = false; ///< a checkpoint was written after it
    float learnRate = 0.0f;    ///< at the epoch's end
    double seconds = 0.0;      ///< since fit began
    double imagesPerSecond = 0.0;
};

struct FitCallbacks {
    /// After every batch (the trainer's onBatchFinish is fit's while it runs).
    std::function<void(const BatchInfo&)> onBatch;
    /// After every epoch, with its report.
    std::function<void(const EpochReport&)> onEpoch;
    /// Asked after every batch: true stops training there (a checkpoint is written first).
    /// A data-parallel job must give the same answer on every rank.
    std::function<bool()> stop;
};

struct FitResult {
    std::vector<EpochReport> epochs;                                ///< the epochs this call ran
    double testAccuracy = std::numeric_limits<double>::quiet_NaN(); ///< after the last epoch
    double bestValidationAccuracy = std::numeric_limits<double>::quiet_NaN();
    int64_t bestEpoch = 0;     ///< the epoch (from 1) of the best validation accuracy
    bool stoppedEarly = false; ///< by earlyStop
    bool stopped = false;      ///< by callbacks.stop: position() says where
    bool resumed = false;      ///< from options.resume
    TrainerPosition position;  ///< where training is now
    /// The weight average fit made for options.ema (nullptr when the trainer had one, or
    /// none was asked for). It stays set on the trainer; `average->swap()` puts the averaged
    /// weights into the model (and back), as evaluation and saving did.
    std::shared_ptr<WeightAverage> average;
};

/// A learning rate as the epoch line prints it: four significant digits ("0.001", "2.5e-05").
std::string formatRate(float rate);

/// Trains `trainer`'s network on `train` for options.epochs epochs (counted from a resumed
/// checkpoint's position). The trainer's optimizer rate is the base rate of the schedule
/// and warm-up. A weight average the trainer has (setWeightAverage) is used as it is; else
/// one is made when options.ema > 0 (FitResult::average).
/// UsageError-free: ModuleError for options that contradict each other (saveBest or
/// earlyStop without validation), IoError for files that cannot be read or written, and
/// whatever training throws.
FitResult fit(Trainer& trainer, Loader& train, const FitOptions& options, const FitCallbacks& callbacks = {});

} // namespace tessera
