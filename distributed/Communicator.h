#pragma once
/// \file Collective communication between the processes of a data-parallel job. One
/// interface; MPI (Open MPI, for CPU processes on one or many hosts) implements it when the
/// build found MPI, NCCL (one GPU per process) when the build has CUDA. Nothing in
/// modules/ or containers/ knows about it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/Tensor.h"

namespace tessera {

/// The ranks 0 .. size()-1 of one job. Every rank must make the same collective calls in
/// the same order. Calls may come from any thread, one at a time.
class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// Where the tensors of allReduceSum and broadcast live: the host for MPI, this rank's
    /// GPU for NCCL.
    virtual Device device() const { return Device::cpu(); }
    /// Sums `t` (float32, plain, on device()) over the ranks, in place. On a GPU the sum is
    /// queued on the device's stream: later work on the device sees it.
    virtual void allReduceSum(const Tensor& t) = 0;
    /// Copies rank `root`'s `t` (on device()) into every rank's `t` (same shape and dtype
    /// everywhere).
    virtual void broadcast(const Tensor& t, int root) = 0;
    /// Every rank's `value`, in rank order.
    virtual std::vector<int64_t> allGather(int64_t value) = 0;
    /// What carries the messages, for a log line: "MPI (Open MPI v4.1.4)".
    virtual std::string describe() const = 0;
    /// Ends the whole job with exit code `code`, after an error on this rank.
    [[noreturn]] virtual void abort(int code) = 0;
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

/// Whether this build has MPI (libopenmpi-dev was found at configure time).
bool mpiBuilt();
/// Whether this process was started by mpirun or mpiexec (it looks for the rank variables
/// of Open MPI, MPICH and PMI launchers).
bool launchedByMpi();
/// MPI_COMM_WORLD. The first call initialises MPI (thread level "serialized" at least:
/// calls from several threads, one at a time); MPI is finalised when the process exits.
/// BackendError when the build has no MPI or MPI cannot start.
CommunicatorPtr mpiWorld();

/// Whether this build has NCCL support (it has with CUDA; libnccl.so.2, or the file
/// TESSERA_NCCL_LIBRARY names, is opened when the first NCCL communicator is made).
bool ncclBuilt();
/// Whether the environment asks for NCCL without mpirun (TESSERA_NCCL_SIZE is set).
bool ncclRequestedByEnvironment();
/// An NCCL communicator for this process's GPU `device`. With `bootstrap` (say, mpiWorld())
/// the ranks are its ranks and rank 0's NCCL id reaches the others through it. Without,
/// the environment says: TESSERA_NCCL_RANK and TESSERA_NCCL_SIZE (default 0 and 1), and,
/// for more than one rank, NCCL_COMM_ID=host:port, where rank 0 listens (the same on every
/// rank). Every rank calls it at the same point. BackendError without CUDA or NCCL.
CommunicatorPtr ncclWorld(Device device, const CommunicatorPtr& bootstrap = nullptr);

} // namespace tessera
