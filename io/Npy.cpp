#include "io/Npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <vector>

#include "backend/Errors.h"

namespace tessera {

namespace {

std::string readAll(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw IoError("npy file " + path + ": cannot open it");
    std::ostringstream s;
    s << file.rdbuf();
    return s.str();
}

template <class T> std::vector<T> values(const std::string& data, size_t offset, int64_t n, const std::string& path) {
    if (data.size() - offset < static_cast<size_t>(n) * sizeof(T)) {
        throw IoError("npy file " + path + ": truncated (" + std::to_string(data.size() - offset) +
                      " data bytes, the header says " + std::to_string(static_cast<size_t>(n) * sizeof(T)) + ")");
    }
    std::vector<T> v(static_cast<size_t>(n));
    if (n) std::memcpy(v.data(), data.data() + offset, v.size() * sizeof(T));
    return v;
}

} // namespace

Tensor readNpy(const std::string& path, std::string* dtype) {
    const std::string data = readAll(path);
    if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
        throw IoError("npy file " + path + ": not a .npy file");
    const int major = static_cast<unsigned char>(data[6]);
    size_t headerLen = 0, start = 0;
    if (major == 1) {
        headerLen =
            static_cast<unsigned char>(data[8]) | (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
        start = 10;
    } else if (major == 2 || major == 3) {
        if (data.size() < 12) throw IoError("npy file " + path + ": truncated header");
        for (int i = 0; i < 4; ++i)
            headerLen |= static_cast<size_t>(static_cast<unsigned char>(data[8 + i])) << (8 * i);
        start = 12;
    } else {
        throw IoError("npy file " + path + ": format version " + std::to_string(major) + " is not supported");
    }
    if (data.size() < start + headerLen) throw IoError("npy file " + path + ": truncated header");
    const std::string header = data.substr(start, headerLen);
    std::smatch m;
    if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'"))) {
        throw IoError("npy file " + path + ": the header has no 'descr'");
    }
    const std::string descr = m[1];
    if (std::regex_search(header, std::regex("'fortran_order'\\s*:\\s*True"))) {
        throw IoError("npy file " + path + ": Fortran order is not supported (save a C-order array)");
    }
    if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) {
        throw IoError("npy file " + path + ": the header has no 'shape'");
    }
    std::vector<int64_t> dims;
    std::string dimsText = m[1];
    const std::regex number("\\d+");
    // Dims are checked against the file before anything is sized by them: a product over the
    // file's bytes is a bad header, whatever the element size.
    int64_t product = 1;
    for (std::sregex_iterator it(dimsText.begin(), dimsText.end(), number), end; it != end; ++it) {
        const std::string digits = it->str();
        if (digits.size() > 12) throw IoError("npy file " + path + ": dimension " + digits + " is too large");
        const int64_t d = std::stoll(digits);
        if (d > 0 && product > static_cast<int64_t>(data.size()) / d) {
            throw IoError("npy file " + path + ": the shape (" + dimsText +
                          ") holds more elements than the file has bytes");
        }
        product *= d;
        dims.push_back(d);
    }
    const Shape shape = dims.empty() ? Shape{1} : Shape(dims); // a 0-d array as [1]
    const int64_t n = shape.numel();
    const size_t offset = start + headerLen;
    if (dtype) {
        const char* names[][2] = {
            {"<f4", "float32"}, {"<f8", "float64"}, {"<i4", "int32"}, {"<i8", "int64"}, {"|u1", "uint8"}};
        for (auto& [d, name] : names) {
            if (descr == d) *dtype = name;
        }
    }
    if (descr == "<f4") return Tensor::fromVector(shape, values<float>(data, offset, n, path));
    if (descr == "<f8") {
        const std::vector<double> d = values<double>(data, offset, n, path);
        return Tensor::fromVector(shape, std::vector<float>(d.begin(), d.end()));
    }
    if (descr == "<i4") return Tensor::fromVector(shape, values<int32_t>(data, offset, n, path));
    if (descr == "<i8" || descr == "|u1") {
        std::vector<int32_t> v;
        if (descr == "|u1") {
            for (uint8_t x : values<uint8_t>(data, offset, n, path)) v.push_back(x);
        } else {
            for (int64_t x : values<int64_t>(data, offset, n, path)) {
                if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
                    throw IoError("npy file " + path + ": the int64 value " + std::to_string(x) +
                                  " does not fit int32");
                }
                v.push_back(static_cast<int32_t>(x));
            }
        }
        return Tensor::fromVector(shape, v);
    }
    throw IoError("npy file " + path + ": dtype '" + descr +
                  "' is not supported (float32, float64, int32, int64 and uint8 little-endian are)");
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
    const std::string tmp = path + ".tmp";
    {
        std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
        if (!file) throw IoError("npy file " + path + ": cannot write " + tmp);
        const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
        file.write(magic, 8);
        const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
        file.write(len, 2);
        file.write(header.data(), static_cast<std::streamsize>(header.size()));
        file.write(static_cast<const char*>(host.raw()), static_cast<std::streamsize>(host.nbytes()));
        if (!file) throw IoError("npy file " + path + ": cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw IoError("npy file " + path + ": cannot rename " + tmp);
}

} // namespace tessera
