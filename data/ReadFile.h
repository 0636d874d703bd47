#pragma once
/// \file Helpers of the readers of data/: a whole file into memory, which file names are
/// images, and the index check every data set makes. Internal: not installed.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/Errors.h"
#include "data/Dataset.h"

namespace tessera::data_detail {

/// The bytes of `path`; IoError "<what> <path>: ..." when it cannot be opened or read.
inline std::vector<uint8_t> readFile(const std::string& path, const std::string& what) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw IoError(what + " " + path + ": cannot open (" + std::strerror(errno) + ")");
    std::vector<uint8_t> bytes;
    uint8_t chunk[1 << 16];
    for (;;) {
        const size_t got = std::fread(chunk, 1, sizeof chunk, f.get());
        bytes.insert(bytes.end(), chunk, chunk + got);
        if (got < sizeof chunk) break;
    }
    if (std::ferror(f.get())) throw IoError(what + " " + path + ": read error");
    return bytes;
}

/// Whether a file or archive member name ends in .jpg, .jpeg or .png (any case).
inline bool isImageName(const std::string& name) {
    const size_t dot = name.rfind('.');
    // "x/.png" is a hidden file without an extension, as std::filesystem reads it.
    if (dot == std::string::npos || dot == 0 || name[dot - 1] == '/' || name.find('/', dot) != std::string::npos) {
        return false;
    }
    std::string ext = name.substr(dot);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

/// ShapeError naming `d` unless 0 <= index < d.size().
inline void checkIndex(const Dataset& d, int64_t index) {
    if (index < 0 || index >= d.size()) {
        throw ShapeError("data set " + d.describe() + ": sample " + std::to_string(index) + " is out of range [0, " +
                         std::to_string(d.size()) + ")");
    }
}

} // namespace tessera::data_detail
