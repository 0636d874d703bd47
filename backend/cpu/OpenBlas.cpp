#include "backend/cpu/OpenBlas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <dnnl.hpp>
#include <filesystem>

#include "backend/Errors.h"
#include "backend/cpu/Dnnl.h"

namespace tessera::cpu {

namespace {

// The kernel set for this CPU when OpenBLAS's own model table may not know it. Intel CPUs
// are named: on them the table and the instruction sets agree whenever the model is known,
// so naming them changes nothing but the unknown-model fallback. AMD CPUs with AVX-512
// are named SkylakeX: OpenBLAS 0.3.21 (Debian 12's) runs its AVX2 Haswell kernels on Zen 5,
// at half the rate of its AVX-512 SkylakeX kernels there (1024^3 sgemm on 2 cores: 240
// against 460 GFLOP/s, tools/bench). Other AMD CPUs keep OpenBLAS's own choice.
// The instruction sets are the CPU's as capped by ONEDNN_MAX_CPU_ISA (oneDNN's effective
// ISA), so one variable caps both libraries: under ONEDNN_MAX_CPU_ISA=AVX2 an AVX-512 CPU
// runs OpenBLAS's Haswell kernels, as an AVX2-only CPU does.
const char* coreTypeFromIsa() {
    __builtin_cpu_init();
    const auto within = dnnl_util::isaIncludes;
    const bool hardware512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool avx512 = hardware512 && within(dnnl::cpu_isa::avx512_core);
    const bool avx2 = __builtin_cpu_supports("avx2") && within(dnnl::cpu_isa::avx2);
    if (hardware512 && !avx512) { // capped below what the CPU has
        if (avx2) return "Haswell";
        return within(dnnl::cpu_isa::avx) ? "Sandybridge" : "Nehalem";
    }
    if (__builtin_cpu_is("amd")) return avx512 ? "SkylakeX" : nullptr;
    if (!__builtin_cpu_is("intel")) return nullptr;
    if (avx512) return "SkylakeX";
    if (avx2) return "Haswell";
    return nullptr;
}

// The directory holding libtessera itself: a relocated install (tools/bundle.sh) keeps
// its OpenBLAS there.
std::filesystem::path ownDirectory() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&coreTypeFromIsa), &info) == 0 || !info.dli_fname) return {};
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::weakly_canonical(info.dli_fname, ec);
    return (ec ? std::filesystem::path(info.dli_fname) : self).parent_path();
}

// Where to load OpenBLAS from, first match wins: TESSERA_OPENBLAS_LIBRARY (the user's
// choice, used as given), libopenblas.so.0 beside libtessera (a relocated install), the
// path found when Tessera was built.
std::string libraryPath() {
    if (const char* env = std::getenv("TESSERA_OPENBLAS_LIBRARY"); env && *env) return env;
    std::error_code ec;
    const std::filesystem::path dir = ownDirectory();
    if (!dir.empty() && std::filesystem::exists(dir / "libopenblas.so.0", ec))
        return (dir / "libopenblas.so.0").string();
    return TESSERA_OPENBLAS_LIBRARY;
}

template <class F> F symbol(void* lib, const char* name, const std::string& path) {
    void* p = dlsym(lib, name);
    if (!p) throw BackendError(std::string("OpenBLAS: symbol ") + name + " not found in " + path);
    return reinterpret_cast<F>(p);
}

} // namespace

void preferCoreType() {
    if (const char* core = coreTypeFromIsa()) setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
}

namespace {

OpenBlas load() {
    preferCoreType();
    const std::string path = libraryPath();
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        throw BackendError("OpenBLAS: cannot load " + path + ": " + dlerror() +
                           "; set TESSERA_OPENBLAS_LIBRARY to the path of an OpenMP build of libopenblas.so.0");
    }
    OpenBlas blas;
    blas.path = path;
    blas.sgemm = symbol<SgemmFn>(lib, "cblas_sgemm", path);
    blas.coreName = symbol<char* (*)()>(lib, "openblas_get_corename", path)();
    return blas;
}

} // namespace

const OpenBlas& openBlas() {
    static const OpenBlas blas = load();
    return blas;
}

} // namespace tessera::cpu
