// Tensors and NumPy arrays, both ways.
#include <cstdint>
#include <cstring>
#include <sstream>

#include "Bindings.h"
#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"

namespace tessera::python {

namespace {

py::dtype numpyDType(DType dtype) {
    switch (dtype) {
    case DType::float32: return py::dtype::of<float>();
    case DType::int32: return py::dtype::of<int32_t>();
    case DType::float16: return py::dtype("float16");
    case DType::bfloat16: break;
    }
    throw py::type_error("tessera: " + str(dtype) + " has no NumPy dtype");
}

// The Tessera dtype an array of `dt` becomes, and whether that is the array's own dtype.
DType dtypeFor(const py::dtype& dt, bool* same) {
    const char kind = dt.kind();
    const size_t size = static_cast<size_t>(dt.itemsize());
    if (kind == 'f') {
        *same = size == 4 || size == 2;
        return size == 2 ? DType::float16 : DType::float32;
    }
    if (kind == 'i' || kind == 'u' || kind == 'b') {
        *same = kind == 'i' && size == 4;
        return DType::int32;
    }
    throw py::type_error("tessera.tensor: an array of dtype " + dt.attr("name").cast<std::string>() +
                         " has no Tessera dtype; expected float32, float16, int32, or a float or integer dtype "
                         "to convert to float32 or int32");
}

std::string shapeText(const py::array& a) {
    std::ostringstream s;
    s << "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s << (i ? ", " : "") << a.shape(i);
    s << (a.ndim() == 1 ? ",)" : ")");
    return s.str();
}

} // namespace

Shape toShape(const py::handle& value) {
    if (py::isinstance<py::int_>(value)) return Shape{value.cast<int64_t>()};
    if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value)) {
        throw py::type_error("tessera: a shape is a tuple or list of integers, got " +
                             std::string(py::str(value.get_type().attr("__name__"))));
    }
    std::vector<int64_t> dims;
    for (const py::handle& d : value.cast<py::sequence>()) {
        if (!py::isinstance<py::int_>(d)) {
            throw py::type_error("tessera: a shape is a tuple or list of integers, got " +
                                 std::string(py::repr(value)));
        }
        dims.push_back(d.cast<int64_t>());
    }
    return Shape(dims);
}

Shapes toShapes(const py::handle& value, bool* single) {
    const bool one = py::isinstance<py::int_>(value) ||
                     (py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value) &&
                      (py::len(value) == 0 || py::isinstance<py::int_>(value.cast<py::sequence>()[0])));
    if (single) *single = one;
    if (one) return {toShape(value)};
    Shapes out;
    for (const py::handle& s : value.cast<py::sequence>()) out.push_back(toShape(s));
    return out;
}

py::tuple fromShape(const Shape& shape) {
    py::tuple t(shape.rank());
    for (size_t i = 0; i < shape.rank(); ++i) t[i] = py::int_(shape[i]);
    return t;
}

Device toDevice(const std::string& text) {
    if (text == "cpu") return Device::cpu();
    if (text == "cuda") return Device::cuda(0);
    if (text.rfind("cuda:", 0) == 0) {
        size_t used = 0;
        int index = -1;
        try {
            index = std::stoi(text.substr(5), &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == text.size() - 5 && used > 0 && index >= 0) return Device::cuda(index);
    }
    throw py::value_error("tessera: a device is 'cpu', 'cuda' or 'cuda:N', got '" + text + "'");
}

DType toDType(const std::string& text) {
    for (DType d : {DType::float32, DType::int32, DType::bfloat16, DType::float16}) {
        if (str(d) == text) return d;
    }
    throw py::value_error("tessera: a dtype is float32, int32, bfloat16 or float16, got '" + text + "'");
}

py::array toNumpy(const Tensor& t, bool copy) {
    if (!t.defined()) throw py::value_error("tessera: the tensor is undefined (it holds nothing)");
    if (!t.hasData()) {
        throw py::value_error("tessera: the tensor is a shape-only placeholder " + t.shape().str() +
                              " (made while only shapes were checked) and holds no data");
    }
    Tensor h = t;
    if (!h.device().isCpu()) {
        if (!copy) {
            throw py::type_error("tessera: the tensor is on " + h.device().str() +
                                 "; NumPy arrays live on the CPU: use .to('cpu') first, or numpy(copy=True)");
        }
        h = h.toHost();
    }
    if (!h.isPlain()) h = h.plain();
    if (h.dtype() == DType::bfloat16) h = h.astype(DType::float32); // NumPy has no bfloat16
    if (copy && h.sharesStorage(t)) h = h.clone();
    std::vector<py::ssize_t> shape, strides;
    py::ssize_t stride = static_cast<py::ssize_t>(sizeOf(h.dtype()));
    for (size_t i = h.shape().rank(); i-- > 0;) {
        shape.insert(shape.begin(), h.shape()[i]);
        strides.insert(strides.begin(), stride);
        stride *= h.shape()[i];
    }
    auto* keep = new Tensor(h);
    py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
    return py::array(numpyDType(h.dtype()), shape, strides, h.raw(), owner);
}

Tensor toTensor(const py::handle& value, bool copy) {
    if (py::isinstance<Tensor>(value)) {
        const Tensor& t = value.cast<const Tensor&>();
        return copy ? t.clone() : t;
    }
    py::array a = py::array::ensure(value);
    if (!a) {
        PyErr_Clear();
        throw py::type_error("tessera: expected a tessera.Tensor or something NumPy makes an array of, got " +
                             std::string(py::str(value.get_type().attr("__name__"))));
    }
    bool same = false;
    const DType dtype = dtypeFor(a.dtype(), &same);
    std::vector<int64_t> dims;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) dims.push_back(a.shape(i));
    const Shape shape(dims);
    const bool contiguous = (a.flags() & py::array::c_style) != 0;
    const bool writeable = a.writeable();
    const bool aligned = reinterpret_cast<uintptr_t>(a.data()) % 64 == 0;
    if (!copy && same && contiguous && writeable && aligned) {
        auto owner = std::make_shared<PythonOwner>(py::reinterpret_borrow<py::object>(a));
        return Tensor::wrap(const_cast<void*>(a.data()), shape, dtype, owner);
    }
    if (dtype == DType::int32 && !same && a.size() > 0) { // integers must fit in int32
        const auto lo = a.attr("min")().cast<long double>(), hi = a.attr("max")().cast<long double>();
        if (lo < INT32_MIN || hi > INT32_MAX) {
            throw py::value_error("tessera.tensor: an array of " + a.dtype().attr("name").cast<std::string>() + " " +
                                  shapeText(a) + " holds values outside int32's range (from " +
                                  std::string(py::str(a.attr("min")())) + " to " +
                                  std::string(py::str(a.attr("max")())) + ")");
        }
    }
    Tensor t = Tensor::empty(shape, dtype);
    if (t.numel() > 0) {
        py::module_::import("numpy").attr("copyto")(toNumpy(t, false), a, py::arg("casting") = "unsafe");
    }
    return t;
}

Tensors toTensors(const py::handle& value) {
    if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
        Tensors out;
        for (const py::handle& v : value) out.push_back(toTensor(v));
        return out;
    }
    return {toTensor(value)};
}

void bindTensor(py::module_& m) {
    py::class_<Tensor>(m, "Tensor", R"(A Tessera tensor: storage on a device, a shape, a dtype and a layout.

Make one with tessera.tensor(array), tessera.zeros(shape), tessera.randn(shape), ...;
numpy() gives its elements back as an array.)")
        .def(py::init([](const py::handle& data) { return toTensor(data); }), py::arg("data"),
             "The same as tessera.tensor(data).")
        .def_property_readonly("shape", [](const Tensor& t) { return fromShape(t.shape()); })
        .def_property_readonly("dtype", [](const Tensor& t) { return str(t.dtype()); })
        .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); })
        .def_property_readonly("layout", [](const Tensor& t) { return str(t.layout()); })
        .def_property_readonly("ndim", [](const Tensor& t) { return t.shape().rank(); })
        .def_property_readonly("size", [](const Tensor& t) { return t.numel(); })
        .def("__len__",
             [](const Tensor& t) {
                 if (t.shape().rank() == 0) throw py::type_error("len() of a 0-d tensor");
                 return t.shape()[0];
             })
        .def("numpy", &toNumpy, py::arg("copy") = false,
             R"(The elements as a NumPy array: shared with a plain CPU float32, int32 or float16
tensor; a copy for blocked layouts (made plain), bfloat16 (read as float32), or with
copy=True. A GPU tensor needs copy=True (or .to('cpu') first).)")
        .def(
            "__array__",
            [](const Tensor& t, const py::object& dtype, const py::object& copy) {
                py::array a = toNumpy(t, !t.device().isCpu() || (!copy.is_none() && copy.cast<bool>()));
                return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
            },
            py::arg("dtype") = py::none(), py::arg("copy") = py::none())
        .def(
            "to", [](const Tensor& t, const std::string& device) { return t.to(toDevice(device)); }, py::arg("device"),
            "A copy on the device ('cpu', 'cuda', 'cuda:N').")
        .def(
            "astype", [](const Tensor& t, const std::string& dtype) { return t.astype(toDType(dtype)); },
            py::arg("dtype"))
        .def(
            "__getitem__",
            [](const Tensor& t, const py::object& key) -> py::object {
                const py::object part = toNumpy(t, !t.device().isCpu()).attr("__getitem__")(key);
                if (py::array::ensure(part).ndim() == 0) return part.attr("item")(); // one element: a number
                Tensor out = toTensor(part, true);
                if (out.dtype() != t.dtype()) out = out.astype(t.dtype()); // bfloat16 went through float32
                return py::cast(t.device().isCpu() ? out : out.to(t.device()));
            },
            py::arg("key"),
            R"(NumPy's indexing: t[0], t[:, 1:3], t[mask], ... A new tensor holding a copy of the
selected elements, of the same dtype and on the same device; one element is a Python number.)")
        .def(
            "__setitem__",
            [](Tensor& t, const py::object& key, const py::object& value) {
                const py::object v =
                    py::isinstance<Tensor>(value) ? py::object(toNumpy(value.cast<const Tensor&>(), true)) : value;
                if (t.device().isCpu() && t.isPlain() && t.dtype() != DType::bfloat16) {
                    toNumpy(t, false).attr("__setitem__")(key, v); // in place, through the shared array
                    return;
                }
                // A host copy in plain layout (bfloat16 as float32), changed, and copied back.
                py::array h = toNumpy(t, true);
                h.attr("__setitem__")(key, v);
                Tensor back = toTensor(h, true);
                if (back.dtype() != t.dtype()) back = back.astype(t.dtype());
                t.copyFrom(back);
            },
            py::arg("key"), py::arg("value"),
            "NumPy's indexed assignment, in place: t[0] = 1, t[:, 1:3] = array, t[mask] = 0.")
        .def("plain", &Tensor::plain, "This tensor in plain (row-major) layout.")
        .def("clone", &Tensor::clone)
        .def("reshape", [](const Tensor& t, const py::handle& shape) { return t.reshape(toShape(shape)); })
        .def("sharesMemory", &Tensor::sharesStorage, py::arg("other"))
        .def("__repr__", [](const Tensor& t) {
            std::string s = "tessera.Tensor(shape=" + std::string(py::str(fromShape(t.shape()))) +
                            ", dtype=" + str(t.dtype()) + ", device=" + t.device().str();
            if (!t.isPlain()) s += ", layout=" + str(t.layout());
            return s + ")";
        });

    m.def("tensor", &toTensor, py::arg("data"), py::arg("copy") = false,
          R"(A tessera.Tensor of an array (or anything NumPy makes an array of).

Shares the array's memory when it is C-contiguous, writeable, 64-byte aligned and
float32, int32 or float16 (as arrays from Tensor.numpy() and tessera.empty() are);
otherwise copies once: float64 becomes float32 and other integer dtypes int32 (a
ValueError when a value does not fit). copy=True always copies.)");
    auto dtypeArg = py::arg("dtype") = "float32";
    m.def(
        "empty",
        [](const py::handle& shape, const std::string& dtype) { return Tensor::empty(toShape(shape), toDType(dtype)); },
        py::arg("shape"), dtypeArg, "Uninitialised CPU memory, 64-byte aligned (its numpy() view is shared).");
    m.def(
        "zeros",
        [](const py::handle& shape, const std::string& dtype) { return Tensor::zeros(toShape(shape), toDType(dtype)); },
        py::arg("shape"), dtypeArg);
    m.def(
        "full", [](const py::handle& shape, float value) { return Tensor::full(toShape(shape), value); },
        py::arg("shape"), py::arg("value"));
    m.def(
        "randn",
        [](const py::handle& shape, float mean, float stddev) { return Tensor::randn(toShape(shape), mean, stddev); },
        py::arg("shape"), py::arg("mean") = 0.0f, py::arg("stddev") = 1.0f,
        "Normal(mean, stddev) float32 values from the global generator (tessera.manualSeed).");
    m.def(
        "rand", [](const py::handle& shape, float lo, float hi) { return Tensor::rand(toShape(shape), lo, hi); },
        py::arg("shape"), py::arg("lo") = 0.0f, py::arg("hi") = 1.0f);
    m.def(
        "randint", [](const py::handle& shape, int32_t classes) { return Tensor::randint(toShape(shape), classes); },
        py::arg("shape"), py::arg("classes"), "int32 labels in [0, classes).");
    m.def("manualSeed", &manualSeed, py::arg("seed"),
          "Seeds the global generator: parameter initialisation and randn/rand/randint.");
    m.def("cudaDeviceCount", &cudaDeviceCount, "The CUDA devices there are (0 without a GPU or a CUDA build).");
    m.def("setCudaAllowTF32", &setCudaAllowTF32, py::arg("allow"),
          "Lets cuBLAS and cuDNN use TF32 tensor cores for float32 work (on by default); a no-op without CUDA.");
    m.def("setCudaDeterministic", &setCudaDeterministic, py::arg("on"),
          "Only cuDNN algorithms that give the same bits on every run, none chosen by timing (off by default; "
          "docs/gpu.md); a no-op without CUDA.");
    m.def("setCuda16BitActivations", &setCuda16BitActivations, py::arg("on"),
          "16-bit activations between layers on CUDA in calcMode(float16|bfloat16) (on by default; "
          "TESSERA_CUDA_16BIT_ACTIVATIONS=0 turns it off at start; docs/precision.md); a no-op without CUDA.");
    m.def("cuda16BitActivations", &cuda16BitActivations, "Whether setCuda16BitActivations is on now.");
    m.def("setCudaChannelsLast", &setCudaChannelsLast, py::arg("on"),
          "Channels-last (NHWC) activations between 2-D convolutions carrying 16-bit activations, batch norm, "
          "pooling and activations on CUDA (on by default; TESSERA_CUDA_CHANNELS_LAST=0 turns it off at start; "
          "docs/precision.md); a no-op without CUDA.");
    m.def("cudaChannelsLast", &cudaChannelsLast, "Whether setCudaChannelsLast is on now.");
    m.def("setCudaFusedAttention", &setCudaFusedAttention, py::arg("on"),
          "cuDNN's fused attention (cuDNN 9.17 or later) for 16-bit attention without masks, causal masking or "
          "train-mode dropout on CUDA (off by default; TESSERA_CUDA_FUSED_ATTENTION=1 turns it on at start; "
          "docs/gpu.md); a no-op without CUDA.");
    m.def("cudaFusedAttention", &cudaFusedAttention, "Whether setCudaFusedAttention is on now.");
    m.def("setCpuFusedAttention", &CpuBackend::setFusedAttention, py::arg("on"),
          "The CPU's fused float32 attention for attention without masks, causal masking or train-mode dropout: "
          "a chunk of query rows' scores in cache from q k^T to P v (on by default; TESSERA_CPU_FUSED_ATTENTION=0 "
          "turns it off at start; docs/layers.md). Off: blocks of heads, as masked attention runs.");
    m.def("cpuFusedAttention", &CpuBackend::fusedAttention, "Whether setCpuFusedAttention is on now.");
}

} // namespace tessera::python
