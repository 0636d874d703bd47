// tessera: the command-line program: `tessera train | check | summary | draw`.
#include <cstdio>
#include <exception>

#include "Commands.h"

int main(int argc, char** argv) {
    CLI::App app{"Tessera: neural-network layers and graphs on CPU and GPU"};
    app.require_subcommand(1);
    auto train = tessera::cli::addTrain(app);
    auto check = tessera::cli::addCheck(app);
    auto summary = tessera::cli::addSummary(app);
    auto draw = tessera::cli::addDraw(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        if (app.got_subcommand("train")) return train();
        if (app.got_subcommand("check")) return check();
        if (app.got_subcommand("summary")) return summary();
        if (app.got_subcommand("draw")) return draw();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera: %s\n", e.what());
        return 1;
    }
    return 0;
}
