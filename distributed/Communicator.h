#pragma once
/// \file Collective communication between the processes of a data-parallel job. One
/// interface; MPI (Open MPI, for CPU processes on one or many hosts) implements it when the
/// build found MPI. Nothing in modules/ or containers/ knows about it.

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
    /// Sums `t` (float32, plain, on the host) over the ranks, in place.
    virtual void allReduceSum(const Tensor& t) = 0;
    /// Copies rank `root`'s `t` into every rank's `t` (same shape and dtype everywhere).
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

} // namespace tessera
