#include "data/Transform.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <tuple>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "data/TransformDetail.h"

namespace tessera {

namespace {

using Kind = Transforms::Step::Kind;

// Salt of the transforms' random stream, so it is not the batch order's (same seed).
constexpr uint64_t kSalt = 0x5DA7A0A06E1A7E5Bull;

// The random stream of sample `index` in `epoch`, which every random step draws from in turn.
uint64_t streamOf(uint64_t seed, int64_t epoch, int64_t index) {
    return randomBits(randomBits(seed ^ kSalt, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(index));
}

struct Window {
    int64_t top = 0, left = 0, height = 0, width = 0;
};

// A random-resized crop's window on an H x W picture (torchvision's RandomResizedCrop: an
// area of [scale, 1] of the picture's at an aspect ratio in [3/4, 4/3], log-uniform; after
// ten misses the centre window of the whole width or height nearest those ratios), drawn
// from `stream` at `draw` on.
Window randomWindow(double scale, uint64_t stream, uint64_t& draw, int64_t H, int64_t W) {
    auto uniform = [&](uint64_t n) { return randomBits(stream, draw++) % n; };                     // in [0, n)
    auto unit = [&] { return static_cast<double>(randomBits(stream, draw++) >> 11) * 0x1.0p-53; }; // in [0, 1)
    const double area = static_cast<double>(H * W), lo = std::log(3.0 / 4.0), hi = std::log(4.0 / 3.0);
    Window win{-1, 0, H, W};
    for (int attempt = 0; attempt < 10 && win.top < 0; ++attempt) {
        const double target = area * (scale + (1.0 - scale) * unit());
        const double ratio = std::exp(lo + (hi - lo) * unit());
        const int64_t tw = std::llround(std::sqrt(target * ratio)), th = std::llround(std::sqrt(target / ratio));
        if (tw > 0 && tw <= W && th > 0 && th <= H) {
            win.height = th, win.width = tw;
            win.top = static_cast<int64_t>(uniform(static_cast<uint64_t>(H - th) + 1));
            win.left = static_cast<int64_t>(uniform(static_cast<uint64_t>(W - tw) + 1));
        }
    }
    if (win.top < 0) {
        const double r = static_cast<double>(W) / static_cast<double>(H);
        if (r < 3.0 / 4.0) {
            win.width = W, win.height = std::min<int64_t>(H, std::llround(static_cast<double>(W) * 4.0 / 3.0));
        } else if (r > 4.0 / 3.0) {
            win.height = H, win.width = std::min<int64_t>(W, std::llround(static_cast<double>(H) * 4.0 / 3.0));
        }
        win.top = (H - win.height) / 2, win.left = (W - win.width) / 2;
    }
    return win;
}

void checkSize(const char* what, int64_t h, int64_t w) {
    if (h < 1 || w < 0 || h > kMaxImageSide || w > kMaxImageSide) {
        throw ModuleError(std::string("Transforms::") + what + ": sizes must lie in [1, " +
                          std::to_string(kMaxImageSide) + "], got " + std::to_string(h) + "x" + std::to_string(w));
    }
}

// Each output index's input indices and weights along one axis of n outputs from inN
// inputs: output i reads the k inputs from start[i] with weights weight[i k ..]. Enlarging:
// bilinear with half-pixel centres (the edge repeated). Shrinking: the same triangle filter
// widened to the scale and normalised (antialiasing, as PIL and torchvision's
// antialias=True do), so every input pixel counts.
struct Taps {
    int64_t k = 1;
    std::vector<int64_t> start;
    std::vector<float> weight;
};

Taps taps(int64_t n, int64_t inN) {
    const double scale = static_cast<double>(inN) / static_cast<double>(n);
    std::vector<std::vector<std::pair<int64_t, double>>> rows(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        auto& row = rows[static_cast<size_t>(i)];
        if (scale <= 1.0) {
            const double src = std::max(0.0, (static_cast<double>(i) + 0.5) * scale - 0.5);
            const auto i0 = std::min(static_cast<int64_t>(src), inN - 1);
            const double f = i0 + 1 < inN ? src - static_cast<double>(i0) : 0.0;
            row.emplace_back(i0, 1.0 - f);
            if (f > 0.0) row.emplace_back(i0 + 1, f);
            continue;
        }
        const double centre = scale * (static_cast<double>(i) + 0.5);
        const auto from = std::max<int64_t>(0, static_cast<int64_t>(centre - scale + 0.5));
        const auto to = std::min<int64_t>(inN, static_cast<int64_t>(centre + scale + 0.5));
        double total = 0;
        for (int64_t j = from; j < to; ++j) {
            const double weight = std::max(0.0, 1.0 - std::abs((static_cast<double>(j) + 0.5 - centre) / scale));
            row.emplace_back(j, weight);
            total += weight;
        }
        for (auto& tap : row) tap.second /= total;
    }
    Taps t;
    for (const auto& row : rows) t.k = std::max<int64_t>(t.k, static_cast<int64_t>(row.size()));
    t.start.resize(static_cast<size_t>(n));
    t.weight.assign(static_cast<size_t>(n * t.k), 0.0f);
    for (int64_t i = 0; i < n; ++i) { // k taps from start, within [0, inN): zeros where a row has fewer
        const auto& row = rows[static_cast<size_t>(i)];
        const int64_t first = std::max<int64_t>(0, std::min(row.front().first, inN - t.k));
        t.start[static_cast<size_t>(i)] = first;
        for (const auto& [j, weight] : row)
            t.weight[static_cast<size_t>(i * t.k + j - first)] = static_cast<float>(weight);
    }
    return t;
}

// Keeps each channel of `out` within the range of `in`'s channel (widened to take `fill`):
// resampling weights are non-negative and sum to 1, so every output is a weighted mean of
// inputs, but float rounding can carry a white pixel to 1.0000001, which the [0, 1] checks
// of jitter and the augmentations then refuse.
} // namespace

void clampToInputRange(Image& out, const Image& in, std::optional<float> fill) {
    const int64_t inPlane = in.height * in.width, outPlane = out.height * out.width;
    if (inPlane == 0) return;
    for (int64_t c = 0; c < in.channels; ++c) {
        const auto first = in.pixels.begin() + c * inPlane;
        auto [lo, hi] = std::minmax_element(first, first + inPlane);
        float low = *lo, high = *hi;
        if (fill) low = std::min(low, *fill), high = std::max(high, *fill);
        float* p = out.pixels.data() + c * outPlane;
        for (int64_t i = 0; i < outPlane; ++i) p[i] = std::clamp(p[i], low, high); // NaN stays NaN
    }
}

namespace {

// Resized to h x w, one axis at a time: columns first, then rows (channel by channel).
Image resized(const Image& in, int64_t h, int64_t w) {
    const Taps tx = taps(w, in.width), ty = taps(h, in.height);
    Image out(in.channels, h, w);
    // The columns-resized rows of one channel: kept per thread, so that a fresh block is not
    // faulted in for every image.
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(in.height * w));
    for (int64_t c = 0; c < in.channels; ++c) {
        for (int64_t y = 0; y < in.height; ++y) {
            const float* src = in.pixels.data() + (c * in.height + y) * in.width;
            float* dst = scratch.data() + y * w;
            const int64_t* from = tx.start.data();
            const float* weight = tx.weight.data();
            if (tx.k == 2) { // enlarging: two taps, spelt out so the loop stays tight
                for (int64_t x = 0; x < w; ++x) {
                    const float* p = src + from[x];
                    dst[x] = p[0] * weight[2 * x] + p[1] * weight[2 * x + 1];
                }
                continue;
            }
            for (int64_t x = 0; x < w; ++x) {
                const float* p = src + from[x];
                const float* wx = weight + x * tx.k;
                float sum = 0;
                for (int64_t j = 0; j < tx.k; ++j) sum += p[j] * wx[j];
                dst[x] = sum;
            }
        }
        for (int64_t y = 0; y < h; ++y) {
            float* dst = &out.at(c, y, 0);
            const int64_t first = ty.start[static_cast<size_t>(y)];
            const float* weight = ty.weight.data() + y * ty.k;
            const float* src = scratch.data() + first * w;
            for (int64_t x = 0; x < w; ++x) dst[x] = src[x] * weight[0];
            for (int64_t j = 1; j < ty.k; ++j) {
                src = scratch.data() + (first + j) * w;
                const float wj = weight[j];
                for (int64_t x = 0; x < w; ++x) dst[x] += src[x] * wj;
            }
        }
    }
    clampToInputRange(out, in);
    return out;
}

// The h x w window at (top, left) of `in` padded by `pad` zeros on each side.
Image cropped(const Image& in, int64_t top, int64_t left, int64_t h, int64_t w, int64_t pad) {
    Image out(in.channels, h, w); // zeros: the padding
    // Each output row takes one run of an input row: output x in [x0, x1) from input x - left + pad.
    const int64_t x0 = std::clamp<int64_t>(pad - left, 0, w), x1 = std::clamp<int64_t>(in.width + pad - left, x0, w);
    for (int64_t c = 0; c < in.channels; ++c) {
        for (int64_t y = 0; y < h; ++y) {
            const int64_t sy = top + y - pad;
            if (sy < 0 || sy >= in.height || x1 == x0) continue;
            std::memcpy(&out.at(c, y, x0), in.pixels.data() + (c * in.height + sy) * in.width + left + x0 - pad,
                        static_cast<size_t>(x1 - x0) * sizeof(float));
        }
    }
    return out;
}

// The size `resize:S` gives `image`: the shorter side `side`, the other keeping the aspect ratio.
// The picture's size: before a scaled decode shrank it, if one did.
std::pair<int64_t, int64_t> fullSize(const Image& image) {
    return image.fullHeight > 0 ? std::make_pair(image.fullHeight, image.fullWidth)
                                : std::make_pair(image.height, image.width);
}

// The size with the shorter side `side` and the picture's aspect ratio.
std::pair<int64_t, int64_t> shorterSideTo(const Image& image, int64_t side) {
    const auto [fh, fw] = fullSize(image);
    const bool tall = fh >= fw;
    const double ratio = static_cast<double>(tall ? fh : fw) / static_cast<double>(tall ? fw : fh);
    const auto longer = std::max<int64_t>(1, std::llround(static_cast<double>(side) * ratio));
    return {tall ? longer : side, tall ? side : longer};
}

// The centre h x w window (a ShapeError naming `what` when it does not fit).
Image centre(const Image& image, int64_t h, int64_t w, const std::string& what) {
    if (image.height < h || image.width < w) {
        throw ShapeError("a " + what + " does not fit a " + std::to_string(image.height) + "x" +
                         std::to_string(image.width) + " image");
    }
    if (image.height == h && image.width == w) return image;
    return cropped(image, (image.height - h) / 2, (image.width - w) / 2, h, w, 0);
}

int64_t parseInt(const std::string& text, const std::string& item) {
    size_t used = 0;
    long long v = -1;
    try {
        v = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || v < 0) {
        throw ModuleError("transform '" + item + "': '" + text + "' is not a whole number");
    }
    return v;
}

// "S" -> (S, S); "HxW" -> (H, W).
std::pair<int64_t, int64_t> parseSize(const std::string& text, const std::string& item) {
    const size_t x = text.find('x');
    if (x == std::string::npos) {
        const int64_t s = parseInt(text, item);
        return {s, s};
    }
    return {parseInt(text.substr(0, x), item), parseInt(text.substr(x + 1), item)};
}

std::vector<float> parseFloats(const std::string& text, const std::string& item) {
    std::vector<float> v;
    std::stringstream ss(text);
    for (std::string part; std::getline(ss, part, '/');) {
        size_t used = 0;
        float f = 0;
        try {
            f = std::stof(part, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != part.size()) {
            throw ModuleError("transform '" + item + "': '" + part + "' is not a number");
        }
        v.push_back(f);
    }
    return v;
}

const char* kSyntax =
    "expected a comma-separated list of resize:S | resize:HxW, crop:S[:PAD] | crop:HxW[:PAD], "
    "center:S | center:HxW, rrc:S[:MIN] | rrc:HxW[:MIN], flip[:P], rotate:DEG, "
    "affine:DEG[:T[:LO/HI[:SHEAR]]], jitter:B[:C[:S[:H]]], erase[:P[:MIN:MAX]], trivial, randaugment[:N[:M]], "
    "normalize:M1/M2/..:S1/S2/.. | normalize:cifar10 | cifar100 | imagenet | mnist";

} // namespace

std::string numberStr(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

namespace {

std::string sizeStr(int64_t h, int64_t w) {
    return h == w ? std::to_string(h) : std::to_string(h) + "x" + std::to_string(w);
}

std::string floatsStr(const std::vector<float>& v) {
    std::ostringstream s;
    for (size_t i = 0; i < v.size(); ++i) s << (i ? "/" : "") << v[i];
    return s.str();
}

} // namespace

Transforms::Step step(Transforms::Step::Kind kind, int64_t height, int64_t width, int64_t pad) {
    Transforms::Step s{};
    s.kind = kind;
    s.height = height, s.width = width, s.pad = pad;
    return s;
}

Transforms& Transforms::resize(int64_t height, int64_t width) {
    checkSize("resize", height, width);
    steps_.push_back(step(Kind::resize, height, width));
    return *this;
}

Transforms& Transforms::randomCrop(int64_t height, int64_t width, int64_t pad) {
    checkSize("randomCrop", height, width);
    if (width < 1 || pad < 0 || pad > kMaxImageSide) {
        throw ModuleError("Transforms::randomCrop: width must be positive and pad in [0, " +
                          std::to_string(kMaxImageSide) + "], got width " + std::to_string(width) + ", pad " +
                          std::to_string(pad));
    }
    steps_.push_back(step(Kind::randomCrop, height, width, pad));
    return *this;
}

Transforms& Transforms::centerCrop(int64_t height, int64_t width) {
    checkSize("centerCrop", height, width);
    if (width < 1) throw ModuleError("Transforms::centerCrop: width must be positive");
    steps_.push_back(step(Kind::centerCrop, height, width));
    return *this;
}

Transforms& Transforms::flip(double p) {
    if (!(p >= 0.0 && p <= 1.0)) throw ModuleError("Transforms::flip: p must lie in [0, 1], got " + std::to_string(p));
    Step f = step(Kind::flip);
    f.p = p;
    steps_.push_back(f);
    return *this;
}

Transforms& Transforms::normalize(std::vector<float> mean, std::vector<float> std) {
    if (mean.empty() || mean.size() != std.size()) {
        throw ModuleError("Transforms::normalize: mean and std need the same number of values (one per channel, or "
                          "one for all), got " +
                          std::to_string(mean.size()) + " and " + std::to_string(std.size()));
    }
    for (float s : std) {
        if (!(s > 0.0f) || !std::isfinite(s)) {
            throw ModuleError("Transforms::normalize: every std must be positive and finite, got " + std::to_string(s));
        }
    }
    Step n = step(Kind::normalize);
    n.mean = std::move(mean);
    n.std = std::move(std);
    steps_.push_back(std::move(n));
    return *this;
}

Transforms& Transforms::randomResizedCrop(int64_t height, int64_t width, double scale) {
    checkSize("randomResizedCrop", height, width);
    if (width < 1 || !(scale > 0.0 && scale <= 1.0)) {
        throw ModuleError("Transforms::randomResizedCrop: width must be positive and scale in (0, 1], got width " +
                          std::to_string(width) + ", scale " + numberStr(scale));
    }
    Step r = step(Kind::randomResizedCrop, height, width);
    r.scale = scale;
    steps_.push_back(r);
    return *this;
}

Transforms& Transforms::erase(double p, double minScale, double maxScale) {
    if (!(p >= 0.0 && p <= 1.0)) throw ModuleError("Transforms::erase: p must lie in [0, 1], got " + numberStr(p));
    if (!(minScale > 0.0 && minScale <= maxScale && maxScale < 1.0)) {
        throw ModuleError("Transforms::erase: the area fractions need 0 < MIN <= MAX < 1, got " + numberStr(minScale) +
                          " and " + numberStr(maxScale));
    }
    Step r = step(Kind::erase);
    r.p = p, r.scale = minScale, r.maxScale = maxScale;
    steps_.push_back(r);
    return *this;
}

Transforms& Transforms::rotate(double degrees) {
    if (!(degrees >= 0.0 && degrees <= 180.0)) {
        throw ModuleError("Transforms::rotate: degrees must lie in [0, 180], got " + numberStr(degrees));
    }
    Step r = step(Kind::rotate);
    r.degrees = degrees;
    steps_.push_back(r);
    return *this;
}

Transforms& Transforms::jitter(double brightness, double contrast, double saturation, double hue) {
    for (double v : {brightness, contrast, saturation}) {
        if (!(v >= 0.0 && v <= 10.0)) {
            throw ModuleError("Transforms::jitter: brightness, contrast and saturation must lie in [0, 10], got " +
                              numberStr(v));
        }
    }
    if (!(hue >= 0.0 && hue <= 0.5)) {
        throw ModuleError("Transforms::jitter: hue must lie in [0, 0.5] (a fraction of the colour circle), got " +
                          numberStr(hue));
    }
    Step j = step(Kind::jitter);
    j.brightness = brightness, j.contrast = contrast, j.saturation = saturation, j.hue = hue;
    steps_.push_back(j);
    return *this;
}

Image Transforms::hueShifted(const Image& image, double shift) {
    if (image.channels != 3) throw ShapeError("a hue shift needs 3 channels, got " + image.str());
    Image out = image;
    const int64_t plane = image.height * image.width;
    float* r = out.pixels.data();
    float* g = r + plane;
    float* b = g + plane;
    for (int64_t i = 0; i < plane; ++i) {
        // RGB -> HSV (hue in [0, 1)), turned, and back.
        const double R = r[i], G = g[i], B = b[i];
        const double V = std::max({R, G, B}), C = V - std::min({R, G, B});
        if (C <= 0.0) continue; // grey: no hue
        double h = V == R ? (G - B) / C : V == G ? 2.0 + (B - R) / C : 4.0 + (R - G) / C;
        h = h / 6.0 + shift;
        h -= std::floor(h);
        const double S = C / V, h6 = h * 6.0;
        const auto sector = static_cast<int>(std::floor(h6)) % 6;
        const double f = h6 - std::floor(h6), p = V * (1 - S), q = V * (1 - S * f), t = V * (1 - S * (1 - f));
        const double rgb[6][3] = {{V, t, p}, {q, V, p}, {p, V, t}, {p, q, V}, {t, p, V}, {V, p, q}};
        r[i] = static_cast<float>(rgb[sector][0]);
        g[i] = static_cast<float>(rgb[sector][1]);
        b[i] = static_cast<float>(rgb[sector][2]);
    }
    return out;
}

Transforms& Transforms::affine(double degrees, double translate, double minScale, double maxScale, double shear) {
    auto bad = [](const std::string& what) { return ModuleError("Transforms::affine: " + what); };
    if (!(degrees >= 0.0 && degrees <= 180.0)) throw bad("degrees must lie in [0, 180], got " + numberStr(degrees));
    if (!(translate >= 0.0 && translate <= 1.0)) {
        throw bad("translate must lie in [0, 1] (a fraction of the size), got " + numberStr(translate));
    }
    if (!(minScale > 0.0 && minScale <= maxScale && maxScale <= 100.0)) {
        throw bad("the zoom range needs 0 < LO <= HI <= 100, got " + numberStr(minScale) + " and " +
                  numberStr(maxScale));
    }
    if (!(shear >= 0.0 && shear < 90.0)) throw bad("shear must lie in [0, 90) degrees, got " + numberStr(shear));
    Step a = step(Kind::affine);
    a.degrees = degrees, a.translate = translate, a.scale = minScale, a.maxScale = maxScale, a.shear = shear;
    steps_.push_back(a);
    return *this;
}

Image Transforms::rotated(const Image& in, double degrees) { return warped(in, degrees); }

DecodeScale Transforms::decodeScale(bool train) const {
    if (steps_.empty()) return {};
    const Step s = steps_.front();
    auto d = [](int64_t v) { return static_cast<double>(v); };
    auto least = [](double v) { return DecodePlan{.least = v}; };
    if (s.kind == Kind::resize) {
        if (s.width == 0) return [s, d, least](int64_t h, int64_t w) { return least(d(s.height) / d(std::min(h, w))); };
        return [s, d, least](int64_t h, int64_t w) { return least(std::max(d(s.height) / d(h), d(s.width) / d(w))); };
    }
    if (s.kind != Kind::randomResizedCrop) return {};
    if (!train) {
        return
            [s, d, least](int64_t h, int64_t w) { return least(d(std::max(s.height, s.width)) / d(std::min(h, w))); };
    }
    // The smallest window: an area of `scale` of the image's at the most extreme aspect
    // ratio (3/4 or 4/3) has sides of sqrt(area * 3/4) at the least.
    return [s, d, least](int64_t h, int64_t w) {
        const double side = std::sqrt(d(h) * d(w) * s.scale * 0.75);
        return least(std::max({d(s.height) / std::min(side, d(h)), d(s.width) / std::min(side, d(w))}));
    };
}

DecodeScale Transforms::decodeScale(bool train, uint64_t seed, int64_t epoch, int64_t index) const {
    if (!train || steps_.empty() || steps_.front().kind != Kind::randomResizedCrop) return decodeScale(train);
    // The window apply() draws first (the same stream, from its start), and its size kept.
    const Step s = steps_.front();
    const uint64_t stream = streamOf(seed, epoch, index);
    return [s, stream](int64_t h, int64_t w) {
        uint64_t draw = 0;
        const Window win = randomWindow(s.scale, stream, draw, h, w);
        return DecodePlan{.least = std::max(static_cast<double>(s.height) / static_cast<double>(win.height),
                                            static_cast<double>(s.width) / static_cast<double>(win.width)),
                          .top = win.top,
                          .left = win.left,
                          .height = win.height,
                          .width = win.width};
    };
}

Transforms Transforms::parse(const std::string& spec) {
    Transforms t;
    std::stringstream ss(spec);
    for (std::string item; std::getline(ss, item, ',');) {
        std::vector<std::string> parts;
        std::stringstream is(item);
        for (std::string p; std::getline(is, p, ':');) parts.push_back(p);
        if (parts.empty() || parts[0].empty())
            throw ModuleError("transforms '" + spec + "': an empty item; " + kSyntax);
        const std::string& name = parts[0];
        const size_t args = parts.size() - 1;
        try {
            if (name == "resize" && args == 1) {
                const bool exact = parts[1].find('x') != std::string::npos;
                const auto [h, w] = parseSize(parts[1], item);
                t.resize(h, exact ? w : 0);
            } else if (name == "crop" && (args == 1 || args == 2)) {
                const auto [h, w] = parseSize(parts[1], item);
                t.randomCrop(h, w, args == 2 ? parseInt(parts[2], item) : 0);
            } else if (name == "center" && args == 1) {
                const auto [h, w] = parseSize(parts[1], item);
                t.centerCrop(h, w);
            } else if (name == "rrc" && (args == 1 || args == 2)) {
                const auto [h, w] = parseSize(parts[1], item);
                t.randomResizedCrop(h, w, args == 2 ? parseFloats(parts[2], item).at(0) : 0.08);
            } else if (name == "trivial" && args == 0) {
                t.trivialAugment();
            } else if (name == "randaugment" && args <= 2) {
                t.randAugment(args >= 1 ? parseInt(parts[1], item) : 2, args == 2 ? parseInt(parts[2], item) : 9);
            } else if (name == "rotate" && args == 1) {
                t.rotate(parseFloats(parts[1], item).at(0));
            } else if (name == "affine" && args >= 1 && args <= 4) {
                const double translate = args >= 2 ? parseFloats(parts[2], item).at(0) : 0.0;
                std::vector<float> zoom{1.0f, 1.0f};
                if (args >= 3) zoom = parseFloats(parts[3], item);
                if (zoom.size() != 2) {
                    throw ModuleError("transform '" + item + "': the zoom range is LO/HI, got '" + parts[3] + "'");
                }
                t.affine(parseFloats(parts[1], item).at(0), translate, zoom[0], zoom[1],
                         args == 4 ? parseFloats(parts[4], item).at(0) : 0.0);
            } else if (name == "jitter" && args >= 1 && args <= 4) {
                std::vector<double> v(4, 0.0);
                for (size_t k = 0; k < args; ++k) v[k] = parseFloats(parts[k + 1], item).at(0);
                t.jitter(v[0], v[1], v[2], v[3]);
            } else if (name == "erase" && (args == 0 || args == 1 || args == 3)) {
                const double p = args >= 1 ? parseFloats(parts[1], item).at(0) : 0.5;
                if (args == 3) {
                    t.erase(p, parseFloats(parts[2], item).at(0), parseFloats(parts[3], item).at(0));
                } else {
                    t.erase(p);
                }
            } else if (name == "flip" && args <= 1) {
                t.flip(args == 1 ? parseFloats(parts[1], item).at(0) : 0.5);
            } else if (name == "normalize" && args == 1) {
                const std::string& set = parts[1];
                if (set == "cifar10") {
                    t.normalize({0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f});
                } else if (set == "cifar100") {
                    t.normalize({0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f});
                } else if (set == "imagenet") {
                    t.normalize({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f});
                } else if (set == "mnist") {
                    t.normalize({0.1307f}, {0.3081f});
                } else {
                    throw ModuleError("transform '" + item + "': unknown statistics '" + set + "'");
                }
            } else if (name == "normalize" && args == 2) {
                t.normalize(parseFloats(parts[1], item), parseFloats(parts[2], item));
            } else {
                throw ModuleError("transform '" + item + "' is not understood");
            }
        } catch (const ModuleError& e) {
            throw ModuleError(std::string(e.what()) + "; " + kSyntax);
        }
    }
    return t;
}

Image Transforms::apply(Image image, uint64_t seed, int64_t epoch, int64_t index, bool train) const {
    const uint64_t stream = streamOf(seed, epoch, index);
    uint64_t draw = 0;
    auto uniform = [&](uint64_t n) { return randomBits(stream, draw++) % n; };                     // in [0, n)
    auto unit = [&] { return static_cast<double>(randomBits(stream, draw++) >> 11) * 0x1.0p-53; }; // in [0, 1)
    for (const Step& s : steps_) {
        switch (s.kind) {
        case Kind::resize: {
            int64_t h = s.height, w = s.width;
            if (w == 0) std::tie(h, w) = shorterSideTo(image, s.height);
            if (h != image.height || w != image.width) image = resized(image, h, w);
            break;
        }
        case Kind::randomResizedCrop: {
            if (!train) {
                const auto [h, w] = shorterSideTo(image, std::max(s.height, s.width));
                if (h != image.height || w != image.width) image = resized(image, h, w);
                image = centre(image, s.height, s.width, sizeStr(s.height, s.width) + " centre crop");
                break;
            }
            // The window is drawn on the picture's full size, then taken from the pixels
            // there are (fewer after a scaled decode, or a decode of a window around it): the
            // same window for any decode.
            const auto [H, W] = fullSize(image);
            auto [top, left, h, w] = randomWindow(s.scale, stream, draw, H, W);
            if (H != image.height || W != image.width) { // to the decoded pixels' scale
                const int64_t wholeH = image.decodedHeight > 0 ? image.decodedHeight : image.height;
                const int64_t wholeW = image.decodedWidth > 0 ? image.decodedWidth : image.width;
                const double sy = static_cast<double>(wholeH) / static_cast<double>(H);
                const double sx = static_cast<double>(wholeW) / static_cast<double>(W);
                const int64_t y0 = std::llround(static_cast<double>(top) * sy);
                const int64_t x0 = std::llround(static_cast<double>(left) * sx);
                const int64_t y1 = std::max<int64_t>(y0 + 1, std::llround(static_cast<double>(top + h) * sy));
                const int64_t x1 = std::max<int64_t>(x0 + 1, std::llround(static_cast<double>(left + w) * sx));
                top = std::min(y0, wholeH - 1), left = std::min(x0, wholeW - 1);
                h = std::min(y1, wholeH) - top, w = std::min(x1, wholeW) - left;
                top -= image.windowTop, left -= image.windowLeft; // into the decoded window
                if (top < 0 || left < 0 || top + h > image.height || left + w > image.width) {
                    throw ShapeError("a random-resized crop's window (" + sizeStr(h, w) + " at " + std::to_string(top) +
                                     ", " + std::to_string(left) + ") lies outside the " + image.str() +
                                     " pixels decoded for it (decoded for another sample, seed or epoch)");
                }
            }
            if (h != image.height || w != image.width) image = cropped(image, top, left, h, w, 0);
            if (h != s.height || w != s.width) image = resized(image, s.height, s.width);
            image.fullHeight = image.fullWidth = 0; // the window is the picture now
            image.windowTop = image.windowLeft = image.decodedHeight = image.decodedWidth = 0;
            break;
        }
        case Kind::erase: {
            if (!train) break;
            // Drawn whether or not the box is made, so later steps see the same draws.
            const bool act = unit() < s.p;
            const int64_t H = image.height, W = image.width;
            const double area = static_cast<double>(H * W), lo = std::log(0.3), hi = std::log(3.3);
            for (int attempt = 0; attempt < 10; ++attempt) {
                const double target = area * (s.scale + (s.maxScale - s.scale) * unit());
                const double ratio = std::exp(lo + (hi - lo) * unit());
                const int64_t h = std::llround(std::sqrt(target * ratio)), w = std::llround(std::sqrt(target / ratio));
                const double u = unit(), v = unit();
                if (h < 1 || h >= H || w < 1 || w >= W) continue;
                if (!act) break;
                const auto top = static_cast<int64_t>(u * static_cast<double>(H - h + 1));
                const auto left = static_cast<int64_t>(v * static_cast<double>(W - w + 1));
                for (int64_t c = 0; c < image.channels; ++c) {
                    for (int64_t y = top; y < top + h; ++y) std::fill_n(&image.at(c, y, left), w, 0.0f);
                }
                break;
            }
            break;
        }
        case Kind::rotate: {
            if (!train) break;
            const double angle = s.degrees * (2.0 * unit() - 1.0);
            if (angle != 0.0) image = rotated(image, angle);
            break;
        }
        case Kind::trivialAugment: {
            if (!train) break;
            const std::string op = kAugmentOps[uniform(std::size(kAugmentOps))];
            const auto bin = static_cast<int64_t>(uniform(kAugmentBins));
            const bool negative = uniform(2) == 1;
            auto [magnitude, hasSign] = augmentMagnitude(true, op, bin, image.height, image.width);
            if (hasSign && negative) magnitude = -magnitude;
            if (op != "Identity") image = augmentOp(image, op, magnitude);
            break;
        }
        case Kind::randAugment: {
            if (!train) break;
            for (int64_t k = 0; k < s.ops; ++k) {
                const std::string op = kAugmentOps[uniform(std::size(kAugmentOps))];
                const bool negative = uniform(2) == 1;
                auto [magnitude, hasSign] = augmentMagnitude(false, op, s.magnitude, image.height, image.width);
                if (hasSign && negative) magnitude = -magnitude;
                if (op != "Identity") image = augmentOp(image, op, magnitude);
            }
            break;
        }
        case Kind::affine: {
            if (!train) break;
            // torchvision's order of draws: angle, shift across and down, zoom, shear.
            const double angle = s.degrees * (2.0 * unit() - 1.0);
            const double across = s.translate * static_cast<double>(image.width);
            const double down = s.translate * static_cast<double>(image.height);
            const double tx = std::round(across * (2.0 * unit() - 1.0)), ty = std::round(down * (2.0 * unit() - 1.0));
            const double zoom = s.scale + (s.maxScale - s.scale) * unit();
            const double shear = s.shear * (2.0 * unit() - 1.0);
            if (angle != 0.0 || tx != 0.0 || ty != 0.0 || zoom != 1.0 || shear != 0.0) {
                image = warped(image, angle, tx, ty, zoom, shear);
            }
            break;
        }
        case Kind::jitter: {
            if (!train) break;
            for (float v : image.pixels) {
                if (!(v >= 0.0f && v <= 1.0f)) {
                    throw ShapeError("jitter needs pixel values in [0, 1] (decoded images, uint8 data; put it before "
                                     "normalize), found " +
                                     numberStr(v));
                }
            }
            auto factor = [&](double v) {
                const double from = std::max(0.0, 1.0 - v);
                return static_cast<float>(from + (1.0 + v - from) * unit());
            };
            auto clamp01 = [](float v) { return std::min(1.0f, std::max(0.0f, v)); };
            const int64_t plane = image.height * image.width;
            const bool colour = image.channels == 3;
            auto grey = [&](int64_t i) { // torchvision's rgb_to_grayscale weights
                const float* p = image.pixels.data();
                return 0.2989f * p[i] + 0.587f * p[plane + i] + 0.114f * p[2 * plane + i];
            };
            if (s.brightness > 0) {
                const float f = factor(s.brightness);
                for (float& v : image.pixels) v = clamp01(v * f);
            }
            if (s.contrast > 0) {
                const float f = factor(s.contrast);
                double sum = 0;
                if (colour) {
                    for (int64_t i = 0; i < plane; ++i) sum += grey(i);
                } else {
                    for (float v : image.pixels) sum += v;
                }
                const auto mean = static_cast<float>(sum / static_cast<double>(colour ? plane : image.pixels.size()));
                for (float& v : image.pixels) v = clamp01(f * v + (1 - f) * mean);
            }
            if (s.saturation > 0) {
                const float f = factor(s.saturation);
                if (colour) {
                    for (int64_t i = 0; i < plane; ++i) {
                        const float g = grey(i);
                        for (int64_t c = 0; c < 3; ++c) {
                            float& v = image.pixels[static_cast<size_t>(c * plane + i)];
                            v = clamp01(f * v + (1 - f) * g);
                        }
                    }
                }
            }
            if (s.hue > 0) {
                const double shift = s.hue * (2.0 * unit() - 1.0);
                if (colour) image = hueShifted(image, shift);
            }
            break;
        }
        case Kind::randomCrop:
        case Kind::centerCrop: {
            const bool random = s.kind == Kind::randomCrop && train;
            const int64_t pad = random ? s.pad : 0;
            const int64_t room_h = image.height + 2 * pad - s.height, room_w = image.width + 2 * pad - s.width;
            if (room_h < 0 || room_w < 0) {
                throw ShapeError("a " + sizeStr(s.height, s.width) + " crop does not fit a " +
                                 std::to_string(image.height) + "x" + std::to_string(image.width) + " image" +
                                 (pad ? " padded by " + std::to_string(pad) : std::string()) +
                                 " (resize first: resize:S)");
            }
            // Drawn in training even when there is no room, so later steps see the same draws.
            const int64_t top = random ? static_cast<int64_t>(uniform(static_cast<uint64_t>(room_h) + 1)) : room_h / 2;
            const int64_t left = random ? static_cast<int64_t>(uniform(static_cast<uint64_t>(room_w) + 1)) : room_w / 2;
            // A window that is the whole unpadded image (a centre crop of its own size) leaves it.
            const bool whole = pad == 0 && s.height == image.height && s.width == image.width;
            if (!whole) image = cropped(image, top, left, s.height, s.width, pad);
            break;
        }
        case Kind::flip: {
            if (!train) break;
            const bool mirror = static_cast<double>(uniform(uint64_t{1} << 24)) < s.p * static_cast<double>(1 << 24);
            if (!mirror) break;
            for (int64_t c = 0; c < image.channels; ++c) {
                for (int64_t y = 0; y < image.height; ++y) {
                    float* row = &image.at(c, y, 0);
                    std::reverse(row, row + image.width);
                }
            }
            break;
        }
        case Kind::normalize: {
            const auto n = static_cast<int64_t>(s.mean.size());
            if (n != 1 && n != image.channels) {
                throw ShapeError("normalize:" + floatsStr(s.mean) + ":" + floatsStr(s.std) + " has " +
                                 std::to_string(n) + " values per statistic but the image has " +
                                 std::to_string(image.channels) + " channels");
            }
            const int64_t plane = image.height * image.width;
            for (int64_t c = 0; c < image.channels; ++c) {
                const float m = s.mean[static_cast<size_t>(n == 1 ? 0 : c)];
                const float inv = 1.0f / s.std[static_cast<size_t>(n == 1 ? 0 : c)];
                float* p = image.pixels.data() + c * plane;
                for (int64_t i = 0; i < plane; ++i) p[i] = (p[i] - m) * inv;
            }
            break;
        }
        }
    }
    return image;
}

std::string Transforms::str() const {
    std::string out;
    for (const Step& s : steps_) {
        if (!out.empty()) out += ",";
        switch (s.kind) {
        case Kind::resize:
            out += "resize:" +
                   (s.width ? std::to_string(s.height) + "x" + std::to_string(s.width) : std::to_string(s.height));
            break;
        case Kind::randomCrop:
            out += "crop:";
            out += sizeStr(s.height, s.width);
            if (s.pad) out.append(":").append(std::to_string(s.pad));
            break;
        case Kind::centerCrop: out += "center:" + sizeStr(s.height, s.width); break;
        case Kind::flip: {
            std::ostringstream p;
            p << s.p;
            out += s.p == 0.5 ? std::string("flip") : "flip:" + p.str();
            break;
        }
        case Kind::normalize: out += "normalize:" + floatsStr(s.mean) + ":" + floatsStr(s.std); break;
        case Kind::randomResizedCrop:
            out += "rrc:" + sizeStr(s.height, s.width);
            if (s.scale != 0.08) out += ":" + numberStr(s.scale);
            break;
        case Kind::rotate: out += "rotate:" + numberStr(s.degrees); break;
        case Kind::trivialAugment: out += "trivial"; break;
        case Kind::randAugment:
            out += "randaugment";
            if (s.ops != 2 || s.magnitude != 9) out += ":" + std::to_string(s.ops);
            if (s.magnitude != 9) out += ":" + std::to_string(s.magnitude);
            break;
        case Kind::affine:
            out += "affine:" + numberStr(s.degrees);
            if (s.translate != 0 || s.scale != 1 || s.maxScale != 1 || s.shear != 0)
                out += ":" + numberStr(s.translate);
            if (s.scale != 1 || s.maxScale != 1 || s.shear != 0) {
                out += ":" + numberStr(s.scale) + "/" + numberStr(s.maxScale);
            }
            if (s.shear != 0) out += ":" + numberStr(s.shear);
            break;
        case Kind::erase:
            out += "erase";
            if (s.p != 0.5 || s.scale != 0.02 || s.maxScale != 0.33) out += ":" + numberStr(s.p);
            if (s.scale != 0.02 || s.maxScale != 0.33) out += ":" + numberStr(s.scale) + ":" + numberStr(s.maxScale);
            break;
        case Kind::jitter:
            out += "jitter:" + numberStr(s.brightness);
            if (s.contrast != 0 || s.saturation != 0 || s.hue != 0) out += ":" + numberStr(s.contrast);
            if (s.saturation != 0 || s.hue != 0) out += ":" + numberStr(s.saturation);
            if (s.hue != 0) out += ":" + numberStr(s.hue);
            break;
        }
    }
    return out;
}

} // namespace tessera
