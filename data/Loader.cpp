#include "data/Loader.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>

#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h"

namespace tessera {

namespace {
using Clock = std::chrono::steady_clock;

// Workers allocate and free an image's pixels a few times a sample (decoded, cropped, ...),
// hundreds of KB each at ImageNet sizes. With glibc's default heap padding (128 KiB) each
// such free shrinks the heap and the next allocation grows it again, page faults and all:
// more than half of a 224x224 JPEG pipeline's time went to the kernel. Keeping 64 MiB of
// slack when the heap grows or shrinks (M_TOP_PAD) removes that. Setting it also fixes
// glibc's mmap threshold at its 128 KiB default (no longer raised as large blocks are
// freed), so every image above that would be a fresh mapping, faulted in page by page: the
// threshold is set to glibc's largest, 32 MiB, which took random-resized crops of 2048x1536
// photographs from 19 to 39 images/s. Once per process, unless the user chose a value
// (MALLOC_TOP_PAD_, MALLOC_MMAP_THRESHOLD_).
void padHeapOnce() {
#ifdef __GLIBC__
    static std::once_flag once;
    std::call_once(once, [] {
        if (std::getenv("MALLOC_TOP_PAD_") == nullptr) mallopt(M_TOP_PAD, 64 << 20);
        if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 32 << 20);
    });
#endif
}
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

namespace {
// Gamma(a, 1) by Marsaglia and Tsang, from uniforms and normals of (seed, counter++).
double gammaSample(double a, uint64_t seed, uint64_t& counter) {
    auto uniform = [&] { // in (0, 1)
        return (static_cast<double>(randomBits(seed, counter++) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    };
    if (a < 1.0) return gammaSample(a + 1.0, seed, counter) * std::pow(uniform(), 1.0 / a);
    const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
        const double x = std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
        const double v1 = 1.0 + c * x;
        if (v1 <= 0) continue;
        const double v = v1 * v1 * v1, u = uniform();
        if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
}
} // namespace

double betaSample(double alpha, uint64_t seed, uint64_t counter) {
    uint64_t at = counter << 20; // a stream of its own per counter
    const double x = gammaSample(alpha, seed, at), y = gammaSample(alpha, seed, at);
    return x + y > 0 ? x / (x + y) : 0.5;
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
    for (auto [name, alpha] : {std::pair{"mixup", options_.mixup}, std::pair{"cutmix", options_.cutmix}}) {
        if (!(alpha >= 0.0f && alpha <= 1e4f)) {
            throw ModuleError(std::string("Loader: ") + name + " must be 0 (off) or a Beta alpha > 0, got " +
                              std::to_string(alpha));
        }
    }
    if (options_.classes != 0 && options_.classes < data_->classes()) {
        throw ModuleError("Loader: classes " + std::to_string(options_.classes) + " is fewer than the data set's " +
                          std::to_string(data_->classes()));
    }
    if (options_.prefetch == 0) options_.prefetch = 2 * std::max(1, options_.workers);
    if (options_.balanced) {
        labels_.reserve(static_cast<size_t>(data_->size()));
        for (int64_t i = 0; i < data_->size(); ++i) labels_.push_back(data_->label(i));
    }
    padHeapOnce();
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

std::vector<int64_t> Loader::order(int64_t epoch) const {
    return options_.balanced ? balancedOrder(labels_, options_.seed, epoch)
                             : epochOrder(size(), options_.seed, epoch, options_.shuffle);
}

std::vector<int64_t> balancedOrder(const std::vector<int32_t>& labels, uint64_t seed, int64_t epoch) {
    std::map<int32_t, int64_t> counts;
    for (int32_t l : labels) ++counts[l];
    std::vector<double> cumulative; // of the weights 1 / count
    double total = 0.0;
    for (int32_t l : labels) cumulative.push_back(total += 1.0 / static_cast<double>(counts[l]));
    const uint64_t s = randomBits(seed ^ 0x62616C616E6365ull, static_cast<uint64_t>(epoch)); // "balance"
    std::vector<int64_t> order(labels.size());
    for (size_t i = 0; i < order.size(); ++i) {
        const double u = static_cast<double>(randomBits(s, i) >> 11) * 0x1.0p-53 * total;
        const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
        order[i] =
            std::min<int64_t>(static_cast<int64_t>(it - cumulative.begin()), static_cast<int64_t>(labels.size()) - 1);
    }
    return order;
}

int64_t Loader::batches() const {
    const int64_t global = options_.batchsize * options_.ranks, n = size();
    const int64_t full = n / global, rest = n % global;
    return full + (rest >= options_.ranks ? 1 : 0);
}

Shape Loader::sampleShape() const {
    const DecodeScale shrink = options_.scaledDecode ? transforms_.decodeScale(false) : DecodeScale{};
    const Image img = transforms_.apply(data_->getScaled(0, shrink).image, options_.seed, 0, 0, false);
    if (options_.flatten) return Shape{img.channels * img.height * img.width};
    return Shape{img.channels, img.height, img.width};
}

DataBatch Loader::make(int64_t epoch, int64_t index) const { return build(order(epoch), epoch, index); }

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
            // Decoded no larger than the transforms need: a random-resized crop's window only.
            s = data_->getScaled(sample, options_.scaledDecode
                                             ? transforms_.decodeScale(options_.train, options_.seed, epoch, sample)
                                             : DecodeScale{});
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
    if (options_.train && (options_.mixup > 0 || options_.cutmix > 0)) {
        mix(b, epoch, first.channels, first.height, first.width);
    }
    return b;
}

void Loader::mix(DataBatch& b, int64_t epoch, int64_t channels, int64_t height, int64_t width) const {
    const int64_t n = b.labels.numel(), plane = height * width;
    const int64_t classes = options_.classes > 0 ? options_.classes : data_->classes();
    const uint64_t key = randomBits(randomBits(options_.seed ^ 0x6D69787570ull, static_cast<uint64_t>(epoch)),
                                    static_cast<uint64_t>(b.index) * 1024 + static_cast<uint64_t>(options_.rank));
    const bool cut = options_.cutmix > 0 && (options_.mixup <= 0 || (randomBits(key, 0) & 1));
    double l = betaSample(cut ? options_.cutmix : options_.mixup, key, 1);
    float* x = b.images.data<float>();
    const int64_t size = channels * plane;
    if (cut) { // a box of about 1 - l of the area, centred at a random pixel, clipped to the image
        const double r = std::sqrt(1.0 - l);
        const auto ch = static_cast<int64_t>(static_cast<double>(height) * r);
        const auto cw = static_cast<int64_t>(static_cast<double>(width) * r);
        const auto cy = static_cast<int64_t>(randomBits(key, 2) % static_cast<uint64_t>(height));
        const auto cx = static_cast<int64_t>(randomBits(key, 3) % static_cast<uint64_t>(width));
        const int64_t y0 = std::max<int64_t>(cy - ch / 2, 0), y1 = std::min<int64_t>(cy + ch / 2, height);
        const int64_t x0 = std::max<int64_t>(cx - cw / 2, 0), x1 = std::min<int64_t>(cx + cw / 2, width);
        l = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(plane);
        for (int64_t i = 0; i < n / 2; ++i) { // swap the box between i and its partner
            float* a = x + i * size;
            float* p = x + (n - 1 - i) * size;
            for (int64_t c = 0; c < channels; ++c) {
                for (int64_t y = y0; y < y1; ++y) {
                    std::swap_ranges(a + c * plane + y * width + x0, a + c * plane + y * width + x1,
                                     p + c * plane + y * width + x0);
                }
            }
        }
    } else {
        const auto lf = static_cast<float>(l);
        for (int64_t i = 0; i < n / 2; ++i) {
            float* a = x + i * size;
            float* p = x + (n - 1 - i) * size;
            for (int64_t k = 0; k < size; ++k) {
                const float u = a[k], v = p[k];
                a[k] = lf * u + (1.0f - lf) * v;
                p[k] = lf * v + (1.0f - lf) * u;
            }
        }
    }
    Tensor probs = options_.pinned ? pinnedEmpty({n, classes}, DType::float32) : Tensor::empty({n, classes});
    float* t = probs.data<float>();
    const int32_t* y = b.labels.data<int32_t>();
    std::fill(t, t + n * classes, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
        t[i * classes + y[i]] += static_cast<float>(l);
        t[i * classes + y[n - 1 - i]] += static_cast<float>(1.0 - l);
    }
    b.labels = probs;
}

void Loader::start(int64_t epoch, int64_t first) {
    if (epoch < 0) throw ModuleError("Loader::start: epoch must not be negative, got " + std::to_string(epoch));
    if (first < 0 || first > batches()) {
        throw ModuleError("Loader::start: batch " + std::to_string(first) + " of an epoch of " +
                          std::to_string(batches()));
    }
    Order order = order_;
    if (epoch != epoch_ || !order) {
        order = std::make_shared<const std::vector<int64_t>>(this->order(epoch));
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
