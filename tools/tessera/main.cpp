// tessera: the command-line program: `tessera train | eval | predict | check | summary | draw | profile | convert | run
// | layers | sample | help`. Exit codes: 0 success, 1 a failed check or a failure while running, 2 a usage error.
#include <cstdio>
#include <exception>

#include "Commands.h"

int main(int argc, char** argv) {
    CLI::App app{"Tessera: neural-network layers and graphs on CPU and GPU"};
    app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
    app.require_subcommand(1);
    auto train = tessera::cli::addTrain(app);
    auto eval = tessera::cli::addEval(app);
    auto predict = tessera::cli::addPredict(app);
    auto check = tessera::cli::addCheck(app);
    auto summary = tessera::cli::addSummary(app);
    auto draw = tessera::cli::addDraw(app);
    auto profile = tessera::cli::addProfile(app);
    auto convert = tessera::cli::addConvert(app);
    auto run = tessera::cli::addRun(app);
    auto layers = tessera::cli::addLayers(app);
    auto sample = tessera::cli::addSample(app);
    CLI::App* help = app.add_subcommand("help", "Print this help, or a command's: tessera help train");
    std::string topic;
    help->add_option("command", topic,
                     "train, eval, predict, check, summary, draw, profile, convert, run, layers or sample");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2; // --help and --version are not errors; every parse error is usage
    }
    try {
        if (app.got_subcommand("help")) {
            if (topic.empty()) {
                std::printf("%s", app.help().c_str());
                return 0;
            }
            for (CLI::App* sub : app.get_subcommands({})) {
                if (sub->get_name() == topic) {
                    std::printf("%s", sub->help().c_str());
                    return 0;
                }
            }
            std::fprintf(stderr,
                         "tessera: no command '%s'; the commands are train, eval, predict, check, summary, draw, "
                         "profile, convert, run, layers, sample\n",
                         topic.c_str());
            return 2;
        }
        if (app.got_subcommand("train")) return train();
        if (app.got_subcommand("eval")) return eval();
        if (app.got_subcommand("predict")) return predict();
        if (app.got_subcommand("check")) return check();
        if (app.got_subcommand("summary")) return summary();
        if (app.got_subcommand("draw")) return draw();
        if (app.got_subcommand("profile")) return profile();
        if (app.got_subcommand("convert")) return convert();
        if (app.got_subcommand("run")) return run();
        if (app.got_subcommand("layers")) return layers();
        if (app.got_subcommand("sample")) return sample();
    } catch (const tessera::cli::UsageError& e) {
        std::fprintf(stderr, "tessera: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera: %s\n", e.what());
        return 1;
    }
    return 0;
}
