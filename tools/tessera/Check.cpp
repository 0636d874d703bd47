// tessera check: whole-model data-shape and gradient-shape checking, nothing run.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "Commands.h"
#include "backend/Files.h"
#include "containers/Graph.h"
#include "io/Factory.h"
#include "io/Hdf5.h"
#include "io/Onnx.h"
#include "io/Summary.h"
#include "models/Zoo.h"
#include "modules/Init.h"

namespace tessera::cli {

namespace {
// The whole number `text` is, if it is one and fits in 64 bits.
std::optional<int64_t> wholeNumber(const std::string& text) {
    size_t used = 0;
    try {
        const long long v = std::stoll(text, &used);
        if (used == text.size()) return v;
    } catch (const std::exception&) {}
    return std::nullopt;
}
} // namespace

CLI::Validator positiveInteger() {
    return CLI::Validator(
        [](std::string& v) -> std::string {
            const std::optional<int64_t> n = wholeNumber(v);
            return n && *n > 0 ? "" : "expected a positive whole number, got '" + v + "'";
        },
        "POSITIVE");
}

CLI::Validator nonNegativeInteger() {
    return CLI::Validator(
        [](std::string& v) -> std::string {
            const std::optional<int64_t> n = wholeNumber(v);
            return n && *n >= 0 ? "" : "expected a whole number >= 0, got '" + v + "'";
        },
        "NONNEGATIVE");
}

CLI::Validator positiveNumber() {
    return CLI::Validator(
        [](std::string& v) -> std::string {
            size_t used = 0;
            double x = 0;
            try {
                x = std::stod(v, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            return used == v.size() && used > 0 && std::isfinite(x) && x > 0
                       ? ""
                       : "expected a finite number > 0, got '" + v + "'";
        },
        "POSITIVE");
}

void requireWritableDestination(const std::string& option, const std::string& path) {
    namespace fs = std::filesystem;
    if (path.empty()) throw UsageError(option + ": an empty file name");
    std::string target;
    try {
        target = saveTarget(path, option); // through symbolic links; a device or directory is refused
    } catch (const IoError& e) {
        throw UsageError(e.what());
    }
    const fs::path parent = fs::path(target).parent_path().empty() ? fs::path(".") : fs::path(target).parent_path();
    std::error_code ec;
    if (!fs::is_directory(parent, ec)) {
        throw UsageError(option + " " + path + ": the directory " + parent.string() + " does not exist");
    }
    if (::access(parent.c_str(), W_OK) != 0) {
        throw UsageError(option + " " + path + ": the directory " + parent.string() + " is not writable");
    }
}

void requireDistinctDestinations(const std::vector<std::pair<std::string, std::string>>& destinations) {
    struct Seen {
        std::string option, path, target;
    };
    std::vector<Seen> seen;
    for (const auto& [option, path] : destinations) {
        if (path.empty()) continue;
        std::error_code ec;
        const std::string target = std::filesystem::weakly_canonical(path, ec).string();
        if (ec) continue;
        for (const Seen& other : seen) {
            if (other.target == target) {
                throw UsageError(other.option + " " + other.path + " and " + option + " " + path +
                                 " name the same file: one would replace the other; give each its own file");
            }
        }
        seen.push_back({option, path, target});
    }
}

Shapes parseInputs(const std::vector<std::string>& inputs, int64_t batch) {
    if (inputs.empty()) throw UsageError("give the input shape with --input, for example --input 1x3x224x224");
    Shapes shapes;
    for (const std::string& s : inputs) {
        Shape sh;
        try {
            sh = parseShape(s);
        } catch (const ShapeError& e) {
            throw UsageError(std::string("--input: ") + e.what());
        }
        if (batch > 0) sh[0] = batch;
        shapes.push_back(sh);
    }
    return shapes;
}

std::vector<std::vector<int64_t>> declaredInputs(const std::string& model) {
    std::vector<std::vector<int64_t>> shapes;
    auto add = [&](const Shape& s) { shapes.emplace_back(s.dims().begin(), s.dims().end()); };
    for (const ZooEntry& e : zooModels()) {
        if (e.name == model) add(parseShape(e.input));
    }
    if (shapes.empty() && !isOnnxPath(model) && isHdf5File(model)) { // the shapes a model file was saved for
        for (const Shape& in : readInputShapes(model)) add(in);
    }
    if (shapes.empty() && isOnnxPath(model)) shapes = onnxInputShapes(model);
    return shapes;
}

Shapes inputsFor(const std::string& model, const std::vector<std::string>& inputs, int64_t batch) {
    std::vector<std::string> given = inputs;
    if (given.empty()) {
        bool free = false; // a size left free past the batch
        std::string declared, example;
        for (const std::vector<int64_t>& dims : declaredInputs(model)) {
            std::string s, shown, filled;
            for (size_t j = 0; j < dims.size(); ++j) {
                free = free || (j > 0 && dims[j] < 0);
                s += (j ? "x" : "") + std::to_string(dims[j] < 0 ? 1 : dims[j]); // a free batch is 1
                shown += (j ? ", " : "") + (dims[j] < 0 ? std::string("?") : std::to_string(dims[j]));
                filled += (j ? "x" : "") + std::to_string(dims[j] >= 0 ? dims[j] : j ? 224 : 1);
            }
            given.push_back(s);
            declared += (declared.empty() ? "[" : ", [") + shown + "]";
            example += " --input " + filled;
        }
        if (free) {
            throw UsageError(model + " leaves sizes of its inputs free besides the batch (" + declared +
                             "): give each input's whole shape with --input (for example" + example + ")");
        }
    }
    return parseInputs(given, batch);
}

Shapes givenInputs(const std::vector<std::string>& inputs) {
    return inputs.empty() ? Shapes{} : parseInputs(inputs, 0);
}

bool isZooModel(const std::string& model) {
    for (const ZooEntry& e : zooModels()) {
        if (e.name == model) return true;
    }
    return false;
}

ModulePtr loadModel(const std::string& model, bool train, const Shapes& inputs) {
    if (isOnnxPath(model)) { // weights are the file's
        OnnxImportOptions options;
        try {
            options.dims = onnxDimSizes(model, inputs);
        } catch (const ShapeError& e) {
            throw UsageError(e.what());
        }
        return importOnnx(model, options);
    }
    // Weights are not needed to check shapes: no parameter memory at all.
    std::optional<ShapeOnlyBuild> noInit;
    if (!train) noInit.emplace();
    for (const ZooEntry& e : zooModels()) {
        if (e.name == model) return loadZooModel(model);
    }
    if (isHdf5File(model)) {
        ModulePtr m = buildModuleFromFile(model);
        if (train) tessera::loadModel(*m, model); // fine-tune from the saved weights
        return m;
    }
    std::ifstream file(model);
    if (!file) {
        throw UsageError(
            "'" + model +
            "' is neither a zoo model nor a readable blueprint, HDF5 or ONNX file (zoo: tessera check --list)");
    }
    std::stringstream text;
    text << file.rdbuf();
    try {
        return buildModule(blueprintFromJson(text.str()));
    } catch (const IoError& e) {
        throw IoError(model + ": " + e.what());
    }
}

std::string modelTransforms(const std::string& model) {
    if (isOnnxPath(model)) return onnxTransforms(model);
    if (!isHdf5File(model)) return {};
    for (const ZooEntry& e : zooModels()) {
        if (e.name == model) return {};
    }
    return readTransforms(model);
}

std::vector<std::string> modelClassNames(const std::string& model) {
    if (isOnnxPath(model)) return onnxClassNames(model);
    if (!isHdf5File(model)) return {};
    for (const ZooEntry& e : zooModels()) {
        if (e.name == model) return {};
    }
    return readClassNames(model);
}

namespace {

struct CheckArgs {
    std::string model;
    std::vector<std::string> inputs;
    int64_t batch = 0;
    bool list = false;
    bool printBlueprint = false;
};

int runCheck(const CheckArgs& a) {
    if (a.list) {
        for (const ZooEntry& e : zooModels()) std::printf("%-16s input %s\n", e.name.c_str(), e.input.c_str());
        return 0;
    }
    if (a.model.empty()) throw UsageError("check needs a MODEL (a zoo name or a blueprint file)");
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    ModulePtr net = loadModel(a.model, false, givenInputs(a.inputs));
    const auto t1 = Clock::now();
    if (a.printBlueprint) {
        std::printf("%s\n", net->blueprint().toJson().c_str());
        return 0;
    }
    const Shapes shapes = inputsFor(a.model, a.inputs, a.batch); // an ONNX file's are read from it again
    try {
        const auto t2 = Clock::now();
        const Shapes out = net->inferDataShape(shapes);
        const Shapes in = net->gradShapeFrom(out);
        const auto t3 = Clock::now();
        const double checkMs = std::chrono::duration<double, std::milli>(t3 - t2).count();
        const double buildMs = std::chrono::duration<double, std::milli>(t1 - t0).count();
        if (in != shapes) {
            std::printf("FAILED: %s: gradient shapes %s do not match the inputs %s\n", a.model.c_str(), str(in).c_str(),
                        str(shapes).c_str());
            return 1;
        }
        std::printf("ok: %s, %s -> %s, %s parameters; shapes checked in %.2f ms (model built in %.0f ms)\n",
                    a.model.c_str(), str(shapes).c_str(), str(out).c_str(), thousands(net->numOfParams()).c_str(),
                    checkMs, buildMs);
        return 0;
    } catch (const ShapeError& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
}

} // namespace

std::function<int()> addCheck(CLI::App& app) {
    auto args = std::make_shared<CheckArgs>();
    CLI::App* cmd = app.add_subcommand("check", "Check a model's data and gradient shapes without running it");
    cmd->add_option("model", args->model,
                    "a zoo model name, a blueprint JSON file, an HDF5 model file with a blueprint, or an ONNX file");
    cmd->add_option("--input", args->inputs,
                    "input shape such as 1x3x224x224; repeat for several inputs (an ONNX file's named free dims "
                    "past the batch, such as a sequence length, take these sizes)");
    cmd->add_option("--batch", args->batch, "replace the batch dim of every input")->check(positiveInteger());
    cmd->add_flag("--list", args->list, "list the zoo models");
    cmd->add_flag("--print-blueprint", args->printBlueprint, "print the model's blueprint JSON instead of checking");
    return [args] { return runCheck(*args); };
}

} // namespace tessera::cli
