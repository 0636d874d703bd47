#pragma once
// What the binding files share: conversions between Python values and Tessera's types.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "backend/Tensor.h"

namespace tessera::python {

namespace py = pybind11;

/// A Python object held by C++ code that may drop it without the GIL (a tensor's storage
/// owner, a function in a static registry): released with the GIL taken, or leaked once
/// the interpreter has shut down.
struct PythonOwner {
    explicit PythonOwner(py::object o) : object(std::move(o)) {}
    PythonOwner(const PythonOwner&) = delete;
    PythonOwner& operator=(const PythonOwner&) = delete;
    ~PythonOwner() {
        if (!Py_IsInitialized()) {
            object.release();
            return;
        }
        py::gil_scoped_acquire gil;
        object = py::object();
    }
    py::object object;
};

/// A Tensor from a Tensor or anything NumPy makes an array of: shared with a plain,
/// C-contiguous, writeable, 64-byte aligned float32/int32/float16 array; otherwise copied
/// once (float64 becomes float32, other integers int32). `copy` forces the copy.
Tensor toTensor(const py::handle& value, bool copy = false);
/// The same for one tensor or a list or tuple of them.
Tensors toTensors(const py::handle& value);
/// A Tensor's elements as a NumPy array: shared when the tensor is a plain CPU float32,
/// int32 or float16 tensor and `copy` is false; otherwise copied (blocked layouts made plain,
/// bfloat16 read as float32). A GPU tensor without `copy` is a TypeError.
py::array toNumpy(const Tensor& t, bool copy);
/// The text of transforms given as None (""), a tessera.Transforms or its text (checked by
/// parsing it): what model files keep (SaveOptions::transforms).
std::string transformsText(const py::handle& transforms);
/// True for a list or tuple: a module or cost called with one answers with a list.
inline bool isList(const py::handle& v) { return py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v); }
/// Tensors back to Python: one Tensor for one tensor of a call that was not given a list,
/// else a list.
inline py::object outputs(const Tensors& out, bool listIn) {
    if (!listIn && out.size() == 1) return py::cast(out[0]);
    return py::cast(out);
}
/// Shape from a tuple or list of integers.
Shape toShape(const py::handle& value);
/// One shape or a list of shapes; `single` says which it was.
Shapes toShapes(const py::handle& value, bool* single = nullptr);
py::tuple fromShape(const Shape& shape);
/// "cpu", "cuda", "cuda:N".
Device toDevice(const std::string& text);
/// "float32", "int32", "bfloat16", "float16".
DType toDType(const std::string& text);

void bindTensor(py::module_& m);
void bindModules(py::module_& m);
void bindDistributed(py::module_& m);
void bindTraining(py::module_& m);
void bindIo(py::module_& m);
void bindData(py::module_& m);

} // namespace tessera::python
