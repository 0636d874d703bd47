#pragma once
/// \file Images in memory (float channels in [0, 1]), and JPEG and PNG files read and
/// written through libjpeg-turbo and libpng.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera {

/// One image: `channels` planes of `height` x `width` float values, plane after plane
/// (CHW), 0 black and 1 white.
struct Image {
    int64_t channels = 0, height = 0, width = 0;
    std::vector<float> pixels; ///< channels * height * width values, CHW
    /// The picture's size before a scaled decode shrank it (0: height and width): resizes
    /// keep its aspect ratio, random-resized crops draw their windows on it.
    int64_t fullHeight = 0, fullWidth = 0;
    /// After a decode of a window (DecodePlan::height > 0): the pixels are rows [windowTop,
    /// windowTop + height) and columns [windowLeft, windowLeft + width) of the picture as
    /// decoded whole at the same scale, which would be decodedHeight x decodedWidth (0:
    /// height and width, the whole picture).
    int64_t windowTop = 0, windowLeft = 0, decodedHeight = 0, decodedWidth = 0;

    Image() = default;
    Image(int64_t c, int64_t h, int64_t w) : channels(c), height(h), width(w), pixels(size_t(c * h * w), 0.0f) {}
    float& at(int64_t c, int64_t y, int64_t x) { return pixels[size_t((c * height + y) * width + x)]; }
    float at(int64_t c, int64_t y, int64_t x) const { return pixels[size_t((c * height + y) * width + x)]; }
    /// "CxHxW", for messages.
    std::string str() const;
};

/// The largest side a decoded image may have, and the most pixels (8192 x 8192); a bigger
/// header is refused rather than allocated (a small file can declare a huge image).
inline constexpr int64_t kMaxImageSide = 1 << 15;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

/// What a decoder may leave out of a picture (see DecodeScale).
struct DecodePlan {
    /// The least scale the decoded picture (or window) must keep (at 1 or more: none). A JPEG
    /// is then decoded at M/8 of its size, M the least of 1..8 with M/8 at least that
    /// (libjpeg's DCT scaling: fewer coefficients read back, several times faster on large
    /// photos).
    double least = 1.0;
    /// The window of the picture's pixels that is needed (height 0: all of them): a JPEG
    /// decodes the rows and the columns (whole blocks, and some pixels more on each side so
    /// that those in the window are the whole decode's) that hold it, and stops below it.
    int64_t top = 0, left = 0, height = 0, width = 0;
};

/// How far a decoder may shrink and cut an image whose header says height x width (when
/// empty: none); other formats than JPEG ignore it. It must not throw.
using DecodeScale = std::function<DecodePlan(int64_t height, int64_t width)>;

/// Decodes a JPEG or PNG file (told apart by its first bytes, not its name) into
/// `channels` channels: 1 (grayscale: colour is converted with the ITU-R 601 luma
/// weights) or 3 (RGB: grayscale is repeated). 8- and 16-bit PNGs, palettes and alpha
/// (dropped) are read. IoError naming the file for a missing, truncated or malformed file,
/// another format, a side over kMaxImageSide or more than kMaxImagePixels pixels.
Image readImage(const std::string& path, int channels, const DecodeScale& shrink = {});

/// readImage on bytes already in memory (an archive's member); `where` names them in errors.
Image decodeImage(const std::vector<uint8_t>& bytes, const std::string& where, int channels,
                  const DecodeScale& shrink = {});

/// Writes `image` (1 or 3 channels; values clamped to [0, 1] and rounded to 8 bits) as an
/// 8-bit PNG, or as a baseline JPEG of `quality` 1..100. IoError when it cannot be written.
void writePng(const std::string& path, const Image& image);
void writeJpeg(const std::string& path, const Image& image, int quality = 95);

} // namespace tessera
