#include "containers/Container.h"

#include <atomic>
#include <unordered_map>

#include "backend/Backend.h"

namespace tessera {

namespace {
std::atomic<uint64_t> version{0};
} // namespace

uint64_t Container::structureVersion() { return version.load(std::memory_order_relaxed); }
void Container::structureChanged() { version.fetch_add(1, std::memory_order_relaxed); }

void Container::setReleaseInBackward(bool on) {
    releaseInBackward_ = on;
    for (const auto& [name, child] : children_) {
        if (auto* c = dynamic_cast<Container*>(child.get())) c->setReleaseInBackward(on);
    }
}

void Container::beginBackward() {
    if (spent_) {
        throw moduleError("a second backward after one forward: the first released the values it used "
                          "(setReleaseInBackward(false) keeps them); run the forward again");
    }
    spent_ = releaseInBackward_;
}

Module& Container::operator[](size_t index) const { return *childPtr(index); }

const ModulePtr& Container::childPtr(size_t index) const {
    if (index >= children_.size()) {
        throw ContainerError(str() + ": no child at index " + std::to_string(index) + " (it holds " +
                             std::to_string(children_.size()) + ")");
    }
    return children_[index].second;
}

const std::string& Container::childName(size_t index) const {
    (void)(*this)[index];
    return children_[index].first;
}

Module& Container::getByName(const std::string& dottedName) const {
    const size_t dot = dottedName.find('.');
    const std::string head = dottedName.substr(0, dot);
    for (const auto& [n, child] : children_) {
        if (n != head) continue;
        if (dot == std::string::npos) return *child;
        auto* sub = dynamic_cast<Container*>(child.get());
        if (!sub)
            throw ContainerError(str() + ": child '" + head + "' is a " + child->classname() + ", not a container");
        return sub->getByName(dottedName.substr(dot + 1));
    }
    std::string names;
    for (const auto& [n, child] : children_) names += (names.empty() ? "" : ", ") + n;
    throw ContainerError(str() + ": no child named '" + head + "' (children: " + (names.empty() ? "none" : names) +
                         ")");
}

std::vector<std::pair<std::string, Module*>> Container::namedChildren() const {
    std::vector<std::pair<std::string, Module*>> out;
    out.reserve(children_.size());
    for (const auto& [n, child] : children_) out.emplace_back(n, child.get());
    return out;
}

ModulePtr Container::replace(const std::string& name, ModulePtr module) {
    const std::string where = str() + ".replace('" + name + "')";
    if (!module) throw ContainerError(where + ": the module is null");
    size_t at = children_.size();
    for (size_t i = 0; i < children_.size(); ++i) {
        if (children_[i].first == name) at = i;
        if (children_[i].second == module) {
            throw ContainerError(where + ": " + module->str() + " is already a child (as '" + children_[i].first +
                                 "')");
        }
    }
    if (at == children_.size()) {
        std::string names;
        for (const auto& [n, c] : children_) names += (names.empty() ? "" : ", ") + n;
        throw ContainerError(where + ": no child named '" + name + "' (children: " + names + ")");
    }
    ModulePtr old = children_[at].second;
    const Device device = this->device(); // where the container's parameters are
    if (numOfParams() > 0 && module->device() != device) module->to(device);
    children_[at].second = std::move(module);
    structureChanged();
    return old;
}

void Container::insertChild(size_t pos, ModulePtr mod, const char* op) {
    const std::string where = str() + "." + op + " at position " + std::to_string(pos);
    if (!mod) throw ContainerError(where + ": the module is null");
    if (pos > children_.size()) {
        throw ContainerError(where + ": position out of range (valid: 0.." + std::to_string(children_.size()) + ")");
    }
    auto taken = [&](const std::string& n) {
        for (const auto& [cn, c] : children_) {
            if (cn == n) return true;
        }
        return false;
    };
    for (const auto& [cn, c] : children_) {
        if (c == mod) throw ContainerError(where + ": " + mod->str() + " is already a child (as '" + cn + "')");
    }
    std::string name = mod->name();
    if (name.empty()) {
        for (size_t i = pos;; ++i) {
            if (!taken(std::to_string(i))) {
                name = std::to_string(i);
                break;
            }
        }
    } else if (name.find('.') != std::string::npos) {
        throw ContainerError(where + ": module name '" + name + "' contains '.', which separates dotted names");
    } else if (taken(name)) {
        throw ContainerError(where + ": a child named '" + name + "' already exists; names must be unique");
    }
    children_.insert(children_.begin() + static_cast<std::ptrdiff_t>(pos), {name, std::move(mod)});
    structureChanged();
}

ModulePtr Container::removeChild(size_t pos, const char* op) {
    if (pos >= children_.size()) {
        throw ContainerError(str() + "." + op + " at position " + std::to_string(pos) + ": out of range (it holds " +
                             std::to_string(children_.size()) + " modules)");
    }
    ModulePtr mod = std::move(children_[pos].second);
    children_.erase(children_.begin() + static_cast<std::ptrdiff_t>(pos));
    structureChanged();
    return mod;
}

Blueprint Container::blueprint() const {
    Blueprint bp = Module::blueprint();
    for (const auto& [n, child] : children_) bp.modules.push_back(child->blueprint());
    return bp;
}

std::unordered_set<const Module*> prepareSharedGrads(const std::vector<const Module*>& modules, float momentum) {
    std::vector<std::pair<const Module*, NamedVariables>> updaters;
    std::unordered_map<const Variable*, int> users;
    for (const Module* m : modules) {
        NamedVariables vars = m->namedParams();
        std::unordered_set<const Variable*> mine; // a module listing one Variable twice counts once
        for (const auto& [name, v] : vars) {
            if (mine.insert(v.get()).second) ++users[v.get()];
        }
        updaters.emplace_back(m, std::move(vars));
    }
    std::unordered_set<const Module*> shared;
    std::unordered_set<const Variable*> scaled;
    for (const auto& [m, vars] : updaters) {
        bool sharing = false;
        for (const auto& [name, v] : vars) sharing = sharing || users[v.get()] > 1;
        if (!sharing) continue;
        shared.insert(m);
        for (const auto& [name, v] : vars) { // m runs with momentum 1: its gradients take momentum now
            if (!scaled.insert(v.get()).second || momentum == 1.0f) continue;
            if (momentum == 0.0f) {
                backendOf(v->grad).fill(v->grad, 0.0f);
            } else {
                backendOf(v->grad).affine(v->grad, momentum, 0.0f, v->grad);
            }
        }
    }
    return shared;
}

} // namespace tessera
