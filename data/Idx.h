#pragma once
/// \file IDX files (the MNIST format), plain or gzip-compressed, and the MNIST-style
/// data sets made of them.

#include <cstdint>
#include <string>
#include <vector>

#include "backend/Tensor.h"

namespace tessera {

/// An IDX array of unsigned bytes.
struct IdxArray {
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
};

/// The most data an IDX file may declare (1 TiB); more is refused as a bad header.
inline constexpr int64_t kMaxIdxBytes = int64_t{1} << 40;

/// Reads `path` (gzip or plain). Throws IoError naming the file on a missing file, a
/// wrong magic number (expects 0x0000 08 nn: unsigned bytes, nn dims), dims whose product
/// exceeds kMaxIdxBytes, or a file shorter than its header says. Memory grows with the
/// data actually read, never with what the header alone claims.
IdxArray readIdx(const std::string& path);

/// Images and labels of one split.
struct ImageSet {
    Tensor images; ///< [N, 1, rows, cols] float32 in [0, 1]
    Tensor labels; ///< [N] int32
};

/// Loads `<dir>/<split>-images-idx3-ubyte[.gz]` and `<dir>/<split>-labels-idx1-ubyte[.gz]`
/// (split "train" or "t10k"). Throws IoError when a file is missing or bad, or
/// the image and label counts differ. `limit` > 0 keeps only the first `limit` samples.
ImageSet loadMnistFormat(const std::string& dir, const std::string& split, int64_t limit = 0);

/// Where Debian's dataset-fashion-mnist package puts Fashion-MNIST.
inline const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

} // namespace tessera
