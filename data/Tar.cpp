// Tar headers, and whole archives streamed through zlib (which reads plain files as they
// are). Nothing a header declares is trusted: sizes are bounded before anything is
// allocated, and a stream that ends early is an error naming where.
#include "data/Tar.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "backend/Errors.h"

namespace tessera::data_detail {

namespace {

// A NUL-terminated field of at most n bytes.
std::string field(const uint8_t* p, size_t n) {
    size_t len = 0;
    while (len < n && p[len]) ++len;
    return std::string(reinterpret_cast<const char*>(p), len);
}

struct GzClose {
    void operator()(gzFile f) const { gzclose(f); }
};

constexpr uint64_t kMaxNameRecord = uint64_t{1} << 20;

} // namespace

std::vector<std::string> pathComponents(const std::string& name) {
    std::vector<std::string> out;
    size_t from = 0;
    while (from <= name.size()) {
        const size_t slash = name.find('/', from);
        const std::string part = name.substr(from, slash == std::string::npos ? std::string::npos : slash - from);
        if (!part.empty() && part != ".") out.push_back(part);
        if (slash == std::string::npos) break;
        from = slash + 1;
    }
    return out;
}

TarHeader parseTarHeader(const uint8_t* h, uint64_t offset, const std::string& what) {
    TarHeader t;
    if (std::all_of(h, h + 512, [](uint8_t b) { return b == 0; })) {
        t.kind = TarHeader::End;
        return t;
    }
    auto bad = [&](const std::string& text) {
        return IoError(what + ": " + text + " in the tar header at byte " + std::to_string(offset));
    };
    // The checksum: the header's bytes summed with its own field read as spaces.
    uint64_t sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? uint8_t{' '} : h[i];
    auto octal = [&](size_t at, size_t n, const char* name) {
        uint64_t v = 0;
        size_t i = at;
        while (i < at + n && h[i] == ' ') ++i;
        bool any = false;
        for (; i < at + n && h[i] >= '0' && h[i] <= '7'; ++i) {
            if (v > (uint64_t{1} << 60)) throw bad(std::string("an overlong ") + name);
            v = v * 8 + (h[i] - '0'), any = true;
        }
        if (!any || (i < at + n && h[i] != 0 && h[i] != ' ')) throw bad(std::string("a malformed ") + name);
        return v;
    };
    if (octal(148, 8, "checksum") != sum) throw bad("a wrong checksum (not a tar file, or a damaged one)");
    t.size = octal(124, 12, "size");
    t.type = static_cast<char>(h[156]);
    t.name = field(h, 100);
    const std::string prefix = field(h + 345, 155);
    if (!prefix.empty()) t.name = prefix + "/" + t.name;
    if (t.type == 'L' || t.type == 'x') {
        if (t.size > kMaxNameRecord) throw bad("an overlong name record");
        t.kind = TarHeader::Name;
    } else if (t.type == '0' || t.type == '\0' || t.type == '7') {
        t.kind = TarHeader::File;
    }
    return t;
}

void TarNames::take(const TarHeader& record, const std::vector<uint8_t>& body) {
    if (record.type == 'L') {
        longName_ = field(body.data(), body.size());
        return;
    }
    // pax records "LEN key=value\n"
    const std::string text(body.begin(), body.end());
    const size_t at = text.find(" path=");
    if (at != std::string::npos) {
        const size_t end = text.find('\n', at);
        longName_ = text.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    }
}

std::string TarNames::nameOf(const TarHeader& header) {
    std::string name = longName_.empty() ? header.name : longName_;
    longName_.clear();
    return name;
}

bool isGzipFile(const std::string& path) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    unsigned char magic[2] = {0, 0};
    return f && std::fread(magic, 1, 2, f.get()) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>>
readTarMembers(const std::string& path, const std::function<bool(const std::string&)>& want, const std::string& what,
               uint64_t maxBytes, const std::string& tooMuch) {
    const std::string where = what + " " + path;
    errno = 0;
    std::unique_ptr<gzFile_s, GzClose> f(gzopen(path.c_str(), "rb"));
    if (!f) throw IoError(where + ": cannot open (" + std::strerror(errno ? errno : ENOENT) + ")");
    gzbuffer(f.get(), 1 << 17);
    uint64_t offset = 0; // in the (unpacked) tar stream
    // Exactly n bytes into `out` (nullptr: skipped); false when the stream ends first.
    auto read = [&](uint8_t* out, uint64_t n) {
        std::vector<uint8_t> scrap(out ? 0 : std::min<uint64_t>(n, 1 << 17));
        while (n > 0) {
            const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n, 1u << 30));
            const unsigned ask = out ? chunk : std::min<unsigned>(chunk, static_cast<unsigned>(scrap.size()));
            const int got = gzread(f.get(), out ? out : scrap.data(), ask);
            if (got < 0) {
                int code = 0;
                const char* msg = gzerror(f.get(), &code);
                throw IoError(where + ": damaged compressed data at tar byte " + std::to_string(offset) + " (" +
                              (msg ? msg : "zlib error") + ")");
            }
            if (got == 0) {
                // The end of the file: of the stream too, unless gzip's data stop short of it.
                int code = Z_OK;
                gzerror(f.get(), &code);
                if (code == Z_BUF_ERROR) {
                    throw IoError(where + ": truncated: the compressed data end early, at tar byte " +
                                  std::to_string(offset));
                }
                return false;
            }
            if (out) out += got;
            n -= static_cast<uint64_t>(got), offset += static_cast<uint64_t>(got);
        }
        return true;
    };
    std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
    TarNames names;
    uint64_t kept = 0;
    uint8_t h[512];
    for (bool first = true;; first = false) {
        const uint64_t at = offset;
        if (!read(h, 512)) {
            if (first) throw IoError(where + ": not a tar archive (shorter than one tar header)");
            break; // an archive without its end blocks: what it holds is whole
        }
        if (first && std::memcmp(h + 257, "ustar", 5) != 0) {
            throw IoError(where + ": not a tar archive (no ustar header at its start" +
                          std::string(gzdirect(f.get()) ? "" : ", after gzip") + ")");
        }
        const TarHeader t = parseTarHeader(h, at, where);
        if (t.kind == TarHeader::End) {
            // To the stream's end, so that gzip's check of everything unpacked is made.
            while (read(nullptr, uint64_t{1} << 20)) {}
            break;
        }
        const uint64_t padded = (t.size + 511) / 512 * 512;
        auto truncated = [&] {
            return IoError(where + ": truncated: the member in the tar header at byte " + std::to_string(at) +
                           " promises " + std::to_string(t.size) + " bytes");
        };
        if (t.kind == TarHeader::Name) {
            std::vector<uint8_t> body(static_cast<size_t>(t.size));
            if (!read(body.data(), t.size) || !read(nullptr, padded - t.size)) throw truncated();
            names.take(t, body);
            continue;
        }
        const std::string name = names.nameOf(t);
        if (t.kind == TarHeader::File && want(name)) {
            if (t.size > maxBytes - kept) {
                throw IoError(where + ": the members wanted exceed " + std::to_string(maxBytes) + " bytes at " + name +
                              " (" + std::to_string(t.size) + " bytes; " + tooMuch + ")");
            }
            kept += t.size;
            // Grown as the bytes arrive: a header's claim alone allocates nothing.
            std::vector<uint8_t> body;
            for (uint64_t have = 0; have < t.size;) {
                const uint64_t step = std::min<uint64_t>(t.size - have, uint64_t{1} << 24);
                body.resize(static_cast<size_t>(have + step));
                if (!read(body.data() + have, step)) throw truncated();
                have += step;
            }
            if (!read(nullptr, padded - t.size)) throw truncated();
            out.emplace_back(name, std::move(body));
        } else if (!read(nullptr, padded)) {
            throw truncated();
        }
    }
    return out;
}

} // namespace tessera::data_detail
