#include "training/Checkpoint.h"

#include <nlohmann/json.hpp>

#include <map>
#include <tuple>
#include <vector>

#include "backend/Random.h"
#include "io/Hdf5.h"

namespace tessera {

namespace {
using json = nlohmann::json;
constexpr const char* kFormat = "tessera checkpoint 1";

// Every module's own random stream (dropout, noise) and training counters (batch norm's
// batches seen), by path, in a fixed order.
void randomStreams(Module& m, const std::string& path, std::vector<std::pair<std::string, Generator*>>& out) {
    if (Generator* g = m.randomStream()) out.emplace_back(path, g);
    for (const auto& [name, child] : m.namedChildren())
        randomStreams(*child, path.empty() ? name : path + "." + name, out);
}

void counters(Module& m, const std::string& path, std::vector<std::pair<std::string, int64_t*>>& out) {
    for (const auto& [name, c] : m.trainingCounters()) out.emplace_back(path.empty() ? name : path + "." + name, c);
    for (const auto& [name, child] : m.namedChildren()) counters(*child, path.empty() ? name : path + "." + name, out);
}
} // namespace

void saveCheckpoint(const std::string& path, const Module& net, const Optimizer& optimizer, const Trainer& trainer) {
    const Optimizer::State st = optimizer.state();
    const TrainerPosition& pos = trainer.position();
    const Generator& gen = globalGenerator();
    json record = {
        {"format", kFormat},
        {"trainer",
         {{"epoch", pos.epoch},
          {"batch", pos.batch},
          {"errorSum", pos.errorSum},
          {"errorSamples", pos.errorSamples},
          {"batchsize", trainer.options().batchsize},
          {"shuffle", trainer.options().shuffle},
          {"seed", trainer.options().seed}}},
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
    std::vector<std::pair<std::string, int64_t*>> cs;
    counters(const_cast<Module&>(net), "", cs); // read only
    json countersJson = json::object();
    for (const auto& [where, c] : cs) countersJson[where] = *c;
    record["counters"] = countersJson;
    FileExtras extras;
    extras.tensors = st.tensors;
    extras.record = record.dump();
    saveModel(net, path, SaveOptions{}, extras);
}

void loadCheckpoint(const std::string& path, Module& net, Optimizer& optimizer, Trainer& trainer) {
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
    try {
        const json& t = r.at("trainer");
        const json& o = r.at("optimizer");
        auto mismatch = [&](const std::string& what, const std::string& saved, const std::string& now) {
            throw ModuleError("checkpoint " + path + ": saved with " + what + " " + saved + ", resumed with " + now);
        };
        const HandlerOptions& opts = trainer.options();
        if (t.at("batchsize").get<int64_t>() != opts.batchsize)
            mismatch("batch size", t.at("batchsize").dump(), std::to_string(opts.batchsize));
        if (t.at("seed").get<uint64_t>() != opts.seed) mismatch("seed", t.at("seed").dump(), std::to_string(opts.seed));
        if (t.at("shuffle").get<bool>() != opts.shuffle)
            mismatch("shuffle", t.at("shuffle").dump(), opts.shuffle ? "true" : "false");
        if (o.at("class").get<std::string>() != optimizer.classname())
            mismatch("optimizer", o.at("class").get<std::string>(), optimizer.classname());
        pos = {t.at("epoch").get<int64_t>(), t.at("batch").get<int64_t>(), t.at("errorSum").get<double>(),
               t.at("errorSamples").get<int64_t>()};
        st.steps = o.at("steps").get<int64_t>();
        st.lossScale = o.at("lossScale").get<float>();
        st.cleanSteps = o.at("cleanSteps").get<int64_t>();
        st.skippedSteps = o.at("skippedSteps").get<int64_t>();
        genSeed = r.at("generator").at("seed").get<uint64_t>();
        genOffset = r.at("generator").at("offset").get<uint64_t>();
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
            streams.emplace_back(gens[i].second, saved[i].at("seed").get<uint64_t>(),
                                 saved[i].at("offset").get<uint64_t>());
        }
        std::vector<std::pair<std::string, int64_t*>> cs;
        counters(net, "", cs);
        const json& savedCounters = r.at("counters");
        if (savedCounters.size() != cs.size()) {
            throw ModuleError("checkpoint " + path + ": " + std::to_string(savedCounters.size()) +
                              " training counters saved, the model has " + std::to_string(cs.size()));
        }
        for (const auto& [where, c] : cs) {
            if (!savedCounters.contains(where))
                throw ModuleError("checkpoint " + path + ": no counter '" + where + "'");
            counterValues.emplace_back(c, savedCounters.at(where).get<int64_t>());
        }
    } catch (const json::exception& e) {
        throw IoError("checkpoint " + path + ": unreadable record: " + e.what());
    }
    // The optimizer's tensors in its own order (the file keeps them by name).
    std::map<std::string, Tensor> byName(extras.tensors.begin(), extras.tensors.end());
    for (const auto& [name, t] : optimizer.state().tensors) {
        auto it = byName.find(name);
        if (it == byName.end()) throw ModuleError("checkpoint " + path + ": no optimizer state '" + name + "'");
        if (it->second.shape() != t.shape()) {
            throw ModuleError("checkpoint " + path + ": optimizer state '" + name + "' has shape " +
                              it->second.shape().str() + ", the parameter " + t.shape().str());
        }
        st.tensors.emplace_back(name, it->second);
    }
    if (st.tensors.size() != extras.tensors.size()) {
        throw ModuleError("checkpoint " + path + ": " + std::to_string(extras.tensors.size()) +
                          " optimizer state tensors, this optimizer has " + std::to_string(st.tensors.size()));
    }
    // Everything checked that can be before a change: the model (strict: every name and
    // shape must match, nothing copied otherwise), then the rest.
    loadModel(net, path, LoadMode::strict);
    optimizer.setState(st);
    trainer.setPosition(pos);
    globalGenerator().manualSeed(genSeed);
    globalGenerator().advance(genOffset);
    for (auto& [g, seed, offset] : streams) {
        g->manualSeed(seed);
        g->advance(offset);
    }
    for (auto& [c, value] : counterValues) *c = value;
}

} // namespace tessera
