// The augmentations of Transforms: affine warps, TrivialAugment and RandAugment (their ops
// and magnitudes as torchvision's).
#include "data/Transform.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "backend/Random.h"
#include "data/TransformDetail.h"

namespace tessera {

using Kind = Transforms::Step::Kind;

namespace {

// torchvision's inverse affine matrix (its _get_inverse_affine_matrix), [m0 m1 m2; m3 m4 m5],
// taking an output pixel's centre, relative to the image's centre, back onto the input: the
// inverse of C T R S Sh C^-1 for a centre (cx, cy) and a shift (tx, ty) relative to the
// image's centre, `angle` clockwise and the shears in degrees.
std::array<double, 6> inverseAffine(double cx, double cy, double angle, double tx, double ty, double scale,
                                    double shearX, double shearY) {
    constexpr double kRadian = 3.14159265358979323846 / 180.0;
    const double rot = angle * kRadian, sx = shearX * kRadian, sy = shearY * kRadian;
    const double a = std::cos(rot - sy) / std::cos(sy);
    const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
    const double c = std::sin(rot - sy) / std::cos(sy);
    const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
    std::array<double, 6> m{d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0};
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty) + cx;
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty) + cy;
    return m;
}

// `in` sampled at the output pixels' centres mapped through `m` (inverseAffine), bilinear or
// the nearest pixel (halves to even, as grid_sample), zeros outside.
Image sampleAffine(const Image& in, const std::array<double, 6>& m, bool nearest) {
    Image out(in.channels, in.height, in.width);
    const double cx = static_cast<double>(in.width) / 2.0, cy = static_cast<double>(in.height) / 2.0;
    auto at = [&](int64_t ch, int64_t y, int64_t x) {
        return y >= 0 && y < in.height && x >= 0 && x < in.width ? in.at(ch, y, x) : 0.0f;
    };
    for (int64_t y = 0; y < in.height; ++y) {
        for (int64_t x = 0; x < in.width; ++x) {
            const double dx = static_cast<double>(x) + 0.5 - cx, dy = static_cast<double>(y) + 0.5 - cy;
            const double sx = cx + m[0] * dx + m[1] * dy + m[2] - 0.5, sy = cy + m[3] * dx + m[4] * dy + m[5] - 0.5;
            if (nearest) {
                const double nx = std::nearbyint(sx), ny = std::nearbyint(sy);
                if (!(nx >= 0.0 && ny >= 0.0 && nx < static_cast<double>(in.width) &&
                      ny < static_cast<double>(in.height))) {
                    continue;
                }
                for (int64_t ch = 0; ch < in.channels; ++ch) {
                    out.at(ch, y, x) = in.at(ch, static_cast<int64_t>(ny), static_cast<int64_t>(nx));
                }
                continue;
            }
            const double fx0 = std::floor(sx), fy0 = std::floor(sy);
            if (!(fx0 >= -1.0 && fy0 >= -1.0 && fx0 < static_cast<double>(in.width) &&
                  fy0 < static_cast<double>(in.height))) {
                continue; // wholly outside (or not a number, for a degenerate zoom)
            }
            const auto x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
            const auto fx = static_cast<float>(sx - fx0), fy = static_cast<float>(sy - fy0);
            for (int64_t ch = 0; ch < in.channels; ++ch) {
                const float top = at(ch, y0, x0) * (1 - fx) + at(ch, y0, x0 + 1) * fx;
                const float bottom = at(ch, y0 + 1, x0) * (1 - fx) + at(ch, y0 + 1, x0 + 1) * fx;
                out.at(ch, y, x) = top * (1 - fy) + bottom * fy;
            }
        }
    }
    if (!nearest) clampToInputRange(out, in, 0.0f); // 0 fills what falls outside
    return out;
}

} // namespace

// Bin k of 31 of `op`'s magnitudes in torchvision's TrivialAugmentWide (`wide`) or
// RandAugment table for an image of height x width, and whether it takes a sign.
std::pair<double, bool> augmentMagnitude(bool wide, const std::string& op, int64_t k, int64_t height, int64_t width) {
    const double t = static_cast<double>(k) / (kAugmentBins - 1);
    if (op == "ShearX" || op == "ShearY") return {(wide ? 0.99 : 0.3) * t, true};
    if (op == "TranslateX" || op == "TranslateY") {
        const double side = static_cast<double>(op == "TranslateX" ? width : height);
        return {(wide ? 32.0 : 150.0 / 331.0 * side) * t, true};
    }
    if (op == "Rotate") return {(wide ? 135.0 : 30.0) * t, true};
    if (op == "Brightness" || op == "Color" || op == "Contrast" || op == "Sharpness")
        return {(wide ? 0.99 : 0.9) * t, true};
    if (op == "Posterize") return {8.0 - std::nearbyint(static_cast<double>(k) / (wide ? 5.0 : 7.5)), false};
    if (op == "Solarize") return {255.0 * (1.0 - t), false};
    return {0.0, false};
}

namespace {

// Throws ModuleError naming `caller` and the operations there are, unless `op` is one.
void requireAugmentOp(const char* caller, const std::string& op) {
    if (std::find(std::begin(kAugmentOps), std::end(kAugmentOps), op) != std::end(kAugmentOps)) return;
    std::string names;
    for (const char* n : kAugmentOps) names += std::string(names.empty() ? "" : ", ") + n;
    throw ModuleError(std::string("Transforms::") + caller + ": unknown operation '" + op + "' (expected one of " +
                      names + ")");
}

} // namespace

Image Transforms::warped(const Image& in, double degrees, double tx, double ty, double scale, double shear) {
    // torchvision's angle is clockwise: ours negated.
    return sampleAffine(in, inverseAffine(0.0, 0.0, -degrees, tx, ty, scale, shear, 0.0), false);
}

Transforms& Transforms::trivialAugment() {
    steps_.push_back(step(Kind::trivialAugment));
    return *this;
}

Transforms& Transforms::randAugment(int64_t ops, int64_t magnitude) {
    if (ops < 1 || ops > 16)
        throw ModuleError("Transforms::randAugment: ops must lie in [1, 16], got " + std::to_string(ops));
    if (magnitude < 0 || magnitude >= kAugmentBins) {
        throw ModuleError("Transforms::randAugment: magnitude must lie in [0, 30], got " + std::to_string(magnitude));
    }
    Step r = step(Kind::randAugment);
    r.ops = ops, r.magnitude = magnitude;
    steps_.push_back(r);
    return *this;
}

std::pair<std::vector<double>, bool> Transforms::augmentMagnitudes(const std::string& policy, const std::string& op,
                                                                   int64_t height, int64_t width) {
    if (policy != "trivial" && policy != "randaugment") {
        throw ModuleError("Transforms::augmentMagnitudes: policy must be trivial or randaugment, got '" + policy + "'");
    }
    requireAugmentOp("augmentMagnitudes", op);
    std::vector<double> out;
    bool hasSign = false;
    for (int64_t k = 0; k < kAugmentBins; ++k) {
        const auto [m, sign] = augmentMagnitude(policy == "trivial", op, k, height, width);
        out.push_back(m);
        hasSign = sign;
    }
    return {out, hasSign};
}

Image Transforms::augmentOp(const Image& in, const std::string& op, double magnitude) {
    requireAugmentOp("augmentOp", op);
    if (in.channels != 1 && in.channels != 3) {
        throw ShapeError("augmentation " + op + " needs 1 or 3 channels, got " + in.str());
    }
    // 8-bit levels, as torchvision's uint8 images hold them; arithmetic in float32 as there,
    // results cut to integers as its casts to uint8 cut them.
    Image q = in;
    for (float& v : q.pixels) {
        if (!(v >= 0.0f && v <= 1.0f)) {
            throw ShapeError("augmentation " + op +
                             " needs pixel values in [0, 1] (decoded images, uint8 data; put it before normalize), "
                             "found " +
                             numberStr(v));
        }
        v = std::nearbyint(v * 255.0f);
    }
    const int64_t H = q.height, W = q.width, plane = H * W, C = q.channels;
    if (plane == 0) return q; // no pixels: nothing to change
    auto cut = [](float v) { return std::trunc(std::min(255.0f, std::max(0.0f, v))); };
    // torchvision's _blend of q with `other` (per pixel, or one value) at ratio 1 + magnitude.
    auto blend = [&](const std::function<float(int64_t c, int64_t i)>& other) {
        const double ratio = 1.0 + magnitude;
        const auto r1 = static_cast<float>(ratio), r2 = static_cast<float>(1.0 - ratio);
        for (int64_t c = 0; c < C; ++c) {
            for (int64_t i = 0; i < plane; ++i) {
                float& v = q.pixels[static_cast<size_t>(c * plane + i)];
                const float a = r1 * v, b = r2 * other(c, i);
                v = cut(a + b);
            }
        }
    };
    auto grey = [&](int64_t i) { // rgb_to_grayscale on uint8: float32 weights, cut to an integer
        const float* p = q.pixels.data();
        const float a = 0.2989f * p[i], b = 0.587f * p[plane + i], c = 0.114f * p[2 * plane + i];
        return std::trunc((a + b) + c);
    };
    constexpr double kDegrees = 180.0 / 3.14159265358979323846;
    const double cx = -static_cast<double>(W) / 2.0, cy = -static_cast<double>(H) / 2.0; // the top-left corner
    if (op == "ShearX") {
        q = sampleAffine(q, inverseAffine(cx, cy, 0.0, 0.0, 0.0, 1.0, std::atan(magnitude) * kDegrees, 0.0), true);
    } else if (op == "ShearY") {
        q = sampleAffine(q, inverseAffine(cx, cy, 0.0, 0.0, 0.0, 1.0, 0.0, std::atan(magnitude) * kDegrees), true);
    } else if (op == "TranslateX" || op == "TranslateY") {
        const double by = std::trunc(magnitude); // int(magnitude)
        q = sampleAffine(
            q,
            inverseAffine(0.0, 0.0, 0.0, op == "TranslateX" ? by : 0.0, op == "TranslateY" ? by : 0.0, 1.0, 0.0, 0.0),
            true);
    } else if (op == "Rotate") { // F.rotate: counter-clockwise, as its matrix takes -angle
        q = sampleAffine(q, inverseAffine(0.0, 0.0, -magnitude, 0.0, 0.0, 1.0, 0.0, 0.0), true);
    } else if (op == "Brightness") {
        blend([](int64_t, int64_t) { return 0.0f; });
    } else if (op == "Color") {
        if (C == 3) {
            std::vector<float> g(static_cast<size_t>(plane));
            for (int64_t i = 0; i < plane; ++i) g[static_cast<size_t>(i)] = grey(i);
            blend([&](int64_t, int64_t i) { return g[static_cast<size_t>(i)]; });
        }
    } else if (op == "Contrast") {
        double sum = 0.0; // whole numbers: exact
        if (C == 3) {
            for (int64_t i = 0; i < plane; ++i) sum += grey(i);
        } else {
            for (float v : q.pixels) sum += v;
        }
        const float mean = static_cast<float>(sum) / static_cast<float>(C == 3 ? plane : C * plane);
        blend([&](int64_t, int64_t) { return mean; });
    } else if (op == "Sharpness") {
        if (H > 2 && W > 2) {
            // The interior blurred by [[1 1 1] [1 5 1] [1 1 1]] / 13 and rounded; the border kept.
            Image blurred = q;
            for (int64_t c = 0; c < C; ++c) {
                for (int64_t y = 1; y + 1 < H; ++y) {
                    for (int64_t x = 1; x + 1 < W; ++x) {
                        double sum = 4.0 * q.at(c, y, x);
                        for (int64_t dy = -1; dy <= 1; ++dy) {
                            for (int64_t dx = -1; dx <= 1; ++dx) sum += q.at(c, y + dy, x + dx);
                        }
                        blurred.at(c, y, x) = static_cast<float>(std::nearbyint(sum / 13.0));
                    }
                }
            }
            blend([&](int64_t c, int64_t i) { return blurred.pixels[static_cast<size_t>(c * plane + i)]; });
        }
    } else if (op == "Posterize") {
        if (!(magnitude >= 0.0 && magnitude < 9.0)) {
            throw ModuleError("augmentation Posterize: bits must lie in [0, 8], got " + numberStr(magnitude));
        }
        const auto bits = static_cast<int>(magnitude);
        const auto mask = static_cast<uint8_t>(256 - (1 << (8 - bits)));
        for (float& v : q.pixels) v = static_cast<float>(static_cast<uint8_t>(v) & mask);
    } else if (op == "Solarize") {
        for (float& v : q.pixels) v = v >= magnitude ? 255.0f - v : v;
    } else if (op == "AutoContrast") {
        for (int64_t c = 0; c < C; ++c) {
            float* p = q.pixels.data() + c * plane;
            float lo = *std::min_element(p, p + plane), hi = *std::max_element(p, p + plane);
            float scale = (1.0f / (hi - lo)) * 255.0f; // as torch's 255 / tensor: a reciprocal, then a product
            if (hi == lo) lo = 0.0f, scale = 1.0f;
            for (int64_t i = 0; i < plane; ++i) p[i] = cut((p[i] - lo) * scale);
        }
    } else if (op == "Equalize") { // torchvision's _scale_channel, per channel
        for (int64_t c = 0; c < C; ++c) {
            float* p = q.pixels.data() + c * plane;
            std::array<int64_t, 256> hist{};
            for (int64_t i = 0; i < plane; ++i) ++hist[static_cast<size_t>(p[i])];
            int64_t last = 255;
            while (hist[static_cast<size_t>(last)] == 0) --last; // the last level present
            int64_t rest = 0;
            for (int64_t v = 0; v < last; ++v) rest += hist[static_cast<size_t>(v)];
            const int64_t step = rest / 255;
            if (step == 0) continue;
            std::array<float, 256> lut{};
            int64_t cum = 0;
            for (size_t v = 0; v < 256; ++v) { // lut[v] from the counts below v
                lut[v] = static_cast<float>(std::min<int64_t>(255, (cum + step / 2) / step));
                cum += hist[v];
            }
            for (int64_t i = 0; i < plane; ++i) p[i] = lut[static_cast<size_t>(p[i])];
        }
    }
    for (float& v : q.pixels) v /= 255.0f;
    return q;
}

} // namespace tessera
