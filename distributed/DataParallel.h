#pragma once
/// \file Data-parallel training: every rank holds the whole model, trains on its share of
/// each global batch, and the gradients are averaged over the ranks before the optimizer
/// steps, so all ranks make the same update. Buckets of gradients are reduced by a
/// background thread while backward is still running.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distributed/Communicator.h"
#include "modules/BatchNormND.h"
#include "modules/Module.h"
#include "training/GradientSync.h"
#include "training/Optimizer.h"

namespace tessera {

struct DataParallelOptions {
    /// Gradients are reduced in buckets of about this many bytes (whole parameters each),
    /// from the last parameters to the first, the order backward finishes them.
    size_t bucketBytes = size_t{25} << 20;
    /// Reduce a bucket as soon as backward has finished all its parameters (else all of
    /// them after backward).
    bool overlap = true;
    /// Synchronised batch norm: every batch norm of the process normalises with the
    /// statistics of the whole global batch (and differentiates through them), so N ranks
    /// of batch B compute what one process of batch N*B would. Off: each rank's own
    /// statistics (cheaper: no communication in forward). One DataParallel at a time may
    /// have it on.
    bool syncBatchNorm = false;
};

/// Binds `net`, whose parameters `optimizer` holds in global state
/// (`optimizer.setupOn(net, true)` first), to `comm`. The constructor checks that every
/// rank has the same parameters (names and shapes; a ModuleError names the ranks that
/// differ, on every rank) and copies rank 0's parameters and attributes (batch-norm
/// statistics) to the others. Batch-norm statistics are then kept per rank, or synchronised
/// (DataParallelOptions::syncBatchNorm).
class DataParallel : public GradientSync {
public:
    DataParallel(Module& net, Optimizer& optimizer, CommunicatorPtr comm, const DataParallelOptions& options = {});
    ~DataParallel() override;
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    const Communicator& communicator() const { return *comm_; }
    int rank() const { return comm_->rank(); }
    int ranks() const { return comm_->size(); }

    /// Call right before backward, with this rank's samples in the batch and the batch's
    /// samples over all ranks: each rank's gradients are weighted by its share, so the
    /// reduced gradient is the mean over the global batch.
    ///
    /// Gradient accumulation (several batches' gradients added up before one update):
    /// `reduce` false for every batch of a group but the last, whose gradients then stay
    /// on this rank (nothing is communicated but a synchronised batch norm's statistics);
    /// the group's last backward reduces the sum. The batches of a group may have
    /// different shares, so the caller weighs each backward by share() itself (its scale)
    /// and passes `weighted` false: the reduction then only sums.
    void beginBackward(int64_t samples, int64_t globalSamples, bool reduce = true, bool weighted = true) override;
    /// This rank's share of the batch begun last: samples / globalSamples.
    float share() const override { return share_; }
    /// Call right after backward: waits for every bucket. The gradients are then the
    /// global batch's, the same on every rank (after a backward that does not reduce: this
    /// rank's, added up so far).
    void finishBackward() override;
    /// After a backward that threw: stops watching modules (the job is failing; the other
    /// ranks are not waited for).
    void abandonBackward() noexcept override;

    /// The buckets: [first, last) element ranges of the flat gradient buffer, in the order
    /// they are reduced.
    const std::vector<std::pair<int64_t, int64_t>>& buckets() const { return buckets_; }
    /// Since construction: seconds the reducing thread spent in reductions, and seconds
    /// finishBackward waited for them (the part not hidden behind backward).
    double reduceSeconds() const { return reduceSeconds_; }
    double exposedSeconds() const { return exposedSeconds_; }

private:
    void onModuleDone(const Module& m);
    void enqueue(size_t bucket);
    void serve();

    Module& net_;
    Optimizer& optimizer_;
    CommunicatorPtr comm_;
    DataParallelOptions options_;
    Tensor grads_;
    // The batch norms' link to the other ranks (syncBatchNorm). In forward it gathers
    // directly; during backward its requests go through the reducing thread's queue, so
    // that every MPI call is made by one thread at a time and in the same order on every
    // rank.
    class BatchNormLink : public BatchNormSync {
    public:
        explicit BatchNormLink(DataParallel& dp) : dp_(dp) {}
        std::vector<float> allGather(const std::vector<float>& mine) override;
        double gradientWeight() const override { return dp_.share_; }

    private:
        DataParallel& dp_;
    };
    static constexpr size_t kSyncJob = static_cast<size_t>(-1); // in queue_: reduce syncTensor_
    BatchNormLink link_{*this};
    bool linked_ = false;
    Tensor syncTensor_;

    std::vector<std::pair<int64_t, int64_t>> buckets_;
    std::unordered_map<const Variable*, size_t> bucketOf_;
    // Backward calls per parameter, learned on the first step (which reduces everything
    // after backward), and what is left of them per bucket in this step.
    bool learned_ = false;
    std::unordered_map<const Variable*, int64_t> calls_;
    std::vector<int64_t> left_;
    std::vector<bool> queued_;
    float share_ = 1.0f;  // this rank's share of the batch
    float weight_ = 1.0f; // what the reduction multiplies this rank's gradients by
    bool reduce_ = true;  // whether this backward reduces (not a group's earlier batch)
    bool inBackward_ = false;

    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<size_t> queue_;
    size_t done_ = 0, sent_ = 0;
    std::exception_ptr error_;
    bool quit_ = false;
    double reduceSeconds_ = 0, exposedSeconds_ = 0;
    std::thread thread_;
};

} // namespace tessera
