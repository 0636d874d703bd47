#pragma once
/// \file A whole file into memory, for the readers of data/. Internal: not installed.

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/Errors.h"

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

} // namespace tessera::data_detail
