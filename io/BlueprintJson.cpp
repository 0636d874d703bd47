// Blueprint JSON parsing with nlohmann::json.
#include <nlohmann/json.hpp>

#include <stdexcept>

#include "io/Factory.h"

namespace tessera {

namespace {

using json = nlohmann::json;

BlueprintValue valueOf(const json& v, const std::string& key) {
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) {
        bool allInt = true;
        for (const json& e : v) {
            if (!e.is_number()) throw IoError("scheme argument '" + key + "' must be a list of numbers");
            allInt = allInt && e.is_number_integer();
        }
        if (allInt) return v.get<std::vector<int64_t>>();
        return v.get<std::vector<double>>();
    }
    throw IoError("scheme argument '" + key + "' has an unsupported type (" + v.type_name() + ")");
}

// A parent's slots: integers (a number too large for one, such as 1e40, is refused rather
// than converted).
std::vector<int64_t> slotsOf(const json& s, const std::string& node) {
    if (!s.is_array()) throw IoError("node '" + node + "': a parent's slots must be a list");
    std::vector<int64_t> slots;
    for (const json& e : s) {
        if (!e.is_number_integer()) {
            throw IoError("node '" + node + "': slots must be integers, got a " + e.type_name() +
                          (e.is_number_float() ? " (or an integer out of range)" : ""));
        }
        slots.push_back(e.get<int64_t>());
    }
    return slots;
}

// Deeper is refused: no real model nests containers this far, and every layer of nesting
// costs stack in the builders that follow.
constexpr int kMaxDepth = 1000;

Blueprint fromJson(const json& j, int depth) {
    if (depth > kMaxDepth) {
        throw IoError("blueprint JSON: modules nested more than " + std::to_string(kMaxDepth) + " deep");
    }
    if (!j.is_object() || !j.contains("classname") || !j["classname"].is_string()) {
        throw IoError("a blueprint must be an object with a string \"classname\"");
    }
    Blueprint bp;
    bp.classname = j["classname"].get<std::string>();
    if (j.contains("scheme")) {
        if (!j["scheme"].is_object()) throw IoError(bp.classname + ": \"scheme\" must be an object");
        for (const auto& [k, v] : j["scheme"].items()) bp.scheme.emplace_back(k, valueOf(v, k));
    }
    if (j.contains("modules")) {
        for (const json& m : j["modules"]) bp.modules.push_back(fromJson(m, depth + 1));
    }
    if (j.contains("nodes")) {
        for (const json& n : j["nodes"]) {
            NodeBlueprint nb;
            nb.name = n.at("name").get<std::string>();
            for (const json& p : n.at("parents")) {
                if (!p.is_array() || p.size() != 2) {
                    throw IoError("node '" + nb.name + "': a parent is [name, [slots]]");
                }
                nb.parents.emplace_back(p[0].get<std::string>(), slotsOf(p[1], nb.name));
            }
            if (n.contains("sameModuleAs")) nb.sameModuleAs = n["sameModuleAs"].get<std::string>();
            bp.nodes.push_back(std::move(nb));
        }
        bp.inputs = j.at("inputs").get<std::vector<std::string>>();
        bp.outputs = j.at("outputs").get<std::vector<std::string>>();
    }
    return bp;
}

} // namespace

Blueprint blueprintFromJson(const std::string& text) {
    json j;
    try {
        // Nesting is bounded while parsing, before a deep document is built in memory.
        j = json::parse(text, [](int depth, json::parse_event_t, json&) {
            if (depth > 4 * kMaxDepth) {
                throw IoError("blueprint JSON: nested more than " + std::to_string(4 * kMaxDepth) + " deep");
            }
            return true;
        });
    } catch (const json::exception& e) { // malformed, or a number out of range ("1E400")
        throw IoError(std::string("blueprint JSON: ") + e.what());
    }
    try {
        return fromJson(j, 0);
    } catch (const json::exception& e) {
        throw IoError(std::string("blueprint JSON: ") + e.what());
    }
}

} // namespace tessera
