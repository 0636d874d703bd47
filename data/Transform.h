#pragma once
/// \file Per-sample image transforms (resize, crops, flips, normalisation), seeded so that
/// a sample's result depends only on (seed, epoch, index): the same with any number of
/// loader workers, and the same again when training resumes.

#include <cstdint>
#include <string>
#include <vector>

#include "data/Image.h"

namespace tessera {

/// An ordered list of steps applied to each image. Random steps (`randomCrop`, `flip`) act
/// only in training; in evaluation a random crop becomes a centre crop of the same size
/// (no padding) and a flip does nothing, so the test set sees the same geometry.
class Transforms {
public:
    struct Step {
        enum class Kind { resize, randomCrop, centerCrop, flip, normalize } kind;
        int64_t height = 0, width = 0; ///< resize (width 0: shorter side to height), crops
        int64_t pad = 0;               ///< randomCrop: zero padding on every side first
        double p = 0.5;                ///< flip: probability
        std::vector<float> mean, std;  ///< normalize: one value per channel, or one for all
    };

    /// Bilinear (half-pixel centres). `width` 0: the shorter side becomes `height`, the
    /// other keeps the aspect ratio (rounded); else exactly height x width.
    Transforms& resize(int64_t height, int64_t width = 0);
    /// Pads by `pad` zeros on each side, then cuts a height x width window at a random place.
    Transforms& randomCrop(int64_t height, int64_t width, int64_t pad = 0);
    Transforms& centerCrop(int64_t height, int64_t width);
    /// Mirrors left-right with probability p.
    Transforms& flip(double p = 0.5);
    /// (x - mean[c]) / std[c] per channel.
    Transforms& normalize(std::vector<float> mean, std::vector<float> std);

    /// Parses a comma-separated list, e.g. "resize:36,crop:32:4,flip,normalize:cifar10":
    ///   resize:S | resize:HxW      shorter side to S, or exactly H x W
    ///   crop:S[:P] | crop:HxW[:P]  random crop (after P pixels of zero padding)
    ///   center:S | center:HxW      centre crop
    ///   flip[:P]                   horizontal flip with probability P (0.5)
    ///   normalize:M1/M2/M3:S1/S2/S3, or normalize:cifar10 | cifar100 | imagenet | mnist
    /// The empty string is no step. A bad list is a ModuleError naming the item that is
    /// wrong and showing what the items look like.
    static Transforms parse(const std::string& spec);

    /// `image` after every step. Random steps draw from (seed, epoch, index) only. A crop
    /// larger than the (padded) image, or a normalisation whose channel count differs from
    /// the image's, is a ShapeError.
    Image apply(Image image, uint64_t seed, int64_t epoch, int64_t index, bool train) const;

    const std::vector<Step>& steps() const { return steps_; }
    bool empty() const { return steps_.empty(); }
    /// The list in parse()'s syntax ("" when empty).
    std::string str() const;

private:
    std::vector<Step> steps_;
};

} // namespace tessera
