#include "data/Loader.h"

#include <chrono>
#include <cstring>
#include <numeric>

#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h"

namespace tessera {

namespace {
using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
} // namespace

std::vector<int64_t> epochOrder(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    if (shuffle) {
        const uint64_t s = randomBits(seed, static_cast<uint64_t>(epoch));
        for (int64_t i = n - 1; i > 0; --i) {
            const auto j = static_cast<int64_t>(randomBits(s, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
            std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
        }
    }
    return order;
}

Loader::Loader(DatasetPtr data, Transforms transforms, const LoaderOptions& options)
    : data_(std::move(data)), transforms_(std::move(transforms)), options_(options) {
    if (!data_) throw ModuleError("Loader: no data set");
    if (data_->size() < 1) throw ShapeError("Loader: the data set " + data_->describe() + " is empty");
    if (options_.batchsize < 1) {
        throw ShapeError("Loader: batchsize must be at least 1, got " + std::to_string(options_.batchsize));
    }
    if (options_.workers < 0 || options_.workers > 256) {
        throw ModuleError("Loader: workers must lie in [0, 256], got " + std::to_string(options_.workers));
    }
    if (options_.prefetch < 0) throw ModuleError("Loader: prefetch must not be negative");
    if (options_.ranks < 1 || options_.rank < 0 || options_.rank >= options_.ranks) {
        throw ModuleError("Loader: rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.ranks) +
                          " ranks is out of range");
    }
    if (data_->size() < options_.ranks) {
        throw ShapeError("Loader: the data set " + data_->describe() + " has " + std::to_string(data_->size()) +
                         " samples, fewer than the " + std::to_string(options_.ranks) + " ranks");
    }
    if (options_.prefetch == 0) options_.prefetch = 2 * std::max(1, options_.workers);
    for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this] { work(); });
}

Loader::~Loader() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        quit_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : workers_) t.join();
}

int64_t Loader::batches() const {
    const int64_t global = options_.batchsize * options_.ranks, n = size();
    const int64_t full = n / global, rest = n % global;
    return full + (rest >= options_.ranks ? 1 : 0);
}

Shape Loader::sampleShape() const {
    const Image img = transforms_.apply(data_->get(0).image, options_.seed, 0, 0, false);
    if (options_.flatten) return Shape{img.channels * img.height * img.width};
    return Shape{img.channels, img.height, img.width};
}

DataBatch Loader::make(int64_t epoch, int64_t index) const {
    return build(epochOrder(size(), options_.seed, epoch, options_.shuffle), epoch, index);
}

DataBatch Loader::build(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
    const int64_t global = options_.batchsize * options_.ranks;
    const int64_t start = index * global, m = std::min(size(), start + global) - start;
    const int64_t begin = start + m * options_.rank / options_.ranks;
    const int64_t end = start + m * (options_.rank + 1) / options_.ranks;
    auto make = [&](const Shape& shape, DType dtype) {
        return options_.pinned ? pinnedEmpty(shape, dtype) : Tensor::empty(shape, dtype);
    };
    DataBatch b{index, {}, make({end - begin}, DType::int32), m};
    int32_t* labels = b.labels.data<int32_t>();
    float* dst = nullptr;
    Image first;
    for (int64_t i = begin; i < end; ++i) {
        const int64_t sample = order[static_cast<size_t>(i)];
        Sample s;
        try {
            s = data_->get(sample);
            s.image = transforms_.apply(std::move(s.image), options_.seed, epoch, sample, options_.train);
        } catch (const IoError&) {
            throw; // names its file already
        } catch (const Error&) {
            rethrowWithContext("sample " + std::to_string(sample) + " (" + data_->where(sample) + "): ");
        }
        const Image& img = s.image;
        if (i == begin) {
            first = Image();
            first.channels = img.channels, first.height = img.height, first.width = img.width;
            const int64_t n = end - begin;
            b.images = options_.flatten ? make({n, img.channels * img.height * img.width}, DType::float32)
                                        : make({n, img.channels, img.height, img.width}, DType::float32);
            dst = b.images.data<float>();
        } else if (img.channels != first.channels || img.height != first.height || img.width != first.width) {
            throw ShapeError("sample " + std::to_string(sample) + " (" + data_->where(sample) + "): its image is " +
                             img.str() + " but the batch's first is " + first.str() +
                             "; give every image one size with a transform (resize:HxW, or resize:S then center:S)");
        }
        if (s.label < 0 || s.label >= data_->classes()) {
            throw ShapeError("sample " + std::to_string(sample) + " (" + data_->where(sample) + "): label " +
                             std::to_string(s.label) + " outside [0, " + std::to_string(data_->classes()) + ")");
        }
        std::memcpy(dst + (i - begin) * static_cast<int64_t>(img.pixels.size()), img.pixels.data(),
                    img.pixels.size() * sizeof(float));
        labels[i - begin] = s.label;
    }
    return b;
}

void Loader::start(int64_t epoch, int64_t first) {
    if (epoch < 0) throw ModuleError("Loader::start: epoch must not be negative, got " + std::to_string(epoch));
    if (first < 0 || first > batches()) {
        throw ModuleError("Loader::start: batch " + std::to_string(first) + " of an epoch of " +
                          std::to_string(batches()));
    }
    Order order = order_;
    if (epoch != epoch_ || !order) {
        order =
            std::make_shared<const std::vector<int64_t>>(epochOrder(size(), options_.seed, epoch, options_.shuffle));
    }
    next_ = first;
    waiting_ = making_ = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_); // the workers read these
        order_ = std::move(order);
        epoch_ = epoch;
        end_ = batches();
        ++generation_;
        made_.clear();
        claim_ = taken_ = first;
    }
    changed_.notify_all();
}

std::optional<DataBatch> Loader::next() {
    if (epoch_ < 0) throw ModuleError("Loader::next: start(epoch) first");
    if (next_ >= end_) return std::nullopt;
    const int64_t index = next_++;
    if (workers_.empty()) {
        const auto t0 = Clock::now();
        DataBatch b = build(*order_, epoch_, index);
        making_ += secondsSince(t0);
        return b;
    }
    Made m;
    {
        const auto t0 = Clock::now();
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return made_.count(index) > 0; });
        waiting_ += secondsSince(t0);
        m = std::move(made_[index]);
        made_.erase(index);
        taken_ = index + 1;
    }
    changed_.notify_all(); // room for one more
    if (m.error) std::rethrow_exception(m.error);
    return std::move(m.batch);
}

void Loader::work() {
    for (;;) {
        int64_t index = 0, epoch = 0;
        uint64_t generation = 0;
        Order order;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            changed_.wait(lock,
                          [&] { return quit_ || (order_ && claim_ < end_ && claim_ < taken_ + options_.prefetch); });
            if (quit_) return;
            index = claim_++;
            epoch = epoch_;
            generation = generation_;
            order = order_;
        }
        Made m;
        try {
            m.batch = build(*order, epoch, index);
        } catch (...) {
            m.error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (generation != generation_) continue; // an epoch begun since: dropped
            made_[index] = std::move(m);
        }
        changed_.notify_all();
    }
}

} // namespace tessera
