// The table from device kind to backend, and the global generator.
#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera {

Backend& backendFor(Device device) {
    if (device.isCpu()) {
        static CpuBackend cpu;
        return cpu;
    }
    throw BackendError("no backend for device " + device.str() +
                       ": this build of Tessera has no CUDA backend (CPU only)");
}

Generator& globalGenerator() {
    static Generator gen(0);
    return gen;
}

void manualSeed(uint64_t seed) { globalGenerator().manualSeed(seed); }

} // namespace tessera
