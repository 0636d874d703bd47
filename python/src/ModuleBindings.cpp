// Modules, containers and graph nodes.
#include <set>

#include "Bindings.h"
#include "backend/Errors.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "io/Factory.h"
#include "io/Hdf5.h"
#include "modules/BatchNormND.h"
#include "modules/Dropout.h"
#include "modules/Glue.h"
#include "modules/LCN.h"
#include "modules/MaxUnpool2D.h"
#include "modules/MulAddConst.h"
#include "modules/Pool.h"

namespace tessera::python {

namespace {

// A keyword argument as a blueprint value (the types a blueprint holds).
BlueprintValue schemeValue(const std::string& cls, const std::string& key, const py::handle& v) {
    auto bad = [&] {
        return py::type_error(cls + ": argument '" + key +
                              "' must be a bool, a number, a string or a list of numbers, got " +
                              std::string(py::repr(v)));
    };
    if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
    if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
    if (py::isinstance<py::float_>(v)) return v.cast<double>();
    if (py::isinstance<py::str>(v)) return v.cast<std::string>();
    if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
        bool allInts = true;
        for (const py::handle& x : v) {
            if (py::isinstance<py::bool_>(x) || !(py::isinstance<py::int_>(x) || py::isinstance<py::float_>(x))) {
                throw bad();
            }
            allInts = allInts && py::isinstance<py::int_>(x);
        }
        if (allInts) return v.cast<std::vector<int64_t>>();
        return v.cast<std::vector<double>>();
    }
    // NumPy scalars and the like: whatever converts exactly.
    if (py::hasattr(v, "__index__")) return py::int_(py::reinterpret_borrow<py::object>(v)).cast<int64_t>();
    if (py::hasattr(v, "__float__")) return py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
    throw bad();
}

// MulAddConst with tensor constants (a per-channel scale or shift, say): an array, list or
// tensor for `a` or `b` builds it directly, since a blueprint's arguments hold numbers only
// (model files keep such constants as attributes).
ModulePtr mulAddConstWithTensors(const py::dict& scheme) {
    auto get = [&](const char* key) -> py::object {
        if (!scheme.contains(key)) return py::none();
        return scheme[key];
    };
    auto isArray = [](const py::handle& v) {
        return py::isinstance<Tensor>(v) || py::isinstance<py::array>(v) || isList(v);
    };
    const py::object a = get("a"), b = get("b"), name = get("name");
    if (!isArray(a) && !isArray(b)) return nullptr;
    auto tensorOf = [&](const py::object& v) {
        if (v.is_none()) return Tensor(); // the neutral number
        if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
        if (isArray(v)) return toTensor(py::module_::import("numpy").attr("asarray")(v, "float32"), /*copy=*/true);
        return Tensor::full({1}, v.cast<float>());
    };
    return std::make_shared<MulAddConst>(tensorOf(a), tensorOf(b), name.is_none() ? "" : name.cast<std::string>());
}

ModulePtr build(const std::string& cls, const py::dict& scheme) {
    if (cls == "MulAddConst") {
        if (ModulePtr m = mulAddConstWithTensors(scheme)) return m;
    }
    Blueprint bp;
    bp.classname = cls;
    for (const auto& [k, v] : scheme) {
        if (v.is_none()) continue; // the class's default
        const std::string key = py::str(k);
        bp.scheme.emplace_back(key, schemeValue(cls, key, v));
    }
    return buildModule(bp, {}, /*strictArguments=*/true);
}

// ---- what Python layers give back (Glue functions and Module subclasses) ----

// Input gradients from a Python function's result: a tensor or a list, None for an input
// that gets none.
Tensors gradientsOf(const py::handle& r) {
    auto one = [](const py::handle& v) { return v.is_none() ? Tensor() : toTensor(v); };
    if (!isList(r)) return Tensors{one(r)};
    Tensors out;
    for (const py::handle& v : r) out.push_back(one(v));
    return out;
}

// True for the errors a Python shape function raises for inputs it does not take: a
// ValueError or a tessera.ShapeError (they become the layer's ShapeError).
bool isShapeError(py::error_already_set& e) {
    static const py::handle shapeError =
        py::object(py::module_::import("tessera._tessera").attr("ShapeError")).release();
    return e.matches(PyExc_ValueError) || e.matches(shapeError);
}

// ---- Glue layers from Python functions ----

// One field of a Glue spec given as a dict or as an object with attributes (None when
// absent).
py::object specField(const py::handle& spec, const char* name) {
    if (py::isinstance<py::dict>(spec)) {
        const py::dict d = py::reinterpret_borrow<py::dict>(spec);
        return d.contains(name) ? py::reinterpret_borrow<py::object>(d[name]) : py::none();
    }
    return py::getattr(spec, name, py::none());
}

// The spec's function `name` (None when absent and not required), checked callable.
std::shared_ptr<PythonOwner> specFunction(const std::string& kind, const py::handle& spec, const char* name,
                                          bool required) {
    py::object f = specField(spec, name);
    if (f.is_none()) {
        if (required) throw py::type_error("Glue '" + kind + "': the spec needs '" + name + "' (a function)");
        return nullptr;
    }
    if (!PyCallable_Check(f.ptr())) {
        throw py::type_error("Glue '" + kind + "': '" + name + "' must be a function, got " +
                             std::string(py::str(f.get_type().attr("__name__"))));
    }
    return std::make_shared<PythonOwner>(std::move(f));
}

// The module a Glue function gets as `self`: the Python object already wrapping it.
py::object selfOf(Glue& self) { return py::cast(static_cast<Module*>(&self), py::return_value_policy::reference); }

// A GlueSpec whose functions call the Python ones (taking the GIL: forward and backward
// run with it released). A ValueError or ShapeError raised by `shapes` becomes the
// layer's ShapeError, so shape checks name the layer; any other exception passes through.
GlueSpec pythonGlueSpec(const std::string& kind, const py::handle& spec) {
    if (py::isinstance<py::dict>(spec)) {
        static const std::set<std::string> known = {"outputs", "shapes", "forward", "backward", "paramGrads", "params"};
        for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(spec)) {
            const std::string key = py::str(k);
            if (!known.count(key)) {
                throw py::type_error("Glue '" + kind + "': unknown spec entry '" + key +
                                     "' (outputs, shapes, forward, backward, paramGrads, params)");
            }
        }
    }
    GlueSpec g;
    if (py::object n = specField(spec, "outputs"); !n.is_none()) {
        const auto count = n.cast<int64_t>();
        if (count < 1) throw py::value_error("Glue '" + kind + "': outputs must be at least 1");
        g.outputs = static_cast<size_t>(count);
    }
    const auto shapes = specFunction(kind, spec, "shapes", true), forward = specFunction(kind, spec, "forward", true),
               backward = specFunction(kind, spec, "backward", false),
               paramGrads = specFunction(kind, spec, "paramGrads", false);
    g.shapes = [shapes](const Shapes& in) {
        py::gil_scoped_acquire gil;
        py::list l;
        for (const Shape& sh : in) l.append(fromShape(sh));
        try {
            return toShapes(shapes->object(l));
        } catch (py::error_already_set& e) {
            if (isShapeError(e)) throw ShapeError(py::str(e.value()));
            throw;
        }
    };
    g.forward = [forward](Glue& self, const Tensors& in) {
        py::gil_scoped_acquire gil;
        return toTensors(forward->object(selfOf(self), py::cast(in)));
    };
    if (backward) {
        g.backward = [backward](Glue& self, const Tensors& grads) {
            py::gil_scoped_acquire gil;
            return gradientsOf(backward->object(selfOf(self), py::cast(grads)));
        };
    }
    if (paramGrads) {
        g.paramGrads = [paramGrads](Glue& self, const Tensors& grads, float scale, float momentum) {
            py::gil_scoped_acquire gil;
            paramGrads->object(selfOf(self), py::cast(grads), scale, momentum);
        };
    }
    if (py::object params = specField(spec, "params"); !params.is_none()) {
        if (!py::isinstance<py::dict>(params)) {
            throw py::type_error("Glue '" + kind + "': params must be a dict {name: array}");
        }
        for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(params)) {
            g.params.emplace_back(py::str(k), toTensor(v, true));
        }
    }
    return g;
}

// registerGlue(kind, make): `make` is a function giving a spec (called for each layer
// built), or the spec itself.
void registerPythonGlue(const std::string& kind, const py::object& make) {
    if (kind.empty()) throw py::value_error("registerGlue: a kind name is required");
    pythonGlueSpec(kind, PyCallable_Check(make.ptr()) ? make() : make); // checked now, not at the first layer
    auto held = std::make_shared<PythonOwner>(make);
    registerGlue(kind, [kind, held] {
        py::gil_scoped_acquire gil;
        const py::object& m = held->object;
        return pythonGlueSpec(kind, PyCallable_Check(m.ptr()) ? m() : m);
    });
}

py::object forward(Module& m, const py::handle& data) {
    Tensors in = toTensors(data);
    Tensors out;
    {
        py::gil_scoped_release nogil;
        out = m(in);
    }
    return outputs(out, isList(data));
}

py::object backward(Module& m, const py::handle& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    Tensors in = toTensors(grad);
    Tensors out;
    {
        py::gil_scoped_release nogil;
        out = m.backward(in, updParamGrads, updGrad, scale, momentum);
    }
    return outputs(out, isList(grad));
}

py::object shapesOut(const Shapes& shapes, bool single) {
    if (single && shapes.size() == 1) return fromShape(shapes[0]);
    py::list l;
    for (const Shape& s : shapes) l.append(fromShape(s));
    return l;
}

Parent toParent(const py::handle& v) {
    if (py::isinstance<Node>(v)) return Parent(v.cast<NodePtr>());
    if (py::isinstance<py::tuple>(v) && py::len(v) == 2 && py::isinstance<Node>(v.cast<py::tuple>()[0])) {
        auto t = v.cast<py::tuple>();
        NodePtr n = t[0].cast<NodePtr>();
        if (py::isinstance<py::int_>(t[1])) return Parent(n, t[1].cast<int>());
        return Parent(n, t[1].cast<std::vector<int>>());
    }
    throw py::type_error("tessera: a parent is a Node or a tuple (Node, slot) or (Node, [slots]), got " +
                         std::string(py::repr(v)));
}

Parents toParents(const py::handle& v) {
    Parents out;
    if (v.is_none()) return out;
    if (py::isinstance<py::list>(v)) {
        for (const py::handle& p : v) out.push_back(toParent(p));
        return out;
    }
    out.push_back(toParent(v));
    return out;
}

std::vector<NodePtr> toNodes(const py::handle& v) {
    if (py::isinstance<Node>(v)) return {v.cast<NodePtr>()};
    return v.cast<std::vector<NodePtr>>();
}

py::list edges(const std::vector<Edge>& es) {
    py::list l;
    for (const Edge& e : es) l.append(py::make_tuple(e.node->shared_from_this(), e.slots));
    return l;
}

// A child by name or index; dotted names walk down nested containers.
ModulePtr child(const Container& c, const py::handle& key) {
    if (py::isinstance<py::int_>(key)) {
        auto i = key.cast<int64_t>();
        if (i < 0) i += static_cast<int64_t>(c.size());
        if (i < 0 || i >= static_cast<int64_t>(c.size())) {
            throw py::index_error(c.str() + ": no child at index " + std::to_string(key.cast<int64_t>()) +
                                  " (it holds " + std::to_string(c.size()) + ")");
        }
        return c.childPtr(static_cast<size_t>(i));
    }
    const std::string name = py::str(key);
    c.getByName(name); // the ContainerError naming the missing part
    const Container* at = &c;
    ModulePtr found;
    size_t begin = 0;
    while (true) {
        const size_t dot = name.find('.', begin);
        const std::string part = name.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
        for (size_t i = 0; i < at->size(); ++i) {
            if (at->childName(i) == part) found = at->childPtr(i);
        }
        if (dot == std::string::npos) return found;
        at = dynamic_cast<const Container*>(found.get());
        begin = dot + 1;
    }
}

py::dict namedTensors(const NamedTensors& ts) {
    py::dict d;
    for (const auto& [n, t] : ts) d[py::str(n)] = t;
    return d;
}

// ---- layers written in Python ----

// A blueprint value as Python has it.
py::object fromSchemeValue(const BlueprintValue& v) {
    return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

// class M(tessera.Module) written in Python (python/tessera/__init__.py turns such a class
// into a subclass of tessera._PythonModule): Tessera calls its updateData, updateGrad,
// accGradParams, dataShapeFrom, gradShapeFrom and checkDataShape, with the GIL taken. The
// module holds its Python object (set by _attach once its __init__ has run), so it lives
// as long as any container holds it; the Python object holds the module. That cycle is
// shown to Python's garbage collector (pythonModuleTraverse) while nothing else holds the
// module, so a layer no longer used by Python or by a container is freed. Its blueprint
// names its Python class ("python:" + module + "." + qualified name) and the arguments its
// __init__ took.
class PythonModule : public Module {
public:
    using Module::Module;

    void attach(py::object self, py::dict arguments) {
        py::object cls = py::type::of(self);
        name_ = py::str(cls.attr("__name__"));
        path_ = "python:" + std::string(py::str(cls.attr("__module__"))) + "." +
                std::string(py::str(cls.attr("__qualname__")));
        scheme_.clear();
        for (const auto& [k, v] : arguments) {
            if (v.is_none()) continue;
            const std::string key = py::str(k);
            scheme_.emplace_back(key, schemeValue(name_, key, v));
        }
        outputs_ = py::hasattr(self, "outputs") ? self.attr("outputs").cast<size_t>() : 1;
        self_ = std::make_shared<PythonOwner>(std::move(self));
    }

    std::string classname() const override { return name_.empty() ? "PythonModule" : name_; }
    size_t outputCount() const override { return outputs_; }
    // For the garbage collector: the Python object this module holds (null before _attach),
    // and the hold itself, moved out to be dropped.
    PyObject* pythonObject() const { return self_ ? self_->object.ptr() : nullptr; }
    std::shared_ptr<PythonOwner> takePythonObject() { return std::move(self_); }

    Shapes dataShapeFrom(const Shapes& inShapes) const override {
        py::gil_scoped_acquire gil;
        return shapes("dataShapeFrom", inShapes);
    }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override {
        py::gil_scoped_acquire gil;
        if (!has("gradShapeFrom")) return lastInShapes("gradShapeFrom"); // the input's, as most layers
        return shapes("gradShapeFrom", outGradShapes);
    }
    void checkDataShape(const Shapes& inShapes) const override {
        py::gil_scoped_acquire gil;
        if (has("checkDataShape")) call([&] { self().attr("checkDataShape")(shapesArg(inShapes)); });
    }
    Blueprint blueprint() const override {
        Blueprint bp = Module::blueprint();
        bp.classname = path_;
        for (const auto& kv : scheme_) {
            if (kv.first != "name") bp.scheme.push_back(kv);
        }
        return bp;
    }

protected:
    // The outputs must be what dataShapeFrom says: their count and shapes are checked.
    Tensors updateData(const Tensors& data) override {
        py::gil_scoped_acquire gil;
        Tensors out = toTensors(self().attr("updateData")(data.size() == 1 ? py::cast(data[0]) : py::cast(data)));
        Shapes in;
        for (const Tensor& t : data) in.push_back(t.shape());
        const Shapes want = shapes("dataShapeFrom", in);
        if (out.size() != want.size()) {
            throw moduleError("updateData gave " + std::to_string(out.size()) + " outputs, dataShapeFrom " +
                              std::to_string(want.size()));
        }
        for (size_t i = 0; i < out.size(); ++i) {
            if (out[i].shape() != want[i]) {
                throw moduleError("updateData gave output " + std::to_string(i) + " of shape " + out[i].shape().str() +
                                  ", dataShapeFrom says " + want[i].str());
            }
        }
        return out;
    }
    Tensors updateGrad(const Tensors& grad) override {
        py::gil_scoped_acquire gil;
        if (!has("updateGrad")) throw moduleError("has no updateGrad: it gives no input gradient");
        const Tensors out =
            gradientsOf(self().attr("updateGrad")(grad.size() == 1 ? py::cast(grad[0]) : py::cast(grad)));
        const Tensors& in = inDataList();
        if (out.size() != in.size()) {
            throw moduleError("updateGrad gave " + std::to_string(out.size()) + " gradients for " +
                              std::to_string(in.size()) + " inputs");
        }
        for (size_t i = 0; i < out.size(); ++i) {
            if (out[i].defined() && out[i].shape() != in[i].shape()) {
                throw moduleError("updateGrad gave gradient " + std::to_string(i) + " of shape " +
                                  out[i].shape().str() + " for input " + in[i].shape().str());
            }
        }
        return out;
    }
    void accGradParams(const Tensors& grad, float scale, float momentum) override {
        if (ownParams().empty()) return;
        py::gil_scoped_acquire gil;
        if (!has("accGradParams")) throw moduleError("has parameters but no accGradParams");
        self().attr("accGradParams")(grad.size() == 1 ? py::cast(grad[0]) : py::cast(grad), scale, momentum);
    }

private:
    const py::object& self() const {
        if (!self_) throw moduleError("is used before its __init__ finished");
        return self_->object;
    }
    bool has(const char* method) const { return self_ && py::hasattr(self_->object, method); }
    static py::object shapesArg(const Shapes& shapes) {
        if (shapes.size() == 1) return fromShape(shapes[0]);
        py::list l;
        for (const Shape& sh : shapes) l.append(fromShape(sh));
        return l;
    }
    // A ValueError or ShapeError from the Python method is this layer's ShapeError.
    template <class F> void call(F&& f) const {
        try {
            f();
        } catch (py::error_already_set& e) {
            if (isShapeError(e)) throw shapeError(py::str(e.value()));
            throw;
        }
    }
    Shapes shapes(const char* method, const Shapes& in) const {
        Shapes out;
        call([&] { out = toShapes(self().attr(method)(shapesArg(in))); });
        return out;
    }

    std::shared_ptr<PythonOwner> self_;
    std::string name_, path_;
    std::vector<std::pair<std::string, BlueprintValue>> scheme_;
    size_t outputs_ = 1;
};

// Every Module's Python object is known to Python's garbage collector (a layer written in
// Python subclasses one, and a class's base may only be swapped for one of the same kind).
// Of a layer written in Python, it sees the hold of its module on the layer's own object
// while only that object holds the module: a reference cycle through Python alone. While a
// container (any other C++ owner) holds the module, the layer stays.
PyTypeObject* pythonModuleType = nullptr; // tessera._PythonModule, once registered

PythonModule* heldOnlyByPython(PyObject* o) {
    if (!pythonModuleType || !PyObject_TypeCheck(o, pythonModuleType)) return nullptr;
    const py::detail::value_and_holder vh = reinterpret_cast<py::detail::instance*>(o)->get_value_and_holder();
    if (!vh.inst || !vh.holder_constructed()) return nullptr;
    const auto& holder = vh.holder<std::shared_ptr<PythonModule>>();
    return holder.use_count() == 1 ? holder.get() : nullptr;
}

extern "C" int moduleTraverse(PyObject* o, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(o)); // instances of heap types hold their type
    if (PythonModule* m = heldOnlyByPython(o)) Py_VISIT(m->pythonObject());
    return 0;
}

extern "C" int moduleClear(PyObject* o) {
    std::shared_ptr<PythonOwner> dropped; // dropped on return: it may free o and its module
    if (PythonModule* m = heldOnlyByPython(o)) dropped = m->takePythonObject();
    return 0;
}

// Rebuilds a layer written in Python from its blueprint: imports its module, calls its class
// with the blueprint's arguments.
ModulePtr buildPythonModule(const Blueprint& bp) {
    py::gil_scoped_acquire gil;
    const std::string path = bp.classname.substr(std::string("python:").size());
    const size_t dot = path.rfind('.');
    if (dot == std::string::npos) throw ModuleError("'" + bp.classname + "' names no Python class");
    py::object cls;
    try {
        cls = py::module_::import(path.substr(0, dot).c_str());
        std::string rest = path.substr(dot + 1);
        cls = cls.attr(rest.c_str());
    } catch (py::error_already_set& e) {
        throw ModuleError("the layer written in Python '" + path + "' cannot be found: " + std::string(e.what()) +
                          " (import its module first)");
    }
    py::dict kwargs;
    std::string name;
    for (const auto& [k, v] : bp.scheme) {
        if (k == "name") {
            name = std::get<std::string>(v);
        } else {
            kwargs[py::str(k)] = fromSchemeValue(v);
        }
    }
    ModulePtr mod = cls(**kwargs).cast<ModulePtr>();
    if (!name.empty()) mod->setName(name);
    return mod;
}

} // namespace

void bindModules(py::module_& m) {
    py::class_<Variable, VariablePtr>(m, "Variable", "A trained parameter: its value and its accumulated gradient.")
        .def_property(
            "data", [](const Variable& v) { return v.data; },
            [](Variable& v, const py::handle& value) {
                Tensor t = toTensor(value);
                if (t.shape() != v.data.shape()) {
                    throw ShapeError("Variable: the new value has shape " + t.shape().str() + ", the parameter " +
                                     v.data.shape().str());
                }
                v.data.copyFrom(t.dtype() == v.data.dtype() ? t : t.astype(v.data.dtype()));
                noteParameterChange(); // packed weights (Module.packWeights) follow
            },
            "The value; assigning copies into it (same shape), so optimizers stay bound.")
        .def_property_readonly("grad", [](const Variable& v) { return v.grad; })
        .def("__repr__", [](const Variable& v) {
            return "tessera.Variable(shape=" + std::string(py::str(fromShape(v.data.shape()))) + ")";
        });

    py::class_<Module, ModulePtr>(m, "Module", R"(Base of every layer and container.

Layers are made by class name with keyword arguments, as tessera.Conv2D(inmaps=3,
outmaps=16, size=3, pad=1) does; Module(classname, {arguments}) is the general form.)",
                                  py::custom_type_setup([](PyHeapTypeObject* heapType) {
                                      PyTypeObject* type = &heapType->ht_type;
                                      type->tp_flags |= Py_TPFLAGS_HAVE_GC;
                                      type->tp_traverse = moduleTraverse;
                                      type->tp_clear = moduleClear;
                                  }))
        .def(py::init(&build), py::arg("classname"), py::arg("scheme") = py::dict())
        .def(py::init([](const ModulePtr& same) { return same; }), py::arg("module"),
             "Another handle on the same module (the layer classes use it to present a module made in "
             "C++ as, say, a tessera.Conv2D).")
        .def("__call__", &forward, py::arg("data"),
             "Forward: a Tensor (or array) in, a Tensor out; a list in, a list out. Releases the GIL.")
        .def(
            "__call__",
            [](Module& m, const py::args& inputs) {
                if (inputs.empty()) throw py::type_error(m.str() + ": called with no input");
                return forward(m, py::list(inputs));
            },
            "m(a, b, ...): the inputs one by one, as m([a, b, ...]): a list out.")
        .def("backward", &backward, py::arg("grad"), py::arg("updParamGrads") = true, py::arg("updGrad") = true,
             py::arg("scale") = 1.0f, py::arg("momentum") = 0.0f,
             "Back-propagate the gradient of the last output; returns the input gradient. Releases the GIL.")
        .def_property_readonly("data", [](const Module& x) { return outputs(x.dataList(), false); })
        .def_property_readonly("grad", [](const Module& x) { return outputs(x.gradList(), false); })
        .def_property_readonly("inData", [](const Module& x) { return outputs(x.inDataList(), false); })
        .def(
            "dataShapeFrom",
            [](const Module& x, const py::handle& shapes) {
                bool single = false;
                const Shapes in = toShapes(shapes, &single);
                return shapesOut(x.inferDataShape(in), single);
            },
            py::arg("shape"), "Output shape(s) for input shape(s), checked layer by layer; nothing is allocated.")
        .def(
            "gradShapeFrom",
            [](const Module& x, const py::handle& shapes) {
                bool single = false;
                const Shapes in = toShapes(shapes, &single);
                return shapesOut(x.gradShapeFrom(in), single);
            },
            py::arg("shape"))
        .def_property("name", &Module::name, &Module::setName)
        .def_property_readonly("classname", &Module::classname)
        .def("__repr__", &Module::str)
        .def(
            "namedParams",
            [](const Module& x) {
                py::dict d;
                for (const auto& [n, v] : x.namedParams()) d[py::str(n)] = v;
                return d;
            },
            "{dotted name: Variable}, in registration order.")
        .def("namedAttrs", [](const Module& x) { return namedTensors(x.namedAttrs()); })
        .def_property_readonly(
            "saved",
            [](const Module& x) {
                py::dict d;
                auto put = [&](const char* name, const Tensor& t) {
                    if (t.defined()) d[name] = t.plain().clone();
                };
                if (const auto* bn = dynamic_cast<const BatchNormND*>(&x)) {
                    put("batchMean", bn->batchMean());
                    put("batchVar", bn->batchVar());
                } else if (const auto* drop = dynamic_cast<const Dropout*>(&x)) {
                    put("mask", drop->mask());
                } else if (const auto* lcn = dynamic_cast<const LCN*>(&x)) {
                    put("means", lcn->means());
                }
                return d;
            },
            R"(What the last forward kept for backward, as copies (changing them changes nothing):
a batch norm's "batchMean" and "batchVar" (per channel, of a train-mode forward), a
Dropout's "mask" (kept elements scaled by 1/(1-p), dropped ones 0; drawn again from the
forward's random counters, which are all it keeps), an LCN's window
"means". Empty for other layers and before a forward.)")
        .def("copy", &copyModule, py::call_guard<py::gil_scoped_release>(),
             "A copy that shares nothing with this module: rebuilt from its blueprint, with its parameters, "
             "attributes, counters, random streams, compute types and modes, on its device (one model per "
             "thread). copy.deepcopy(module) makes the same.")
        .def("getVar", &Module::getVar, py::arg("name"))
        .def(
            "setVar",
            [](Module& x, const std::string& name, const VariablePtr& var) {
                if (!var) throw ModuleError(x.str() + ": setVar('" + name + "') needs a Variable, got None");
                if (x.hasVar(name) && x.getVar(name)->data.shape() != var->data.shape()) {
                    throw ShapeError(x.str() + ": setVar('" + name + "') expects a Variable of shape " +
                                     x.getVar(name)->data.shape().str() + ", got " + var->data.shape().str());
                }
                x.setVar(name, var);
            },
            py::arg("name"), py::arg("var"),
            "Makes parameter `name` the Variable `var` of another module (getVar), shared: one value, trained "
            "once, its gradient summed over both (a language model's head tied to its token table, "
            "Linear(transposed=True)). Its shape must be the parameter's.")
        .def("numOfParams", &Module::numOfParams)
        .def("paramSize", &Module::paramSize)
        .def("zeroGradParams", &Module::zeroGradParams)
        .def("updateParams", &Module::updateParams, py::arg("lr"), py::call_guard<py::gil_scoped_release>(),
             "Plain gradient step: param -= lr * grad. Releases the GIL.")
        .def("trainMode", &Module::trainMode)
        .def("evalMode", &Module::evalMode)
        .def_property_readonly("train", &Module::isTrain)
        .def("reset", &Module::reset)
        .def(
            "calcMode", [](Module& x, const std::string& dtype) { x.calcMode(toDType(dtype)); }, py::arg("dtype"))
        .def_property_readonly("computeDType", [](const Module& x) { return str(x.computeDType()); })
        .def("packWeights", &Module::packWeights, py::arg("on") = true,
             R"(For inference with fixed weights: in eval mode the layers keep their weights in
their kernels' layout and type between calls (an extra copy) instead of converting them on
every forward. Optimizer updates, assigning var.data, setVar, setAttr, loading and
calcMode make them pack again; a write through a NumPy view of a parameter does not: call
packWeights() again after one. False drops the copies. On the CPU: convolutions,
deconvolutions and Linear. On every device, with fusion on, a convolution whose output
only a batch norm reads folds that normalisation (and its ReLU) into a copy of its
weights: the batch norm's pass is gone.)")
        .def_property_readonly("weightsPacked", &Module::weightsPacked)
        .def(
            "to",
            [](const ModulePtr& x, const std::string& device) {
                x->to(toDevice(device));
                return x;
            },
            py::arg("device"), "Moves parameters and attributes to the device; returns the module.")
        .def_property_readonly("device", [](const Module& x) { return x.device().str(); })
        .def(
            "blueprint",
            [](const Module& x) { return py::module_::import("json").attr("loads")(x.blueprint().toJson()); },
            "Class name and constructor arguments (and children), as a dict.")
        .def(
            "save",
            [](const Module& x, const std::string& path, const std::string& dtype, bool blueprint,
               const py::object& inputs, const std::vector<std::string>& classes, const py::object& transforms) {
                const Shapes shapes = inputs.is_none() ? Shapes{} : toShapes(inputs);
                const std::string text = transformsText(transforms);
                py::gil_scoped_release nogil;
                saveModel(x, path,
                          SaveOptions{.blueprint = blueprint,
                                      .dtype = toDType(dtype),
                                      .inputs = shapes,
                                      .classes = classes,
                                      .transforms = text});
            },
            py::arg("path"), py::arg("dtype") = "float32", py::arg("blueprint") = true, py::arg("inputs") = py::none(),
            py::arg("classes") = std::vector<std::string>{}, py::arg("transforms") = py::none(),
            "Writes parameters and attributes (and the blueprint, the input shape(s) `inputs` when given, which "
            "tessera check/summary/convert then use, the `classes`' names, which tessera predict and eval "
            "print, and the `transforms` (a Transforms or its text) that make an image the model's input, which "
            "tessera predict and eval and readTransforms apply) to an HDF5 file.")
        .def(
            "load",
            [](Module& x, const std::string& path, bool strict) {
                py::gil_scoped_release nogil;
                loadModel(x, path, strict ? LoadMode::strict : LoadMode::lenient);
            },
            py::arg("path"), py::arg("strict") = true,
            "Loads parameters and attributes from an HDF5 file; every name and shape is checked first.")
        .def(
            "node",
            [](const ModulePtr& self, const py::args& parents, const py::object& name) {
                Parents ps;
                for (const py::handle& p : parents) {
                    for (Parent& q : toParents(p)) ps.push_back(std::move(q));
                }
                return node(self, ps, name.is_none() ? std::string() : name.cast<std::string>());
            },
            py::kw_only(), py::arg("name") = py::none(),
            "This module as a graph node whose parents are the arguments: Nodes, or (node, slot) / (node, [slots]).")
        .def("children", [](const Module& x) {
            py::list l;
            if (const auto* c = dynamic_cast<const Container*>(&x)) {
                for (size_t i = 0; i < c->size(); ++i) l.append(c->childPtr(i));
            }
            return l;
        });

    m.def("setCheckNumerics", &Module::setCheckNumerics, py::arg("on"),
          "Process-wide: stop at the first NaN or infinity, naming the layer (NumericsError).");
    m.def(
        "_maxUnpool2D",
        [](const ModulePtr& maxpool, const std::string& name) -> ModulePtr {
            auto pool = std::dynamic_pointer_cast<MaxPool2D>(maxpool);
            if (!pool) throw ModuleError("MaxUnpool2D: expects the MaxPool2D it inverts, got " + maxpool->str());
            return std::make_shared<MaxUnpool2D>(pool, name);
        },
        py::arg("maxpool"), py::arg("name"));
    auto pythonModule = py::class_<PythonModule, Module, std::shared_ptr<PythonModule>>(
        m, "_PythonModule", "The base a layer written in Python gets.");
    pythonModuleType = reinterpret_cast<PyTypeObject*>(pythonModule.ptr());
    pythonModule.def(py::init<std::string>(), py::arg("name") = "")
        .def("_attach", &PythonModule::attach, py::arg("self"), py::arg("arguments"))
        .def(
            "setVar",
            [](PythonModule& x, const std::string& name, const py::handle& value) {
                if (py::isinstance<Variable>(value)) return x.setVar(name, value.cast<VariablePtr>()); // shared
                x.setVar(name, Variable::of(toTensor(value, true)));
            },
            py::arg("name"), py::arg("value"),
            "Registers (or replaces) parameter `name` with a copy of `value` (an array or tensor), or with "
            "`value` itself when it is a Variable (another module's, shared).")
        .def(
            "setAttr",
            [](PythonModule& x, const std::string& name, const py::handle& value) {
                x.setAttr(name, toTensor(value, true));
            },
            py::arg("name"), py::arg("value"), "Registers (or replaces) state tensor `name` (saved, not trained).");
    registerClassResolver("python:", &buildPythonModule);
    m.def("registerGlue", &registerPythonGlue, py::arg("kind"), py::arg("make"),
          R"(Makes `kind` a layer: Glue(kind) (and blueprints and model files naming it) build
one from `make()`, a spec: a dict (or object) with shapes(inShapes) -> shape(s),
forward(self, inputs) -> output(s), and optionally backward(self, grads) -> input
gradients, paramGrads(self, grads, scale, momentum), params {name: array} and outputs
(count, 1 by default). `make` may be the spec itself. Registering a kind again replaces it.)");
    m.def("isGlueRegistered", &isGlueRegistered, py::arg("kind"));
    m.def("factoryClassnames", &factoryClassnames, "The layer classes Module(classname, ...) builds.");
    m.def("factorySignature", &factorySignature, py::arg("classname"),
          "The arguments a layer class takes, with their defaults, as Python writes a signature "
          "(\"insize, outsize, wscale=1.0, ...\"): the one place its defaults are written.");
    m.def("setFusion", &setFusion, py::arg("on"),
          "Process-wide: fuse a batch norm with the ReLU that alone consumes it (on by default; the same results).");
    m.def("fusionEnabled", &fusionEnabled);

    py::class_<Container, Module, std::shared_ptr<Container>>(m, "Container")
        .def("__len__", &Container::size)
        .def("__getitem__", &child, py::arg("key"), "A child by index, name, or dotted path ('block1.fc1').")
        .def("getByName", [](const Container& c, const std::string& n) { return child(c, py::str(n)); })
        .def("childName", &Container::childName, py::arg("index"))
        .def(
            "replace", [](Container& c, const std::string& name, ModulePtr module) { return c.replace(name, module); },
            py::arg("name"), py::arg("module"),
            "Put `module` where the child (a Graph: the node) `name` is, under that name and on the container's "
            "device: a head swap. Returns the module it replaced; the next call checks the shapes again.")
        .def_property("releaseInBackward", &Container::releasesInBackward, &Container::setReleaseInBackward,
                      "Whether backward drops what each child kept for it once the child's backward has run (on by "
                      "default: a training step holds less). Off keeps every child's data readable after backward "
                      "and allows a second backward after one forward. Setting it sets every container below too.")
        .def("__iter__", [](const Container& c) {
            py::list l;
            for (size_t i = 0; i < c.size(); ++i) l.append(c.childPtr(i));
            return py::iter(l);
        });

    py::class_<Sequential, Container, std::shared_ptr<Sequential>>(m, "Sequential")
        .def(py::init([](const py::object& name) {
                 return std::make_shared<Sequential>(name.is_none() ? std::string() : name.cast<std::string>());
             }),
             py::arg("name") = py::none())
        .def(
            "append",
            [](const std::shared_ptr<Sequential>& s, const ModulePtr& mod) {
                s->append(mod);
                return s;
            },
            py::arg("mod"), "Adds a module at the end; returns the Sequential.")
        .def(
            "extend",
            [](const std::shared_ptr<Sequential>& s, const std::vector<ModulePtr>& mods) {
                s->extend(mods);
                return s;
            },
            py::arg("mods"))
        .def("insert", &Sequential::insert, py::arg("pos"), py::arg("mod"))
        .def(
            "pop",
            [](Sequential& s, const py::object& pos) { return pos.is_none() ? s.pop() : s.pop(pos.cast<size_t>()); },
            py::arg("pos") = py::none());

    py::class_<Parallel, Container, std::shared_ptr<Parallel>>(m, "Parallel")
        .def(py::init([](const py::object& name) {
                 return std::make_shared<Parallel>(name.is_none() ? std::string() : name.cast<std::string>());
             }),
             py::arg("name") = py::none())
        .def(
            "append",
            [](const std::shared_ptr<Parallel>& s, const ModulePtr& mod) {
                s->append(mod);
                return s;
            },
            py::arg("mod"));

    py::class_<Graph, Container, std::shared_ptr<Graph>>(m, "Graph")
        .def(py::init([](const py::handle& inputs, const py::handle& outputs, const py::object& name) {
                 return std::make_shared<Graph>(toNodes(inputs), toNodes(outputs),
                                                name.is_none() ? std::string() : name.cast<std::string>());
             }),
             py::arg("inputs"), py::arg("outputs"), py::arg("name") = py::none(),
             "A graph from its input and output nodes (one Node or a list each).")
        .def_property_readonly("inputs", &Graph::inputs)
        .def_property_readonly("outputs", &Graph::outputs)
        .def("nodes",
             [](const Graph& g) {
                 py::list l;
                 for (Node* n : g.order()) l.append(n->shared_from_this());
                 return l;
             })
        .def(
            "getNodeByName", [](const Graph& g, const std::string& n) { return g.getNodeByName(n).shared_from_this(); },
            py::arg("name"));

    py::class_<Node, NodePtr>(m, "Node", "A module wrapped as a vertex of a graph (PuzzleLib's Node).")
        .def(py::init([](const ModulePtr& mod, const py::handle& parents, const py::object& name) {
                 return node(mod, toParents(parents), name.is_none() ? std::string() : name.cast<std::string>());
             }),
             py::arg("mod"), py::arg("parents") = py::none(), py::arg("name") = py::none())
        .def_property("name", &Node::name, &Node::setName)
        .def_property_readonly("module", &Node::modulePtr)
        .def_property_readonly(
            "fwds", [](const Node& n) { return edges(n.fwds()); }, "[(child node, slots of this node it takes)]")
        .def_property_readonly(
            "bwds", [](const Node& n) { return edges(n.bwds()); }, "[(parent node, slots taken from it)]")
        .def_property_readonly("data", [](const Node& n) { return outputs(n.outputs(), false); })
        .def_property_readonly("grad", [](const Node& n) { return outputs(n.inputGrads(), false); })
        .def(
            "addBackwards", [](Node& n, const py::handle& parents) { n.addBackwards(toParents(parents)); },
            py::arg("nodes"))
        .def(
            "forward",
            [](Node& n, const py::handle& data) {
                Tensors in = toTensors(data);
                py::gil_scoped_release nogil;
                n.forward(in);
            },
            py::arg("data"), "Runs this node on data, then every descendant once its parents have run.")
        .def(
            "backward",
            [](Node& n, const py::handle& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
                Tensors in = toTensors(grad);
                py::gil_scoped_release nogil;
                n.backward(in, updParamGrads, updGrad, scale, momentum);
            },
            py::arg("grad"), py::arg("updParamGrads") = true, py::arg("updGrad") = true, py::arg("scale") = 1.0f,
            py::arg("momentum") = 0.0f)
        .def("__repr__", [](const Node& n) { return "tessera.Node(" + n.str() + ")"; });
}

} // namespace tessera::python
