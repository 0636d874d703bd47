// tessera run: inference with NumPy files in and out, so any tool can feed a model and
// compare what it computes. Large inputs run in batches along their first dimension, so
// memory stays that of one batch however many samples the files hold.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "Commands.h"
#include "backend/Backend.h"
#include "data/Npy.h"

namespace tessera::cli {

namespace {

struct RunArgs {
    std::string model;
    std::vector<std::string> inputs, outputs;
    std::string device = "cpu";
    int64_t batch = 0;
    std::string precision = "fp32";
    bool packWeights = true;
    bool quiet = false;
};

/// `shapes` with dim 0 set to `rows`.
Shapes withRows(Shapes shapes, int64_t rows) {
    for (Shape& s : shapes) s[0] = rows;
    return shapes;
}

/// An output as writeNpy takes it: on the host, plain, and float32 unless it is int32.
Tensor hostOutput(const Tensor& y) {
    Tensor h = y.toHost().plain();
    return h.dtype() == DType::int32 || h.dtype() == DType::float32 ? h : h.astype(DType::float32);
}

int runRun(const RunArgs& a) {
    const Device device = parseDevice(a.device);
    const DType compute = parsePrecision(a.precision, device);
    for (const std::string& path : a.outputs) requireWritableDestination("-o", path);
    Tensors xs;
    Shapes shapes;
    for (const std::string& path : a.inputs) {
        xs.push_back(readNpy(path));
        shapes.push_back(xs.back().shape());
    }
    // --batch splits every input along dim 0, so they must agree on it.
    int64_t rows = 0;
    if (a.batch > 0) {
        for (size_t i = 0; i < shapes.size(); ++i) {
            if (shapes[i].rank() == 0) {
                throw UsageError("--batch splits the inputs along their first dimension, but " + a.inputs[i] +
                                 " is a scalar; run without --batch");
            }
            if (i > 0 && shapes[i][0] != rows) {
                throw UsageError("--batch splits the inputs along their first dimension, which must be the same in "
                                 "all of them: " +
                                 a.inputs[0] + " has " + std::to_string(rows) + ", " + a.inputs[i] + " " +
                                 std::to_string(shapes[i][0]));
            }
            rows = shapes[i][0];
        }
    }
    const int64_t step = a.batch > 0 && rows > a.batch ? a.batch : rows; // 0: one run on the whole inputs
    // The file's weights, a zoo model's seeded ones; an ONNX file's named dims take the inputs' sizes.
    ModulePtr net = loadModel(a.model, /*train=*/true, shapes);
    net->evalMode();
    net->calcMode(compute);
    Shapes out;
    try {
        out = net->inferDataShape(shapes);
        if (step > 0 && step < rows) {
            // The batches' outputs are stacked along dim 0: each must have one row per input row.
            const Shapes part = net->inferDataShape(withRows(shapes, step));
            for (size_t k = 0; k < out.size(); ++k) {
                if (out[k].rank() == 0 || part[k].rank() == 0 || out[k][0] != rows || part[k][0] != step) {
                    throw UsageError("--batch " + std::to_string(a.batch) + ": output " + std::to_string(k) + " is " +
                                     out[k].str() + " for inputs " + str(shapes) +
                                     ", not one row per input row, so batches cannot be stacked; run without --batch");
                }
            }
        }
    } catch (const ShapeError& e) {
        std::printf("FAILED: the inputs %s do not fit: %s\n", str(shapes).c_str(), e.what());
        return 1;
    }
    if (out.size() != a.outputs.size()) {
        throw UsageError("the model has " + std::to_string(out.size()) + " output(s) " + str(out) + "; give -o " +
                         std::to_string(out.size()) + " time(s)");
    }
    net->to(device);
    if (a.packWeights) net->packWeights();

    const int64_t batches = step > 0 && step < rows ? (rows + step - 1) / step : 1;
    const bool progress = !a.quiet && batches > 1 && isatty(fileno(stderr)) != 0;
    Tensors results(out.size()); // host, all rows
    const auto start = std::chrono::steady_clock::now();
    for (int64_t b = 0; b < batches; ++b) {
        Tensors inputs;
        for (const Tensor& x : xs)
            inputs.push_back((batches == 1 ? x : x.slice(b * step, std::min(rows, (b + 1) * step))).to(device));
        const Tensors ys = (*net)(inputs);
        for (size_t k = 0; k < ys.size(); ++k) {
            Tensor h = hostOutput(ys[k]);
            if (batches == 1) {
                results[k] = h;
                continue;
            }
            if (b == 0) results[k] = Tensor::empty(out[k], h.dtype());
            results[k].slice(b * step, b * step + h.shape()[0]).copyFrom(h);
        }
        if (progress) {
            std::fprintf(stderr, "\rbatch %lld/%lld", static_cast<long long>(b + 1), static_cast<long long>(batches));
            std::fflush(stderr);
        }
    }
    if (progress) std::fprintf(stderr, "\r%40s\r", "");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (size_t k = 0; k < results.size(); ++k) {
        writeNpy(results[k], a.outputs[k]);
        std::printf("wrote %s %s\n", a.outputs[k].c_str(), results[k].shape().str().c_str());
    }
    if (!a.quiet) {
        std::printf("ran %s on %s in %lld batch%s, %s%s: %.1f ms\n", a.model.c_str(), device.str().c_str(),
                    static_cast<long long>(batches), batches == 1 ? "" : "es", a.precision.c_str(),
                    a.packWeights ? ", packed weights" : "", seconds * 1e3);
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
    cmd->add_option("--batch", args->batch,
                    "run the inputs N rows (first dimension) at a time, stacking the outputs: the memory of one "
                    "batch for any number of samples (default: all at once)")
        ->check(positiveInteger());
    addDeviceAndPrecision(cmd, args->device, args->precision, " (outputs are written in float32)");
    cmd->add_flag("--pack-weights,!--no-pack-weights", args->packWeights,
                  "keep the weights converted to the kernels' layout and type between batches (Module::packWeights; "
                  "default; --no-pack-weights: convert them at every batch, in less memory)");
    cmd->add_flag("--quiet", args->quiet, "no progress line and no timing line");
    return [args] { return runRun(*args); };
}

} // namespace tessera::cli
