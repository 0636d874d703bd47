// tessera summary and tessera draw: per-layer shapes, parameters, FLOPs and activation
// sizes of a model, as a table or as a Graphviz graph (io/Summary.h). Nothing runs;
// weights are not even initialised.
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "Commands.h"
#include "backend/Files.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "io/Summary.h"

namespace tessera::cli {

namespace {

struct InspectArgs {
    std::string model;
    std::vector<std::string> inputs;
    int64_t batch = 0;
    int depth = 0;
    int optimizerStates = 2;
    std::string output;
};

// The rows, or on a shape failure: the model's report (as check prints it) and the table
// up to the failure, then exit code 1.
bool rowsOrReport(Module& net, const Shapes& inputs, int depth, std::vector<SummaryRow>& rows) {
    std::vector<SummaryRow> partial;
    try {
        rows = summarize(net, inputs, &partial);
        return true;
    } catch (const ShapeError& e) {
        std::printf("FAILED: %s\n", e.what());
        if (!partial.empty()) {
            std::printf("\nthe layers before the failure:\n%s",
                        summaryTable(groupRows(partial, depth), dynamic_cast<Graph*>(&net) != nullptr).c_str());
        }
        return false;
    }
}

int runSummary(const InspectArgs& a) {
    ModulePtr net = loadModel(a.model, false, givenInputs(a.inputs));
    const Shapes inputs = inputsFor(a.model, a.inputs, a.batch);
    std::vector<SummaryRow> rows;
    if (!rowsOrReport(*net, inputs, a.depth, rows)) return 1;
    std::printf("%s", summaryTable(groupRows(rows, a.depth), dynamic_cast<Graph*>(net.get()) != nullptr).c_str());
    // The static memory plan (CPU layouts): peaks beyond the inputs and the parameters.
    const double params = static_cast<double>(net->numOfParams());
    const MemoryPlan plan = planMemory(*net, inputs);
    const double fixed = 4 * params * (2 + a.optimizerStates);
    std::printf("planned peak memory (CPU): inference %s, training step %s (train forward %s), beyond the inputs "
                "and parameters\n",
                bytesText(static_cast<double>(plan.inference)).c_str(),
                bytesText(static_cast<double>(plan.training)).c_str(),
                bytesText(static_cast<double>(plan.trainForward)).c_str());
    std::printf("training memory: %s = parameters %s + gradients %s + optimizer state %s (%d per parameter) + planned "
                "step peak %s\n",
                bytesText(fixed + static_cast<double>(plan.training)).c_str(), bytesText(4 * params).c_str(),
                bytesText(4 * params).c_str(), bytesText(4 * params * a.optimizerStates).c_str(), a.optimizerStates,
                bytesText(static_cast<double>(plan.training)).c_str());
    return 0;
}

int runDraw(const InspectArgs& a) {
    if (a.output.empty()) throw UsageError("draw needs -o FILE (.dot, .png or .svg)");
    ModulePtr net = loadModel(a.model, false, givenInputs(a.inputs));
    std::vector<SummaryRow> rows;
    if (!rowsOrReport(*net, inputsFor(a.model, a.inputs, a.batch), a.depth, rows)) return 1;
    const std::vector<SummaryRow> drawn = groupRows(rows, a.depth);
    const std::string dot = toDot(drawn, a.model);
    const std::string& out = a.output;
    const std::string ext = out.size() > 4 ? out.substr(out.size() - 4) : "";
    if (ext == ".png" || ext == ".svg") {
        if (std::system("command -v dot > /dev/null 2>&1") != 0) {
            throw UsageError("writing " + out +
                             " needs Graphviz's dot program (Debian: graphviz); write a .dot file "
                             "instead");
        }
        const std::string source = saveTarget(out, "-o") + ".dot.tmp";
        writeAtomically(out, "-o", [&](const std::string& tmp) {
            writeBytes(source, "-o " + out, dot);
            const std::string cmd = "dot -T" + ext.substr(1) + " '" + source + "' -o '" + tmp + "'";
            const int rc = std::system(cmd.c_str());
            std::remove(source.c_str());
            if (rc != 0) throw IoError("dot failed (" + cmd + ")");
        });
    } else {
        writeFileAtomically(out, "-o", dot);
    }
    std::printf("wrote %s (%zu nodes)\n", out.c_str(), drawn.size());
    return 0;
}

std::shared_ptr<InspectArgs> addCommon(CLI::App* cmd) {
    auto args = std::make_shared<InspectArgs>();
    cmd->add_option("model", args->model,
                    "a zoo model name, a blueprint JSON file, an HDF5 model file with a blueprint, or an ONNX file")
        ->required();
    cmd->add_option("--input", args->inputs,
                    "input shape such as 1x3x224x224; repeat for several inputs (default for a zoo model: its "
                    "typical input)");
    cmd->add_option("--batch", args->batch, "replace the batch dim of every input")->check(positiveInteger());
    cmd->add_option("--depth", args->depth,
                    "group consecutive layers whose names share their first N parts (split at '.' and '_'; "
                    "layer1_0_a_conv: layer1, 0, a, conv); 0 shows every layer")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    return args;
}

} // namespace

std::function<int()> addSummary(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("summary", "Per-layer table: output shape, kernel, connections, parameters, "
                                                  "FLOPs, activation bytes; planned peak memory");
    auto args = addCommon(cmd);
    cmd->add_option("--optimizer-states", args->optimizerStates,
                    "optimizer state tensors per parameter for the memory estimate (Adam 2, momentum 1)")
        ->capture_default_str();
    return [args] { return runSummary(*args); };
}

std::function<int()> addDraw(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("draw", "Graphviz drawing: inputs and outputs with their shapes, layers with "
                                               "their attributes, shapes on the edges");
    auto args = addCommon(cmd);
    cmd->add_option("-o,--output", args->output, "output file: .dot, or .png / .svg when dot is installed")->required();
    return [args] { return runDraw(*args); };
}

} // namespace tessera::cli
