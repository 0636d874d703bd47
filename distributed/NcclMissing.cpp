// A build without CUDA has no NCCL communicator: the functions say so.
#include "backend/Errors.h"
#include "distributed/Communicator.h"

namespace tessera {

bool ncclBuilt() { return false; }

CommunicatorPtr ncclWorld(Device device, const CommunicatorPtr&) {
    throw BackendError("NCCL communicator for " + device.str() +
                       ": this build of Tessera has no CUDA backend (configure with TESSERA_USE_CUDA=ON)");
}

} // namespace tessera
