// tessera summary and tessera draw: per-node shapes, parameters, FLOPs and activation
// sizes of a model, as a table or as a Graphviz graph. Nothing runs; weights are not even
// initialised.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unordered_map>

#include "Commands.h"
#include "containers/Graph.h"
#include "containers/MemoryPlan.h"
#include "containers/Sequential.h"
#include "modules/ConvND.h"
#include "modules/Linear.h"

namespace tessera::cli {

namespace {

// One row of the summary: a Sequential child or a Graph node.
struct Row {
    std::string name, module;
    Shapes in, out;
    int64_t params = 0;
    double flops = 0;
    std::vector<std::pair<std::string, Shape>> edges; // (parent row name, shape on the edge)
};

int64_t paramsOf(const Module& m) {
    int64_t n = 0;
    for (const auto& [name, v] : m.namedParams()) n += v->data.numel();
    return n;
}

// Multiply-adds count twice for Linear and convolutions; other modules count one
// operation per output element (a rough figure for element-wise work).
double flopsOf(const Module& m, const Shapes& in, const Shapes& out) {
    if (const auto* lin = dynamic_cast<const Linear*>(&m)) return 2.0 * in[0][0] * lin->insize() * lin->outsize();
    if (const auto* conv = dynamic_cast<const ConvND*>(&m)) {
        const Shape& w = conv->getVar("W")->data.shape();
        double perOut = 2.0;
        for (size_t d = 1; d < w.rank(); ++d) perOut *= static_cast<double>(w[d]); // C/g (or K/g) * kernel
        const Shape& spatialSide = conv->params().transposed ? in[0] : out[0];
        double positions = static_cast<double>(spatialSide.numel()) / static_cast<double>(spatialSide[1]);
        const int64_t maps = conv->params().transposed ? conv->inmaps() : conv->outmaps();
        return perOut * positions * static_cast<double>(maps);
    }
    double n = 0;
    for (const Shape& s : out) n += static_cast<double>(s.numel());
    return n;
}

std::vector<Row> rowsOf(Module& net, const Shapes& inputs) {
    std::vector<Row> rows;
    if (auto* g = dynamic_cast<Graph*>(&net)) {
        ShapeMap inmap, shapes;
        for (size_t i = 0; i < g->inputs().size(); ++i) inmap[g->inputs()[i].get()] = {inputs.at(i)};
        for (Node* n : g->order()) {
            Shapes in;
            n->dataShapeFrom(inmap, shapes, [&](Node&, const Shapes& s) { in = s; });
            Row r{n->name(), n->module().classname(), in, shapes.at(n), paramsOf(n->module()), 0, {}};
            r.flops = flopsOf(n->module(), in, r.out);
            for (const Edge& e : n->bwds()) {
                for (int s : e.slots)
                    r.edges.emplace_back(e.node->name(), shapes.at(e.node).at(static_cast<size_t>(s)));
            }
            if (n->bwds().empty()) r.edges.emplace_back("input", in.at(0));
            rows.push_back(std::move(r));
        }
        return rows;
    }
    if (auto* seq = dynamic_cast<Sequential*>(&net)) {
        Shapes cur = inputs;
        std::string prev = "input";
        for (const auto& [name, child] : seq->namedChildren()) {
            Row r{name, child->classname(), cur, child->inferDataShape(cur), paramsOf(*child), 0, {}};
            r.flops = flopsOf(*child, cur, r.out);
            r.edges.emplace_back(prev, cur.at(0));
            prev = name;
            cur = r.out;
            rows.push_back(std::move(r));
        }
        return rows;
    }
    Row r{net.name().empty() ? net.classname() : net.name(),
          net.classname(),
          inputs,
          net.inferDataShape(inputs),
          paramsOf(net),
          0,
          {{"input", inputs.at(0)}}};
    r.flops = flopsOf(net, inputs, r.out);
    rows.push_back(std::move(r));
    return rows;
}

struct InspectArgs {
    std::string model;
    std::vector<std::string> inputs;
    int64_t batch = 0;
    int optimizerStates = 2;
    std::string output;
};

std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
    return buf;
}

int runSummary(const InspectArgs& a) {
    ModulePtr net = loadModel(a.model);
    const Shapes inputs = parseInputs(a.inputs, a.batch);
    const std::vector<Row> rows = rowsOf(*net, inputs);
    std::printf("%-28s %-14s %-22s %12s %12s %12s\n", "node", "module", "output", "params", "MFLOPs", "activations");
    double flops = 0, activations = 0;
    for (const Row& r : rows) {
        double bytes = 0;
        for (const Shape& s : r.out) bytes += 4.0 * static_cast<double>(s.numel());
        flops += r.flops;
        activations += bytes;
        std::printf("%-28s %-14s %-22s %12lld %12.2f %12s\n", r.name.c_str(), r.module.c_str(), str(r.out).c_str(),
                    static_cast<long long>(r.params), r.flops / 1e6, human(bytes).c_str());
    }
    const double params = static_cast<double>(net->numOfParams());
    std::printf("\ntotal: %.0f parameters (%s), %.2f GFLOPs forward, %s of activations\n", params,
                human(4 * params).c_str(), flops / 1e9, human(activations).c_str());
    // The static memory plan (CPU layouts): peaks beyond the inputs and the parameters.
    const MemoryPlan plan = planMemory(*net, inputs);
    const double fixed = 4 * params * (2 + a.optimizerStates);
    std::printf("planned peak memory (CPU): inference %s, training step %s (train forward %s), beyond the inputs "
                "and parameters\n",
                human(static_cast<double>(plan.inference)).c_str(), human(static_cast<double>(plan.training)).c_str(),
                human(static_cast<double>(plan.trainForward)).c_str());
    std::printf("training memory: %s = parameters %s + gradients %s + optimizer state %s (%d per parameter) + planned "
                "step peak %s\n",
                human(fixed + static_cast<double>(plan.training)).c_str(), human(4 * params).c_str(),
                human(4 * params).c_str(), human(4 * params * a.optimizerStates).c_str(), a.optimizerStates,
                human(static_cast<double>(plan.training)).c_str());
    return 0;
}

std::string dotEscape(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '"' ? std::string("\\\"") : std::string(1, c);
    return out;
}

int runDraw(const InspectArgs& a) {
    if (a.output.empty()) throw std::invalid_argument("draw needs -o FILE (.dot, .png or .svg)");
    ModulePtr net = loadModel(a.model);
    const std::vector<Row> rows = rowsOf(*net, parseInputs(a.inputs, a.batch));
    std::string dot =
        "digraph \"" + dotEscape(a.model) + "\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];\n";
    dot += "  \"input\" [shape=ellipse];\n";
    for (const Row& r : rows) {
        dot += "  \"" + dotEscape(r.name) + "\" [label=\"" + dotEscape(r.name) + "\\n" + dotEscape(r.module) +
               (r.params ? "\\n" + std::to_string(r.params) + " params" : std::string()) + "\"];\n";
        for (const auto& [parent, shape] : r.edges) {
            dot +=
                "  \"" + dotEscape(parent) + "\" -> \"" + dotEscape(r.name) + "\" [label=\"" + shape.str() + "\"];\n";
        }
    }
    dot += "}\n";
    const std::string& out = a.output;
    const std::string ext = out.size() > 4 ? out.substr(out.size() - 4) : "";
    if (ext == ".png" || ext == ".svg") {
        if (std::system("command -v dot > /dev/null 2>&1") != 0) {
            throw std::invalid_argument("writing " + out +
                                        " needs Graphviz's dot program (Debian: graphviz); "
                                        "write a .dot file instead");
        }
        const std::string tmp = out + ".dot.tmp";
        std::ofstream(tmp) << dot;
        const std::string cmd = "dot -T" + ext.substr(1) + " '" + tmp + "' -o '" + out + "'";
        const int rc = std::system(cmd.c_str());
        std::remove(tmp.c_str());
        if (rc != 0) throw std::runtime_error("dot failed (" + cmd + ")");
    } else {
        std::ofstream file(out);
        if (!(file << dot)) throw std::runtime_error("cannot write " + out);
    }
    std::printf("wrote %s (%zu nodes)\n", out.c_str(), rows.size());
    return 0;
}

std::shared_ptr<InspectArgs> addCommon(CLI::App* cmd) {
    auto args = std::make_shared<InspectArgs>();
    cmd->add_option("model", args->model,
                    "a zoo model name, a blueprint JSON file or an HDF5 model file with a blueprint")
        ->required();
    cmd->add_option("--input", args->inputs, "input shape such as 1x3x224x224; repeat for several inputs")->required();
    cmd->add_option("--batch", args->batch, "replace the batch dim of every input");
    return args;
}

} // namespace

std::function<int()> addSummary(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("summary", "Per-node table: output shape, parameters, FLOPs, activation bytes");
    auto args = addCommon(cmd);
    cmd->add_option("--optimizer-states", args->optimizerStates,
                    "optimizer state tensors per parameter for the memory estimate (Adam 2, momentum 1)")
        ->capture_default_str();
    return [args] { return runSummary(*args); };
}

std::function<int()> addDraw(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("draw", "Graphviz drawing with the shapes on the edges");
    auto args = addCommon(cmd);
    cmd->add_option("-o,--output", args->output, "output file: .dot, or .png / .svg when dot is installed")->required();
    return [args] { return runDraw(*args); };
}

} // namespace tessera::cli
