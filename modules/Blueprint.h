#pragma once
/// \file Blueprint: a module's class name and constructor arguments, printable as JSON.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tessera {

/// One constructor argument.
using BlueprintValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

/// A graph node in a blueprint: its name and its parents with the output slots it reads.
struct NodeBlueprint {
    std::string name;
    std::vector<std::pair<std::string, std::vector<int64_t>>> parents;
    /// The earlier node whose module this node runs too (one module in several nodes:
    /// shared weights); empty when the node has a module of its own.
    std::string sameModuleAs;
};

/// `{"classname": ..., "scheme": {ctor args}}`; containers add their children in order
/// (`modules`); a Graph also lists its nodes (node i wraps modules[i], in execution
/// order), inputs and outputs.
struct Blueprint {
    std::string classname;
    std::vector<std::pair<std::string, BlueprintValue>> scheme;
    std::vector<Blueprint> modules;
    std::vector<NodeBlueprint> nodes;
    std::vector<std::string> inputs, outputs;

    /// The value of argument `key`; throws ModuleError when absent.
    const BlueprintValue& at(const std::string& key) const;
    /// The value of `key`, or nullptr when absent.
    const BlueprintValue* find(const std::string& key) const;
    /// Compact JSON text.
    std::string toJson() const;
};

} // namespace tessera
