#pragma once
// The subcommands of the `tessera` program.

#include <CLI/CLI.hpp>

namespace tessera::cli {

/// Adds `train` to `app`; the returned function runs it (exit code).
std::function<int()> addTrain(CLI::App& app);

} // namespace tessera::cli
