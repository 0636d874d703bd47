#pragma once
/// \file How the CUDA plugin (libtessera_cuda.so) hands the library its NCCL communicator:
/// distributed/Nccl.cpp, built into the plugin, registers a factory while the plugin loads;
/// ncclWorld (distributed/NcclWorld.cpp) calls it. Private to the library.

#include "distributed/Communicator.h"

namespace tessera {

using NcclFactory = CommunicatorPtr (*)(Device device, const CommunicatorPtr& bootstrap);
void registerNcclFactory(NcclFactory make);

} // namespace tessera
