#include "training/Checkpoint.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "backend/Random.h"
#include "io/Hdf5.h"

namespace tessera {

namespace {
using json = nlohmann::json;
constexpr const char* kFormat = "tessera checkpoint 1";
// The weight average's tensors among the extras: "#average#<dotted name>" (an optimizer's
// are "<dotted name>#<k>", and a dotted name does not start with '#').
constexpr const char* kAveragePrefix = "#average#";

// Every module's own random stream (dropout, noise), by path, in a fixed order.
void randomStreams(Module& m, const std::string& path, std::vector<std::pair<std::string, Generator*>>& out) {
    if (Generator* g = m.randomStream()) out.emplace_back(path, g);
    for (const auto& [name, child] : m.namedChildren())
        randomStreams(*child, path.empty() ? name : path + "." + name, out);
}
} // namespace

namespace {
void save(const std::string& path, const Module& net, const Optimizer& optimizer, const Trainer* trainer,
          const WeightAverage* average, const std::string& notes) {
    if (average && average->swapped()) {
        throw ModuleError("checkpoint " + path + ": the model holds the weight averages (swap them back first)");
    }
    const Optimizer::State st = optimizer.state();
    const Generator& gen = globalGenerator();
    json record = {
        {"format", kFormat},
        {"optimizer",
         {{"class", optimizer.classname()},
          {"steps", st.steps},
          {"lossScale", st.lossScale},
          {"cleanSteps", st.cleanSteps},
          {"skippedSteps", st.skippedSteps}}},
        {"generator", {{"seed", gen.seed()}, {"offset", gen.offset()}}},
    };
    json streams = json::array();
    std::vector<std::pair<std::string, Generator*>> gens;
    randomStreams(const_cast<Module&>(net), "", gens); // read only
    for (const auto& [where, g] : gens)
        streams.push_back({{"module", where}, {"seed", g->seed()}, {"offset", g->offset()}});
    record["streams"] = streams;
    const auto cs = const_cast<Module&>(net).namedCounters(); // read only
    json countersJson = json::object();
    for (const auto& [where, c] : cs) countersJson[where] = *c;
    record["counters"] = countersJson;
    if (!notes.empty()) record["notes"] = notes;
    FileExtras extras;
    extras.tensors = st.tensors;
    if (average) {
        record["average"] = {{"decay", average->decay()}, {"updates", average->updates()}};
        for (const auto& [name, t] : average->state()) extras.tensors.emplace_back(kAveragePrefix + name, t);
    }
    if (trainer) { // a loop of one's own has no position to keep
        const TrainerPosition& pos = trainer->position();
        record["trainer"] = {{"epoch", pos.epoch},
                             {"batch", pos.batch},
                             {"errorSum", pos.errorSum},
                             {"errorSamples", pos.errorSamples},
                             {"batchsize", trainer->options().batchsize},
                             {"accumulate", trainer->options().accumulate},
                             {"shuffle", trainer->options().shuffle},
                             {"seed", trainer->options().seed}};
    }
    extras.record = record.dump();
    saveModel(net, path, SaveOptions{}, extras);
}

void load(const std::string& path, Module& net, Optimizer& optimizer, Trainer* trainer, WeightAverage* average,
          std::string* notes) {
    const FileExtras extras = loadExtras(path);
    json r;
    try {
        r = json::parse(extras.record);
        if (r.at("format").get<std::string>() != kFormat) {
            throw IoError("checkpoint " + path + ": format '" + r.at("format").get<std::string>() + "', expected '" +
                          kFormat + "'");
        }
    } catch (const json::exception& e) {
        throw IoError("checkpoint " + path + ": unreadable record: " + e.what());
    }
    TrainerPosition pos;
    Optimizer::State st;
    uint64_t genSeed = 0, genOffset = 0;
    std::vector<std::tuple<Generator*, uint64_t, uint64_t>> streams; // restored last
    std::vector<std::pair<int64_t*, int64_t>> counterValues;
    int64_t averageUpdates = 0;
    try {
        if (trainer && !r.contains("trainer")) {
            throw ModuleError("checkpoint " + path +
                              ": saved without a Trainer (its position is not in it); load it without one");
        }
        const json& o = r.at("optimizer");
        auto mismatch = [&](const std::string& what, const std::string& saved, const std::string& now) {
            throw ModuleError("checkpoint " + path + ": saved with " + what + " " + saved + ", resumed with " + now);
        };
        // Numbers as the types they are read into: a float where an integer belongs (JSON
        // reads 1e40, or a 30-digit integer, as one) or a float beyond float's range is
        // refused, not converted (the conversion would be undefined).
        auto shown = [](const json& j) {
            const std::string d = j.dump();
            return d.size() > 40 ? d.substr(0, 40) + "..." : d;
        };
        auto integer = [&](const json& j) {
            if (!j.is_number_integer()) throw IoError("checkpoint " + path + ": expected an integer, got " + shown(j));
            return j.get<int64_t>();
        };
        auto natural = [&](const json& j) {
            if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
                throw IoError("checkpoint " + path + ": expected an integer >= 0, got " + shown(j));
            return j.get<uint64_t>();
        };
        auto single = [&](const json& j) {
            const double d = j.get<double>();
            if (std::isfinite(d) && std::abs(d) > std::numeric_limits<float>::max())
                throw IoError("checkpoint " + path + ": " + shown(j) + " is beyond float's range");
            return static_cast<float>(d);
        };
        if (trainer) { // a position saved for a Trainer is ignored when loaded without one
            const json& t = r.at("trainer");
            const HandlerOptions& opts = trainer->options();
            if (integer(t.at("batchsize")) != opts.batchsize)
                mismatch("batch size", t.at("batchsize").dump(), std::to_string(opts.batchsize));
            if (natural(t.at("seed")) != opts.seed) mismatch("seed", t.at("seed").dump(), std::to_string(opts.seed));
            const int64_t accumulate = t.contains("accumulate") ? integer(t.at("accumulate")) : 1; // older files: 1
            if (accumulate != opts.accumulate) {
                mismatch("gradient accumulation over", std::to_string(accumulate) + " batches",
                         std::to_string(opts.accumulate) + " batches");
            }
            if (t.at("shuffle").get<bool>() != opts.shuffle)
                mismatch("shuffle", t.at("shuffle").dump(), opts.shuffle ? "true" : "false");
            pos = {integer(t.at("epoch")), integer(t.at("batch")), t.at("errorSum").get<double>(),
                   integer(t.at("errorSamples"))};
        }
        if (o.at("class").get<std::string>() != optimizer.classname())
            mismatch("optimizer", o.at("class").get<std::string>(), optimizer.classname());
        if (r.contains("average") != (average != nullptr)) {
            throw ModuleError("checkpoint " + path +
                              (average ? ": saved without a weight average, resumed with one"
                                       : ": saved with a weight average, resumed without one"));
        }
        if (average) {
            const float decay = single(r.at("average").at("decay"));
            if (decay != average->decay()) {
                mismatch("weight-average decay", r.at("average").at("decay").dump(), std::to_string(average->decay()));
            }
            averageUpdates = static_cast<int64_t>(
                natural(r.at("average").at("updates"))); // >= 0: setState comes after the model is loaded
        }
        st.steps = integer(o.at("steps"));
        st.lossScale = single(o.at("lossScale"));
        st.cleanSteps = integer(o.at("cleanSteps"));
        st.skippedSteps = integer(o.at("skippedSteps"));
        genSeed = natural(r.at("generator").at("seed"));
        genOffset = natural(r.at("generator").at("offset"));
        std::vector<std::pair<std::string, Generator*>> gens;
        randomStreams(net, "", gens);
        const json& saved = r.at("streams");
        if (saved.size() != gens.size()) {
            throw ModuleError("checkpoint " + path + ": " + std::to_string(saved.size()) +
                              " modules with random streams saved, the model has " + std::to_string(gens.size()));
        }
        for (size_t i = 0; i < gens.size(); ++i) {
            if (saved[i].at("module").get<std::string>() != gens[i].first) {
                throw ModuleError("checkpoint " + path + ": random stream of '" +
                                  saved[i].at("module").get<std::string>() + "' saved where the model has '" +
                                  gens[i].first + "'");
            }
            streams.emplace_back(gens[i].second, natural(saved[i].at("seed")), natural(saved[i].at("offset")));
        }
        const auto cs = net.namedCounters();
        const json& savedCounters = r.at("counters");
        if (savedCounters.size() != cs.size()) {
            throw ModuleError("checkpoint " + path + ": " + std::to_string(savedCounters.size()) +
                              " training counters saved, the model has " + std::to_string(cs.size()));
        }
        for (const auto& [where, c] : cs) {
            if (!savedCounters.contains(where))
                throw ModuleError("checkpoint " + path + ": no counter '" + where + "'");
            counterValues.emplace_back(c, integer(savedCounters.at(where)));
        }
        if (r.contains("notes") && !r.at("notes").is_string())
            throw IoError("checkpoint " + path + ": notes are not text");
    } catch (const json::exception& e) {
        throw IoError("checkpoint " + path + ": unreadable record: " + e.what());
    }
    // The optimizer's tensors in its own order (the file keeps them by name), and the
    // weight average's, named with its prefix.
    std::map<std::string, Tensor> byName;
    NamedTensors averages;
    for (const auto& [name, t] : extras.tensors) {
        if (name.rfind(kAveragePrefix, 0) == 0) {
            averages.emplace_back(name.substr(std::string(kAveragePrefix).size()), t);
        } else {
            byName.emplace(name, t);
        }
    }
    for (const auto& [name, t] : optimizer.state().tensors) {
        auto it = byName.find(name);
        if (it == byName.end()) throw ModuleError("checkpoint " + path + ": no optimizer state '" + name + "'");
        if (it->second.shape() != t.shape()) {
            throw ModuleError("checkpoint " + path + ": optimizer state '" + name + "' has shape " +
                              it->second.shape().str() + ", the parameter " + t.shape().str());
        }
        st.tensors.emplace_back(name, it->second);
    }
    if (st.tensors.size() != byName.size()) {
        throw ModuleError("checkpoint " + path + ": " + std::to_string(byName.size()) +
                          " optimizer state tensors, this optimizer has " + std::to_string(st.tensors.size()));
    }
    // Everything checked that can be before a change: the average's names and shapes, the
    // model (strict: every name and shape must match, nothing copied otherwise), then the rest.
    if (average) {
        try {
            average->checkState(averages);
        } catch (const ModuleError& e) {
            throw ModuleError("checkpoint " + path + ": " + e.what());
        }
    }
    loadModel(net, path, LoadMode::strict);
    if (average) average->setState(averages, averageUpdates);
    optimizer.setState(st);
    if (trainer) trainer->setPosition(pos);
    if (notes) *notes = r.contains("notes") ? r.at("notes").get<std::string>() : std::string();
    globalGenerator().manualSeed(genSeed);
    globalGenerator().advance(genOffset);
    for (auto& [g, seed, offset] : streams) {
        g->manualSeed(seed);
        g->advance(offset);
    }
    for (auto& [c, value] : counterValues) *c = value;
}

} // namespace

void saveCheckpoint(const std::string& path, const Module& net, const Optimizer& optimizer, const Trainer& trainer,
                    const WeightAverage* average, const std::string& notes) {
    save(path, net, optimizer, &trainer, average, notes);
}

void saveCheckpoint(const std::string& path, const Module& net, const Optimizer& optimizer,
                    const WeightAverage* average, const std::string& notes) {
    save(path, net, optimizer, nullptr, average, notes);
}

void loadCheckpoint(const std::string& path, Module& net, Optimizer& optimizer, Trainer& trainer,
                    WeightAverage* average, std::string* notes) {
    load(path, net, optimizer, &trainer, average, notes);
}

void loadCheckpoint(const std::string& path, Module& net, Optimizer& optimizer, WeightAverage* average,
                    std::string* notes) {
    load(path, net, optimizer, nullptr, average, notes);
}

} // namespace tessera
