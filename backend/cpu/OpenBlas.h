#pragma once
/// \file OpenBLAS, loaded at first use. Private to backend/cpu, tools/bench and the Python
/// module (preferCoreType).
///
/// Debian's OpenBLAS 0.3.21 picks its kernels by CPU model number and falls back to
/// generic SSE3 code ("Prescott", about 1/5 of the speed) on Intel CPUs newer than it
/// knows. Its documented override, OPENBLAS_CORETYPE, is read when the library is loaded,
/// so Tessera does not link OpenBLAS: it sets the override from the CPU's instruction sets
/// (unless the user set it) and then loads the library.

#include <string>

#include <cblas.h>

namespace tessera::cpu {

using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float, const float*,
                         blasint, const float*, blasint, float, float*, blasint);

struct OpenBlas {
    SgemmFn sgemm = nullptr;
    std::string coreName; ///< the kernel set OpenBLAS runs ("SkylakeX", "Haswell", ...)
    std::string path;     ///< the library file loaded
};

/// Sets OPENBLAS_CORETYPE to the kernel set for this CPU unless the user set it. OpenBLAS
/// reads it once, when the process first loads the library, whoever loads it: the Python
/// module calls this as it is imported, before NumPy (which loads the same library) can,
/// so that NumPy's products and Tessera's run the CPU's kernels, not OpenBLAS's generic
/// ones for a CPU newer than its table.
void preferCoreType();

/// The loaded library; throws BackendError when it cannot be loaded. Looked for at
/// $TESSERA_OPENBLAS_LIBRARY, then beside libtessera, then at the path of the build.
const OpenBlas& openBlas();

} // namespace tessera::cpu
