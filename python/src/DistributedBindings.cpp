// Data-parallel training: communicators (MPI, NCCL) and DataParallel, which a Trainer uses
// through setDataParallel.
#include "Bindings.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "training/Handlers.h"

namespace tessera::python {

void bindDistributed(py::module_& m) {
    py::class_<Communicator, CommunicatorPtr>(m, "Communicator", R"(The ranks of a data-parallel job. Every rank
makes the same collective calls in the same order.)")
        .def_property_readonly("rank", &Communicator::rank)
        .def_property_readonly("size", &Communicator::size)
        .def_property_readonly(
            "device", [](const Communicator& c) { return c.device().str(); },
            "Where its tensors live: 'cpu' (MPI) or this rank's GPU (NCCL).")
        .def(
            "allReduceSum",
            [](Communicator& c, const Tensor& t) {
                py::gil_scoped_release nogil;
                c.allReduceSum(t);
            },
            py::arg("tensor"), "Sums a float32 tensor over the ranks, in place.")
        .def(
            "broadcast",
            [](Communicator& c, const Tensor& t, int root) {
                py::gil_scoped_release nogil;
                c.broadcast(t, root);
            },
            py::arg("tensor"), py::arg("root") = 0, "Copies rank `root`'s tensor into every rank's, in place.")
        .def(
            "allGather",
            [](Communicator& c, int64_t value) {
                py::gil_scoped_release nogil;
                return c.allGather(value);
            },
            py::arg("value"), "Every rank's value, in rank order.")
        .def("describe", &Communicator::describe)
        .def("__repr__", [](const Communicator& c) {
            return "tessera.Communicator(rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + ", " +
                   c.describe() + ")";
        });

    m.def("mpiBuilt", &mpiBuilt, "Whether this build has MPI.");
    m.def("launchedByMpi", &launchedByMpi, "Whether this process was started by mpirun or mpiexec.");
    m.def("mpiWorld", &mpiWorld, "MPI_COMM_WORLD (MPI is initialised on the first call).");
    m.def("ncclBuilt", &ncclBuilt, "Whether this build has NCCL (it has with CUDA).");
    m.def(
        "ncclWorld",
        [](const std::string& device, const CommunicatorPtr& bootstrap) {
            py::gil_scoped_release nogil;
            return ncclWorld(toDevice(device), bootstrap);
        },
        py::arg("device"), py::arg("bootstrap") = CommunicatorPtr(),
        R"(An NCCL communicator for this process's GPU; its ranks are `bootstrap`'s (say, mpiWorld()), else
TESSERA_NCCL_RANK / TESSERA_NCCL_SIZE / NCCL_COMM_ID from the environment.)");

    py::class_<DataParallel>(m, "DataParallel", R"(Binds a model, whose optimizer holds its parameters in
global state (optimizer.setupOn(net, useGlobalState=True)), to a communicator: checks that
every rank has the same model, copies rank 0's weights to the others, and averages the
gradients in buckets reduced while backward runs. Give it to Trainer.setDataParallel.)")
        .def(py::init([](Module& net, Optimizer& optimizer, const CommunicatorPtr& comm, size_t bucketBytes,
                         bool overlap, bool syncBatchNorm) {
                 py::gil_scoped_release nogil;
                 return std::make_unique<DataParallel>(net, optimizer, comm,
                                                       DataParallelOptions{.bucketBytes = bucketBytes,
                                                                           .overlap = overlap,
                                                                           .syncBatchNorm = syncBatchNorm});
             }),
             py::arg("net"), py::arg("optimizer"), py::arg("comm"), py::kw_only(),
             py::arg("bucketBytes") = DataParallelOptions{}.bucketBytes,
             py::arg("overlap") = DataParallelOptions{}.overlap,
             py::arg("syncBatchNorm") = DataParallelOptions{}.syncBatchNorm, py::keep_alive<1, 2>(),
             py::keep_alive<1, 3>())
        .def_property_readonly("rank", &DataParallel::rank)
        .def_property_readonly("ranks", &DataParallel::ranks)
        .def_property_readonly("buckets", &DataParallel::buckets,
                               "[first, last) element ranges of the flat gradient buffer, in reduction order.")
        .def_property_readonly("reduceSeconds", &DataParallel::reduceSeconds)
        .def_property_readonly("exposedSeconds", &DataParallel::exposedSeconds);
}

} // namespace tessera::python
