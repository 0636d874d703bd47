// HDF5 model files through the HDF5 C API. Every handle is closed by a small RAII owner.
#include "io/Hdf5.h"

#include <fcntl.h>
#include <hdf5.h>
#include <malloc.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "backend/Backend.h"
#include "backend/Files.h"
#include "io/ChildProcess.h"

namespace tessera {

namespace {

// An hid_t closed by `close` when it goes out of scope.
class Handle {
public:
    Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
    ~Handle() {
        if (id_ >= 0) close_(id_);
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
    hid_t get() const { return id_; }
    bool ok() const { return id_ >= 0; }

private:
    hid_t id_;
    herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr by default; our exceptions say what went wrong.
void quietHdf5() {
    static const bool done = [] {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)done;
}

IoError fileError(const std::string& path, const std::string& what) {
    return IoError("model file " + path + ": " + what);
}

void check(herr_t status, const std::string& path, const std::string& what) {
    if (status < 0) throw fileError(path, what);
}

// A 16-bit little-endian float type: float16 (IEEE half: 5 exponent bits) or bfloat16
// (float32's upper half: 8 exponent bits). h5py reads the first as numpy's float16.
Handle halfType(DType dtype) {
    const bool bf = dtype == DType::bfloat16;
    Handle type(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    H5Tset_fields(type.get(), 15, bf ? 7 : 10, bf ? 8 : 5, 0, bf ? 7 : 10);
    H5Tset_offset(type.get(), 0);
    H5Tset_precision(type.get(), 16);
    H5Tset_size(type.get(), 2);
    H5Tset_ebias(type.get(), bf ? 127 : 15);
    return type;
}

// Creation properties (H5P_FILE_CREATE, H5P_GROUP_CREATE or H5P_DATASET_CREATE) without
// HDF5's default modification times, so the same model saves to the same bytes.
Handle untimed(hid_t cls) {
    Handle list(H5Pcreate(cls), H5Pclose);
    if (list.ok()) H5Pset_obj_track_times(list.get(), 0);
    return list;
}

// Writes t; a float32 tensor is stored as `store` (rounded by Tensor::astype).
void writeTensor(hid_t group, const std::string& name, const Tensor& t, const std::string& path,
                 DType store = DType::float32) {
    Tensor host = t.toHost().plain();
    const bool half = host.dtype() != DType::int32 && store != DType::float32;
    if (half && host.dtype() != store) host = host.astype(store);
    if (!half && host.dtype() != DType::float32 && host.dtype() != DType::int32) host = host.astype(DType::float32);
    std::vector<hsize_t> dims;
    for (int64_t d : host.shape().dims()) dims.push_back(static_cast<hsize_t>(d));
    Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    Handle custom = half ? halfType(host.dtype()) : Handle(-1, H5Tclose);
    const hid_t type = half ? custom.get() : host.dtype() == DType::int32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    // Each array carries HDF5's Fletcher-32 checksum (in one chunk: the filter needs a
    // chunked layout); reading it back verifies it. Empty arrays cannot be chunked.
    Handle create = untimed(H5P_DATASET_CREATE);
    if (!dims.empty() && host.numel() > 0) {
        check(H5Pset_chunk(create.get(), static_cast<int>(dims.size()), dims.data()), path, "cannot chunk " + name);
        check(H5Pset_fletcher32(create.get()), path, "cannot add a checksum to " + name);
    }
    Handle set(H5Dcreate2(group, name.c_str(), type, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, "cannot create dataset " + name);
    check(H5Dwrite(set.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.raw()), path, "cannot write " + name);
}

void writeIndex(hid_t group, const std::string& name, int64_t index, const std::string& path) {
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle set(H5Dcreate2(group, name.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT,
                          untimed(H5P_DATASET_CREATE).get(), H5P_DEFAULT),
               H5Dclose);
    if (!set.ok()) throw fileError(path, "cannot create link " + name);
    check(H5Dwrite(set.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &index), path, "cannot write " + name);
}

// A fixed-length string: variable-length ones live in HDF5's global heap, whose reader
// crashes or loops on a corrupted heap index (files read back either kind).
void writeString(hid_t file, const std::string& name, const std::string& text, const std::string& path) {
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), std::max<size_t>(1, text.size()));
    H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle set(H5Dcreate2(file, name.c_str(), type.get(), space.get(), H5P_DEFAULT, untimed(H5P_DATASET_CREATE).get(),
                          H5P_DEFAULT),
               H5Dclose);
    std::string padded = text;
    padded.resize(std::max<size_t>(1, text.size()), '\0');
    if (!set.ok()) throw fileError(path, "cannot create " + name);
    check(H5Dwrite(set.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()), path, "cannot write " + name);
}

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

// A dataset as read: its shape, stored type and (for supported types) its elements as
// float32 (floating types, through HDF5's conversion) or int32.
struct Stored {
    Shape shape;
    DType dtype = DType::float32;
    bool supported = true;
    std::string where;       // dataset path
    std::vector<char> bytes; // float32 or int32 elements, as the reader read them
    // The same elements in the parent: a view of the reader's answer, which the Snapshot
    // holds (the elements are not copied again before they reach the tensors).
    std::string_view wire;
    std::string_view elements() const { return bytes.empty() ? wire : std::string_view(bytes.data(), bytes.size()); }
};

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

// The size of the file at `path` (0 when it cannot be read).
uint64_t fileBytes(const std::string& path) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(path, ec);
    return ec ? 0 : static_cast<uint64_t>(n);
}

} // namespace

bool isHdf5File(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char sig[8] = {};
    in.read(sig, 8);
    return in.gcount() == 8 && std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8);
}

namespace {
void saveModelWith(const Module& module, const std::string& path, const SaveOptions& options,
                   const FileExtras* extras) {
    quietHdf5();
    if (!isFloating(options.dtype)) {
        throw IoError("model file " + path + ": parameters are stored as float32, bfloat16 or float16, not " +
                      str(options.dtype));
    }
    // Built in memory (HDF5's core driver), then written through writeAtomically: a
    // temporary beside the target, synced and renamed over it, so a full disk or a kill
    // leaves the old file whole, and HDF5 itself never meets a failing disk (whose errors
    // left files open in its library until a crash at exit).
    std::string image;
    {
        Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        check(H5Pset_fapl_core(access.get(), 1 << 20, /*backing_store=*/0), path, "cannot set up an in-memory file");
        static std::atomic<uint64_t> saves{0}; // a name of its own: it is never written, but HDF5 knows files by name
        const std::string name = "tessera-model-in-memory-" + std::to_string(saves++);
        Handle file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, untimed(H5P_FILE_CREATE).get(), access.get()), H5Fclose);
        if (!file.ok()) throw fileError(path, "cannot create the file in memory");
        Handle params(H5Gcreate2(file.get(), "params", H5P_DEFAULT, untimed(H5P_GROUP_CREATE).get(), H5P_DEFAULT),
                      H5Gclose);
        Handle links(H5Gcreate2(file.get(), "links", H5P_DEFAULT, untimed(H5P_GROUP_CREATE).get(), H5P_DEFAULT),
                     H5Gclose);
        Handle attrs(H5Gcreate2(file.get(), "attrs", H5P_DEFAULT, untimed(H5P_GROUP_CREATE).get(), H5P_DEFAULT),
                     H5Gclose);
        std::unordered_map<const Variable*, int64_t> index;
        for (const auto& [name, var] : module.namedParams()) {
            auto [it, fresh] = index.emplace(var.get(), static_cast<int64_t>(index.size()));
            if (fresh) writeTensor(params.get(), std::to_string(it->second), var->data, path, options.dtype);
            writeIndex(links.get(), name, it->second, path);
        }
        for (const auto& [name, t] : module.namedAttrs()) writeTensor(attrs.get(), name, t, path, options.dtype);
        if (options.blueprint) writeString(file.get(), "blueprint", module.blueprint().toJson(), path);
        const auto counters = const_cast<Module&>(module).namedCounters(); // read only
        if (!counters.empty()) {
            nlohmann::json values = nlohmann::json::object();
            for (const auto& [name, c] : counters) values[name] = *c;
            writeString(file.get(), "counters", values.dump(), path);
        }
        if (!options.inputs.empty()) {
            std::string text;
            for (const Shape& in : options.inputs) {
                if (!text.empty()) text += ';';
                text += shapeText(in);
            }
            writeString(file.get(), "inputs", text, path);
        }
        if (!options.classes.empty()) writeString(file.get(), "classes", nlohmann::json(options.classes).dump(), path);
        if (!options.transforms.empty()) writeString(file.get(), "transforms", options.transforms, path);
        if (extras) {
            Handle extra(H5Gcreate2(file.get(), "extra", H5P_DEFAULT, untimed(H5P_GROUP_CREATE).get(), H5P_DEFAULT),
                         H5Gclose);
            for (const auto& [name, t] : extras->tensors) {
                if (name.empty() || name.find('/') != std::string::npos || name == ".") {
                    throw fileError(path, "an extra tensor name must be non-empty, without '/': '" + name + "'");
                }
                writeTensor(extra.get(), name, t, path, DType::float32);
            }
            writeString(file.get(), "extra_record", extras->record, path);
        }
        check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), path, "cannot flush the file in memory");
        const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
        if (size <= 0) throw fileError(path, "cannot read back the file built in memory");
        image.resize(static_cast<size_t>(size));
        if (H5Fget_file_image(file.get(), image.data(), image.size()) != size) {
            throw fileError(path, "cannot read back the file built in memory");
        }
    }
    writeFileAtomically(path, "model file", image);
}
} // namespace

void saveModel(const Module& module, const std::string& path, const SaveOptions& options) {
    saveModelWith(module, path, options, nullptr);
}

void saveModel(const Module& module, const std::string& path, const SaveOptions& options, const FileExtras& extras) {
    saveModelWith(module, path, options, &extras);
}

namespace {

// ---- reading, in a reader process -----------------------------------------------------
//
// libhdf5 trusts the sizes and offsets in a file's metadata: a corrupt file can make it
// crash (group iteration, the global heap), loop, or allocate gigabytes before it fails,
// and none of that can be checked from outside before it happens. So every read runs in
// a reader process, under a memory limit where the build allows one: the reader reads what
// the caller needs into a snapshot and sends it back through a pipe; a crash, a hang or
// a failed allocation there is an IoError naming the file here. The parent never reads a
// file through libhdf5.

// Which parts of a file a snapshot holds.
enum Part : unsigned { blueprintPart = 1, modelPart = 2, extrasPart = 4 };

struct Snapshot {
    bool hasBlueprint = false;
    std::string blueprint;
    std::string inputs;     // the "inputs" text, empty when none
    std::string classes;    // the "classes" JSON array of names, empty when none
    std::string transforms; // the "transforms" text, empty when none
    std::string counters;   // the "counters" JSON object, empty when none
    bool hasLinks = false;
    std::vector<std::pair<std::string, int64_t>> links; // link name -> params index
    std::map<int64_t, Stored> params;                   // the linked params/<index>
    bool hasAttrs = false;
    std::vector<Stored> attrs; // where = the attribute's name
    bool hasExtras = false;
    std::vector<Stored> extras; // where = the tensor's name
    std::string record;
    std::shared_ptr<const std::string> answer; // the reader's answer, which `wire` views
};

// The snapshot's wire format: numbers as 8 native bytes, strings and byte arrays with
// their length first.
void put(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, const std::string& v) {
    put(out, static_cast<uint64_t>(v.size()));
    out += v;
}
void put(std::string& out, const Stored& v) {
    put(out, v.where);
    put(out, static_cast<uint64_t>(v.dtype));
    put(out, static_cast<uint64_t>(v.supported));
    put(out, static_cast<uint64_t>(v.shape.rank()));
    for (int64_t d : v.shape.dims()) put(out, static_cast<uint64_t>(d));
    put(out, static_cast<uint64_t>(v.bytes.size()));
    out.append(v.bytes.data(), v.bytes.size());
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
        v.dtype = static_cast<DType>(u64());
        v.supported = u64() != 0;
        const uint64_t rank = u64();
        if (rank > 32) bad();
        std::vector<int64_t> dims;
        for (uint64_t i = 0; i < rank; ++i) dims.push_back(static_cast<int64_t>(u64()));
        v.shape = Shape(dims);
        const uint64_t n = u64();
        need(n);
        v.wire = in_.substr(at_, n);
        at_ += n;
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

// Appended to `out` (the answer's first byte), which is sized once; each dataset's elements
// are freed once appended, so the reader holds about one copy of them at a time.
std::string serialize(Snapshot&& s, std::string out) {
    size_t size = out.size() + 8 * 16 + s.blueprint.size() + s.inputs.size() + s.classes.size() + s.transforms.size() +
                  s.counters.size() + s.record.size();
    auto storedSize = [](const Stored& v) { return 8 * (7 + v.shape.rank()) + v.where.size() + v.bytes.size(); };
    for (const auto& [name, index] : s.links) size += 16 + name.size();
    for (const auto& [index, st] : s.params) size += 8 + storedSize(st);
    for (const Stored& st : s.attrs) size += storedSize(st);
    for (const Stored& st : s.extras) size += storedSize(st);
    out.reserve(size);
    auto putAndFree = [&out](Stored& st) {
        put(out, st);
        std::vector<char>().swap(st.bytes);
    };
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
    for (auto& [index, st] : s.params) {
        put(out, static_cast<uint64_t>(index));
        putAndFree(st);
    }
    put(out, s.hasAttrs);
    put(out, static_cast<uint64_t>(s.attrs.size()));
    for (Stored& st : s.attrs) putAndFree(st);
    put(out, s.hasExtras);
    put(out, static_cast<uint64_t>(s.extras.size()));
    for (Stored& st : s.extras) putAndFree(st);
    put(out, s.record);
    return out;
}

// `in` views `answer`, which the snapshot keeps.
Snapshot deserialize(std::string_view in, std::shared_ptr<const std::string> answer, const std::string& path) {
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
    s.answer = std::move(answer);
    return s;
}

// ---- the child's side: libhdf5 calls --------------------------------------------------

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

// Describes and reads the dataset `where`. Its declared size is checked against what the
// file stores before anything is allocated.
Stored readDataset(hid_t file, const std::string& where, const std::string& path) {
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
    s.bytes.resize(static_cast<size_t>(numel) * 4);
    const hid_t mem = s.dtype == DType::int32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    if (numel > 0 && H5Dread(set.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.bytes.data()) < 0) {
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
    if (s.dtype != DType::int32) { // NaN or infinity in a parameter poisons every step that uses it
        const auto* v = reinterpret_cast<const float*>(s.bytes.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < numel; ++i) bad += !std::isfinite(v[i]);
        if (bad > 0) {
            throw fileError(path, "dataset " + where + " holds " + std::to_string(bad) + " non-finite value" +
                                      (bad > 1 ? "s" : "") + " (NaN or infinity) of " + std::to_string(numel) +
                                      ": the model it was saved from had diverged");
        }
    }
    return s;
}

Snapshot readParts(const std::string& path, unsigned parts) {
    Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file.ok()) throw fileError(path, "cannot be opened as HDF5 (truncated or corrupt?)");
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
                    s.params[index] = readDataset(file.get(), "params/" + std::to_string(index), path);
                }
            }
        }
        if (exists("counters")) s.counters = readString(file.get(), "counters", path);
        s.hasAttrs = exists("attrs");
        if (s.hasAttrs) {
            for (const std::string& n : group("attrs")) {
                s.attrs.push_back(readDataset(file.get(), "attrs/" + n, path));
                s.attrs.back().where = n;
            }
        }
    }
    if (parts & extrasPart) {
        s.hasExtras = exists("extra") && exists("extra_record");
        if (s.hasExtras) {
            s.record = readString(file.get(), "extra_record", path);
            for (const std::string& n : group("extra")) {
                s.extras.push_back(readDataset(file.get(), "extra/" + n, path));
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

// How long a read may take before the reader is taken to hang: TESSERA_HDF5_READ_TIMEOUT
// seconds (a decimal number), else 10 s; plus a second per 50 MB of file.
std::chrono::milliseconds readTimeout(uint64_t fileSize) {
    static const double seconds = [] {
        const char* env = std::getenv("TESSERA_HDF5_READ_TIMEOUT");
        const double v = env ? std::atof(env) : 0.0;
        return v > 0.0 && v < 1e6 ? v : 10.0;
    }();
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0) +
                                     static_cast<int64_t>(fileSize / (50 << 20)) * 1000);
}

// The parts of `path` a snapshot holds, read by the reader process (see above).
Snapshot snapshot(const std::string& path, unsigned parts) {
    quietHdf5();
    if (!std::filesystem::exists(path)) throw fileError(path, "no such file");
    if (!isHdf5File(path)) throw fileError(path, "not an HDF5 file (no HDF5 signature)");
    // Never destroyed: reads during static destruction work.
    static auto* reader = new io_detail::ChildServer("hdf5-read");
    const uint64_t size = fileBytes(path);
    std::string request;
    put(request, static_cast<uint64_t>(parts));
    put(request, size);
    put(request, path);
    // Generous for a healthy file (10 s, plus a second per 50 MB); a looping reader is stopped.
    io_detail::ChildServer::Result r = reader->call(request, readTimeout(size));
    using Failure = io_detail::ChildServer::Result::Failure;
    switch (r.failure) {
    case Failure::none: break;
    case Failure::cannotStart: throw fileError(path, "cannot read it: " + r.detail);
    case Failure::timedOut: throw fileError(path, "is unreadable: reading it did not finish in time (a corrupt file?)");
    case Failure::crashed:
        throw fileError(path, "is unreadable: the HDF5 library crashed reading it (" + r.detail + "; a corrupt file)");
    case Failure::exited:
        throw fileError(path, "is unreadable: the HDF5 library failed reading it (" + r.detail + "; a corrupt file)");
    }
    auto got = std::make_shared<const std::string>(std::move(*r.answer));
    if (got->empty()) throw fileError(path, "cannot read it");
    if ((*got)[0] != '\0') throw IoError(got->substr(1)); // the reader's error, already naming the file
    return deserialize(std::string_view(*got).substr(1), got, path);
}

// Copies a snapshot's elements into `dst` (its shape and an element type it can hold).
// A plain tensor in host memory takes them directly; others through a host copy.
void copyInto(const Stored& s, const Tensor& dst) {
    const std::string_view elements = s.elements();
    if (static_cast<size_t>(dst.numel()) * sizeOf(dst.dtype()) != elements.size())
        throw IoError("model file: dataset " + s.where + " changed size");
    if (dst.device().isCpu() && dst.isPlain()) {
        if (!elements.empty()) std::memcpy(dst.raw(), elements.data(), elements.size());
        return;
    }
    Tensor host = Tensor::empty(dst.shape(), dst.dtype());
    if (!elements.empty()) std::memcpy(host.raw(), elements.data(), elements.size());
    Tensor(dst).copyFrom(host.to(dst.device()).toLayout(dst.layout()));
}

} // namespace

// The reader process (io_detail::ChildServer: started on the first read and kept; one that
// crashed or hung is replaced at the next read). A request is (parts, file size, path);
// the answer is '\0' and the serialized snapshot, or '\1' and the error's message.
std::string io_detail::hdf5Read(const std::string& request) {
    std::string path;
    try {
        WireReader r(request, path);
        const auto parts = static_cast<unsigned>(r.u64());
        const uint64_t size = r.u64();
        path = r.str();
        limitMemory(size);
        // Blocks of 1 MiB and more mapped for themselves, so that a dataset's elements freed
        // once serialized go back to the OS (glibc otherwise raises this threshold as mapped
        // blocks are freed, and later ones stay in its heap). The reader is this process.
        ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
        return serialize(readParts(path, parts), std::string(1, '\0'));
    } catch (const std::exception& e) {
        return std::string(1, '\1') + e.what();
    } catch (...) {
        return std::string(1, '\1') + fileError(path, "cannot read it").what();
    }
}

void loadModel(Module& module, const std::string& path, LoadMode mode) {
    const Snapshot file = snapshot(path, modelPart);
    std::vector<std::string> problems;
    std::vector<std::pair<const Stored*, Tensor>> copies;
    auto match = [&](const std::string& what, const std::string& name, const Tensor& dst, const Stored& s) {
        if (!s.supported) {
            problems.push_back(what + " " + name + ": stored with an unsupported type");
        } else if (s.dtype != dst.dtype() && !(isFloating(s.dtype) && dst.dtype() == DType::float32)) {
            problems.push_back(what + " " + name + ": file has " + str(s.dtype) + ", model has " + str(dst.dtype()));
        } else if (s.shape != dst.shape()) {
            problems.push_back(what + " " + name + ": file has " + s.shape.str() + ", model has " + dst.shape().str());
        } else {
            copies.emplace_back(&s, dst);
        }
    };
    // Parameters through links/.
    std::map<std::string, int64_t> stored; // link name -> params index
    if (file.hasLinks) {
        for (const auto& [n, index] : file.links) stored[n] = index;
    } else {
        problems.push_back("the file has no links/ group");
    }
    for (const auto& [name, var] : module.namedParams()) {
        auto it = stored.find(name);
        if (it == stored.end()) {
            if (mode == LoadMode::strict) problems.push_back("parameter " + name + ": not in the file");
            continue;
        }
        match("parameter", name, var->data, file.params.at(it->second));
        stored.erase(it);
    }
    if (mode == LoadMode::strict) {
        for (const auto& [name, index] : stored)
            problems.push_back("parameter " + name + ": in the file but not in the model");
    }
    // Attributes.
    std::map<std::string, const Stored*> storedAttrs;
    for (const Stored& a : file.attrs) storedAttrs[a.where] = &a;
    for (const auto& [name, t] : module.namedAttrs()) {
        auto it = storedAttrs.find(name);
        if (it == storedAttrs.end()) {
            if (mode == LoadMode::strict) problems.push_back("attribute " + name + ": not in the file");
            continue;
        }
        match("attribute", name, t, *it->second);
        storedAttrs.erase(it);
    }
    if (mode == LoadMode::strict) {
        for (const auto& [name, a] : storedAttrs)
            problems.push_back("attribute " + name + ": in the file but not in the model");
    }
    // Training counters (batch norm's batches seen): restored where the file has them, so
    // training on from a model file continues its running averages; files from before
    // they were saved leave the model's own.
    std::vector<std::pair<int64_t*, int64_t>> counterValues;
    if (!file.counters.empty()) {
        nlohmann::json saved;
        try {
            saved = nlohmann::json::parse(file.counters);
        } catch (const nlohmann::json::exception&) {
            throw fileError(path, "its training counters are not a JSON object (a corrupt file?)");
        }
        if (!saved.is_object()) throw fileError(path, "its training counters are not a JSON object (a corrupt file?)");
        for (const auto& [name, c] : module.namedCounters()) {
            auto it = saved.find(name);
            if (it == saved.end()) continue;
            if (!it->is_number_integer() || it->get<int64_t>() < 0) {
                problems.push_back("counter " + name + ": file has " + it->dump() + ", not a count");
            } else {
                counterValues.emplace_back(c, it->get<int64_t>());
            }
            saved.erase(it);
        }
        if (mode == LoadMode::strict) {
            for (const auto& [name, v] : saved.items())
                problems.push_back("counter " + name + ": in the file but not in the model");
        }
    }
    if (!problems.empty()) {
        std::string msg =
            std::to_string(problems.size()) + " mismatch(es) with " + module.str() + "; nothing was loaded:";
        for (const std::string& p : problems) msg += "\n  " + p;
        throw fileError(path, msg);
    }
    for (const auto& [s, dst] : copies) copyInto(*s, dst);
    for (const auto& [c, v] : counterValues) *c = v;
    noteParameterChange();
}

std::string readBlueprint(const std::string& path) {
    const Snapshot file = snapshot(path, blueprintPart);
    if (!file.hasBlueprint) throw fileError(path, "holds no blueprint");
    // A corrupt global heap can read as an empty string instead of crashing the reader
    // (libhdf5's state from earlier reads in the reader process decides which).
    if (file.blueprint.empty()) throw fileError(path, "is unreadable: its blueprint is empty (a corrupt file?)");
    return file.blueprint;
}

Shapes readInputShapes(const std::string& path) {
    const std::string text = snapshot(path, blueprintPart).inputs;
    Shapes out;
    if (text.empty()) return out;
    std::stringstream in(text + ";"); // a trailing ';' in the file leaves an empty last shape: malformed
    std::string one;
    try {
        while (std::getline(in, one, ';')) out.push_back(parseShape(one));
    } catch (const ShapeError& e) {
        throw fileError(path, "its input shapes '" + text + "' are malformed (" + e.what() + ")");
    }
    return out;
}

std::vector<std::string> readClassNames(const std::string& path) {
    const std::string text = snapshot(path, blueprintPart).classes;
    if (text.empty()) return {};
    try {
        return nlohmann::json::parse(text).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
        throw fileError(path, "its class names are malformed (" + std::string(e.what()) + ")");
    }
}

std::string readTransforms(const std::string& path) { return snapshot(path, blueprintPart).transforms; }

FileExtras loadExtras(const std::string& path) {
    const Snapshot file = snapshot(path, extrasPart);
    if (!file.hasExtras) {
        throw fileError(path, "is a model file without checkpoint data (no 'extra' group and record)");
    }
    FileExtras extras;
    extras.record = file.record;
    for (const Stored& s : file.extras) {
        if (!s.supported || s.dtype == DType::int32)
            throw fileError(path, "extra/" + s.where + " is not a float tensor");
        Tensor t = Tensor::empty(s.shape, DType::float32);
        copyInto(s, t);
        extras.tensors.emplace_back(s.where, t);
    }
    return extras;
}

} // namespace tessera
