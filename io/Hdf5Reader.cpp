// The HDF5 reader process's side (io/Hdf5Reader.h): libhdf5 reads a file here, in
// tessera-child, never in the process that loads it.
#include "io/Hdf5Reader.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include "io/Checksum.h"
#include "io/ChildProcess.h"
#include "io/Pages.h"

namespace tessera::hdf5_detail {

// The datasets of a snapshot in the order the reader streams their elements.
std::vector<const Stored*> datasets(const Snapshot& s) {
    std::vector<const Stored*> out;
    for (const auto& [index, st] : s.params) out.push_back(&st);
    for (const Stored& st : s.attrs) out.push_back(&st);
    for (const Stored& st : s.extras) out.push_back(&st);
    return out;
}

namespace {

// The snapshot's wire format: numbers as 8 native bytes, strings with their length first.
// The datasets' elements are not in it: the reader streams them after it.
void put(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, const std::string& v) {
    put(out, static_cast<uint64_t>(v.size()));
    out += v;
}
void put(std::string& out, const Stored& v) {
    put(out, v.where);
    put(out, v.dataset);
    put(out, static_cast<uint64_t>(v.dtype));
    put(out, static_cast<uint64_t>(v.supported));
    put(out, static_cast<uint64_t>(v.shape.rank()));
    for (int64_t d : v.shape.dims()) put(out, static_cast<uint64_t>(d));
}

class WireReader {
public:
    WireReader(std::string_view in, const std::string& path) : in_(in), path_(path) {}
    uint64_t u64() {
        need(8);
        uint64_t v = 0;
        std::memcpy(&v, in_.data() + at_, 8);
        at_ += 8;
        return v;
    }
    std::string str() {
        const uint64_t n = u64();
        need(n);
        std::string v(in_.substr(at_, n));
        at_ += n;
        return v;
    }
    Stored stored() {
        Stored v;
        v.where = str();
        v.dataset = str();
        v.dtype = static_cast<DType>(u64());
        v.supported = u64() != 0;
        const uint64_t rank = u64();
        if (rank > 32) bad();
        std::vector<int64_t> dims;
        for (uint64_t i = 0; i < rank; ++i) dims.push_back(static_cast<int64_t>(u64()));
        v.shape = Shape(dims);
        return v;
    }

private:
    void need(uint64_t n) const {
        if (n > in_.size() - at_) bad();
    }
    [[noreturn]] void bad() const { throw fileError(path_, "reading it failed (a malformed answer from the reader)"); }
    std::string_view in_;
    const std::string& path_;
    size_t at_ = 0;
};

std::string serialize(const Snapshot& s) {
    std::string out;
    put(out, s.hasBlueprint);
    put(out, s.blueprint);
    put(out, s.inputs);
    put(out, s.classes);
    put(out, s.transforms);
    put(out, s.counters);
    put(out, s.hasLinks);
    put(out, static_cast<uint64_t>(s.links.size()));
    for (const auto& [name, index] : s.links) {
        put(out, name);
        put(out, static_cast<uint64_t>(index));
    }
    put(out, static_cast<uint64_t>(s.params.size()));
    for (const auto& [index, st] : s.params) {
        put(out, static_cast<uint64_t>(index));
        put(out, st);
    }
    put(out, s.hasAttrs);
    put(out, static_cast<uint64_t>(s.attrs.size()));
    for (const Stored& st : s.attrs) put(out, st);
    put(out, s.hasExtras);
    put(out, static_cast<uint64_t>(s.extras.size()));
    for (const Stored& st : s.extras) put(out, st);
    put(out, s.record);
    return out;
}

} // namespace

Snapshot deserialize(std::string_view in, const std::string& path) {
    WireReader r(in, path);
    Snapshot s;
    s.hasBlueprint = r.u64() != 0;
    s.blueprint = r.str();
    s.inputs = r.str();
    s.classes = r.str();
    s.transforms = r.str();
    s.counters = r.str();
    s.hasLinks = r.u64() != 0;
    for (uint64_t i = 0, n = r.u64(); i < n; ++i) {
        std::string name = r.str();
        s.links.emplace_back(std::move(name), static_cast<int64_t>(r.u64()));
    }
    for (uint64_t i = 0, n = r.u64(); i < n; ++i) {
        const auto index = static_cast<int64_t>(r.u64());
        s.params[index] = r.stored();
    }
    s.hasAttrs = r.u64() != 0;
    for (uint64_t i = 0, n = r.u64(); i < n; ++i) s.attrs.push_back(r.stored());
    s.hasExtras = r.u64() != 0;
    for (uint64_t i = 0, n = r.u64(); i < n; ++i) s.extras.push_back(r.stored());
    s.record = r.str();
    return s;
}

std::string readRequest(unsigned parts, uint64_t size, const std::string& path) {
    std::string request;
    put(request, static_cast<uint64_t>(parts));
    put(request, size);
    put(request, path);
    return request;
}

namespace {

// The names of a group's members.
std::vector<std::string> members(hid_t group) {
    std::vector<std::string> names;
    H5Literate(
        group, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
        [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
            static_cast<std::vector<std::string>*>(out)->push_back(name);
            return 0;
        },
        &names);
    return names;
}

Stored describe(hid_t file, const std::string& where, const std::string& path) {
    Handle set(H5Dopen2(file, where.c_str(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, "dataset " + where + " is missing");
    Handle space(H5Dget_space(set.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) throw fileError(path, "dataset " + where + " is unreadable");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    Stored s;
    std::vector<int64_t> d;
    for (hsize_t v : dims) d.push_back(static_cast<int64_t>(v));
    s.shape = Shape(d);
    s.where = where;
    s.dataset = where;
    Handle type(H5Dget_type(set.get()), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    const size_t size = H5Tget_size(type.get());
    if (cls == H5T_FLOAT && size == 4)
        s.dtype = DType::float32;
    else if (cls == H5T_FLOAT && size == 2) // read back through HDF5's conversion to float
        s.dtype = H5Tget_ebias(type.get()) == 127 ? DType::bfloat16 : DType::float16;
    else if (cls == H5T_INTEGER && size == 4)
        s.dtype = DType::int32;
    else
        s.supported = false;
    return s;
}

int64_t readIndex(hid_t file, const std::string& where, const std::string& path) {
    Handle set(H5Dopen2(file, where.c_str(), H5P_DEFAULT), H5Dclose);
    int64_t index = -1;
    if (!set.ok() || H5Dread(set.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &index) < 0) {
        throw fileError(path, "link " + where + " is unreadable");
    }
    return index;
}

// The string dataset `name` of an open file (fixed or variable length).
std::string readString(hid_t file, const std::string& name, const std::string& path) {
    Handle set(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, name + " is unreadable");
    Handle type(H5Dget_type(set.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING) throw fileError(path, name + " is not a string");
    Handle space(H5Dget_space(set.get()), H5Sclose);
    if (H5Sget_simple_extent_npoints(space.get()) != 1) throw fileError(path, name + " is not a single string");
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Tis_variable_str(type.get()) > 0) {
        H5Tset_size(mem.get(), H5T_VARIABLE);
        char* data = nullptr;
        check(H5Dread(set.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &data), path, "cannot read " + name);
        std::string text = data ? data : "";
        H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &data);
        return text;
    }
    // One byte more than stored, for the terminator of the null-terminated memory type.
    const size_t size = H5Tget_size(type.get()) + 1;
    if (size > fileBytes(path))
        throw fileError(path, name + " claims " + std::to_string(size) + " bytes, more than the file holds");
    H5Tset_size(mem.get(), size);
    std::string text(size, '\0');
    check(H5Dread(set.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), path, "cannot read " + name);
    text.resize(std::strlen(text.c_str()));
    return text;
}

// Describes the dataset `where`; its declared size is checked against what the file
// stores, so nothing is allocated for a size a corrupt header made up.
Stored describeDataset(hid_t file, const std::string& where, const std::string& path) {
    Stored s = describe(file, where, path);
    if (!s.supported) return s;
    Handle set(H5Dopen2(file, where.c_str(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, "dataset " + where + " is missing");
    Handle type(H5Dget_type(set.get()), H5Tclose);
    int64_t numel = 0;
    try {
        numel = s.shape.numel();
    } catch (const Error&) {
        throw fileError(path, "dataset " + where + " has an impossible shape " + s.shape.str());
    }
    const uint64_t stored = H5Dget_storage_size(set.get());
    const uint64_t need = static_cast<uint64_t>(numel) * H5Tget_size(type.get());
    if (stored < need || stored > fileBytes(path)) {
        throw fileError(path, "dataset " + where + " declares " + s.shape.str() + " (" + std::to_string(need) +
                                  " bytes) but the file stores " + std::to_string(stored) + " bytes for it");
    }
    return s;
}

// How many of the n floats at `p` are NaN or infinite (all exponent bits set).
int64_t nonFinite(const char* p, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, p + 4 * i, 4);
        bad += (bits & 0x7f800000u) == 0x7f800000u;
    }
    return bad;
}

// Room the reader leaves after a dataset's elements: readWholeChunk reads the checksum there.
constexpr size_t kChunkRoom = 4;

// The layout Tessera saves (writeTensor): the elements in one chunk of the memory type,
// under Fletcher-32 alone, read as they lie in the file into `out` (`bytes` and the
// checksum's 4 bytes after them) and checked here: libhdf5 would read the chunk into a
// buffer of its own, check it there and copy it over. False when the dataset is laid out
// otherwise or anything does not match (then H5Dread reads it, and reports what is wrong).
bool readWholeChunk(hid_t set, hid_t mem, const Shape& shape, char* out, size_t bytes) {
    Handle create(H5Dget_create_plist(set), H5Pclose);
    Handle type(H5Dget_type(set), H5Tclose);
    const int rank = static_cast<int>(shape.rank());
    if (!create.ok() || !type.ok() || rank == 0 || H5Pget_layout(create.get()) != H5D_CHUNKED ||
        H5Tequal(type.get(), mem) <= 0 || H5Pget_nfilters(create.get()) != 1) {
        return false;
    }
    unsigned flags = 0, config = 0, values[4] = {};
    size_t count = 4;
    char name[16] = {};
    if (H5Pget_filter2(create.get(), 0, &flags, &count, values, sizeof name, name, &config) != H5Z_FILTER_FLETCHER32)
        return false;
    std::vector<hsize_t> chunk(static_cast<size_t>(rank));
    if (H5Pget_chunk(create.get(), rank, chunk.data()) != rank) return false;
    for (int i = 0; i < rank; ++i) {
        if (chunk[static_cast<size_t>(i)] != static_cast<hsize_t>(shape[i])) return false;
    }
    const std::vector<hsize_t> origin(static_cast<size_t>(rank), 0);
    hsize_t stored = 0;
    if (H5Dget_chunk_storage_size(set, origin.data(), &stored) < 0 || stored != bytes + 4) return false;
    uint32_t skipped = 0;
    if (H5Dread_chunk(set, H5P_DEFAULT, origin.data(), &skipped, out) < 0 || skipped != 0) return false;
    const auto* b = reinterpret_cast<const unsigned char*>(out + bytes); // stored little-endian
    const uint32_t sum = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    return sum == io_detail::fletcher32(reinterpret_cast<const unsigned char*>(out), bytes);
}

// Reads the elements of a dataset describeDataset described into `out` (s.bytes() bytes,
// and kChunkRoom after them).
void readElements(hid_t file, const Stored& s, char* out, const std::string& path) {
    const std::string& where = s.dataset;
    const size_t bytes = s.bytes();
    if (bytes == 0) return;
    Handle set(H5Dopen2(file, where.c_str(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, "dataset " + where + " is missing");
    const hid_t mem = s.dtype == DType::int32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    if (!readWholeChunk(set.get(), mem, s.shape, out, bytes) &&
        H5Dread(set.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
        Handle create(H5Dget_create_plist(set.get()), H5Pclose);
        unsigned flags = 0, config = 0, values[4] = {};
        size_t count = 4;
        const bool summed = create.ok() && H5Pget_filter_by_id2(create.get(), H5Z_FILTER_FLETCHER32, &flags, &count,
                                                                values, 0, nullptr, &config) >= 0;
        throw fileError(path, "cannot read " + where +
                                  (summed ? ": its bytes do not match its Fletcher-32 checksum (the file is damaged; "
                                            "save it again from a good copy)"
                                          : ""));
    }
    // NaN or infinity in a parameter poisons every step that uses it. An attribute is a
    // constant its layer was made with, which may hold infinities (a mask's -inf fill).
    if (s.dtype != DType::int32 && where.rfind("attrs/", 0) != 0) {
        const auto numel = static_cast<int64_t>(bytes / 4);
        const int64_t bad = nonFinite(out, numel);
        if (bad > 0) {
            throw fileError(path, "dataset " + where + " holds " + std::to_string(bad) + " non-finite value" +
                                      (bad > 1 ? "s" : "") + " (NaN or infinity) of " + std::to_string(numel) +
                                      ": the model it was saved from had diverged");
        }
    }
}

// The parts of the open file a snapshot holds, its datasets described (hdf5Read reads their
// elements).
Snapshot readParts(const Handle& file, const std::string& path, unsigned parts) {
    auto exists = [&](const char* name) { return H5Lexists(file.get(), name, H5P_DEFAULT) > 0; };
    auto group = [&](const std::string& name) {
        Handle g(H5Gopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
        if (!g.ok()) throw fileError(path, "the '" + name + "' group is unreadable");
        return members(g.get());
    };
    Snapshot s;
    if (parts & blueprintPart) {
        s.hasBlueprint = exists("blueprint");
        if (s.hasBlueprint) s.blueprint = readString(file.get(), "blueprint", path);
        if (exists("inputs")) s.inputs = readString(file.get(), "inputs", path);
        if (exists("classes")) s.classes = readString(file.get(), "classes", path);
        if (exists("transforms")) s.transforms = readString(file.get(), "transforms", path);
    }
    if (parts & modelPart) {
        s.hasLinks = exists("links");
        if (s.hasLinks) {
            for (const std::string& n : group("links")) {
                const int64_t index = readIndex(file.get(), "links/" + n, path);
                s.links.emplace_back(n, index);
                if (!s.params.count(index)) {
                    s.params[index] = describeDataset(file.get(), "params/" + std::to_string(index), path);
                }
            }
        }
        if (exists("counters")) s.counters = readString(file.get(), "counters", path);
        s.hasAttrs = exists("attrs");
        if (s.hasAttrs) {
            for (const std::string& n : group("attrs")) {
                s.attrs.push_back(describeDataset(file.get(), "attrs/" + n, path));
                s.attrs.back().where = n;
            }
        }
    }
    if (parts & extrasPart) {
        s.hasExtras = exists("extra") && exists("extra_record");
        if (s.hasExtras) {
            s.record = readString(file.get(), "extra_record", path);
            for (const std::string& n : group("extra")) {
                s.extras.push_back(describeDataset(file.get(), "extra/" + n, path));
                s.extras.back().where = n;
            }
        }
    }
    return s;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// The reader's memory limit for one file: its address space so far plus room for a
// snapshot of the file (16-bit data grows to 32), so a size libhdf5 took from a corrupt
// header fails to allocate instead of succeeding. (AddressSanitizer builds reserve
// terabytes of address space and cap allocations themselves: none there.)
void limitMemory(uint64_t fileSize) {
    if (kAddressSanitizer) return;
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    if (!(statm >> pages)) return;
    const uint64_t limit = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + 4 * fileSize + (uint64_t{1} << 30);
    const rlimit rl{limit, RLIM_INFINITY};
    ::setrlimit(RLIMIT_AS, &rl);
}

} // namespace

} // namespace tessera::hdf5_detail

namespace tessera {

using namespace hdf5_detail;

// The reader process (io_detail::ChildServer: started on the first read and kept; one that
// crashed or hung is replaced at the next read). A request is (parts, file size, path);
// the answer is '\1' and the error's message, or '\0' and the serialized snapshot, after
// which the reader streams every dataset's elements in datasets()'s order. It reads and
// checks them all first, so a damaged file is an error before any tensor is written.
io_detail::Answer io_detail::hdf5Read(const std::string& request) {
    std::string path;
    try {
        WireReader r(request, path);
        const auto parts = static_cast<unsigned>(r.u64());
        const uint64_t size = r.u64();
        path = r.str();
        limitMemory(size);
        quietHdf5();
        Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
        if (!file.ok()) throw fileError(path, "cannot be opened as HDF5 (truncated or corrupt?)");
        const Snapshot s = readParts(file, path, parts);
        const std::vector<const Stored*> sets = datasets(s);
        std::vector<std::pair<size_t, size_t>> spans; // each dataset's offset and bytes
        size_t total = 0;
        for (const Stored* st : sets) {
            total = (total + 63) / 64 * 64;
            spans.emplace_back(total, st->bytes());
            total += st->bytes() + kChunkRoom;
        }
        const std::shared_ptr<char> elements = io_detail::mapPages(total);
        if (total > 0 && !elements)
            throw fileError(path, "cannot read it: no memory for its " + std::to_string(total) + " bytes of elements");
        for (size_t i = 0; i < sets.size(); ++i)
            readElements(file.get(), *sets[i], elements.get() + spans[i].first, path);
        return Answer(std::string(1, '\0') + serialize(s), [elements, spans](Outgoing& out) {
            for (const auto& [at, n] : spans) {
                if (!out.write(elements.get() + at, n)) return false;
            }
            return true;
        });
    } catch (const std::exception& e) {
        return std::string(1, '\1') + e.what();
    } catch (...) {
        return std::string(1, '\1') + fileError(path, "cannot read it").what();
    }
}

} // namespace tessera
