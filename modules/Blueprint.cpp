#include "modules/Blueprint.h"

#include "backend/Errors.h"
#include <cstdio>

namespace tessera {

namespace {
std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += c;
            }
        }
    }
    return out + "\"";
}

struct ValueToJson {
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", v);
        return buf;
    }
    std::string operator()(const std::string& v) const { return quoted(v); }
    std::string operator()(const std::vector<int64_t>& v) const { return list(v); }
    std::string operator()(const std::vector<double>& v) const { return list(v); }
    template <class T> std::string list(const std::vector<T>& v) const {
        std::string s = "[";
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (*this)(v[i]);
        return s + "]";
    }
};
} // namespace

const BlueprintValue* Blueprint::find(const std::string& key) const {
    for (const auto& [k, v] : scheme) {
        if (k == key) return &v;
    }
    return nullptr;
}

const BlueprintValue& Blueprint::at(const std::string& key) const {
    for (const auto& [k, v] : scheme) {
        if (k == key) return v;
    }
    throw ModuleError("Blueprint of " + classname + " has no argument '" + key + "'");
}

std::string Blueprint::toJson() const {
    std::string s = "{\"classname\": " + quoted(classname) + ", \"scheme\": {";
    for (size_t i = 0; i < scheme.size(); ++i) {
        s += (i ? ", " : "") + quoted(scheme[i].first) + ": " + std::visit(ValueToJson{}, scheme[i].second);
    }
    s += "}";
    if (!modules.empty()) {
        s += ", \"modules\": [";
        for (size_t i = 0; i < modules.size(); ++i) s += (i ? ", " : "") + modules[i].toJson();
        s += "]";
    }
    if (!nodes.empty()) {
        s += ", \"nodes\": [";
        for (size_t i = 0; i < nodes.size(); ++i) {
            s += std::string(i ? ", " : "") + "{\"name\": " + quoted(nodes[i].name) + ", \"parents\": [";
            for (size_t p = 0; p < nodes[i].parents.size(); ++p) {
                s += std::string(p ? ", " : "") + "[" + quoted(nodes[i].parents[p].first) + ", " +
                     ValueToJson{}(nodes[i].parents[p].second) + "]";
            }
            s += "]";
            if (!nodes[i].sameModuleAs.empty()) s += ", \"sameModuleAs\": " + quoted(nodes[i].sameModuleAs);
            s += "}";
        }
        s += "]";
        for (const auto* list : {&inputs, &outputs}) {
            s += std::string(", \"") + (list == &inputs ? "inputs" : "outputs") + "\": [";
            for (size_t i = 0; i < list->size(); ++i) s += (i ? ", " : "") + quoted((*list)[i]);
            s += "]";
        }
    }
    return s + "}";
}

} // namespace tessera
