#pragma once
/// \file oneDNN plumbing shared by the CPU op files: the engine and stream, the status
/// checker, and a per-op cache of primitives keyed by shape. Private to backend/cpu.

#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/Errors.h"

namespace tessera::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();

/// Runs `f`, turning a dnnl::error into a BackendError that names the call.
template <class F> auto checkDnnl(const char* call, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const dnnl::error& e) {
        throw BackendError(std::string("oneDNN: ") + call + " failed: " + e.what() +
                           " (status " + std::to_string(static_cast<int>(e.status)) + ")");
    }
}

/// A plain (row-major) f32 memory descriptor.
inline dnnl::memory::desc plainDesc(const std::vector<int64_t>& dims) {
    static const dnnl::memory::format_tag tags[] = {
        dnnl::memory::format_tag::a,    dnnl::memory::format_tag::a,     dnnl::memory::format_tag::ab,
        dnnl::memory::format_tag::abc,  dnnl::memory::format_tag::abcd,  dnnl::memory::format_tag::abcde,
        dnnl::memory::format_tag::abcdef};
    if (dims.empty() || dims.size() > 6) throw BackendError("oneDNN: unsupported rank " + std::to_string(dims.size()));
    return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tags[dims.size()]);
}

struct KeyHash {
    size_t operator()(const std::vector<int64_t>& k) const {
        size_t h = 1469598103934665603ull;
        for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
        return h;
    }
};

/// Primitives built once per key (op parameters and dims) and reused afterwards.
template <class Value> class PrimitiveCache {
public:
    const Value& get(const std::vector<int64_t>& key, const std::function<Value()>& make) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = map_.find(key);
        if (it == map_.end()) it = map_.emplace(key, make()).first;
        return it->second;
    }

private:
    std::mutex mutex_;
    std::unordered_map<std::vector<int64_t>, Value, KeyHash> map_;
};

/// Bit pattern of a float, for use in cache keys.
inline int64_t keyOf(float v) {
    int32_t bits;
    static_assert(sizeof bits == sizeof v);
    __builtin_memcpy(&bits, &v, sizeof v);
    return bits;
}

/// A memory object over an existing buffer.
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* ptr) {
    return dnnl::memory(md, engine(), const_cast<void*>(ptr));
}

} // namespace tessera::dnnl_util
