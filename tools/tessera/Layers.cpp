// tessera layers: every layer class the factory builds, with the arguments it takes and
// their defaults (io/Factory.h's factorySignature), as a list or as the Markdown table
// docs/layers.md holds.
#include <cstdio>

#include "Commands.h"
#include "io/Factory.h"

namespace tessera::cli {

namespace {

struct LayersArgs {
    std::vector<std::string> names;
    bool markdown = false;
};

int runLayers(const LayersArgs& args) {
    std::vector<std::string> names = args.names;
    if (names.empty()) names = factoryClassnames(); // sorted by name
    if (args.markdown) {
        std::printf("| layer | arguments and defaults |\n| --- | --- |\n");
    }
    for (const std::string& n : names) {
        std::string signature;
        try {
            signature = factorySignature(n);
        } catch (const ModuleError&) {
            throw UsageError("no layer class '" + n + "'; `tessera layers` lists them all");
        }
        if (args.markdown) {
            std::printf("| `%s` | `%s` |\n", n.c_str(), signature.c_str());
        } else {
            std::printf("%s(%s)\n", n.c_str(), signature.c_str());
        }
    }
    return 0;
}

} // namespace

std::function<int()> addLayers(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("layers", "Every layer class a blueprint or Python can name, with the "
                                                 "arguments it takes and their defaults (None: the class decides)");
    auto args = std::make_shared<LayersArgs>();
    cmd->add_option("names", args->names, "only these classes (Conv2D Linear ...)");
    cmd->add_flag("--markdown", args->markdown, "a Markdown table (the one in docs/layers.md)");
    return [args] { return runLayers(*args); };
}

} // namespace tessera::cli
