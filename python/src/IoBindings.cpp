// Model files (HDF5, ONNX, blueprints), the zoo and summaries.
#include "Bindings.h"
#include "backend/Errors.h"
#include "containers/Graph.h"
#include "data/Transform.h"
#include "io/Factory.h"
#include "io/Hdf5.h"
#include "io/Onnx.h"
#include "io/Summary.h"
#include "models/Zoo.h"
#include "training/Profile.h"

namespace tessera::python {

void bindIo(py::module_& m) {
    m.def(
        "loadZooModel",
        [](const std::string& name, int64_t classes) {
            py::gil_scoped_release nogil;
            return loadZooModel(name, classes);
        },
        py::arg("name"), py::arg("classes") = 0,
        "A zoo model by name (tessera.zooModels() lists them), initialised from the global generator, with a "
        "head for `classes` classes (0: the model's own count).");
    m.def(
        "zooModels",
        [] {
            py::list l;
            for (const ZooEntry& e : zooModels()) {
                py::dict d;
                d["name"] = e.name;
                d["input"] = e.input;
                l.append(d);
            }
            return l;
        },
        "[{'name': ..., 'input': '1x3x224x224'}] for every zoo model.");
    m.def(
        "buildModule",
        [](const py::handle& blueprint) {
            const std::string json = py::isinstance<py::str>(blueprint)
                                         ? blueprint.cast<std::string>()
                                         : py::module_::import("json").attr("dumps")(blueprint).cast<std::string>();
            return buildModule(blueprintFromJson(json));
        },
        py::arg("blueprint"), "A fresh module from a blueprint (a dict as Module.blueprint() gives, or JSON text).");
    m.def(
        "loadModelFile",
        [](const std::string& path) -> ModulePtr {
            if (isOnnxPath(path)) {
                py::gil_scoped_release nogil;
                return importOnnx(path);
            }
            ModulePtr mod = buildModuleFromFile(path);
            loadModel(*mod, path);
            return mod;
        },
        py::arg("path"),
        "The model an HDF5 file saved with its blueprint holds (rebuilt, then its weights loaded), or an ONNX model.");
    m.def(
        "readClassNames",
        [](const std::string& path) { return isOnnxPath(path) ? onnxClassNames(path) : readClassNames(path); },
        py::arg("path"),
        "The class names saved with an HDF5 model file (Module.save(classes=...), tessera train --save) or an ONNX "
        "file (exportOnnx(classes=...)); [] if none.");
    m.def(
        "readTransforms",
        [](const std::string& path) {
            const std::string text = isOnnxPath(path) ? onnxTransforms(path) : readTransforms(path);
            return text.empty() ? Transforms() : Transforms::parse(text);
        },
        py::arg("path"),
        "The transforms saved with an HDF5 model file (Module.save(transforms=...), tessera train --save keeps its "
        "--augment) or an ONNX file (exportOnnx(transforms=...)): apply(image, train=False) makes an image the "
        "model's input. Empty Transforms if none.");
    m.def(
        "importOnnx",
        [](const std::string& path, bool attention, int64_t foldLimit, const std::map<std::string, int64_t>& dims) {
            py::gil_scoped_release nogil;
            OnnxImportOptions options;
            options.attention = attention;
            options.foldLimit = foldLimit;
            options.dims = dims;
            return importOnnx(path, options);
        },
        py::arg("path"), py::arg("attention") = true, py::arg("foldLimit") = OnnxImportOptions{}.foldLimit,
        py::arg("dims") = std::map<std::string, int64_t>{},
        "An ONNX model as a Graph of Tessera modules. attention: attention in the forms exporters write it (MatMul(q, "
        "k^T), scaled, masked, Softmax, MatMul(v)) read back as one ScaledDotProductAttention layer; False: as "
        "separate layers. foldLimit: the most values the import reads and writes computing on constants in all "
        "(shape computations, masks, tables); a file past it is an error naming the node. dims: sizes for the "
        "inputs' named free dims ({'seq': 128} for a model exported with a free sequence length): each becomes that "
        "size, and the graph takes that size only.");
    m.def(
        "exportOnnx",
        [](Module& model, const py::handle& input, const std::string& path, int64_t opset,
           const std::vector<std::string>& classes, const py::object& transforms) {
            const Shapes shapes = toShapes(input);
            const std::string text = transformsText(transforms);
            py::gil_scoped_release nogil;
            exportOnnx(model, shapes, path, OnnxExportOptions{.opset = opset, .classes = classes, .transforms = text});
        },
        py::arg("model"), py::arg("input"), py::arg("path"), py::arg("opset") = 13,
        py::arg("classes") = std::vector<std::string>{}, py::arg("transforms") = py::none(),
        "Writes the model to an ONNX file for the input shape(s) (dim 0 left free); classes: the names of the "
        "classes its outputs score, and transforms (a Transforms or its text): what makes an image its input, "
        "both kept in the file's metadata (readClassNames, readTransforms).");

    py::class_<SummaryRow>(m, "SummaryRow", "One layer of a summary.")
        .def_readonly("name", &SummaryRow::name)
        .def_readonly("module", &SummaryRow::module)
        .def_property_readonly("inputs",
                               [](const SummaryRow& r) {
                                   py::list l;
                                   for (const Shape& s : r.in) l.append(fromShape(s));
                                   return l;
                               })
        .def_property_readonly("outputs",
                               [](const SummaryRow& r) {
                                   py::list l;
                                   for (const Shape& s : r.out) l.append(fromShape(s));
                                   return l;
                               })
        .def_property_readonly("connectedTo",
                               [](const SummaryRow& r) {
                                   py::list l;
                                   for (const auto& [from, shape] : r.from) l.append(from);
                                   return l;
                               })
        .def_readonly("trainable", &SummaryRow::trainable)
        .def_readonly("nonTrainable", &SummaryRow::nonTrainable)
        .def_readonly("flops", &SummaryRow::flops)
        .def_readonly("activationBytes", &SummaryRow::activationBytes)
        .def_readonly("attributes", &SummaryRow::attributes)
        .def("__repr__", [](const SummaryRow& r) {
            std::string out;
            for (const Shape& s : r.out) out += (out.empty() ? "" : ", ") + s.str();
            return "tessera.SummaryRow(" + r.name + ": " + r.module + " -> " + out + ")";
        });
    m.def(
        "_summarize",
        [](Module& model, const py::handle& input) {
            const Shapes shapes = toShapes(input);
            return summarize(model, shapes);
        },
        py::arg("model"), py::arg("input"));
    m.def(
        "_groupRows", [](const std::vector<SummaryRow>& rows, int depth) { return groupRows(rows, depth); },
        py::arg("rows"), py::arg("depth"));
    m.def("_summaryTable", &summaryTable, py::arg("rows"), py::arg("connections"));

    py::class_<ProfileRow, SummaryRow>(m, "ProfileRow", "One layer of a profile: a summary row with its times.")
        .def_readonly("forward", &ProfileRow::forward, "median seconds of its forward")
        .def_readonly("backward", &ProfileRow::backward, "median seconds of its backward (0 in inference)")
        .def_readonly("fused", &ProfileRow::fused, "a ReLU the batch norm before it runs (its time is in that row)")
        .def_readonly("kept", &ProfileRow::kept, "bytes its forward left allocated: outputs and saved tensors")
        .def("__repr__", [](const ProfileRow& r) {
            char b[96];
            std::snprintf(b, sizeof b, ": forward %.3f ms, backward %.3f ms)", r.forward * 1e3, r.backward * 1e3);
            return "tessera.ProfileRow(" + r.name + " " + r.module + b;
        });
    py::class_<Profile>(m, "Profile", "Where a step's time goes, layer by layer (tessera.profile).")
        .def_readonly("rows", &Profile::rows)
        .def_readonly("train", &Profile::train)
        .def_readonly("steps", &Profile::steps)
        .def_readonly("forward", &Profile::forward)
        .def_readonly("backward", &Profile::backward)
        .def_readonly("update", &Profile::update)
        .def_readonly("step", &Profile::step)
        .def_readonly("plainStep", &Profile::plainStep)
        .def_readonly("kept", &Profile::kept)
        .def_readonly("stepSamples", &Profile::stepSamples)
        .def_readonly("layerSamples", &Profile::layerSamples)
        .def("table", &profileTable, py::arg("depth") = 0, py::arg("byTime") = false,
             "The table tessera profile prints (rows grouped at `depth`; slowest first with byTime).")
        .def("csv", &profileCsv, "Every row's times as CSV.")
        .def("__str__", [](const Profile& p) { return profileTable(p); });
    m.def(
        "profile",
        [](Module& model, const py::handle& inputs, bool train, int warmup, int steps, Optimizer* optimizer) {
            const Tensors in = toTensors(inputs);
            ProfileOptions options;
            options.train = train;
            options.warmup = warmup;
            options.steps = steps;
            options.optimizer = optimizer;
            py::gil_scoped_release nogil;
            return profile(model, in, options);
        },
        py::arg("model"), py::arg("inputs"), py::arg("train") = true, py::arg("warmup") = 2, py::arg("steps") = 5,
        py::arg("optimizer") = nullptr,
        "Times each layer's forward and backward over `steps` training steps (forward, backward with a fixed output "
        "gradient, the optimizer's update when given one set up on the model) after `warmup` untimed ones; "
        "train=False: inference steps in eval mode. Medians in seconds.");
    m.def("_toDot", &toDot, py::arg("rows"), py::arg("title"));
}

} // namespace tessera::python
