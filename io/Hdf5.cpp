// HDF5 model files through the HDF5 C API. Every handle is closed by a small RAII owner.
#include "io/Hdf5.h"

#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "backend/Backend.h"

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
    Handle set(H5Dcreate2(group, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, "cannot create dataset " + name);
    check(H5Dwrite(set.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.raw()), path, "cannot write " + name);
}

void writeIndex(hid_t group, const std::string& name, int64_t index, const std::string& path) {
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle set(H5Dcreate2(group, name.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
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
    Handle set(H5Dcreate2(file, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
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

struct Stored {
    Shape shape;
    DType dtype = DType::float32;
    bool supported = true;
    std::string where; // dataset path
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

void readInto(hid_t file, const Stored& s, const Tensor& dst, const std::string& path) {
    Handle set(H5Dopen2(file, s.where.c_str(), H5P_DEFAULT), H5Dclose);
    Tensor host = Tensor::empty(dst.shape(), dst.dtype());
    const hid_t type = dst.dtype() == DType::int32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    check(H5Dread(set.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.raw()), path, "cannot read " + s.where);
    Tensor(dst).copyFrom(host.to(dst.device()).toLayout(dst.layout()));
}

int64_t readIndex(hid_t file, const std::string& where, const std::string& path) {
    Handle set(H5Dopen2(file, where.c_str(), H5P_DEFAULT), H5Dclose);
    int64_t index = -1;
    if (!set.ok() || H5Dread(set.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &index) < 0) {
        throw fileError(path, "link " + where + " is unreadable");
    }
    return index;
}

// An open file id (the caller owns it).
hid_t openFile(const std::string& path) {
    quietHdf5();
    if (!std::filesystem::exists(path)) throw fileError(path, "no such file");
    if (!isHdf5File(path)) throw fileError(path, "not an HDF5 file (no HDF5 signature)");
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) throw fileError(path, "cannot be opened as HDF5 (truncated or corrupt?)");
    return file;
}

} // namespace

bool isHdf5File(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char sig[8] = {};
    in.read(sig, 8);
    return in.gcount() == 8 && std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8);
}

namespace {
// fsync of a file or directory by path; false (errno set) when it cannot be done.
bool syncFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return ok;
}
} // namespace

namespace {
void saveModelWith(const Module& module, const std::string& path, const SaveOptions& options,
                   const FileExtras* extras) {
    quietHdf5();
    if (!isFloating(options.dtype)) {
        throw IoError("model file " + path + ": parameters are stored as float32, bfloat16 or float16, not " +
                      str(options.dtype));
    }
    // Written beside the target, synced to disk, then renamed over it: a crash or kill at
    // any point leaves the old file or the new one, whole. A failure removes the temporary;
    // one left by a kill is replaced by the next save.
    const std::string tmp = path + ".tmp";
    try {
        Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
        if (!file.ok()) throw fileError(path, "cannot create " + tmp);
        Handle params(H5Gcreate2(file.get(), "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        Handle links(H5Gcreate2(file.get(), "links", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        Handle attrs(H5Gcreate2(file.get(), "attrs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        std::unordered_map<const Variable*, int64_t> index;
        for (const auto& [name, var] : module.namedParams()) {
            auto [it, fresh] = index.emplace(var.get(), static_cast<int64_t>(index.size()));
            if (fresh) writeTensor(params.get(), std::to_string(it->second), var->data, path, options.dtype);
            writeIndex(links.get(), name, it->second, path);
        }
        for (const auto& [name, t] : module.namedAttrs()) writeTensor(attrs.get(), name, t, path, options.dtype);
        if (options.blueprint) writeString(file.get(), "blueprint", module.blueprint().toJson(), path);
        if (extras) {
            Handle extra(H5Gcreate2(file.get(), "extra", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
            for (const auto& [name, t] : extras->tensors) {
                if (name.empty() || name.find('/') != std::string::npos || name == ".") {
                    throw fileError(path, "an extra tensor name must be non-empty, without '/': '" + name + "'");
                }
                writeTensor(extra.get(), name, t, path, DType::float32);
            }
            writeString(file.get(), "extra_record", extras->record, path);
        }
        check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), path, "cannot flush " + tmp);
    } catch (...) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
        throw;
    }
    std::error_code ec;
    if (!syncFile(tmp)) {
        std::filesystem::remove(tmp, ec);
        throw fileError(path, "cannot sync " + tmp + " to disk: " + std::strerror(errno));
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        throw fileError(path, "cannot rename " + tmp + " over it: " + ec.message());
    }
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    syncFile(dir.empty() ? "." : dir.string()); // the rename itself; best effort
}
} // namespace

void saveModel(const Module& module, const std::string& path, const SaveOptions& options) {
    saveModelWith(module, path, options, nullptr);
}

void saveModel(const Module& module, const std::string& path, const SaveOptions& options, const FileExtras& extras) {
    saveModelWith(module, path, options, &extras);
}

void loadModel(Module& module, const std::string& path, LoadMode mode) {
    Handle file(openFile(path), H5Fclose);
    std::vector<std::string> problems;
    std::vector<std::pair<Stored, Tensor>> copies;
    auto match = [&](const std::string& what, const std::string& name, const Tensor& dst, const Stored& s) {
        if (!s.supported) {
            problems.push_back(what + " " + name + ": stored with an unsupported type");
        } else if (s.dtype != dst.dtype() && !(isFloating(s.dtype) && dst.dtype() == DType::float32)) {
            problems.push_back(what + " " + name + ": file has " + str(s.dtype) + ", model has " + str(dst.dtype()));
        } else if (s.shape != dst.shape()) {
            problems.push_back(what + " " + name + ": file has " + s.shape.str() + ", model has " + dst.shape().str());
        } else {
            copies.emplace_back(s, dst);
        }
    };
    // Parameters through links/.
    std::map<std::string, std::string> stored; // link name -> params dataset
    if (H5Lexists(file.get(), "links", H5P_DEFAULT) > 0) {
        Handle links(H5Gopen2(file.get(), "links", H5P_DEFAULT), H5Gclose);
        for (const std::string& n : members(links.get())) {
            stored[n] = "params/" + std::to_string(readIndex(file.get(), "links/" + n, path));
        }
    } else {
        problems.push_back("the file has no links/ group");
    }
    for (const auto& [name, var] : module.namedParams()) {
        auto it = stored.find(name);
        if (it == stored.end()) {
            if (mode == LoadMode::strict) problems.push_back("parameter " + name + ": not in the file");
            continue;
        }
        match("parameter", name, var->data, describe(file.get(), it->second, path));
        stored.erase(it);
    }
    if (mode == LoadMode::strict) {
        for (const auto& [name, set] : stored)
            problems.push_back("parameter " + name + ": in the file but not in the model");
    }
    // Attributes.
    std::map<std::string, bool> storedAttrs;
    if (H5Lexists(file.get(), "attrs", H5P_DEFAULT) > 0) {
        Handle attrs(H5Gopen2(file.get(), "attrs", H5P_DEFAULT), H5Gclose);
        for (const std::string& n : members(attrs.get())) storedAttrs[n] = true;
    }
    for (const auto& [name, t] : module.namedAttrs()) {
        if (!storedAttrs.erase(name)) {
            if (mode == LoadMode::strict) problems.push_back("attribute " + name + ": not in the file");
            continue;
        }
        match("attribute", name, t, describe(file.get(), "attrs/" + name, path));
    }
    if (mode == LoadMode::strict) {
        for (const auto& [name, b] : storedAttrs)
            problems.push_back("attribute " + name + ": in the file but not in the model");
    }
    if (!problems.empty()) {
        std::string msg =
            std::to_string(problems.size()) + " mismatch(es) with " + module.str() + "; nothing was loaded:";
        for (const std::string& p : problems) msg += "\n  " + p;
        throw fileError(path, msg);
    }
    for (const auto& [s, dst] : copies) readInto(file.get(), s, dst, path);
}

namespace {
// Runs `read` (a read through libhdf5 that a corrupt file can crash or hang: variable-length
// strings go through its global heap) in a child process and returns what it returned,
// which starts with a status byte (0: the rest is the value; else libhdf5 reported an
// error). A crash or no answer within a minute there is an IoError naming the file here.
std::string isolated(const std::string& path, const std::string& name, const std::function<std::string()>& read) {
    int fds[2];
    if (::pipe(fds) != 0) throw fileError(path, "cannot read " + name + ": pipe: " + std::strerror(errno));
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        throw fileError(path, "cannot read " + name + ": fork: " + std::strerror(errno));
    }
    if (pid == 0) { // the child: read, send, leave without running the parent's exit handlers
        ::close(fds[0]);
        std::string out;
        try {
            out = read();
        } catch (...) {
            out = "\x01";
        }
        const char* p = out.data();
        size_t left = out.size();
        while (left > 0) {
            const ssize_t n = ::write(fds[1], p, left);
            if (n <= 0) ::_exit(3);
            p += n;
            left -= static_cast<size_t>(n);
        }
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string got;
    char buf[65536];
    bool timedOut = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timedOut = true;
            break;
        }
        pollfd pfd{fds[0], POLLIN, 0};
        const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            timedOut = ready == 0;
            break;
        }
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    if (timedOut) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (timedOut) throw fileError(path, name + " is unreadable: reading it did not finish in 60 s (a corrupt file)");
    if (WIFSIGNALED(status)) {
        throw fileError(path, name + " is unreadable: the HDF5 library crashed reading it (signal " +
                                  std::to_string(WTERMSIG(status)) + "; a corrupt file)");
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { // a sanitizer turns a crash into an exit
        throw fileError(path, name + " is unreadable: the HDF5 library failed reading it (exit status " +
                                  std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "; a corrupt file)");
    }
    if (got.empty() || got[0] != '\0') throw fileError(path, "cannot read " + name);
    return got.substr(1);
}

// The string dataset `name` of an open file.
std::string readString(hid_t file, const std::string& name, const std::string& path) {
    Handle set(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) throw fileError(path, name + " is unreadable");
    Handle type(H5Dget_type(set.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING) throw fileError(path, name + " is not a string");
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Tis_variable_str(type.get()) > 0) {
        H5Tset_size(mem.get(), H5T_VARIABLE);
        return isolated(path, name, [&] {
            char* data = nullptr;
            if (H5Dread(set.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &data) < 0) return std::string("\x01");
            std::string text = data ? data : "";
            Handle space(H5Dget_space(set.get()), H5Sclose);
            H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &data);
            return std::string("\x00", 1) + text;
        });
    }
    // One byte more than stored, for the terminator of the null-terminated memory type.
    const size_t size = H5Tget_size(type.get()) + 1;
    H5Tset_size(mem.get(), size);
    std::string text(size, '\0');
    check(H5Dread(set.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), path, "cannot read " + name);
    text.resize(std::strlen(text.c_str()));
    return text;
}
} // namespace

std::string readBlueprint(const std::string& path) {
    Handle file(openFile(path), H5Fclose);
    if (H5Lexists(file.get(), "blueprint", H5P_DEFAULT) <= 0) throw fileError(path, "holds no blueprint");
    return readString(file.get(), "blueprint", path);
}

FileExtras loadExtras(const std::string& path) {
    Handle file(openFile(path), H5Fclose);
    if (H5Lexists(file.get(), "extra", H5P_DEFAULT) <= 0 || H5Lexists(file.get(), "extra_record", H5P_DEFAULT) <= 0) {
        throw fileError(path, "is a model file without checkpoint data (no 'extra' group and record)");
    }
    FileExtras extras;
    extras.record = readString(file.get(), "extra_record", path);
    Handle group(H5Gopen2(file.get(), "extra", H5P_DEFAULT), H5Gclose);
    if (!group.ok()) throw fileError(path, "the 'extra' group is unreadable");
    for (const std::string& name : members(group.get())) {
        const Stored s = describe(file.get(), "extra/" + name, path);
        if (!s.supported || s.dtype == DType::int32) throw fileError(path, "extra/" + name + " is not a float tensor");
        Tensor t = Tensor::empty(s.shape, DType::float32);
        readInto(file.get(), s, t, path);
        extras.tensors.emplace_back(name, t);
    }
    return extras;
}

} // namespace tessera
