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

/// `{"classname": ..., "scheme": {ctor args}}`; containers add their children in order.
struct Blueprint {
    std::string classname;
    std::vector<std::pair<std::string, BlueprintValue>> scheme;
    std::vector<Blueprint> modules;

    /// The value of argument `key`; throws std::out_of_range when absent.
    const BlueprintValue& at(const std::string& key) const;
    /// Compact JSON text.
    std::string toJson() const;
};

} // namespace tessera
