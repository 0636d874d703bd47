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

/// "1x3x224x224" -> [1, 3, 224, 224]; std::invalid_argument otherwise.
Shape parseShape(const std::string& text);
/// A zoo model by name, or a model rebuilt from a blueprint JSON file; weights are left
/// uninitialised (for shape work).
ModulePtr loadModel(const std::string& model);

} // namespace tessera::cli
