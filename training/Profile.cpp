#include "training/Profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <unordered_map>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "containers/Fusion.h"
#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/ConvND.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
    const double hi = v[mid];
    if (v.size() % 2) return hi;
    return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)) + hi) / 2;
}

// Times the calls of the rows' modules, one at a time: a row's own children (a container
// row) run inside its time and are not timed apart. A module in several rows (a layer
// run at several graph nodes) gives its k-th forward call of a step to its k-th row and
// its k-th backward call to its k-th row from the end: the order the nodes run in.
class LayerClock final : public Module::CallObserver {
public:
    LayerClock(const std::vector<ProfileRow>& rows, Backend& backend)
        : backend_(backend), forward_(rows.size()), backward_(rows.size()), kept_(rows.size()) {
        for (size_t i = 0; i < rows.size(); ++i) {
            if (rows[i].layer) rowsOf_[rows[i].layer].push_back(i);
        }
    }

    void startStep() {
        std::fill(forward_.begin(), forward_.end(), 0.0);
        std::fill(backward_.begin(), backward_.end(), 0.0);
        std::fill(kept_.begin(), kept_.end(), 0);
        forwardCalls_.clear();
        backwardCalls_.clear();
        open_ = nullptr;
    }

    void begin(const Module& m, bool backward) override {
        if (open_ || !rowsOf_.count(&m)) return;
        backend_.synchronize(); // what the device still runs belongs to the layers before
        open_ = &m;
        openBackward_ = backward;
        live_ = static_cast<int64_t>(backend_.memoryStats().current);
        start_ = Clock::now();
    }

    void end(const Module& m, bool backward) override {
        if (open_ != &m || openBackward_ != backward) return;
        backend_.synchronize();
        const double t = since(start_);
        open_ = nullptr;
        const std::vector<size_t>& rows = rowsOf_.at(&m);
        size_t& k = (backward ? backwardCalls_ : forwardCalls_)[&m];
        const size_t at = k++ % rows.size();
        if (backward) {
            backward_[rows[rows.size() - 1 - at]] += t;
        } else {
            forward_[rows[at]] += t;
            kept_[rows[at]] += static_cast<int64_t>(backend_.memoryStats().current) - live_;
        }
    }

    const std::vector<double>& forward() const { return forward_; }
    const std::vector<double>& backward() const { return backward_; }
    const std::vector<int64_t>& kept() const { return kept_; }

private:
    Backend& backend_;
    std::unordered_map<const Module*, std::vector<size_t>> rowsOf_;
    std::unordered_map<const Module*, size_t> forwardCalls_, backwardCalls_;
    std::vector<double> forward_, backward_;
    std::vector<int64_t> kept_;
    int64_t live_ = 0;
    const Module* open_ = nullptr;
    bool openBackward_ = false;
    Clock::time_point start_;
};

// Installs an observer on this thread for its lifetime.
class Observing {
public:
    explicit Observing(Module::CallObserver* observer) : previous_(Module::setCallObserver(observer)) {}
    ~Observing() { Module::setCallObserver(previous_); }
    Observing(const Observing&) = delete;
    Observing& operator=(const Observing&) = delete;

private:
    Module::CallObserver* previous_;
};

struct StepTimes {
    double forward = 0, backward = 0, update = 0, step = 0;
};

std::string ms(double seconds) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", seconds * 1e3);
    return b;
}

std::string fixed(double v, int digits) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return b;
}

std::string outputText(const Shapes& out) {
    std::string s;
    for (const Shape& shape : out) {
        if (!s.empty()) s += ' ';
        s += shape.str();
    }
    return s;
}

// A fused activation's name after its source's: ReLU, or its class (Gelu) or kind (tanh).
std::string activationLabel(const Activation& a) {
    if (a.kind() == ActivationKind::relu) return "ReLU";
    return a.classname() != "Activation" ? a.classname() : str(a.kind());
}

} // namespace

Profile profile(Module& model, const Tensors& inputs, const ProfileOptions& options) {
    if (options.steps < 1) {
        throw ModuleError("profile: expected at least 1 timed step, got " + std::to_string(options.steps));
    }
    if (options.warmup < 0) {
        throw ModuleError("profile: expected 0 or more warm-up steps, got " + std::to_string(options.warmup));
    }
    if (inputs.empty()) throw ModuleError("profile: " + model.str() + " needs its input tensors, got none");
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i].defined()) throw ModuleError("profile: input " + std::to_string(i) + " is undefined");
    }
    Profile p;
    p.train = options.train;
    p.steps = options.steps;
    for (SummaryRow& r : summarize(model, shapesOf(inputs))) {
        ProfileRow row;
        static_cast<SummaryRow&>(row) = std::move(r);
        p.rows.push_back(std::move(row));
    }
    // A batch norm or sum that runs its ReLU (containers/Fusion.h) holds both layers' time,
    // a sum that runs the batch norm before it holds the batch norm's, and in eval mode a
    // convolution that folds the batch norm after it holds the batch norm's (and its ReLU's).
    std::vector<fusion::Pair> fused;
    std::vector<fusion::NormSum> sums;
    std::vector<fusion::ConvNorm> folds;
    if (fusionEnabled()) {
        if (const auto* g = dynamic_cast<const Graph*>(&model)) {
            fused = fusion::pairsOf(*g, options.train);
            sums = fusion::normSumsOf(*g);
            if (!options.train) folds = fusion::foldsOf(*g);
        }
        if (const auto* s = dynamic_cast<const Sequential*>(&model)) {
            fused = fusion::pairsOf(*s, options.train);
            if (!options.train) folds = fusion::foldsOf(*s);
        }
    }
    auto markFused = [](ProfileRow& r) {
        r.module += " (fused)";
        r.fused = true;
    };
    for (ProfileRow& r : p.rows) {
        for (const fusion::Pair& f : fused) {
            if (r.layer == dynamic_cast<const Module*>(f.source))
                r.module.append(1, '+').append(activationLabel(*f.activation));
            if (r.layer == f.activation) markFused(r);
        }
        for (const fusion::NormSum& s : sums) {
            if (r.layer == dynamic_cast<const Module*>(s.sum)) r.module = "BatchNorm+" + r.module;
            if (r.layer == dynamic_cast<const Module*>(s.norm)) markFused(r);
        }
    }
    for (ProfileRow& r : p.rows) { // after the pairs: a folded batch norm's "+ReLU" goes to its convolution
        for (const fusion::ConvNorm& f : folds) {
            const auto* norm = dynamic_cast<const Module*>(f.norm);
            if (r.layer == f.conv) r.module += "+BatchNorm";
            if (r.layer != norm) continue;
            if (r.module.ends_with("+ReLU")) {
                r.module.resize(r.module.size() - 5);
                for (ProfileRow& c : p.rows) {
                    if (c.layer == f.conv) c.module += "+ReLU";
                }
            }
            markFused(r);
        }
    }
    if (options.train) {
        model.trainMode();
    } else {
        model.evalMode();
    }
    Backend& backend = backendOf(inputs[0]);
    LayerClock clock(p.rows, backend);

    // The output gradients of training steps: fixed, of a loss's scale (a mean over the
    // outputs' elements), drawn from a generator of their own (the global one is the user's).
    Tensors grads;
    Generator gen(1);
    auto run = [&](bool timed) {
        StepTimes t;
        // The last step's values go first (as a new step's would replace them), so that
        // the memory a layer's forward allocates is not offset by what it drops.
        model.reset();
        const Observing observing(timed ? &clock : nullptr);
        if (timed) clock.startStep();
        backend.synchronize();
        const auto start = Clock::now();
        const Tensors& out = model(inputs);
        backend.synchronize();
        t.forward = since(start);
        if (options.train) {
            if (grads.empty()) {
                for (const Tensor& o : out) {
                    Tensor g = Tensor::empty(o.shape(), DType::float32, o.device());
                    backendOf(g).fillNormal(g, 0.0f, 1.0f / static_cast<float>(o.numel()), gen);
                    grads.push_back(g);
                }
            }
            const auto back = Clock::now();
            model.backward(grads, true, false, 1.0f, 0.0f); // no gradient for the data
            backend.synchronize();
            t.backward = since(back);
            if (options.optimizer) {
                const auto update = Clock::now();
                options.optimizer->update();
                backend.synchronize();
                t.update = since(update);
            }
        }
        t.step = since(start);
        return t;
    };

    const int total = options.warmup + 2 * options.steps;
    int done = 0;
    auto tick = [&]() {
        if (options.progress) options.progress(++done, total);
    };
    for (int i = 0; i < options.warmup; ++i) {
        run(false);
        tick();
    }
    std::vector<std::vector<double>> forward(p.rows.size()), backward(p.rows.size());
    std::vector<double> plain, fwd, bwd, upd;
    for (int i = 0; i < options.steps; ++i) {
        plain.push_back(run(false).step);
        tick();
        const StepTimes t = run(true);
        tick();
        p.stepSamples.push_back(t.step);
        fwd.push_back(t.forward);
        bwd.push_back(t.backward);
        upd.push_back(t.update);
        double layers = 0;
        for (size_t r = 0; r < p.rows.size(); ++r) {
            forward[r].push_back(clock.forward()[r]);
            backward[r].push_back(clock.backward()[r]);
            layers += clock.forward()[r] + clock.backward()[r];
        }
        p.layerSamples.push_back(layers);
    }
    for (size_t r = 0; r < p.rows.size(); ++r) {
        p.rows[r].forward = median(forward[r]);
        p.rows[r].backward = median(backward[r]);
        p.rows[r].kept = clock.kept()[r];
        p.kept += p.rows[r].kept;
    }
    p.forward = median(fwd);
    p.backward = median(bwd);
    p.update = median(upd);
    p.step = median(p.stepSamples);
    p.plainStep = median(plain);
    return p;
}

std::string profileTable(const Profile& profile, int depth, bool byTime) {
    std::vector<SummaryRow> summary(profile.rows.begin(), profile.rows.end());
    std::vector<size_t> groupOf;
    const std::vector<SummaryRow> grouped = groupRows(summary, depth, &groupOf);
    std::vector<ProfileRow> rows(grouped.size());
    for (size_t i = 0; i < grouped.size(); ++i) static_cast<SummaryRow&>(rows[i]) = grouped[i];
    for (size_t i = 0; i < profile.rows.size(); ++i) {
        rows[groupOf[i]].forward += profile.rows[i].forward;
        rows[groupOf[i]].backward += profile.rows[i].backward;
        rows[groupOf[i]].kept += profile.rows[i].kept;
        if (grouped[groupOf[i]].name == profile.rows[i].name) rows[groupOf[i]].fused = profile.rows[i].fused;
    }
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), size_t{0});
    if (byTime) {
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return rows[a].forward + rows[a].backward > rows[b].forward + rows[b].backward;
        });
    }
    const bool train = profile.train;
    std::vector<std::vector<std::string>> cells;
    cells.push_back({"layer", "module", "output", "FLOPs", "keeps", "forward ms"});
    if (train) {
        cells.back().push_back("backward ms");
        cells.back().push_back("total ms");
    }
    cells.back().push_back("% of step");
    cells.back().push_back("fwd GFLOP/s");
    const double step = profile.step > 0 ? profile.step : 1;
    double layers = 0;
    for (size_t i : order) {
        const ProfileRow& r = rows[i];
        const double t = r.forward + r.backward;
        layers += t;
        std::vector<std::string> c{r.name,
                                   r.module,
                                   outputText(r.out),
                                   r.flops > 0 ? flopsText(r.flops) : "-",
                                   r.kept > 0    ? bytesText(static_cast<double>(r.kept))
                                   : r.kept == 0 ? "-"
                                                 : "frees",
                                   ms(r.forward)};
        if (train) {
            c.push_back(ms(r.backward));
            c.push_back(ms(t));
        }
        c.push_back(fixed(100 * t / step, 1));
        c.push_back(r.flops > 0 && r.forward > 0 && !r.fused ? fixed(r.flops / r.forward / 1e9, 1) : "-");
        cells.push_back(std::move(c));
    }
    std::vector<size_t> width(cells[0].size(), 0);
    for (const auto& row : cells) {
        for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
    }
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
        std::string line;
        for (size_t k = 0; k < cells[i].size(); ++k) {
            const std::string& s = cells[i][k];
            const std::string pad(width[k] - s.size(), ' ');
            line += k < 3 ? s + pad : pad + s; // names left, numbers right
            if (k + 1 < cells[i].size()) line += "  ";
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out += line + "\n";
        if (i == 0) out += std::string(line.size(), '-') + "\n";
    }
    const double rest = std::max(profile.step - profile.update - layers, 0.0);
    char b[256];
    std::snprintf(b, sizeof b, "\n%s step, median of %d: %s ms", train ? "training" : "inference", profile.steps,
                  ms(profile.step).c_str());
    out += b;
    if (train) {
        std::snprintf(b, sizeof b, " (forward %s, backward %s, update %s)", ms(profile.forward).c_str(),
                      ms(profile.backward).c_str(), ms(profile.update).c_str());
        out += b;
    }
    auto part = [&](const char* what, double t, const char* note) {
        std::snprintf(b, sizeof b, "  %-8s %10s ms %6.1f%%%s\n", what, ms(t).c_str(), 100 * t / step, note);
        out += b;
    };
    out += "\n";
    part("layers", layers, "");
    if (train) part("update", profile.update, "  (the optimizer)");
    part("the rest", rest, "  (graph bookkeeping, sums of gradients: what no layer runs)");
    std::snprintf(b, sizeof b, "the same step without layer timers: %s ms\n", ms(profile.plainStep).c_str());
    out += b;
    out += std::string(train ? "the forward keeps " : "the forward makes ") +
           bytesText(static_cast<double>(std::max<int64_t>(profile.kept, 0))) +
           (train ? " for backward (the layers' outputs and saved tensors)\n" : " (the layers' outputs)\n");
    return out;
}

namespace {
// A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string csvField(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}
} // namespace

std::string profileCsv(const Profile& profile) {
    std::string out = "name,module,output,flops,kept_bytes,forward_ms,backward_ms\n";
    for (const ProfileRow& r : profile.rows) {
        out += csvField(r.name) + "," + csvField(r.module) + "," + csvField(outputText(r.out)) + "," +
               fixed(r.flops, 0) + "," + std::to_string(r.kept) + "," + ms(r.forward) + "," + ms(r.backward) + "\n";
    }
    return out;
}

} // namespace tessera
