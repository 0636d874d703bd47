#include "data/Npy.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <vector>

#include "backend/Errors.h"
#include "backend/Files.h"

namespace tessera {

namespace {

// A .npy file's header, read from an open file; `data` is where the array starts and
// `bytes` the file's size, so data sizes are checked before anything is allocated.
struct Header {
    std::string descr;
    Shape shape;
    size_t data = 0;
    size_t bytes = 0;
};

Header readHeader(std::ifstream& file, const std::string& path) {
    if (!file) throw IoError("npy file " + path + ": cannot open it");
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw IoError("npy file " + path + ": is a directory");
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    if (size < 0) throw IoError("npy file " + path + ": cannot read it");
    Header h;
    h.bytes = static_cast<size_t>(size);
    file.seekg(0);
    auto take = [&](size_t n) {
        std::string out(n, '\0');
        file.read(out.data(), static_cast<std::streamsize>(n));
        if (static_cast<size_t>(file.gcount()) != n) throw IoError("npy file " + path + ": truncated header");
        return out;
    };
    if (h.bytes < 10) throw IoError("npy file " + path + ": not a .npy file");
    const std::string lead = take(10);
    if (lead.compare(0, 6, "\x93NUMPY") != 0) throw IoError("npy file " + path + ": not a .npy file");
    const int major = static_cast<unsigned char>(lead[6]);
    size_t headerLen = 0, start = 0;
    if (major == 1) {
        headerLen =
            static_cast<unsigned char>(lead[8]) | (static_cast<size_t>(static_cast<unsigned char>(lead[9])) << 8);
        start = 10;
    } else if (major == 2 || major == 3) {
        if (h.bytes < 12) throw IoError("npy file " + path + ": truncated header");
        const std::string len = lead.substr(8, 2) + take(2);
        for (int i = 0; i < 4; ++i) headerLen |= static_cast<size_t>(static_cast<unsigned char>(len[i])) << (8 * i);
        start = 12;
    } else {
        throw IoError("npy file " + path + ": format version " + std::to_string(major) + " is not supported");
    }
    if (h.bytes < start + headerLen) throw IoError("npy file " + path + ": truncated header");
    const std::string header = take(headerLen);
    std::smatch m;
    if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'"))) {
        throw IoError("npy file " + path + ": the header has no 'descr'");
    }
    h.descr = m[1];
    if (std::regex_search(header, std::regex("'fortran_order'\\s*:\\s*True"))) {
        throw IoError("npy file " + path + ": Fortran order is not supported (save a C-order array)");
    }
    if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) {
        throw IoError("npy file " + path + ": the header has no 'shape'");
    }
    std::vector<int64_t> dims;
    std::string dimsText = m[1];
    // Each dim is a whole number >= 0 ("3" or Python 2's "3L"), separated by commas; a
    // negative or otherwise malformed dim is a bad header, not a number to skip over.
    std::vector<std::string> items;
    for (size_t from = 0;;) {
        const size_t comma = dimsText.find(',', from);
        const bool last = comma == std::string::npos;
        std::string item = dimsText.substr(from, last ? std::string::npos : comma - from);
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (!item.empty() && item.back() == 'L') item.pop_back();
        if (item.empty() && last) break; // "()", or the trailing comma of "(3,)"
        if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) {
            throw IoError("npy file " + path + ": the shape (" + dimsText +
                          ") has a dimension that is not a whole number >= 0: '" + item + "'");
        }
        items.push_back(item);
        if (last) break;
        from = comma + 1;
    }
    // Dims are checked against the file before anything is sized by them: a product over the
    // file's bytes is a bad header, whatever the element size.
    int64_t product = 1;
    for (const std::string& digits : items) {
        if (digits.size() > 12) throw IoError("npy file " + path + ": dimension " + digits + " is too large");
        const int64_t d = std::stoll(digits);
        if (d > 0 && product > static_cast<int64_t>(h.bytes) / d) {
            throw IoError("npy file " + path + ": the shape (" + dimsText +
                          ") holds more elements than the file has bytes");
        }
        product *= d;
        dims.push_back(d);
    }
    h.shape = dims.empty() ? Shape{1} : Shape(dims); // a 0-d array as [1]
    h.data = start + headerLen;
    return h;
}

// The header's n elements of T, read straight from the file.
template <class T> std::vector<T> values(std::ifstream& file, const Header& h, const std::string& path) {
    const auto n = static_cast<size_t>(h.shape.numel());
    if (h.bytes - h.data < n * sizeof(T)) {
        throw IoError("npy file " + path + ": truncated (" + std::to_string(h.bytes - h.data) +
                      " data bytes, the header says " + std::to_string(n * sizeof(T)) + ")");
    }
    std::vector<T> v(n);
    file.seekg(static_cast<std::streamoff>(h.data));
    file.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
    if (static_cast<size_t>(file.gcount()) != n * sizeof(T))
        throw IoError("npy file " + path + ": cannot read its data");
    return v;
}

std::string dtypeName(const std::string& descr) {
    const char* names[][2] = {{"<f4", "float32"}, {"<f8", "float64"}, {"<i4", "int32"},
                              {"<i8", "int64"},   {"|u1", "uint8"},   {"|b1", "bool"}};
    for (auto& [d, name] : names) {
        if (descr == d) return name;
    }
    return descr;
}

} // namespace

Tensor readNpy(const std::string& path, std::string* dtype) {
    std::ifstream file(path, std::ios::binary);
    const Header h = readHeader(file, path);
    const std::string& descr = h.descr;
    if (dtype) *dtype = dtypeName(descr);
    if (descr == "<f4") return Tensor::fromVector(h.shape, values<float>(file, h, path));
    if (descr == "<f8") {
        const std::vector<double> d = values<double>(file, h, path);
        return Tensor::fromVector(h.shape, std::vector<float>(d.begin(), d.end()));
    }
    if (descr == "<i4") return Tensor::fromVector(h.shape, values<int32_t>(file, h, path));
    if (descr == "|u1" || descr == "|b1") { // bytes; bool as 0 and 1 (a mask)
        const std::vector<uint8_t> b = values<uint8_t>(file, h, path);
        return Tensor::fromVector(h.shape, std::vector<int32_t>(b.begin(), b.end()));
    }
    if (descr == "<i8") {
        std::vector<int32_t> v;
        for (int64_t x : values<int64_t>(file, h, path)) {
            if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
                throw IoError("npy file " + path + ": the int64 value " + std::to_string(x) + " does not fit int32");
            }
            v.push_back(static_cast<int32_t>(x));
        }
        return Tensor::fromVector(h.shape, v);
    }
    throw IoError("npy file " + path + ": dtype '" + descr +
                  "' is not supported (float32, float64, int32, int64, uint8 and bool little-endian are)");
}

std::string npyDtype(const std::string& path, Shape* shape) {
    std::ifstream file(path, std::ios::binary);
    const Header h = readHeader(file, path);
    if (shape) *shape = h.shape;
    return dtypeName(h.descr);
}

std::vector<uint8_t> readNpyBytes(const std::string& path, Shape& shape) {
    std::ifstream file(path, std::ios::binary);
    const Header h = readHeader(file, path);
    if (h.descr != "|u1") {
        throw IoError("npy file " + path + ": holds " + dtypeName(h.descr) + " data, not uint8");
    }
    shape = h.shape;
    return values<uint8_t>(file, h, path);
}

void writeNpy(const Tensor& t, const std::string& path) {
    const Tensor host = t.toHost().plain();
    const bool isFloat = host.dtype() == DType::float32;
    std::string shape;
    for (int64_t d : host.shape().dims()) shape += std::to_string(d) + ", ";
    if (host.shape().rank() > 1) shape.resize(shape.size() - 2);
    std::string header = std::string("{'descr': '") + (isFloat ? "<f4" : "<i4") +
                         "', 'fortran_order': False, 'shape': (" + shape + "), }";
    // Pad with spaces so that the data starts at a multiple of 64 bytes; end with a newline.
    const size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    std::string bytes(magic, 8);
    bytes.append(len, 2);
    bytes += header;
    bytes.append(static_cast<const char*>(host.raw()), host.nbytes());
    writeFileAtomically(path, "npy file", bytes);
}

} // namespace tessera
