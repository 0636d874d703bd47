// tessera convert: a model between Tessera's HDF5 files and ONNX, with its weights.
#include <cstdio>

#include "Commands.h"
#include "io/Hdf5.h"
#include "io/Onnx.h"
#include "io/Summary.h"

namespace tessera::cli {

namespace {

struct ConvertArgs {
    std::string in, out;
    std::vector<std::string> inputs;
    int64_t batch = 0;
    std::string dtype = "fp32";
};

int runConvert(const ConvertArgs& a) {
    const bool toOnnx = isOnnxPath(a.out);
    const bool toHdf5 = a.out.size() > 3 && (a.out.compare(a.out.size() - 3, 3, ".h5") == 0 ||
                                             (a.out.size() > 5 && a.out.compare(a.out.size() - 5, 5, ".hdf5") == 0));
    if (!toOnnx && !toHdf5) throw UsageError("convert: OUT must end in .onnx, .h5 or .hdf5, got '" + a.out + "'");
    if (a.dtype != "fp32" && a.dtype != "bf16" && a.dtype != "fp16") {
        throw UsageError("--dtype: expected fp32, bf16 or fp16, got '" + a.dtype + "'");
    }
    if (a.dtype != "fp32" && !toHdf5) throw UsageError("--dtype " + a.dtype + ": only HDF5 files are written in it");
    // With its weights: a zoo model gets fresh (seeded) ones, files keep theirs.
    ModulePtr net = loadModel(a.in, /*train=*/true, givenInputs(a.inputs));
    const std::vector<std::string> classes = modelClassNames(a.in); // kept by either format
    const std::string transforms = modelTransforms(a.in);           // the same
    const std::string named = (classes.empty() ? "" : ", " + std::to_string(classes.size()) + " class names") +
                              (transforms.empty() ? "" : ", transforms " + transforms);
    if (toOnnx) {
        const Shapes shapes = inputsFor(a.in, a.inputs, a.batch);
        exportOnnx(*net, shapes, a.out, {.classes = classes, .transforms = transforms});
        std::printf("wrote %s (ONNX, %s parameters, inputs %s%s)\n", a.out.c_str(),
                    thousands(net->numOfParams()).c_str(), str(shapes).c_str(), named.c_str());
    } else {
        const DType dtype = a.dtype == "bf16" ? DType::bfloat16 : a.dtype == "fp16" ? DType::float16 : DType::float32;
        // The input shapes, where known (given, the zoo's, the ONNX file's or the model file's), go
        // along: later checks and exports of the file need no --input.
        Shapes shapes;
        try {
            shapes = inputsFor(a.in, a.inputs, a.batch);
        } catch (const UsageError&) { // none known: the file holds none
        }
        saveModel(*net, a.out, {.dtype = dtype, .inputs = shapes, .classes = classes, .transforms = transforms});
        std::printf("wrote %s (HDF5 with the blueprint, %s parameters in %s%s%s)\n", a.out.c_str(),
                    thousands(net->numOfParams()).c_str(), str(dtype).c_str(),
                    shapes.empty() ? "" : (", inputs " + str(shapes)).c_str(), named.c_str());
    }
    return 0;
}

} // namespace

std::function<int()> addConvert(CLI::App& app) {
    auto args = std::make_shared<ConvertArgs>();
    CLI::App* cmd =
        app.add_subcommand("convert", "Convert a model between HDF5 (.h5) and ONNX (.onnx), weights included");
    cmd->add_option("in", args->in, "a zoo model name, a blueprint JSON file, an HDF5 model file or an ONNX file")
        ->required();
    cmd->add_option("out", args->out, "the file to write: .onnx or .h5")->required();
    cmd->add_option("--input", args->inputs,
                    "input shape for an ONNX file's declared shapes, such as 1x3x224x224 (default: the model's typical "
                    "or declared input); the batch dim is written free");
    cmd->add_option("--batch", args->batch, "replace the batch dim of every input")->check(positiveInteger());
    cmd->add_option("--dtype", args->dtype,
                    "fp32, or bf16 / fp16: an HDF5 file's parameters stored in 16 bits (half the file; read back "
                    "as float32)")
        ->capture_default_str();
    return [args] { return runConvert(*args); };
}

} // namespace tessera::cli
