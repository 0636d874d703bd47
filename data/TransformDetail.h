#pragma once
/// \file What data/Transform.cpp and data/Augment.cpp share. Private to data/.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "data/Transform.h"

namespace tessera {

/// Keeps each channel of `out` within the range of `in`'s channel (widened to take `fill`).
void clampToInputRange(Image& out, const Image& in, std::optional<float> fill = std::nullopt);
/// `v` as a stream writes it (six significant digits), for specs and messages.
std::string numberStr(double v);
/// The operations TrivialAugmentWide draws from, in torchvision's order, and their magnitude
/// at bin k of 31 (before a sign).
inline constexpr const char* kAugmentOps[] = {"Identity",  "ShearX",     "ShearY",       "TranslateX", "TranslateY",
                                              "Rotate",    "Brightness", "Color",        "Contrast",   "Sharpness",
                                              "Posterize", "Solarize",   "AutoContrast", "Equalize"};
inline constexpr int kAugmentBins = 31;

/// Bin k of 31 of `op`'s magnitudes in torchvision's TrivialAugmentWide (`wide`) or
/// RandAugment table for an image of height x width, and whether it takes a sign.
std::pair<double, bool> augmentMagnitude(bool wide, const std::string& op, int64_t k, int64_t height, int64_t width);
/// A step of `kind` with these sizes.
Transforms::Step step(Transforms::Step::Kind kind, int64_t height = 0, int64_t width = 0, int64_t pad = 0);

} // namespace tessera
