#include "training/Average.h"

#include <map>
#include <unordered_set>

#include "backend/Backend.h"

namespace tessera {

namespace {
// The model's floating parameters (each shared one once), then its floating attributes.
NamedTensors averaged(const Module& net) {
    NamedTensors out;
    std::unordered_set<const Variable*> seen;
    for (const auto& [name, var] : net.namedParams()) {
        if (seen.insert(var.get()).second && var->data.dtype() == DType::float32) out.emplace_back(name, var->data);
    }
    for (const auto& [name, t] : net.namedAttrs()) {
        if (t.dtype() == DType::float32) out.emplace_back(name, t);
    }
    return out;
}
} // namespace

WeightAverage::WeightAverage(Module& net, float decay) : net_(net), decay_(decay) {
    if (!(decay >= 0.0f && decay < 1.0f)) {
        throw ModuleError("WeightAverage: the decay must lie in [0, 1), got " + std::to_string(decay));
    }
    for (const auto& [name, t] : averaged(net)) entries_.push_back({name, t.clone()});
}

std::vector<Tensor> WeightAverage::live() const {
    const NamedTensors now = averaged(net_);
    if (now.size() != entries_.size()) {
        throw ModuleError("WeightAverage: the model has " + std::to_string(now.size()) + " tensors to average, " +
                          std::to_string(entries_.size()) + " when the average began");
    }
    std::vector<Tensor> out;
    for (size_t i = 0; i < now.size(); ++i) {
        if (now[i].first != entries_[i].name || now[i].second.shape() != entries_[i].average.shape()) {
            throw ModuleError("WeightAverage: the model's '" + now[i].first + "' " + now[i].second.shape().str() +
                              " is not the '" + entries_[i].name + "' " + entries_[i].average.shape().str() +
                              " the average began with");
        }
        out.push_back(now[i].second);
    }
    return out;
}

void WeightAverage::update() {
    if (swapped_) throw ModuleError("WeightAverage: update while the model holds the averages (swap back first)");
    const std::vector<Tensor> w = live();
    const float decay = currentDecay();
    for (size_t i = 0; i < w.size(); ++i) {
        Tensor& avg = entries_[i].average;
        // Kept in the layout the layer keeps its tensor in, so the step converts nothing.
        if (avg.layout() != w[i].layout() || avg.device() != w[i].device()) {
            Tensor moved = Tensor::empty(w[i].shape(), DType::float32, w[i].device(), w[i].layout());
            moved.copyFrom(avg.device() == w[i].device() ? avg : avg.to(w[i].device()));
            avg = moved;
        }
        backendOf(avg).axpby(1.0f - decay, w[i], decay, avg);
    }
    ++updates_;
}

void WeightAverage::swap() {
    const std::vector<Tensor> w = live();
    for (size_t i = 0; i < w.size(); ++i) {
        Tensor& avg = entries_[i].average;
        const Tensor held = w[i].clone();
        Tensor(w[i]).copyFrom(avg.device() == w[i].device() ? avg : avg.to(w[i].device()));
        if (avg.device() != w[i].device()) avg = Tensor::empty(avg.shape(), DType::float32, w[i].device());
        avg.copyFrom(held);
    }
    swapped_ = !swapped_;
    noteParameterChange();
}

NamedTensors WeightAverage::state() const {
    if (!swapped_) {
        NamedTensors out;
        for (const Entry& e : entries_) out.emplace_back(e.name, e.average);
        return out;
    }
    const std::vector<Tensor> w = live();
    NamedTensors out;
    for (size_t i = 0; i < w.size(); ++i) out.emplace_back(entries_[i].name, w[i]);
    return out;
}

void WeightAverage::checkState(const NamedTensors& state) const {
    std::map<std::string, const Tensor*> byName;
    for (const auto& [name, t] : state) byName[name] = &t;
    if (byName.size() != entries_.size()) {
        throw ModuleError("WeightAverage: the state holds " + std::to_string(byName.size()) + " averages, the model " +
                          std::to_string(entries_.size()));
    }
    for (const Entry& e : entries_) {
        auto it = byName.find(e.name);
        if (it == byName.end()) throw ModuleError("WeightAverage: the state has no average of '" + e.name + "'");
        if (it->second->shape() != e.average.shape()) {
            throw ModuleError("WeightAverage: the average of '" + e.name + "' has shape " + it->second->shape().str() +
                              ", the model's " + e.average.shape().str());
        }
    }
}

void WeightAverage::setState(const NamedTensors& state, int64_t updates) {
    checkState(state); // whole, before anything is copied
    if (updates < 0) throw ModuleError("WeightAverage: a negative update count");
    std::map<std::string, const Tensor*> byName;
    for (const auto& [name, t] : state) byName[name] = &t;
    const std::vector<Tensor> w = swapped_ ? live() : std::vector<Tensor>{};
    for (size_t i = 0; i < entries_.size(); ++i) {
        Tensor dst = swapped_ ? w[i] : entries_[i].average;
        const Tensor& src = *byName.at(entries_[i].name);
        dst.copyFrom(src.device() == dst.device() ? src : src.to(dst.device()));
    }
    updates_ = updates;
    if (swapped_) noteParameterChange();
}

} // namespace tessera
