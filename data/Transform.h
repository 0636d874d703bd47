#pragma once
/// \file Per-sample image transforms (resize, crops, flips, normalisation), seeded so that
/// a sample's result depends only on (seed, epoch, index): the same with any number of
/// loader workers, and the same again when training resumes.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/Image.h"

namespace tessera {

/// An ordered list of steps applied to each image. Random steps (`randomCrop`,
/// `randomResizedCrop`, `flip`, `rotate`, `affine`, `jitter`, `erase`, `trivialAugment`,
/// `randAugment`)
/// act only in training; in evaluation a random crop becomes a centre crop of the same size
/// (no padding), a random-resized crop a resize of the shorter side and a centre crop, and
/// the others do nothing, so the test set sees the same geometry.
class Transforms {
public:
    struct Step {
        enum class Kind {
            resize,
            randomCrop,
            centerCrop,
            flip,
            normalize,
            randomResizedCrop,
            rotate,
            jitter,
            erase,
            affine,
            trivialAugment,
            randAugment
        } kind;
        int64_t height = 0, width = 0; ///< resize (width 0: shorter side to height), crops
        int64_t pad = 0;               ///< randomCrop: zero padding on every side first
        double p = 0.5;                ///< flip, erase: probability
        std::vector<float> mean, std;  ///< normalize: one value per channel, or one for all
        double scale = 0.08; ///< randomResizedCrop: the least area fraction; erase: the least; affine: the least zoom
        double maxScale = 0.33; ///< erase: the largest area fraction; affine: the largest zoom
        double degrees = 0;     ///< rotate, affine: the largest angle either way
        double translate = 0;   ///< affine: the largest shift either way, a fraction of the width (height)
        double shear = 0;       ///< affine: the largest x-shear either way, in degrees
        int64_t ops = 2;        ///< randAugment: operations per image
        int64_t magnitude = 9;  ///< randAugment: the magnitude bin, of 31
        double brightness = 0, contrast = 0, saturation = 0, hue = 0; ///< jitter: the largest change of each
    };

    /// Bilinear (half-pixel centres), antialiased along an axis it shrinks (the triangle
    /// filter widened to the scale, as PIL and torchvision's antialias=True). `width` 0: the
    /// shorter side becomes `height`, the other keeps the aspect ratio (rounded); else
    /// exactly height x width.
    Transforms& resize(int64_t height, int64_t width = 0);
    /// Pads by `pad` zeros on each side, then cuts a height x width window at a random place.
    Transforms& randomCrop(int64_t height, int64_t width, int64_t pad = 0);
    Transforms& centerCrop(int64_t height, int64_t width);
    /// Mirrors left-right with probability p.
    Transforms& flip(double p = 0.5);
    /// (x - mean[c]) / std[c] per channel.
    Transforms& normalize(std::vector<float> mean, std::vector<float> std);
    /// torchvision's RandomResizedCrop (Inception's): a window of a random area in
    /// [scale, 1] of the image's and an aspect ratio log-uniform in [3/4, 4/3] (10 tries;
    /// then the centre window nearest the allowed ratios), resized bilinearly to height x
    /// width. Evaluation: the shorter side resized to max(height, width), then a centre crop.
    Transforms& randomResizedCrop(int64_t height, int64_t width, double scale = 0.08);
    /// A rotation by an angle uniform in [-degrees, degrees] (counter-clockwise positive)
    /// about the image's centre, bilinear, the corners filled with zeros; same size.
    Transforms& rotate(double degrees);
    /// torchvision's RandomAffine: about the image's centre, a rotation by an angle uniform in
    /// [-degrees, degrees] (counter-clockwise positive), a zoom uniform in [minScale,
    /// maxScale] and an x-shear uniform in [-shear, shear] degrees, then a shift of a whole
    /// number of pixels, up to `translate` times the width across and the height down;
    /// bilinear, zeros outside, same size.
    Transforms& affine(double degrees, double translate = 0, double minScale = 1, double maxScale = 1,
                       double shear = 0);
    /// torchvision's ColorJitter in a fixed order: brightness (x f), contrast (blend with the
    /// mean grey level) and saturation (blend with each pixel's grey; colour images only),
    /// each factor uniform in [max(0, 1 - v), 1 + v] for its value v (0: left out), the
    /// result clamped to [0, 1]; then hue (colour images): every pixel's hue turned by a
    /// fraction of the colour circle uniform in [-hue, hue], hue in [0, 0.5]. For pixels in
    /// [0, 1] (decoded images, uint8 data): before normalize; other values are a ShapeError.
    Transforms& jitter(double brightness, double contrast = 0, double saturation = 0, double hue = 0);
    /// torchvision's RandomErasing (cutout): with probability p, a box of a random area in
    /// [minScale, maxScale] of the image's and an aspect ratio log-uniform in [0.3, 3.3] (10
    /// tries to fit, else none) is set to zero in every channel, at a random place. Usually
    /// after normalize, where zero is the mean.
    Transforms& erase(double p = 0.5, double minScale = 0.02, double maxScale = 0.33);
    /// torchvision's TrivialAugmentWide: one of 14 operations drawn uniformly (Identity,
    /// ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, Contrast,
    /// Sharpness, Posterize, Solarize, AutoContrast, Equalize), at one of 31 magnitudes
    /// drawn uniformly from its wide range, of either sign where it has one; each applied
    /// as augmentOp applies it. For pixels in [0, 1]: before normalize.
    Transforms& trivialAugment();
    /// torchvision's RandAugment: `ops` operations in turn, each drawn uniformly from the
    /// same 14, at bin `magnitude` (0..30) of RandAugment's narrower ranges (shifts a
    /// fraction of the image's size), of either sign where it has one.
    Transforms& randAugment(int64_t ops = 2, int64_t magnitude = 9);
    /// The 31 magnitudes `op` takes in the `policy` ("trivial": TrivialAugmentWide, or
    /// "randaugment") for an image of height x width, and whether it takes a sign.
    static std::pair<std::vector<double>, bool> augmentMagnitudes(const std::string& policy, const std::string& op,
                                                                  int64_t height, int64_t width);
    /// One operation of torchvision's automatic augmentations (its `_apply_op`), by the name
    /// it has there, at `magnitude`, on `in` rounded to 8-bit levels as torchvision applies
    /// them to uint8 images (geometric ones sampling the nearest pixel, zeros outside);
    /// the result is on those levels too. Values outside [0, 1] or an unknown name: ShapeError
    /// or ModuleError.
    static Image augmentOp(const Image& in, const std::string& op, double magnitude);
    /// `image` (3 channels, values in [0, 1]) with every pixel's hue turned by `shift`, a
    /// fraction of the colour circle (HSV; saturation and value kept): the step hue jitter takes.
    static Image hueShifted(const Image& image, double shift);

    /// Parses a comma-separated list, e.g. "resize:36,crop:32:4,flip,normalize:cifar10":
    ///   resize:S | resize:HxW      shorter side to S, or exactly H x W
    ///   crop:S[:P] | crop:HxW[:P]  random crop (after P pixels of zero padding)
    ///   center:S | center:HxW      centre crop
    ///   flip[:P]                   horizontal flip with probability P (0.5)
    ///   rrc:S[:MIN] | rrc:HxW[:MIN] random-resized crop of area fraction [MIN (0.08), 1]
    ///   rotate:DEG                  rotation by up to DEG degrees either way
    ///   affine:DEG[:T[:LO/HI[:SH]]] rotation, shift by up to T of the size, zoom in [LO, HI], x-shear up to SH degrees
    ///   jitter:B[:C[:S[:H]]]        brightness, contrast, saturation and hue jitter
    ///   erase[:P[:MIN:MAX]]         random erasing with probability P (0.5) of [MIN, MAX] (0.02, 0.33)
    ///   trivial                     TrivialAugmentWide
    ///   randaugment[:N[:M]]         RandAugment, N operations (2) at magnitude M of 0..30 (9)
    ///   normalize:M1/M2/M3:S1/S2/S3, or normalize:cifar10 | cifar100 | imagenet | mnist
    /// The empty string is no step. A bad list is a ModuleError naming the item that is
    /// wrong and showing what the items look like.
    static Transforms parse(const std::string& spec);

    /// `image` after every step. Random steps draw from (seed, epoch, index) only. A crop
    /// larger than the (padded) image, or a normalisation whose channel count differs from
    /// the image's, is a ShapeError.
    Image apply(Image image, uint64_t seed, int64_t epoch, int64_t index, bool train) const;

    /// `in` rotated by `degrees` (counter-clockwise) about its centre, bilinear, zeros
    /// outside: the geometry `rotate` applies.
    static Image rotated(const Image& in, double degrees);
    /// `in` warped about its centre as torchvision's `affine(img, angle=-degrees,
    /// translate=[tx, ty], scale=scale, shear=[shear, 0])` warps a tensor: rotated by
    /// `degrees` (counter-clockwise), zoomed by `scale`, x-sheared by `shear` degrees and
    /// shifted by (tx, ty) pixels (right, down); bilinear, zeros outside: the geometry
    /// `affine` applies.
    static Image warped(const Image& in, double degrees, double tx = 0, double ty = 0, double scale = 1,
                        double shear = 0);

    /// How far an image may be shrunk as it is decoded without changing what the first
    /// step needs: a resize that shrinks it (to the size asked for), or a random-resized
    /// crop (in training: its smallest possible window kept at least the crop's size; in
    /// evaluation: the shorter side at least the crop's larger side). Empty when the first
    /// step is another.
    DecodeScale decodeScale(bool train) const;
    /// The same for sample `index` of `epoch` (apply()'s seed, epoch and index): in training,
    /// a random-resized crop's own window, which alone is decoded, kept at least the crop's
    /// size (most windows are larger than the smallest, so they decode smaller). The image
    /// decoded by it is for apply() with the same seed, epoch and index only.
    DecodeScale decodeScale(bool train, uint64_t seed, int64_t epoch, int64_t index) const;

    const std::vector<Step>& steps() const { return steps_; }
    bool empty() const { return steps_.empty(); }
    /// The list in parse()'s syntax ("" when empty).
    std::string str() const;

private:
    std::vector<Step> steps_;
};

} // namespace tessera
