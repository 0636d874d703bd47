// The extension module tessera._tessera; python/tessera/__init__.py builds the package on it.
#include "Bindings.h"
#include "backend/Errors.h"
#include "backend/cpu/OpenBlas.h"

PYBIND11_MODULE(_tessera, m) {
    namespace py = pybind11;
    using namespace tessera;
    m.doc() = "Tessera's C++ library; import tessera, not this module.";
    // Before NumPy loads OpenBLAS (tessera/__init__.py imports this module first).
    tessera::cpu::preferCoreType();

    // Tessera's exception tree, as Python classes of the same names. Registered root
    // first: the translators are tried last-registered first, so the most derived wins.
    auto& error = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
    auto& moduleError = py::register_exception<ModuleError>(m, "ModuleError", error);
    py::register_exception<ShapeError>(m, "ShapeError", moduleError);
    py::register_exception<ContainerError>(m, "ContainerError", error);
    py::register_exception<GraphError>(m, "GraphError", error);
    py::register_exception<BackendError>(m, "BackendError", error);
    py::register_exception<IoError>(m, "IoError", error);
    py::register_exception<NumericsError>(m, "NumericsError", error);

    tessera::python::bindTensor(m);
    tessera::python::bindModules(m);
    tessera::python::bindTraining(m);
    tessera::python::bindIo(m);
    tessera::python::bindData(m);
    tessera::python::bindDistributed(m);
}
