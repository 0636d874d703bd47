#include "distributed/DataParallel.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <unordered_set>

#include "backend/Backend.h"
#include "backend/Errors.h"

namespace tessera {

namespace {
using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Every parameter once (shared ones at their first name), as the optimizer binds them.
NamedVariables distinctParams(const Module& net) {
    NamedVariables out;
    std::unordered_set<const Variable*> seen;
    for (auto& [name, var] : net.namedParams()) {
        if (seen.insert(var.get()).second) out.emplace_back(name, var);
    }
    return out;
}
} // namespace

DataParallel::DataParallel(Module& net, Optimizer& optimizer, CommunicatorPtr comm, const DataParallelOptions& options)
    : net_(net), optimizer_(optimizer), comm_(std::move(comm)), options_(options) {
    if (!comm_) throw ModuleError("DataParallel: no communicator");
    grads_ = optimizer_.globalGrads();
    if (!grads_.defined()) {
        throw ModuleError("DataParallel: the optimizer must hold the parameters in global state: call "
                          "optimizer.setupOn(net, true) first");
    }
    if (grads_.device() != comm_->device()) {
        throw ModuleError("DataParallel: the model is on " + grads_.device().str() + ", but " + comm_->describe() +
                          " reduces tensors on " + comm_->device().str() +
                          " (MPI for models on the CPU, NCCL for models on a GPU)");
    }
    // The same model everywhere: parameter names and shapes, hashed, and their count.
    const NamedVariables params = distinctParams(net_);
    std::string layout;
    for (const auto& [name, var] : params) layout += name + ":" + var->data.shape().str() + ";";
    const auto hash = static_cast<int64_t>(std::hash<std::string>{}(layout)&0x7FFFFFFFFFFFFFFFull);
    const std::vector<int64_t> hashes = comm_->allGather(hash);
    const std::vector<int64_t> counts = comm_->allGather(net_.numOfParams());
    std::string differ;
    for (size_t r = 1; r < hashes.size(); ++r) {
        if (hashes[r] != hashes[0] || counts[r] != counts[0]) {
            differ += (differ.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (" +
                      std::to_string(counts[r]) + " parameters)";
        }
    }
    if (!differ.empty()) {
        throw ModuleError("DataParallel: the ranks hold different models: rank 0 has " + std::to_string(counts[0]) +
                          " parameters, and these ranks differ from it in their parameters' names, shapes or "
                          "count: " +
                          differ);
    }
    // Rank 0's starting point everywhere.
    comm_->broadcast(optimizer_.globalParams(), 0);
    noteParameterChange();
    for (const auto& [name, attr] : net_.namedAttrs()) {
        if (attr.defined() && attr.device() == comm_->device() && attr.isPlain()) comm_->broadcast(attr, 0);
    }
    // Buckets of whole parameters, from the end of the flat buffer (backward's first).
    std::vector<std::pair<int64_t, const Variable*>> at;
    const auto* base = static_cast<const float*>(grads_.raw());
    for (const auto& [name, var] : params) {
        at.emplace_back(static_cast<const float*>(var->grad.raw()) - base, var.get());
    }
    std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    const auto limit = static_cast<int64_t>(std::max<size_t>(options_.bucketBytes / sizeof(float), 1));
    int64_t end = grads_.numel();
    for (const auto& [offset, var] : at) { // var spans [offset, end)
        if (buckets_.empty() || buckets_.back().second - offset > limit) {
            buckets_.emplace_back(offset, end); // a parameter over the limit gets a bucket of its own
        } else {
            buckets_.back().first = offset;
        }
        end = offset;
        bucketOf_[var] = buckets_.size() - 1;
    }
    if (options_.syncBatchNorm) {
        if (BatchNormND::sync()) {
            throw ModuleError("DataParallel: batch norm is synchronised by another DataParallel already");
        }
        BatchNormND::setSync(&link_);
        linked_ = true;
    }
    thread_ = std::thread([this] { serve(); });
}

std::vector<float> DataParallel::BatchNormLink::allGather(const std::vector<float>& mine) {
    const auto len = static_cast<int64_t>(mine.size());
    const int ranks = dp_.comm_->size(), rank = dp_.comm_->rank();
    std::vector<float> slots(static_cast<size_t>(ranks * len), 0.0f);
    std::copy(mine.begin(), mine.end(), slots.begin() + rank * len);
    const Tensor all = Tensor::fromVector({ranks * len}, slots, dp_.comm_->device());
    if (!dp_.inBackward_) {
        dp_.comm_->allReduceSum(all); // every slot but one is zero: the sums are exact
    } else {
        {
            std::lock_guard<std::mutex> lock(dp_.mutex_);
            dp_.syncTensor_ = all;
            dp_.queue_.push_back(kSyncJob);
            ++dp_.sent_;
        }
        dp_.changed_.notify_all();
        std::unique_lock<std::mutex> lock(dp_.mutex_);
        dp_.changed_.wait(lock, [&] { return dp_.done_ == dp_.sent_; });
        dp_.syncTensor_ = Tensor();
        if (dp_.error_) std::rethrow_exception(dp_.error_);
    }
    return all.toVector<float>();
}

DataParallel::~DataParallel() {
    if (inBackward_) net_.setGradientHook({});
    if (linked_) BatchNormND::setSync(nullptr);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        quit_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

void DataParallel::beginBackward(int64_t samples, int64_t globalSamples, bool reduce, bool weighted) {
    if (samples < 0 || globalSamples < 1 || samples > globalSamples) {
        throw ModuleError("DataParallel::beginBackward: " + std::to_string(samples) + " of " +
                          std::to_string(globalSamples) + " samples");
    }
    if (inBackward_) throw ModuleError("DataParallel::beginBackward: the previous backward was not finished");
    share_ = static_cast<float>(static_cast<double>(samples) / static_cast<double>(globalSamples));
    weight_ = weighted ? share_ : 1.0f;
    reduce_ = reduce;
    queued_.assign(buckets_.size(), false);
    left_.assign(buckets_.size(), 0);
    if (learned_) {
        for (const auto& [var, n] : calls_) left_[bucketOf_.at(var)] += n;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = sent_ = 0;
        error_ = nullptr;
    }
    inBackward_ = true;
    if (reduce_) net_.setGradientHook([this](const Module& m) { onModuleDone(m); });
}

void DataParallel::onModuleDone(const Module& m) {
    for (const auto& [name, var] : m.ownParams()) {
        auto it = bucketOf_.find(var.get());
        if (it == bucketOf_.end()) continue; // not the optimizer's
        if (!learned_ || !options_.overlap) {
            if (!learned_) ++calls_[var.get()];
            continue;
        }
        const size_t b = it->second;
        if (queued_[b]) {
            throw ModuleError("DataParallel: " + m.str() +
                              " changed a gradient of a bucket already being reduced "
                              "(the network's backward differs from its first step's)");
        }
        if (--left_[b] == 0) enqueue(b);
    }
}

void DataParallel::enqueue(size_t bucket) {
    queued_[bucket] = true;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(bucket);
        ++sent_;
    }
    changed_.notify_all();
}

void DataParallel::finishBackward() {
    if (!inBackward_) throw ModuleError("DataParallel::finishBackward without beginBackward");
    net_.setGradientHook({});
    inBackward_ = false;
    if (reduce_) {
        learned_ = true;
        for (size_t b = 0; b < buckets_.size(); ++b) {
            if (!queued_[b]) enqueue(b); // the rest, in bucket order (the same on every rank)
        }
    }
    const auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ == sent_; });
    exposedSeconds_ += secondsSince(t0);
    if (error_) std::rethrow_exception(error_);
}

void DataParallel::abandonBackward() noexcept {
    if (!inBackward_) return;
    net_.setGradientHook({});
    inBackward_ = false;
}

void DataParallel::serve() {
    for (;;) {
        size_t b = 0;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            changed_.wait(lock, [&] { return quit_ || !queue_.empty(); });
            if (quit_) return;
            b = queue_.front();
            queue_.pop_front();
        }
        const auto t0 = Clock::now();
        std::exception_ptr error;
        try {
            if (b == kSyncJob) { // a batch norm's gather (BatchNormLink), set before it was queued
                comm_->allReduceSum(syncTensor_);
            } else {
                const Tensor slice = grads_.slice(buckets_[b].first, buckets_[b].second);
                const float w = weight_;
                if (w != 1.0f && slice.device().isCpu()) {
                    float* p = slice.data<float>();
                    for (int64_t i = 0; i < slice.numel(); ++i) p[i] *= w;
                } else if (w != 1.0f) {
                    backendOf(slice).affine(slice, w, 0.0f, slice); // queued before the reduction
                }
                comm_->allReduceSum(slice);
            }
        } catch (...) {
            error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (b != kSyncJob) reduceSeconds_ += secondsSince(t0); // gradients' time only
            if (error && !error_) error_ = error;
            ++done_;
        }
        changed_.notify_all();
    }
}

} // namespace tessera
