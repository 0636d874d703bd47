#include "data/Idx.h"
#include "backend/Errors.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <stdexcept>

namespace tessera {

namespace {

struct GzClose {
    void operator()(gzFile f) const { gzclose(f); }
};

// Reads exactly n bytes; false when the file ends first.
bool readAll(gzFile f, void* out, size_t n) {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
        const unsigned chunk = n > (1u << 30) ? (1u << 30) : static_cast<unsigned>(n);
        const int got = gzread(f, p, chunk);
        if (got <= 0) return false;
        p += got;
        n -= static_cast<size_t>(got);
    }
    return true;
}

} // namespace

IdxArray readIdx(const std::string& path) {
    std::unique_ptr<gzFile_s, GzClose> f(gzopen(path.c_str(), "rb"));
    if (!f) throw IoError("IDX file " + path + ": cannot open (" + std::strerror(errno) + ")");
    unsigned char magic[4];
    if (!readAll(f.get(), magic, 4)) throw IoError("IDX file " + path + ": truncated header");
    if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] == 0 || magic[3] > 4) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "0x%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
        throw IoError("IDX file " + path + ": bad magic number " + buf +
                      ", expected 0x000008nn (unsigned bytes, nn = 1 to 4 dims)");
    }
    IdxArray a;
    // The element count, checked: no allocation is sized by the header alone (data is read
    // in chunks as the file delivers it), so a header that promises more than the file
    // holds is a truncation error, not a huge allocation.
    int64_t count = 1;
    for (int d = 0; d < magic[3]; ++d) {
        unsigned char b[4];
        if (!readAll(f.get(), b, 4)) throw IoError("IDX file " + path + ": truncated header");
        const int64_t dim = (int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
        a.dims.push_back(dim);
        if (__builtin_mul_overflow(count, dim, &count) || count > kMaxIdxBytes) {
            std::string dims;
            for (int64_t x : a.dims) dims += (dims.empty() ? "" : " x ") + std::to_string(x);
            throw IoError("IDX file " + path + ": dims " + dims + (d + 1 < magic[3] ? " ..." : "") +
                          " give more than " + std::to_string(kMaxIdxBytes) + " bytes of data");
        }
    }
    int64_t chunk = int64_t{64} << 10; // doubling up to 16 MB: memory grows with what the file holds
    try {
        while (static_cast<int64_t>(a.data.size()) < count) {
            const size_t have = a.data.size();
            const auto want = static_cast<size_t>(std::min(chunk, count - static_cast<int64_t>(have)));
            chunk = std::min(chunk * 2, int64_t{16} << 20);
            a.data.resize(have + want);
            const int got = gzread(f.get(), a.data.data() + have, static_cast<unsigned>(want));
            if (got < 0) throw IoError("IDX file " + path + ": read error");
            a.data.resize(have + static_cast<size_t>(got));
            if (static_cast<size_t>(got) < want) {
                throw IoError("IDX file " + path + ": truncated; the header promises " + std::to_string(count) +
                              " bytes of data, the file holds " + std::to_string(a.data.size()));
            }
        }
    } catch (const std::bad_alloc&) {
        throw IoError("IDX file " + path + ": out of memory reading " + std::to_string(count) + " bytes of data");
    }
    return a;
}

namespace {
std::string findFile(const std::string& dir, const std::string& name) {
    for (const std::string& candidate : {dir + "/" + name + ".gz", dir + "/" + name}) {
        if (std::filesystem::exists(candidate)) return candidate;
    }
    throw IoError("data set file " + dir + "/" + name + "[.gz] not found" +
                  (dir == kFashionMnistDir ? " (install Debian's dataset-fashion-mnist: tools/setup.sh does)" : ""));
}
} // namespace

ImageSet loadMnistFormat(const std::string& dir, const std::string& split, int64_t limit) {
    const std::string imagesPath = findFile(dir, split + "-images-idx3-ubyte");
    const std::string labelsPath = findFile(dir, split + "-labels-idx1-ubyte");
    const IdxArray images = readIdx(imagesPath);
    const IdxArray labels = readIdx(labelsPath);
    if (images.dims.size() != 3) throw IoError("IDX file " + imagesPath + ": expected 3 dims (N, rows, cols)");
    if (labels.dims.size() != 1) throw IoError("IDX file " + labelsPath + ": expected 1 dim (N)");
    if (images.dims[0] != labels.dims[0]) {
        throw IoError("data set " + dir + " (" + split + "): " + std::to_string(images.dims[0]) + " images but " +
                      std::to_string(labels.dims[0]) + " labels");
    }
    const int64_t n = limit > 0 ? std::min(limit, images.dims[0]) : images.dims[0];
    const int64_t rows = images.dims[1], cols = images.dims[2];
    ImageSet set{Tensor::empty({n, 1, rows, cols}), Tensor::empty({n}, DType::int32)};
    float* px = set.images.data<float>();
    for (int64_t i = 0; i < n * rows * cols; ++i)
        px[i] = static_cast<float>(images.data[static_cast<size_t>(i)]) / 255.0f;
    int32_t* pl = set.labels.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) pl[i] = labels.data[static_cast<size_t>(i)];
    return set;
}

} // namespace tessera
