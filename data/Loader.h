#pragma once
/// \file Batches from a data set: each epoch's seeded order, samples read and transformed
/// by background worker threads into a bounded queue while the current step runs, handed
/// out strictly in order.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/Dataset.h"
#include "data/Transform.h"

namespace tessera {

struct LoaderOptions {
    int64_t batchsize = 128;
    bool shuffle = true; ///< a fresh seeded order each epoch (else 0, 1, 2, ...)
    uint64_t seed = 0;   ///< of the order and of the random transforms
    bool train = true;   ///< random transforms act (see Transforms)
    /// Threads that read and transform batches ahead. 0: each batch is made by next(), in
    /// the caller's thread. The batches are the same for any number.
    int workers = 0;
    /// Batches made ahead of the one being used, at most (0: 2 per worker).
    int prefetch = 0;
    bool flatten = false; ///< images as [B, C*H*W] instead of [B, C, H, W]
    /// Make batches in page-locked host memory (pinnedEmpty), from which a GPU's
    /// `Backend::upload` copies asynchronously while the device computes (ordinary memory
    /// when there is no CUDA device). For training on a GPU.
    bool pinned = false;
    /// Data-parallel training: this process is rank `rank` of `ranks`. Each global batch
    /// holds `ranks * batchsize` samples of the epoch's order, and this rank gets its
    /// share (the r-th of `ranks` nearly equal parts), so together the ranks see what one
    /// process would with a batch of `ranks * batchsize`. A last global batch with fewer
    /// samples than ranks is left out.
    int rank = 0, ranks = 1;
    /// Mixing of samples in training batches (with `train` only): each batch is mixed with
    /// itself in reverse order (sample i with sample B-1-i), by a weight l drawn per batch
    /// from Beta(alpha, alpha) by (seed, epoch, batch). mixup: the images become l x_i +
    /// (1 - l) x_(B-1-i); CutMix: a box of 1 - l of the image's area, at a random place,
    /// comes from the partner, and l is made the share the box leaves. The labels are then
    /// probabilities [B, classes] float32, l for the sample's class plus 1 - l for the
    /// partner's (classes wide), which CrossEntropy takes as targets. 0: off; with both, each batch uses
    /// one of them, half the time each.
    float mixup = 0.0f, cutmix = 0.0f;
    /// The width of mixed labels: the model's scores (0: the data set's classes; else at
    /// least that many).
    int64_t classes = 0;
    /// JPEGs whose first transform shrinks them (a resize, a random-resized crop) are
    /// decoded at a reduced size, M/8 of theirs, as far as that transform allows
    /// (Transforms::decodeScale), and in training a random-resized crop decodes its own
    /// window only, at the scale that window allows: on large photos several times faster,
    /// with pixels close to, not equal to, a full decode's. false: every image decoded whole
    /// at full size.
    bool scaledDecode = true;
    /// Each epoch draws size() samples with replacement, every class equally likely
    /// (a sample's weight 1 / its class's count; balancedOrder), instead of a permutation:
    /// for a training set whose classes are unevenly represented. `shuffle` is then moot.
    bool balanced = false;
};

/// One batch: images [B, C, H, W] (or [B, C*H*W]) float32 and labels [B] int32 (or, with
/// mixing, probabilities [B, classes] float32), on the host.
struct DataBatch {
    int64_t index = 0; ///< within the epoch
    Tensor images, labels;
    int64_t globalSamples = 0; ///< in this batch over all ranks (the batch's own with one)
};

/// The batches of one epoch at a time. The order of an epoch is the Fisher-Yates shuffle
/// that `Trainer::train(data, targets)` uses for the same seed and epoch, so tensors in
/// memory and a Loader over the same samples give the same batches. Not thread-safe:
/// one thread calls start and next.
class Loader {
public:
    Loader(DatasetPtr data, Transforms transforms, const LoaderOptions& options);
    ~Loader();
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;

    const Dataset& dataset() const { return *data_; }
    const LoaderOptions& options() const { return options_; }
    int64_t size() const { return data_->size(); }
    /// Batches per epoch (global batches: the same on every rank).
    int64_t batches() const;
    /// One sample's shape after the transforms ([C, H, W], or [C*H*W] flattened), from
    /// sample 0 as evaluation would see it.
    Shape sampleShape() const;

    /// Begins `epoch` at batch `first` (0 <= first <= batches()); batches of an epoch
    /// begun before and not taken are dropped.
    void start(int64_t epoch, int64_t first = 0);
    /// The epoch's next batch, or nothing after its last. A sample that could not be read
    /// or transformed throws here, in order, an error naming where it comes from (the file).
    std::optional<DataBatch> next();

    /// Seconds next() spent waiting for workers since start() (0 with no workers: the
    /// caller made every batch itself; see makingSeconds).
    double waitingSeconds() const { return waiting_; }
    /// Seconds next() spent making batches itself since start() (no workers).
    double makingSeconds() const { return making_; }

    /// Batch `index` of `epoch` made in this thread, as a worker makes it.
    DataBatch make(int64_t epoch, int64_t index) const;

private:
    using Order = std::shared_ptr<const std::vector<int64_t>>;
    /// The samples of `epoch`, in order: epochOrder's, or balancedOrder's with `balanced`.
    std::vector<int64_t> order(int64_t epoch) const;
    DataBatch build(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;
    /// Mixes `b` (made with its int32 labels) as options_.mixup / cutmix ask.
    void mix(DataBatch& b, int64_t epoch, int64_t channels, int64_t height, int64_t width) const;
    void work();

    DatasetPtr data_;
    Transforms transforms_;
    LoaderOptions options_;
    std::vector<int32_t> labels_; // every sample's, with `balanced`

    Order order_; // of the epoch begun
    int64_t epoch_ = -1, next_ = 0, end_ = 0;
    double waiting_ = 0, making_ = 0;

    // Shared with the workers under mutex_.
    struct Made {
        std::optional<DataBatch> batch;
        std::exception_ptr error;
    };
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<std::thread> workers_;
    bool quit_ = false;
    uint64_t generation_ = 0; // bumped by start(): work of an earlier epoch is dropped
    int64_t claim_ = 0;       // next batch a worker takes
    int64_t taken_ = 0;       // batches before this one have been handed out
    std::map<int64_t, Made> made_;
};

/// A draw from Beta(alpha, alpha) (alpha > 0), a function of (seed, counter) only.
double betaSample(double alpha, uint64_t seed, uint64_t counter);

/// size() sample indices of `epoch` drawn with replacement on the counter-based generator
/// (seed, epoch), each with the weight 1 / (the number of samples of its class): every class
/// present is drawn equally often on average.
std::vector<int64_t> balancedOrder(const std::vector<int32_t>& labels, uint64_t seed, int64_t epoch);

/// Sample indices 0..n-1 in the order of `epoch`: the Fisher-Yates shuffle on the
/// counter-based generator (seed, epoch), or as they are when `shuffle` is false.
std::vector<int64_t> epochOrder(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

} // namespace tessera
