// HDF5 model files: saved through the HDF5 C API (every handle closed by a small RAII
// owner), loaded through the reader process (io/Hdf5Reader.h).
#include "io/Hdf5.h"

#include <fcntl.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
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
#include "io/Hdf5Reader.h"

namespace tessera {

using namespace hdf5_detail;

namespace {

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

// Where each dataset's elements go, in datasets()'s order (null: dropped), given the
// snapshot's description before any element arrives; what it throws ends the read with
// nothing written.
using Placement = std::function<std::vector<char*>(const Snapshot&)>;

// The parts of `path` a snapshot holds, read by the reader process (see above); the
// datasets' elements (modelPart, extrasPart) go where `place` says.
Snapshot snapshot(const std::string& path, unsigned parts, const Placement& place = nullptr) {
    quietHdf5();
    if (!std::filesystem::exists(path)) throw fileError(path, "no such file");
    if (!isHdf5File(path)) throw fileError(path, "not an HDF5 file (no HDF5 signature)");
    // Never destroyed: reads during static destruction work.
    static auto* reader = new io_detail::ChildServer("hdf5-read");
    const uint64_t size = fileBytes(path);
    const std::string request = readRequest(parts, size, path);
    Snapshot s;
    bool described = false, written = false;
    // What `place` threw: the elements are then read and dropped (the reader, which sends
    // them anyway, stays in step for the next read), and it is thrown here afterwards.
    std::exception_ptr refused;
    auto receive = [&](const std::string& answer, io_detail::Incoming& in) {
        if (answer.empty() || answer[0] != '\0') return; // the reader's error: nothing follows
        s = deserialize(std::string_view(answer).substr(1), path);
        described = true;
        const std::vector<const Stored*> sets = datasets(s);
        std::vector<char*> to(sets.size(), nullptr);
        try {
            if (place) to = place(s);
        } catch (...) {
            refused = std::current_exception();
            to.assign(sets.size(), nullptr);
        }
        for (size_t i = 0; i < sets.size(); ++i) {
            written = written || (to.at(i) && sets[i]->bytes() > 0);
            if (!in.read(to[i], sets[i]->bytes())) return;
        }
    };
    // Generous for a healthy file (10 s, plus a second per 50 MB); a looping reader is stopped.
    io_detail::ChildServer::Result r = reader->call(request, readTimeout(size), receive);
    // The reader checks every dataset before it sends any: only a reader killed while sending
    // leaves tensors partly written.
    const std::string partly = written ? " (after some of the tensors had been written)" : "";
    using Failure = io_detail::ChildServer::Result::Failure;
    switch (r.failure) {
    case Failure::none: break;
    case Failure::cannotStart: throw fileError(path, "cannot read it: " + r.detail);
    case Failure::timedOut:
        throw fileError(path, "is unreadable: reading it did not finish in time (a corrupt file?)" + partly);
    case Failure::crashed:
        throw fileError(path, "is unreadable: the HDF5 library crashed reading it (" + r.detail + "; a corrupt file)" +
                                  partly);
    case Failure::exited:
        throw fileError(path, "is unreadable: the HDF5 library failed reading it (" + r.detail + "; a corrupt file)" +
                                  partly);
    }
    if (refused) std::rethrow_exception(refused);
    const std::string& got = *r.answer;
    if (!got.empty() && got[0] == '\1') throw IoError(got.substr(1)); // the reader's error, already naming the file
    if (!described) throw fileError(path, "cannot read it");
    return s;
}

// Where the elements of `copies` go (each a dataset and a tensor it fills, shapes and types
// checked): a plain float32 or int32 tensor in host memory takes them straight from the
// reader; other tensors, and a second tensor filled from the same dataset, through a host
// tensor copied over once all have arrived (`after`: from, to).
std::vector<char*> destinations(const Snapshot& file, const std::vector<std::pair<const Stored*, Tensor>>& copies,
                                std::vector<std::pair<Tensor, Tensor>>& after) {
    const std::vector<const Stored*> sets = datasets(file);
    std::unordered_map<const Stored*, size_t> index;
    for (size_t i = 0; i < sets.size(); ++i) index[sets[i]] = i;
    std::vector<char*> to(sets.size(), nullptr);
    std::unordered_map<const Stored*, Tensor> landed; // where each dataset's elements arrive
    for (const auto& [s, dst] : copies) {
        if (auto it = landed.find(s); it != landed.end()) {
            if (!(dst.device().isCpu() && dst.isPlain() && dst.raw() == it->second.raw())) // not the same tensor
                after.emplace_back(it->second, dst);
            continue;
        }
        const DType wire = s->dtype == DType::int32 ? DType::int32 : DType::float32;
        const bool direct = dst.device().isCpu() && dst.isPlain() && dst.dtype() == wire;
        Tensor land = direct ? dst : Tensor::empty(dst.shape(), wire);
        if (!direct) after.emplace_back(land, dst);
        landed.emplace(s, land);
        if (s->bytes() > 0) to[index.at(s)] = static_cast<char*>(land.raw());
    }
    return to;
}

// Copies `from` (a host tensor) into `to`, converting its type and moving it to its device
// and layout.
void copyOver(const Tensor& from, const Tensor& to) {
    const Tensor typed = from.dtype() == to.dtype() ? from : from.astype(to.dtype());
    Tensor(to).copyFrom(typed.to(to.device()).toLayout(to.layout()));
}

} // namespace

namespace {

// What loading `file` into `module` copies: each dataset and the tensor it fills, and the
// training counters' values. Throws, naming every mismatch, when anything does not match.
struct LoadPlan {
    std::vector<std::pair<const Stored*, Tensor>> copies;
    std::vector<std::pair<int64_t*, int64_t>> counterValues;
    // Parameters the file stores once (shared in the saved model): a name, and the first
    // name of the same stored parameter, whose Variable it gets.
    std::vector<std::pair<std::string, std::string>> shared;
};

LoadPlan planLoad(const Snapshot& file, Module& module, const std::string& path, LoadMode mode) {
    LoadPlan plan;
    auto& copies = plan.copies;
    auto& counterValues = plan.counterValues;
    std::vector<std::string> problems;
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
    std::map<int64_t, std::string> firstOf; // params index -> the first model parameter loaded from it
    for (const auto& [name, var] : module.namedParams()) {
        auto it = stored.find(name);
        if (it == stored.end()) {
            if (mode == LoadMode::strict) problems.push_back("parameter " + name + ": not in the file");
            continue;
        }
        match("parameter", name, var->data, file.params.at(it->second));
        const auto [first, fresh] = firstOf.emplace(it->second, name);
        if (!fresh) plan.shared.emplace_back(name, first->second);
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
    return plan;
}

} // namespace

void loadModel(Module& module, const std::string& path, LoadMode mode) {
    // Matched against the file's description before any element arrives: a mismatch stops
    // the read with nothing loaded.
    std::vector<std::pair<Tensor, Tensor>> after;
    std::vector<std::pair<int64_t*, int64_t>> counterValues;
    std::vector<std::pair<std::string, std::string>> shared;
    snapshot(path, modelPart, [&](const Snapshot& file) {
        LoadPlan plan = planLoad(file, module, path, mode);
        counterValues = std::move(plan.counterValues);
        shared = std::move(plan.shared);
        return destinations(file, plan.copies, after);
    });
    for (const auto& [from, to] : after) copyOver(from, to);
    for (const auto& [c, v] : counterValues) *c = v;
    if (!shared.empty()) { // shared again where the model has two Variables (one rebuilt from a blueprint)
        std::map<std::string, VariablePtr> vars;
        for (auto& [name, v] : module.namedParams()) vars.emplace(name, std::move(v));
        for (const auto& [name, first] : shared) {
            if (vars.at(name) != vars.at(first)) module.shareVarAt(name, vars.at(first));
        }
    }
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
    FileExtras extras;
    snapshot(path, extrasPart, [&](const Snapshot& file) {
        if (!file.hasExtras) {
            throw fileError(path, "is a model file without checkpoint data (no 'extra' group and record)");
        }
        extras.record = file.record;
        std::vector<char*> to; // the extras are the only datasets of this part
        for (const Stored& s : file.extras) {
            if (!s.supported || s.dtype == DType::int32)
                throw fileError(path, "extra/" + s.where + " is not a float tensor");
            Tensor t = Tensor::empty(s.shape, DType::float32);
            to.push_back(s.bytes() > 0 ? static_cast<char*>(t.raw()) : nullptr);
            extras.tensors.emplace_back(s.where, t);
        }
        return to;
    });
    return extras;
}

} // namespace tessera
