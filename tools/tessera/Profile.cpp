// tessera profile: where a training (or inference) step's time goes, layer by layer
// (training/Profile.h), on random inputs of the model's shapes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "Commands.h"
#include "backend/Files.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"
#include "training/Profile.h"

namespace tessera::cli {

namespace {

struct ProfileArgs {
    std::string model;
    std::vector<std::string> inputs;
    int64_t batch = 0;
    std::string mode = "train";
    std::string optimizer = "adam";
    int steps = 5;
    int warmup = 2;
    std::string device = "cpu";
    std::string precision = "fp32";
    int depth = 0;
    std::string sort = "order";
    std::string csv;
    bool packWeights = false;
    bool quiet = false;
};

// "AMD EPYC", from /proc/cpuinfo; empty where it says nothing.
std::string cpuName() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) break;
        return line.substr(line.find_first_not_of(' ', colon + 1));
    }
    return {};
}

// One tensor per model input: uniform [0, 1) floats, or zeros where an input takes int32
// (embedding indices).
Tensors randomInputs(const Module& net, const Shapes& shapes, Device device) {
    std::vector<DType> dtypes(shapes.size(), DType::float32);
    for (size_t i = 0; i < shapes.size(); ++i) {
        try {
            net.checkDataType(dtypes);
        } catch (const ShapeError&) {
            dtypes[i] = DType::int32;
        }
    }
    Tensors inputs;
    for (size_t i = 0; i < shapes.size(); ++i) {
        inputs.push_back(dtypes[i] == DType::int32 ? Tensor::zeros(shapes[i], DType::int32, device)
                                                   : Tensor::rand(shapes[i], 0.0f, 1.0f, device));
    }
    return inputs;
}

int runProfile(const ProfileArgs& a) {
    const Device device = parseDevice(a.device);
    const DType compute = parsePrecision(a.precision, device);
    const bool train = a.mode == "train";
    if (a.packWeights && train) {
        throw UsageError("--pack-weights packs for inference: it needs --mode eval (training changes the weights at "
                         "every step)");
    }
    if (!a.csv.empty()) requireWritableDestination("--csv", a.csv);
    std::unique_ptr<Optimizer> optimizer;
    try {
        if (train) optimizer = makeOptimizer(a.optimizer);
    } catch (const ModuleError& e) {
        throw UsageError(std::string("--optimizer: ") + e.what());
    }
    manualSeed(1);
    ModulePtr net = loadModel(a.model, /*train=*/true,
                              givenInputs(a.inputs)); // real weights: uninitialised memory may time differently
    const Shapes shapes = inputsFor(a.model, a.inputs, a.batch);
    net->calcMode(compute);
    try {
        net->inferDataShape(shapes);
    } catch (const ShapeError& e) {
        throw UsageError("model " + a.model + " does not take inputs " + str(shapes) + ": " + e.what());
    }
    net->to(device);
    if (optimizer) optimizer->setupOn(*net, true);
    if (!device.isCpu()) net->optimizeForShape(shapes, size_t{512} << 20);
    if (a.packWeights) net->packWeights();
    const Tensors inputs = randomInputs(*net, shapes, device);

    const char* threads = std::getenv("OMP_NUM_THREADS");
    std::string where = device.str();
    if (device.isCpu()) {
        const std::string cpu = cpuName();
        where += " (" + (cpu.empty() ? std::string("unknown CPU") : cpu) + ", " +
                 (threads ? std::string(threads) : std::to_string(std::thread::hardware_concurrency())) + " threads)";
    }
    std::printf("profile: %s, input %s, %s, precision %s, %s%s; %d step%s after %d warm-up\n", a.model.c_str(),
                str(shapes).c_str(), where.c_str(), a.precision.c_str(), train ? "training with " : "inference",
                train ? a.optimizer.c_str() : (a.packWeights ? " with packed weights" : ""), a.steps,
                a.steps == 1 ? "" : "s", a.warmup);
    if (a.precision == "bf16" && device.isCpu() && !CpuBackend::bfloat16Kernels()) {
        std::printf("note: this CPU has no bfloat16 kernels; bf16 is emulated (rounded operands, float32 kernels)\n");
    }
    std::fflush(stdout);

    ProfileOptions options;
    options.train = train;
    options.warmup = a.warmup;
    options.steps = a.steps;
    options.optimizer = optimizer.get();
    const bool tty = isatty(fileno(stderr)) != 0;
    if (!a.quiet && tty) {
        options.progress = [](int done, int total) {
            std::fprintf(stderr, "\rstep %d/%d%s", done, total, done == total ? "\r          \r" : "");
            std::fflush(stderr);
        };
    }
    const Profile p = profile(*net, inputs, options);
    std::printf("\n%s", profileTable(p, a.depth, a.sort == "time").c_str());
    if (!a.csv.empty()) {
        writeFileAtomically(a.csv, "--csv", profileCsv(p));
        std::printf("wrote %s (%zu rows)\n", a.csv.c_str(), p.rows.size());
    }
    return 0;
}

} // namespace

std::function<int()> addProfile(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("profile", "Time each layer's forward and backward in training (or inference) "
                                                  "steps on random inputs: where the step's time goes");
    auto args = std::make_shared<ProfileArgs>();
    cmd->add_option("model", args->model,
                    "a zoo model name, a blueprint JSON file, an HDF5 model file with a blueprint, or an ONNX file")
        ->required();
    cmd->add_option("--input", args->inputs,
                    "input shape such as 64x3x32x32; repeat for several inputs (default for a zoo model: its "
                    "typical input)");
    cmd->add_option("--batch", args->batch, "replace the batch dim of every input")->check(positiveInteger());
    cmd->add_option("--mode", args->mode, "train (forward, backward, update) or eval (inference: forward only)")
        ->capture_default_str()
        ->check(CLI::IsMember({"train", "eval"}));
    cmd->add_option("--optimizer", args->optimizer, "the update timed after each backward (as tessera train's)")
        ->capture_default_str();
    cmd->add_option("--steps", args->steps, "timed steps (as many again run without timers, for comparison)")
        ->capture_default_str()
        ->check(positiveInteger());
    cmd->add_option("--warmup", args->warmup, "untimed steps first")
        ->capture_default_str()
        ->check(nonNegativeInteger());
    addDeviceAndPrecision(cmd, args->device, args->precision);
    cmd->add_option("--depth", args->depth,
                    "group consecutive layers whose names share their first N parts (as summary does); 0 shows "
                    "every layer")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--sort", args->sort, "order (the model's) or time (slowest first)")
        ->capture_default_str()
        ->check(CLI::IsMember({"order", "time"}));
    cmd->add_option("--csv", args->csv, "also write every layer's times to this CSV file");
    cmd->add_flag("--pack-weights", args->packWeights,
                  "with --mode eval: the layers keep their weights converted between steps (Module::packWeights), "
                  "as a server would");
    cmd->add_flag("--quiet", args->quiet, "no progress line");
    return [args] { return runProfile(*args); };
}

} // namespace tessera::cli
