// tessera: the command-line program. `tessera train ...`; more subcommands to come.
#include <cstdio>
#include <exception>

#include "Commands.h"

int main(int argc, char** argv) {
    CLI::App app{"Tessera: neural-network layers and graphs on CPU and GPU"};
    app.require_subcommand(1);
    auto train = tessera::cli::addTrain(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        if (app.got_subcommand("train")) return train();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera: %s\n", e.what());
        return 1;
    }
    return 0;
}
