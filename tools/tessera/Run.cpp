// tessera run: inference with NumPy files in and out, so any tool can feed a model and
// compare what it computes.
#include <cstdio>

#include "Commands.h"
#include "backend/Backend.h"
#include "io/Npy.h"

namespace tessera::cli {

namespace {

struct RunArgs {
    std::string model;
    std::vector<std::string> inputs, outputs;
    std::string device = "cpu";
};

int runRun(const RunArgs& a) {
    const Device device = parseDevice(a.device);
    ModulePtr net = loadModel(a.model, /*train=*/true); // the file's weights; a zoo model's seeded ones
    Tensors xs;
    Shapes shapes;
    for (const std::string& path : a.inputs) {
        xs.push_back(readNpy(path));
        shapes.push_back(xs.back().shape());
    }
    net->evalMode();
    Shapes out;
    try {
        out = net->inferDataShape(shapes);
    } catch (const ShapeError& e) {
        std::printf("FAILED: the inputs %s do not fit: %s\n", str(shapes).c_str(), e.what());
        return 1;
    }
    if (out.size() != a.outputs.size()) {
        throw UsageError("the model has " + std::to_string(out.size()) + " output(s) " + str(out) + "; give -o " +
                         std::to_string(out.size()) + " time(s)");
    }
    net->to(device);
    for (Tensor& x : xs) x = x.to(device);
    const Tensors ys = (*net)(xs);
    for (size_t k = 0; k < ys.size(); ++k) {
        writeNpy(ys[k], a.outputs[k]);
        std::printf("wrote %s %s\n", a.outputs[k].c_str(), ys[k].shape().str().c_str());
    }
    return 0;
}

} // namespace

std::function<int()> addRun(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    CLI::App* cmd = app.add_subcommand("run", "Run a model in eval mode on .npy inputs, writing .npy outputs");
    cmd->add_option("model", args->model, "a zoo model name, a blueprint JSON file, an HDF5 model file or an ONNX file")
        ->required();
    cmd->add_option("--input", args->inputs, "an input .npy file, one per model input, in order")->required();
    cmd->add_option("-o,--output", args->outputs, "an output .npy file, one per model output, in order")->required();
    cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
    return [args] { return runRun(*args); };
}

} // namespace tessera::cli
