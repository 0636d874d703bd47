#include "data/Transform.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "backend/Errors.h"
#include "backend/Random.h"

namespace tessera {

namespace {

using Kind = Transforms::Step::Kind;

// Salt of the transforms' random stream, so it is not the batch order's (same seed).
constexpr uint64_t kSalt = 0x5DA7A0A06E1A7E5Bull;

void checkSize(const char* what, int64_t h, int64_t w) {
    if (h < 1 || w < 0 || h > kMaxImageSide || w > kMaxImageSide) {
        throw ModuleError(std::string("Transforms::") + what + ": sizes must lie in [1, " +
                          std::to_string(kMaxImageSide) + "], got " + std::to_string(h) + "x" + std::to_string(w));
    }
}

Image resized(const Image& in, int64_t h, int64_t w) {
    Image out(in.channels, h, w);
    const float sy = static_cast<float>(in.height) / static_cast<float>(h);
    const float sx = static_cast<float>(in.width) / static_cast<float>(w);
    // Source rows/columns and weights once per output row/column.
    auto taps = [](int64_t n, int64_t inN, float scale) {
        std::vector<std::pair<int64_t, float>> t(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            const float src = std::max(0.0f, (static_cast<float>(i) + 0.5f) * scale - 0.5f);
            const auto i0 = std::min(static_cast<int64_t>(src), inN - 1);
            t[static_cast<size_t>(i)] = {i0, i0 + 1 < inN ? src - static_cast<float>(i0) : 0.0f};
        }
        return t;
    };
    const auto ty = taps(h, in.height, sy), tx = taps(w, in.width, sx);
    for (int64_t c = 0; c < in.channels; ++c) {
        for (int64_t y = 0; y < h; ++y) {
            const auto [y0, fy] = ty[static_cast<size_t>(y)];
            const int64_t y1 = std::min(y0 + 1, in.height - 1);
            for (int64_t x = 0; x < w; ++x) {
                const auto [x0, fx] = tx[static_cast<size_t>(x)];
                const int64_t x1 = std::min(x0 + 1, in.width - 1);
                const float top = in.at(c, y0, x0) * (1 - fx) + in.at(c, y0, x1) * fx;
                const float bottom = in.at(c, y1, x0) * (1 - fx) + in.at(c, y1, x1) * fx;
                out.at(c, y, x) = top * (1 - fy) + bottom * fy;
            }
        }
    }
    return out;
}

// The h x w window at (top, left) of `in` padded by `pad` zeros on each side.
Image cropped(const Image& in, int64_t top, int64_t left, int64_t h, int64_t w, int64_t pad) {
    Image out(in.channels, h, w);
    for (int64_t c = 0; c < in.channels; ++c) {
        for (int64_t y = 0; y < h; ++y) {
            const int64_t sy = top + y - pad;
            if (sy < 0 || sy >= in.height) continue;
            for (int64_t x = 0; x < w; ++x) {
                const int64_t sx = left + x - pad;
                if (sx >= 0 && sx < in.width) out.at(c, y, x) = in.at(c, sy, sx);
            }
        }
    }
    return out;
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

const char* kSyntax = "expected a comma-separated list of resize:S | resize:HxW, crop:S[:PAD] | crop:HxW[:PAD], "
                      "center:S | center:HxW, flip[:P], normalize:M1/M2/..:S1/S2/.. | normalize:cifar10 | "
                      "cifar100 | imagenet | mnist";

std::string sizeStr(int64_t h, int64_t w) {
    return h == w ? std::to_string(h) : std::to_string(h) + "x" + std::to_string(w);
}

std::string floatsStr(const std::vector<float>& v) {
    std::ostringstream s;
    for (size_t i = 0; i < v.size(); ++i) s << (i ? "/" : "") << v[i];
    return s.str();
}

Transforms::Step step(Kind kind, int64_t height = 0, int64_t width = 0, int64_t pad = 0) {
    Transforms::Step s{};
    s.kind = kind;
    s.height = height, s.width = width, s.pad = pad;
    return s;
}

} // namespace

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
    const uint64_t stream =
        randomBits(randomBits(seed ^ kSalt, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(index));
    uint64_t draw = 0;
    auto uniform = [&](uint64_t n) { return randomBits(stream, draw++) % n; }; // in [0, n)
    for (const Step& s : steps_) {
        switch (s.kind) {
        case Kind::resize: {
            int64_t h = s.height, w = s.width;
            if (w == 0) { // shorter side to s.height
                const bool tall = image.height >= image.width;
                const double ratio = static_cast<double>(tall ? image.height : image.width) /
                                     static_cast<double>(tall ? image.width : image.height);
                const auto longer = std::max<int64_t>(1, std::llround(static_cast<double>(s.height) * ratio));
                h = tall ? longer : s.height;
                w = tall ? s.height : longer;
            }
            if (h != image.height || w != image.width) image = resized(image, h, w);
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
        }
    }
    return out;
}

} // namespace tessera
