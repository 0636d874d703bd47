#pragma once
/// \file What the HDF5 reader process (io/Hdf5Reader.cpp) and the loading side (io/Hdf5.cpp)
/// share: handles, the snapshot of a file the reader describes, and its wire format.
/// Private to io/.
//
// libhdf5 trusts the sizes and offsets in a file's metadata: a corrupt file can make it
// crash (group iteration, the global heap), loop, or allocate gigabytes before it fails,
// and none of that can be checked from outside before it happens. So every read runs in
// a reader process, under a memory limit where the build allows one: the reader describes
// the parts the caller asked for (a Snapshot), reads and checks every dataset, then sends
// the description and streams the elements after it through its socket, which the caller
// receives straight into its tensors; a crash, a hang or a failed allocation there is an
// IoError naming the file here. The parent never reads a file through libhdf5.

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/DType.h"
#include "backend/Errors.h"
#include "backend/Shape.h"

namespace tessera::hdf5_detail {

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
inline void quietHdf5() {
    static const bool done = [] {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)done;
}

inline IoError fileError(const std::string& path, const std::string& what) {
    return IoError("model file " + path + ": " + what);
}

inline void check(herr_t status, const std::string& path, const std::string& what) {
    if (status < 0) throw fileError(path, what);
}

// The size of the file at `path` (0 when it cannot be read).
inline uint64_t fileBytes(const std::string& path) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(path, ec);
    return ec ? 0 : static_cast<uint64_t>(n);
}

// A dataset: its shape, stored type and (for supported types) its elements as float32
// (floating types, through HDF5's conversion) or int32.
struct Stored {
    Shape shape;
    DType dtype = DType::float32;
    bool supported = true;
    std::string where;   // its name: the dataset's path, or the attribute's or tensor's name
    std::string dataset; // the dataset's path
    // How many bytes of elements the reader reads and sends for it.
    size_t bytes() const { return supported ? static_cast<size_t>(shape.numel()) * 4 : 0; }
};

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
};

// The datasets of a snapshot in the order the reader streams their elements.
std::vector<const Stored*> datasets(const Snapshot& s);

/// The reader's request: which parts, the file's size (for its memory limit) and its path.
std::string readRequest(unsigned parts, uint64_t size, const std::string& path);

/// The snapshot the reader's answer describes (`in`, after its first byte); its datasets'
/// elements follow the answer on the socket.
Snapshot deserialize(std::string_view in, const std::string& path);

} // namespace tessera::hdf5_detail
