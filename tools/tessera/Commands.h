#pragma once
// The subcommands of the `tessera` program.

#include <CLI/CLI.hpp>

#include "modules/Module.h"

namespace tessera::cli {

/// Each adds its subcommand to `app`; the returned function runs it (exit code).
std::function<int()> addTrain(CLI::App& app);
std::function<int()> addCheck(CLI::App& app);
std::function<int()> addSummary(CLI::App& app);
std::function<int()> addDraw(CLI::App& app);

/// The --input shapes ("1x3x224x224" each), with the batch dim replaced when batch > 0.
/// std::invalid_argument when there are none or one does not parse.
Shapes parseInputs(const std::vector<std::string>& inputs, int64_t batch);
/// A zoo model by name, or a model rebuilt from a blueprint JSON file; weights are left
/// uninitialised (for shape work).
ModulePtr loadModel(const std::string& model);

} // namespace tessera::cli
