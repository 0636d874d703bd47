// ncclWorld: the NCCL communicator lives in the CUDA plugin (distributed/Nccl.cpp is built
// into libtessera_cuda.so), which registers its factory here while it loads.
#include "backend/Backend.h"
#include "backend/Errors.h"
#include "distributed/Communicator.h"
#include "distributed/NcclPlugin.h"

namespace tessera {

namespace {
NcclFactory factory = nullptr;
}

void registerNcclFactory(NcclFactory make) { factory = make; }

bool ncclBuilt() {
#if TESSERA_HAVE_NCCL
    return true;
#else
    return false;
#endif
}

CommunicatorPtr ncclWorld(Device device, const CommunicatorPtr& bootstrap) {
    const std::string what = "NCCL communicator for " + device.str();
    if (!ncclBuilt()) {
#if TESSERA_CUDA_PLUGIN
        throw BackendError(what + ": this build of Tessera found no nccl.h when it was configured");
#else
        throw BackendError(what + ": this build of Tessera has no CUDA backend (configure with TESSERA_USE_CUDA=ON)");
#endif
    }
    if (!factory) {
        (void)cudaDeviceCount(); // loads the CUDA plugin, which registers the factory
        if (!factory) throw BackendError(what + ": " + cudaUnavailableReason());
    }
    return factory(device, bootstrap);
}

} // namespace tessera
