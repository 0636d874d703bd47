// Image folders inside tar and zip archives: the members are listed once (tar headers, or
// a zip's central directory) and each image is read when asked for, at its offset, with
// pread (so loader workers share one open file) and, for deflated zip members, zlib.
// Nothing an archive declares is trusted: every offset and size is checked against the
// file before it is used. A gzip-compressed tar has no offsets to read at: its images of
// the split asked for are read in one pass and held in memory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "backend/Errors.h"
#include "data/Dataset.h"
#include "data/Image.h"
#include "data/ReadFile.h"
#include "data/Tar.h"

namespace tessera {

namespace {

// An image's bytes, packed or not, at most this many: far above what an image file of
// kMaxImagePixels needs. A deflated member unpacks to at most deflate's ratio (1032:1) of
// its packed bytes: a larger claim is a damaged directory, refused before allocating.
constexpr uint64_t kMaxMember = uint64_t{1} << 28;
constexpr uint64_t kMaxDeflateRatio = 1032;
// A gzip-compressed tar's images of one split are held in memory, at most this many bytes.
constexpr uint64_t kMaxInMemory = uint64_t{8} << 30;

struct Member {
    std::string name;
    uint64_t offset = 0; ///< of the data (tar), of the local header (zip)
    uint64_t size = 0;   ///< stored bytes
    uint64_t unpacked = 0;
    int method = 0; ///< zip: 0 stored, 8 deflated; tar: 0
};

// An open file read with pread (safe from several threads).
class File {
public:
    explicit File(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
        if (fd_ < 0) throw IoError("image archive " + path + ": cannot open (" + std::strerror(errno) + ")");
        struct stat st {};
        if (::fstat(fd_, &st) != 0) {
            ::close(fd_);
            throw IoError("image archive " + path + ": cannot read its size");
        }
        size_ = static_cast<uint64_t>(st.st_size);
    }
    ~File() { ::close(fd_); }
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    uint64_t size() const { return size_; }
    /// `n` bytes at `offset`; IoError naming `what` when the file ends first.
    std::vector<uint8_t> read(uint64_t offset, uint64_t n, const std::string& what) const {
        if (offset > size_ || n > size_ - offset) {
            throw IoError("image archive " + path_ + ": " + what + " runs past the end of the file (" +
                          std::to_string(n) + " bytes at " + std::to_string(offset) + " of " + std::to_string(size_) +
                          ")");
        }
        std::vector<uint8_t> out(static_cast<size_t>(n));
        size_t done = 0;
        while (done < out.size()) {
            const ssize_t got = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) throw IoError("image archive " + path_ + ": read error in " + what);
            done += static_cast<size_t>(got);
        }
        return out;
    }

private:
    std::string path_;
    int fd_;
    uint64_t size_ = 0;
};

uint32_t le16(const uint8_t* p) { return static_cast<uint32_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
           (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const uint8_t* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

// ---- tar ----------------------------------------------------------------------------------

bool isTar(const File& f) {
    if (f.size() < 512) return false;
    const std::vector<uint8_t> h = f.read(0, 512, "the first header");
    return std::memcmp(h.data() + 257, "ustar", 5) == 0;
}

std::vector<Member> listTar(const File& f, const std::string& path) {
    std::vector<Member> out;
    data_detail::TarNames names;
    uint64_t offset = 0;
    while (offset + 512 <= f.size()) {
        const std::vector<uint8_t> h = f.read(offset, 512, "a tar header");
        const data_detail::TarHeader t = data_detail::parseTarHeader(h.data(), offset, "image archive " + path);
        if (t.kind == data_detail::TarHeader::End) break;
        const uint64_t data = offset + 512;
        if (t.size > f.size() - data) {
            throw IoError("image archive " + path + ": a member of " + std::to_string(t.size) +
                          " bytes past the file's end in the tar header at byte " + std::to_string(offset));
        }
        if (t.kind == data_detail::TarHeader::Name) {
            names.take(t, f.read(data, t.size, "a name record"));
        } else if (t.kind == data_detail::TarHeader::File) {
            out.push_back({names.nameOf(t), data, t.size, t.size, 0});
        } else {
            names.nameOf(t); // directories, links and the rest hold no image
        }
        offset = data + (t.size + 511) / 512 * 512;
    }
    return out;
}

// ---- zip ----------------------------------------------------------------------------------

std::vector<Member> listZip(const File& f, const std::string& path) {
    auto bad = [&](const std::string& what) { return IoError("image archive " + path + ": " + what); };
    // The end-of-central-directory record: within the last 64 KiB + 22 bytes (its comment).
    const uint64_t tail = std::min<uint64_t>(f.size(), 65535 + 22);
    const std::vector<uint8_t> t = f.read(f.size() - tail, tail, "the end of the zip directory");
    int64_t at = static_cast<int64_t>(tail) - 22;
    while (at >= 0 && le32(t.data() + at) != 0x06054b50) --at;
    if (at < 0) throw bad("not a zip file (no end of central directory record)");
    const uint8_t* e = t.data() + at;
    uint64_t entries = le16(e + 10), dirSize = le32(e + 12), dirOffset = le32(e + 16);
    // ZIP64: a locator just before that record points to a record of 64-bit counts, which
    // then holds the true values (writers mark the 16- and 32-bit fields 0xFFFF... or not).
    const uint64_t endAt = f.size() - tail + static_cast<uint64_t>(at);
    if (at >= 20 && le32(e - 20) == 0x07064b50) {
        const uint64_t recordAt = le64(e - 20 + 8);
        const std::vector<uint8_t> r = f.read(recordAt, 56, "the ZIP64 end of central directory record");
        if (le32(r.data()) != 0x06064b50 || recordAt + 56 > endAt - 20) {
            throw bad("no ZIP64 end of central directory record where its locator says (byte " +
                      std::to_string(recordAt) + ")");
        }
        entries = le64(r.data() + 32), dirSize = le64(r.data() + 40), dirOffset = le64(r.data() + 48);
    } else if (entries == 0xFFFF || dirSize == 0xFFFFFFFF || dirOffset == 0xFFFFFFFF) {
        throw bad("the end of central directory record declares ZIP64 but no ZIP64 locator precedes it (damaged)");
    }
    if (entries > dirSize / 46) { // each entry takes 46 bytes at least
        throw bad(std::to_string(entries) + " members cannot fit a central directory of " + std::to_string(dirSize) +
                  " bytes (damaged)");
    }
    const std::vector<uint8_t> dir = f.read(dirOffset, dirSize, "the zip central directory");
    std::vector<Member> out;
    size_t p = 0;
    for (uint64_t k = 0; k < entries; ++k) {
        if (p + 46 > dir.size() || le32(dir.data() + p) != 0x02014b50) {
            throw bad("central directory entry " + std::to_string(k) + " is malformed");
        }
        const uint8_t* d = dir.data() + p;
        const size_t nameLen = le16(d + 28), extraLen = le16(d + 30), commentLen = le16(d + 32);
        if (p + 46 + nameLen + extraLen > dir.size()) {
            throw bad("central directory entry " + std::to_string(k) + " is truncated");
        }
        Member m;
        m.name = std::string(reinterpret_cast<const char*>(d + 46), nameLen);
        m.method = static_cast<int>(le16(d + 10));
        m.size = le32(d + 20);
        m.unpacked = le32(d + 24);
        m.offset = le32(d + 42);
        // Sizes and offsets too large for 32 bits are in the ZIP64 extra field (id 1), in
        // this order, each present only where the entry's own field holds 0xFFFFFFFF.
        uint64_t* const wide[] = {&m.unpacked, &m.size, &m.offset};
        if (std::any_of(std::begin(wide), std::end(wide), [](const uint64_t* v) { return *v == 0xFFFFFFFF; })) {
            const uint8_t* extra = d + 46 + nameLen; // extraLen bytes of (id, size, data) fields
            size_t x = 0;
            while (x + 4 <= extraLen && le16(extra + x) != 1) x += 4 + le16(extra + x + 2);
            if (x + 4 > extraLen || x + 4 + le16(extra + x + 2) > extraLen) {
                throw bad("central directory entry " + std::to_string(k) + " (" + m.name +
                          ") marks a ZIP64 size or offset but has no ZIP64 extra field for it");
            }
            size_t v = x + 4;
            const size_t vEnd = v + le16(extra + x + 2);
            for (uint64_t* field : wide) {
                if (*field != 0xFFFFFFFF) continue;
                if (v + 8 > vEnd) {
                    throw bad("central directory entry " + std::to_string(k) + " (" + m.name +
                              ") has a ZIP64 extra field too short for its marked sizes");
                }
                *field = le64(extra + v);
                v += 8;
            }
        }
        if (le16(d + 8) & 1) m.method = -1; // encrypted: refused when read
        if (!m.name.empty() && m.name.back() != '/') out.push_back(std::move(m));
        p += 46 + nameLen + extraLen + commentLen;
    }
    return out;
}

// A zip member's bytes: stored, or inflated (raw deflate) to exactly its declared size.
std::vector<uint8_t> zipMember(const File& f, const Member& m, const std::string& where) {
    auto bad = [&](const std::string& what) { return IoError("image " + where + ": " + what); };
    if (m.method == -1) throw bad("is encrypted");
    if (m.method != 0 && m.method != 8) {
        throw bad("compression method " + std::to_string(m.method) + " is not supported (stored and deflated are)");
    }
    if (m.size > kMaxMember || m.unpacked > kMaxMember) throw bad("declares over 256 MiB");
    if (m.method == 8 && m.unpacked > kMaxDeflateRatio * m.size + 1024) {
        throw bad("declares " + std::to_string(m.unpacked) + " bytes from " + std::to_string(m.size) +
                  " deflated ones, more than deflate can give (damaged)");
    }
    const std::vector<uint8_t> local = f.read(m.offset, 30, where + "'s local header");
    if (le32(local.data()) != 0x04034b50) throw bad("has no local header where the directory says");
    const uint64_t data = m.offset + 30 + le16(local.data() + 26) + le16(local.data() + 28);
    std::vector<uint8_t> packed = f.read(data, m.size, where);
    if (m.method == 0) {
        if (m.size != m.unpacked) throw bad("is stored but its sizes differ");
        return packed;
    }
    std::vector<uint8_t> out(static_cast<size_t>(m.unpacked));
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw bad("zlib could not start");
    z.next_in = packed.data();
    z.avail_in = static_cast<uInt>(packed.size());
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_FINISH);
    const uint64_t produced = z.total_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != m.unpacked) throw bad("does not inflate to its declared size (damaged)");
    return out;
}

// ---- the data set -------------------------------------------------------------------------

// Where `name` (its components `c`) sits as split/<class>/.../<image>: 0 at the archive's
// top, 1 under one top folder, -1 elsewhere.
int splitDepth(const std::string& name, const std::vector<std::string>& c, const std::string& split) {
    if (!data_detail::isImageName(name)) return -1;
    for (size_t depth = 0; depth < 2; ++depth) {
        if (c.size() >= depth + 3 && c[depth] == split) return static_cast<int>(depth);
    }
    return -1;
}

class ArchiveDataset : public Dataset {
public:
    ArchiveDataset(const std::string& path, const std::string& split, int channels)
        : path_(path), split_(split), channels_(channels), file_(path) {
        std::vector<Member> members;
        if (data_detail::isGzipFile(path)) { // no offsets to read at: the split's images into memory
            auto kept = data_detail::readTarMembers(
                path,
                [&](const std::string& name) {
                    return splitDepth(name, data_detail::pathComponents(name), split) >= 0;
                },
                "image archive", kMaxInMemory,
                "a .tar.gz is held in memory: unpack it (tar xzf) and give the folder, or give the plain tar");
            for (auto& [name, bytes] : kept) {
                members.push_back({name, inMemory_.size(), bytes.size(), bytes.size(), 0});
                inMemory_.push_back(std::move(bytes));
            }
            compressed_ = true;
        } else {
            zip_ = !isTar(file_);
            members = zip_ ? listZip(file_, path) : listTar(file_, path);
        }
        // split/<class>/.../<image>, at the top or under one top folder.
        std::map<std::string, std::vector<const Member*>> byClass[2];
        std::map<std::string, int> tops;
        for (const Member& m : members) {
            const std::vector<std::string> c = data_detail::pathComponents(m.name);
            const int depth = splitDepth(m.name, c, split);
            if (depth < 0) continue;
            byClass[depth][c[depth + 1]].push_back(&m);
            if (depth == 1) tops[c[0]] = 1;
        }
        const size_t depth = byClass[0].empty() ? 1 : 0;
        if (byClass[depth].empty()) {
            throw IoError("image archive " + path + ": no images under " + split + "/<class>/ (expected " + split +
                          "/<class>/<image>.png or .jpg, at the top or in one folder)");
        }
        if (depth == 1 && tops.size() > 1) {
            throw IoError("image archive " + path + ": " + std::to_string(tops.size()) + " top folders hold " + split +
                          "/ (" + tops.begin()->first + ", " + std::next(tops.begin())->first + ", ...); expected one");
        }
        int32_t label = 0;
        for (auto& [cls, list] : byClass[depth]) { // classes and their images in sorted order
            std::sort(list.begin(), list.end(), [](const Member* a, const Member* b) { return a->name < b->name; });
            for (const Member* m : list) samples_.push_back({*m, label});
            classNames_.push_back(cls);
            ++label;
        }
    }

    int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
    int64_t classes() const override { return static_cast<int64_t>(classNames_.size()); }
    std::string describe() const override { return "image archive " + path_ + " (" + split_ + ")"; }
    std::vector<std::string> classNames() const override { return classNames_; }
    std::string where(int64_t index) const override { return path_ + ":" + at(index).first.name; }
    Sample get(int64_t index) const override { return getScaled(index, {}); }
    int32_t label(int64_t index) const override { return at(index).second; }
    Sample getScaled(int64_t index, const DecodeScale& shrink) const override {
        const auto& [m, label] = at(index);
        const std::string whereText = where(index);
        if (compressed_) return {decodeImage(inMemory_[m.offset], whereText, channels_, shrink), label};
        const std::vector<uint8_t> bytes =
            zip_ ? zipMember(file_, m, whereText) : file_.read(m.offset, m.size, whereText);
        return {decodeImage(bytes, whereText, channels_, shrink), label};
    }

private:
    const std::pair<Member, int32_t>& at(int64_t index) const {
        data_detail::checkIndex(*this, index);
        return samples_[static_cast<size_t>(index)];
    }

    std::string path_, split_;
    int channels_;
    File file_;
    bool zip_ = false;
    bool compressed_ = false;                    // a .tar.gz: the images are held in memory ...
    std::vector<std::vector<uint8_t>> inMemory_; // ... here, a member's offset being its index
    std::vector<std::pair<Member, int32_t>> samples_;
    std::vector<std::string> classNames_;
};

} // namespace

DatasetPtr imageArchive(const std::string& path, const std::string& split, int channels) {
    if (channels != 1 && channels != 3) {
        throw IoError("image archive " + path + ": channels must be 1 or 3, got " + std::to_string(channels));
    }
    return std::make_shared<ArchiveDataset>(path, split, channels);
}

} // namespace tessera
