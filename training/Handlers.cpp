#include "training/Handlers.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "data/Loader.h"
#include "training/Average.h"
#include "training/Multi.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Every set of a list: the same number of samples as the first data set.
int64_t checkSets(const char* who, const Tensors& data, const Tensors* targets, int64_t batchsize) {
    if (data.empty()) throw ShapeError(std::string(who) + ": no data set given");
    if (targets && targets->empty()) throw ShapeError(std::string(who) + ": no target set given");
    auto check = [&](const Tensor& t, const std::string& what) {
        if (!t.defined() || t.shape().rank() == 0 || t.shape()[0] == 0) {
            throw ShapeError(std::string(who) + ": " + what + " is empty");
        }
        if (!t.device().isCpu()) throw ShapeError(std::string(who) + ": " + what + " must be a host tensor");
    };
    for (size_t i = 0; i < data.size(); ++i) check(data[i], "data set " + std::to_string(i));
    const int64_t n = data[0].shape()[0];
    auto sameCount = [&](const Tensor& t, const std::string& what) {
        if (t.shape()[0] != n) {
            throw ShapeError(std::string(who) + ": data set 0 has " + std::to_string(n) + " samples but " + what +
                             " has " + std::to_string(t.shape()[0]) + " (shape " + t.shape().str() + ")");
        }
    };
    for (size_t i = 1; i < data.size(); ++i) sameCount(data[i], "data set " + std::to_string(i));
    if (targets) {
        for (size_t i = 0; i < targets->size(); ++i) {
            check((*targets)[i], "target set " + std::to_string(i));
            sameCount((*targets)[i], "target set " + std::to_string(i));
        }
    }
    if (batchsize < 1) throw ShapeError(std::string(who) + ": batchsize must be at least 1");
    return n;
}

Tensors gatherAll(const Tensors& sets, const std::vector<int64_t>& order, int64_t begin, int64_t end, Device device) {
    Tensors out;
    out.reserve(sets.size());
    for (const Tensor& t : sets) out.push_back(gatherBatch(t, order, begin, end, device));
    return out;
}

void checkSet(const char* who, const Tensor& data, const Tensor* targets, int64_t batchsize) {
    if (!data.defined() || data.shape().rank() == 0 || data.shape()[0] == 0) {
        throw ShapeError(std::string(who) + ": the data set is empty");
    }
    if (!data.device().isCpu()) throw ShapeError(std::string(who) + ": data sets must be host tensors");
    if (targets && (!targets->defined() || targets->shape().rank() == 0 || targets->shape()[0] != data.shape()[0])) {
        throw ShapeError(std::string(who) + ": " + std::to_string(data.shape()[0]) + " samples but targets " +
                         (targets->defined() ? targets->shape().str() : std::string("undefined")));
    }
    if (batchsize < 1) throw ShapeError(std::string(who) + ": batchsize must be at least 1");
}

// A progress line: rewritten in place on a terminal, printed every ~10% otherwise.
class Progress {
public:
    Progress(const HandlerOptions& o, const char* what)
        : on_(o.progress && (o.out || o.write)), out_(o.out), write_(o.write), what_(what) {
        tty_ = on_ && !write_ && isatty(fileno(out_));
    }
    void show(const BatchInfo& b, int64_t epochs = 0) {
        if (!on_) return;
        const bool last = b.batch + 1 == b.batches;
        const int64_t tenth = std::max<int64_t>(1, b.batches / 10);
        if (!tty_ && !last && (b.batch + 1) % tenth != 0) return;
        const double rate = b.seconds > 0 ? static_cast<double>(b.samples) / b.seconds : 0.0;
        const double left =
            rate > 0 ? (b.seconds / static_cast<double>(b.batch + 1)) * static_cast<double>(b.batches - b.batch - 1)
                     : 0.0;
        char line[256];
        std::snprintf(line, sizeof line, "%s%s epoch %lld%s batch %lld/%lld  loss %.4f  %.0f samples/s  %s %.1fs%s",
                      tty_ ? "\r" : "", what_, static_cast<long long>(b.epoch + 1),
                      epochs ? ("/" + std::to_string(epochs)).c_str() : "", static_cast<long long>(b.batch + 1),
                      static_cast<long long>(b.batches), b.meanError, rate, last ? "took" : "left",
                      last ? b.seconds : left, tty_ && !last ? "   " : "\n");
        if (write_) {
            write_(line);
            return;
        }
        std::fputs(line, out_);
        std::fflush(out_);
    }

private:
    bool on_, tty_ = false;
    std::FILE* out_;
    std::function<void(const std::string&)> write_;
    const char* what_;
};

// A host batch where the network runs: itself on the CPU, a copy on a device (from
// page-locked memory, made while the device computes: Backend::upload).
Tensor onDevice(const Tensor& t, Device device) { return device.isCpu() ? t : backendFor(device).upload(t); }

} // namespace

Tensor gatherBatch(const Tensor& data, const std::vector<int64_t>& order, int64_t begin, int64_t end, Device device) {
    Shape s = data.shape();
    const size_t row = data.nbytes() / static_cast<size_t>(s[0]);
    std::vector<int64_t> d = s.dims();
    d[0] = end - begin;
    Tensor batch = Tensor::empty(Shape(d), data.dtype());
    const auto* src = static_cast<const char*>(data.raw());
    auto* dst = static_cast<char*>(batch.raw());
    for (int64_t i = begin; i < end; ++i) {
        std::memcpy(dst + static_cast<size_t>(i - begin) * row,
                    src + static_cast<size_t>(order[static_cast<size_t>(i)]) * row, row);
    }
    return onDevice(batch, device);
}

// ---- Trainer ----------------------------------------------------------------------------

Trainer::Trainer(Module& net, Cost& cost, Optimizer& optimizer, const HandlerOptions& options)
    : net_(net), cost_(cost), optimizer_(optimizer), options_(options) {
    if (options.accumulate < 1) {
        throw ModuleError("Trainer: accumulate must be at least 1 (batches per update), got " +
                          std::to_string(options.accumulate));
    }
}

double Trainer::train(const Tensor& data, const Tensor& targets) {
    checkSet("Trainer", data, &targets, options_.batchsize);
    return train(Tensors{data}, Tensors{targets});
}

void Trainer::setPosition(const TrainerPosition& position) {
    if (position.epoch < 0 || position.batch < 0 || position.errorSamples < 0) {
        throw ModuleError("Trainer: a position out of range (epoch " + std::to_string(position.epoch) + ", batch " +
                          std::to_string(position.batch) + ")");
    }
    if (position.batch % options_.accumulate != 0) {
        throw ModuleError("Trainer: batch " + std::to_string(position.batch) + " lies inside a group of " +
                          std::to_string(options_.accumulate) +
                          " accumulated batches (its gradients so far are not kept): resume at a group's start");
    }
    position_ = position;
}

double Trainer::train(const Tensors& data, const Tensors& targets) {
    const int64_t n = checkSets("Trainer", data, &targets, options_.batchsize);
    const int64_t bs = options_.batchsize;
    const std::vector<int64_t> order = epochOrder(n, options_.seed, position_.epoch, options_.shuffle);
    return runEpoch((n + bs - 1) / bs, [&](int64_t b) {
        const int64_t begin = b * bs, end = std::min(n, begin + bs);
        return Fetched{gatherAll(data, order, begin, end, options_.device),
                       gatherAll(targets, order, begin, end, options_.device), end - begin};
    });
}

double Trainer::train(Loader& loader) {
    checkPosition(loader.batches());
    loader.start(position_.epoch, position_.batch);
    const Device device = options_.device;
    return runEpoch(loader.batches(), [&](int64_t b) {
        std::optional<DataBatch> batch = loader.next();
        if (!batch || batch->index != b) throw ModuleError("Trainer: the loader is out of step with the epoch");
        return Fetched{{onDevice(batch->images, device)}, {onDevice(batch->labels, device)}, batch->globalSamples};
    });
}

void Trainer::checkPosition(int64_t batches) const {
    if (position_.batch > batches) {
        throw ModuleError("Trainer: resuming at batch " + std::to_string(position_.batch) + " of an epoch of " +
                          std::to_string(batches));
    }
}

// Once per epoch, one pass over the parameters: without setCheckNumerics a NaN can still
// spread unseen (a ReLU or max pooling maps NaN to 0 on the CPU, so the printed loss stays
// finite while a layer's weights are all NaN). A non-finite loss counts only where loss
// scaling did not skip its steps (an overflowing 16-bit step is skipped, not fatal).
void Trainer::requireFinite(double error, int64_t skippedBefore) const {
    const std::string epoch = std::to_string(position_.epoch + 1);
    const char* hint = "; the learning rate may be too high, or the data hold a NaN (Module::setCheckNumerics, "
                       "tessera train --check-numerics, stops at the first layer that makes one)";
    for (const auto& [name, var] : net_.namedParams()) {
        if (!std::isfinite(backendFor(var->data.device()).sumSquares(var->data))) {
            throw NumericsError("Trainer: after epoch " + epoch + ", parameter " + name +
                                " holds NaN or infinity: training diverged" + hint);
        }
    }
    if (!std::isfinite(error) && optimizer_.skippedSteps() == skippedBefore) {
        throw NumericsError("Trainer: the mean training loss of epoch " + epoch + " is " + std::to_string(error) +
                            hint);
    }
}

double Trainer::runEpoch(int64_t batches, const Fetch& fetch) {
    checkPosition(batches);
    const int64_t accumulate = options_.accumulate;
    // With data parallelism, a group's gradients stay on each rank until its last batch,
    // whose backward reduces their sum; each batch is weighed by its rank's share here.
    const bool accumulating = accumulate > 1 && parallel_;
    net_.trainMode();
    cost_.setAccumulator(position_.errorSum, position_.errorSamples); // zero at an epoch's start
    Progress progress(options_, "train");
    const auto t0 = Clock::now();
    const int64_t first = position_.batch;
    const int64_t skippedBefore = optimizer_.skippedSteps();
    int64_t done = 0; // samples of this pass
    dataSeconds_ = 0.0;
    BatchInfo info;
    info.epoch = position_.epoch;
    info.batches = batches;
    for (int64_t b = first; b < batches; ++b) {
        const auto tData = Clock::now();
        const auto [x, t, globalSamples] = fetch(b);
        dataSeconds_ += secondsSince(tData);
        const Tensors& y = net_(x);
        CostResult r = cost_(y, t);
        optimizer_.scaleLossGradients(r.grad);
        // The batch's group of accumulated batches (one batch without accumulation).
        const int64_t groupStart = b - b % accumulate, groupEnd = std::min(batches, groupStart + accumulate);
        const bool firstOfGroup = b == groupStart, lastOfGroup = b + 1 == groupEnd;
        // Zeroed at a group's start, so a parameter that backward does not reach has a zero
        // gradient; the modules then overwrite theirs (momentum 0: a convolution's kernel
        // writes straight into them), later batches of the group add theirs, and the
        // containers sum a parameter shared by several modules over its uses.
        if (firstOfGroup) optimizer_.zeroGradParams();
        float weight = 1.0f / static_cast<float>(groupEnd - groupStart);
        const int64_t samples = x[0].shape()[0];
        if (parallel_) {
            parallel_->beginBackward(samples, globalSamples, !accumulating || lastOfGroup, !accumulating);
            if (accumulating) weight *= parallel_->share();
        }
        try {
            net_.backward(r.grad, true, false, weight, firstOfGroup ? 0.0f : 1.0f); // no gradient for the data
        } catch (...) {
            if (parallel_) parallel_->abandonBackward();
            throw;
        }
        if (parallel_) parallel_->finishBackward(); // the global batch's gradients (a group's at its end)
        if (lastOfGroup && optimizer_.update() && average_) average_->update();
        done += globalSamples; // over all ranks: samplesPerSecond is the job's rate
        position_.batch = b + 1;
        position_.errorSum = cost_.errorSum();
        position_.errorSamples = cost_.errorSamples();
        info.batch = b;
        info.error = r.error;
        info.meanError = cost_.getMeanError();
        info.samples = done;
        info.seconds = secondsSince(t0);
        info.updated = lastOfGroup;
        progress.show(info);
        if (onBatchFinish) onBatchFinish(info);
        if (stop_ && lastOfGroup && b + 1 < batches) return cost_.getMeanError(); // the epoch stays open
    }
    epochSeconds_ = secondsSince(t0);
    rate_ = static_cast<double>(done) / epochSeconds_;
    const double error = cost_.getMeanError();
    requireFinite(error, skippedBefore);
    if (onEpochFinish) onEpochFinish(info);
    position_ = {position_.epoch + 1, 0, 0.0, 0};
    return error;
}

// ---- Validator ----------------------------------------------------------------------------

Validator::Validator(Module& net, Cost& cost, const HandlerOptions& options)
    : net_(net), cost_(cost), options_(options) {}

double Validator::validate(const Tensor& data, const Tensor& targets) {
    checkSet("Validator", data, &targets, options_.batchsize);
    return validate(Tensors{data}, Tensors{targets});
}

// The accumulators start empty: the cost's, and each part's of a Multi (whose means are
// each output's error).
void Validator::begin() {
    cost_.resetAccumulator();
    if (auto* multi = dynamic_cast<Multi*>(&cost_)) {
        for (const auto& part : multi->costs()) part->resetAccumulator();
    }
}

double Validator::finish() {
    errors_.clear();
    if (const auto* multi = dynamic_cast<const Multi*>(&cost_)) {
        for (const auto& part : multi->costs()) errors_.push_back(part->getMeanError());
    } else {
        errors_.push_back(cost_.getMeanError());
    }
    return cost_.getMeanError();
}

double Validator::validate(const Tensors& data, const Tensors& targets) {
    const int64_t n = checkSets("Validator", data, &targets, options_.batchsize);
    const int64_t bs = options_.batchsize;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const bool wasTrain = net_.isTrain();
    net_.evalMode();
    begin();
    for (int64_t from = 0; from < n; from += bs) {
        const int64_t end = std::min(n, from + bs);
        const Tensors& y = net_(gatherAll(data, order, from, end, options_.device));
        cost_.validate(y, gatherAll(targets, order, from, end, options_.device));
    }
    if (wasTrain) net_.trainMode();
    return finish();
}

double Validator::validate(Loader& loader) {
    const bool wasTrain = net_.isTrain();
    net_.evalMode();
    begin();
    loader.start(0);
    while (std::optional<DataBatch> b = loader.next()) {
        const Tensors& y = net_(Tensors{onDevice(b->images, options_.device)});
        cost_.validate(y, Tensors{onDevice(b->labels, options_.device)});
    }
    if (wasTrain) net_.trainMode();
    return finish();
}

// ---- Calculator ---------------------------------------------------------------------------

Calculator::Calculator(Module& net, const HandlerOptions& options) : net_(net), options_(options) {}

Tensor Calculator::calc(const Tensor& data) {
    checkSet("Calculator", data, nullptr, options_.batchsize);
    const Tensors out = calc(Tensors{data});
    if (out.size() != 1) {
        throw ShapeError("Calculator: the network has " + std::to_string(out.size()) +
                         " outputs; calc(Tensors) returns them all");
    }
    return out[0];
}

Tensors Calculator::calc(const Tensors& data) {
    const int64_t n = checkSets("Calculator", data, nullptr, options_.batchsize);
    const int64_t bs = options_.batchsize;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const bool wasTrain = net_.isTrain();
    net_.evalMode();
    Tensors out;
    for (int64_t begin = 0; begin < n; begin += bs) {
        const int64_t end = std::min(n, begin + bs);
        const Tensors& ys = net_(gatherAll(data, order, begin, end, options_.device));
        if (out.empty()) {
            for (const Tensor& y : ys) {
                std::vector<int64_t> d = y.shape().dims();
                d[0] = n;
                out.push_back(Tensor::empty(Shape(d), y.dtype()));
            }
        }
        for (size_t k = 0; k < ys.size(); ++k) out[k].slice(begin, end).copyFrom(ys[k].toHost().plain());
    }
    if (wasTrain) net_.trainMode();
    return out;
}

} // namespace tessera
