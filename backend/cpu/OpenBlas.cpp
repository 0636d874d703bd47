#include "backend/cpu/OpenBlas.h"

#include <dlfcn.h>

#include <cstdlib>

#include "backend/Errors.h"

namespace tessera::cpu {

namespace {

// The kernel set for this CPU when OpenBLAS's own model table may not know it. Only Intel
// CPUs are named: on them the table and the instruction sets agree whenever the model is
// known, so naming them changes nothing but the unknown-model fallback.
const char* coreTypeFromIsa() {
    __builtin_cpu_init();
    if (!__builtin_cpu_is("intel")) return nullptr;
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
    return nullptr;
}

template <class F> F symbol(void* lib, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) throw BackendError(std::string("OpenBLAS: symbol ") + name + " not found in " + TESSERA_OPENBLAS_LIBRARY);
    return reinterpret_cast<F>(p);
}

OpenBlas load() {
    if (const char* core = coreTypeFromIsa()) setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
    void* lib = dlopen(TESSERA_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw BackendError(std::string("OpenBLAS: cannot load ") + TESSERA_OPENBLAS_LIBRARY + ": " + dlerror());
    OpenBlas blas;
    blas.sgemm = symbol<SgemmFn>(lib, "cblas_sgemm");
    blas.coreName = symbol<char* (*)()>(lib, "openblas_get_corename")();
    return blas;
}

} // namespace

const OpenBlas& openBlas() {
    static const OpenBlas blas = load();
    return blas;
}

} // namespace tessera::cpu
