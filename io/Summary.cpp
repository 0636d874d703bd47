#include "io/Summary.h"

#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "containers/Graph.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Attention.h"
#include "modules/ConvND.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "modules/MultiheadAttention.h"
#include "modules/PoolND.h"

namespace tessera {

namespace {

// Multiply-adds count twice for Linear, convolutions, recurrent layers and attention (its
// products and MultiheadAttention's projections); views (Identity, Flatten,
// Reshape) count nothing; other modules count one operation per output element (a rough
// figure for element-wise work); a container counts its children.
double flopsOf(Module& m, const Shapes& in, const Shapes& out) {
    if (const auto* lin = dynamic_cast<const Linear*>(&m)) { // every row of [..., insize]
        return 2.0 * static_cast<double>(in[0].numel() / lin->insize()) * lin->insize() * lin->outsize();
    }
    if (const auto* conv = dynamic_cast<const ConvND*>(&m)) {
        const Shape& w = conv->getVar("W")->data.shape();
        double perOut = 2.0;
        for (size_t d = 1; d < w.rank(); ++d) perOut *= static_cast<double>(w[d]); // C/g (or K/g) * kernel
        const Shape& spatialSide = conv->params().transposed ? in[0] : out[0];
        double positions = static_cast<double>(spatialSide.numel()) / static_cast<double>(spatialSide[1]);
        const int64_t maps = conv->params().transposed ? conv->inmaps() : conv->outmaps();
        return perOut * positions * static_cast<double>(maps);
    }
    const std::string cls = m.classname();
    if (cls == "RNN") { // every weight matrix element: one multiply-add per step and sample
        double weights = 0;
        for (const auto& [name, v] : m.namedParams()) {
            if (name.rfind("weight_", 0) == 0) weights += static_cast<double>(v->data.numel());
        }
        return 2.0 * static_cast<double>(in[0][0] * in[0][1]) * weights;
    }
    // attention: q k^T and P v, 2 Tq Tk (d + dv) per head; with the projections of
    // MultiheadAttention (query, key, value, output), 2 E^2 per row each
    auto attention = [](const Shape& q, const Shape& k, const Shape& v) {
        const size_t r = q.rank();
        const double heads = static_cast<double>(q.numel()) / static_cast<double>(q[r - 2] * q[r - 1]);
        return 2.0 * heads * static_cast<double>(q[r - 2] * k[r - 2] * (q[r - 1] + v[r - 1]));
    };
    if (cls == "ScaledDotProductAttention") return attention(in[0], in[1], in[2]);
    if (const auto* mha = dynamic_cast<const MultiheadAttention*>(&m)) {
        const Shape& q = in[0];
        const Shape& kv = in.size() >= 3 && in[1].rank() == 3 && in[2].rank() == 3 && in[1][2] == q[2] ? in[1] : q;
        const auto E = static_cast<double>(mha->embedDim());
        const auto rowsQ = static_cast<double>(q[0] * q[1]), rowsKV = static_cast<double>(kv[0] * kv[1]);
        const auto S = static_cast<double>(kv[mha->options().batchFirst ? 1 : 0]);
        return 2.0 * E * E * (2.0 * rowsQ + 2.0 * rowsKV) + 4.0 * rowsQ * S * E;
    }
    if (cls == "Identity" || cls == "Flatten" || cls == "Reshape") return 0;
    if (!m.namedChildren().empty()) {
        double sum = 0;
        for (const SummaryRow& r : summarize(m, in)) sum += r.flops;
        return sum;
    }
    double n = 0;
    for (const Shape& s : out) n += static_cast<double>(s.numel());
    return n;
}

std::string dims(const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) s += 'x';
        s += std::to_string(v[i]);
    }
    return s;
}

bool allOnes(const std::vector<int64_t>& v, int64_t value = 1) {
    for (int64_t x : v) {
        if (x != value) return false;
    }
    return true;
}

// "k3x3 s2 p1": kernel, stride, padding (and dilation, groups when not 1); "causal" for
// causal attention.
std::string attributesOf(const Module& m) {
    if (const auto* a = dynamic_cast<const ScaledDotProductAttention*>(&m)) return a->options().causal ? "causal" : "";
    if (const auto* a = dynamic_cast<const MultiheadAttention*>(&m)) return a->options().causal ? "causal" : "";
    std::vector<int64_t> kernel, stride, pad, dilation;
    int64_t groups = 1;
    if (const auto* conv = dynamic_cast<const ConvND*>(&m)) {
        const Shape& w = conv->getVar("W")->data.shape();
        kernel.assign(w.dims().begin() + 2, w.dims().end());
        stride = conv->params().stride;
        pad = conv->params().padLo;
        dilation = conv->params().dilation;
        groups = conv->params().groups;
    } else if (const auto* pool = dynamic_cast<const PoolND*>(&m)) {
        kernel = pool->params().kernel;
        stride = pool->params().stride;
        pad = pool->params().padLo;
    } else {
        return {};
    }
    if (kernel.empty()) return {}; // a global pooling
    std::string s = "k" + dims(kernel) + " s" + (allOnes(stride, stride[0]) ? std::to_string(stride[0]) : dims(stride));
    s += " p" + (allOnes(pad, pad[0]) ? std::to_string(pad[0]) : dims(pad));
    if (!dilation.empty() && !allOnes(dilation)) s += " d" + dims(dilation);
    if (groups != 1) s += " g" + std::to_string(groups);
    return s;
}

// Parameters not counted before (a shared one counts once, in its first row), and the
// elements of the attributes (running statistics: not trained).
void countParams(const Module& m, std::unordered_set<const Variable*>& seen, SummaryRow& r) {
    for (const auto& [name, v] : m.namedParams()) {
        if (seen.insert(v.get()).second) r.trainable += v->data.numel();
    }
    for (const auto& [name, t] : m.namedAttrs()) r.nonTrainable += t.numel();
}

double bytesOf(const Shapes& shapes) {
    double b = 0;
    for (const Shape& s : shapes) b += 4.0 * static_cast<double>(s.numel());
    return b;
}

std::string inputName(size_t k, size_t count) { return count > 1 ? "input:" + std::to_string(k) : "input"; }

} // namespace

std::vector<SummaryRow> summarize(Module& model, const Shapes& inputs, std::vector<SummaryRow>* partial) {
    std::vector<SummaryRow> rows;
    std::unordered_set<const Variable*> seen;
    auto fail = [&]() -> std::vector<SummaryRow> {
        if (partial) *partial = rows;
        model.inferDataShape(inputs);                              // the model's own report of every failing node
        throw ShapeError(model.str() + ": the shapes do not fit"); // not reached when it reports
    };
    if (auto* g = dynamic_cast<Graph*>(&model)) {
        if (inputs.size() != g->inputs().size()) model.inferDataShape(inputs); // its count error
        ShapeMap inmap, shapes;
        std::unordered_map<const Node*, size_t> inputIndex;
        for (size_t i = 0; i < g->inputs().size(); ++i) {
            inmap[g->inputs()[i].get()] = {inputs.at(i)};
            inputIndex[g->inputs()[i].get()] = i;
        }
        std::unordered_set<const Node*> outputs;
        for (const NodePtr& o : g->outputs()) outputs.insert(o.get());
        for (Node* n : g->order()) {
            SummaryRow r;
            try {
                n->dataShapeFrom(inmap, shapes, [&](Node&, const Shapes& s) { r.in = s; });
            } catch (const Error&) {
                return fail();
            }
            r.name = n->name();
            r.module = n->module().classname();
            r.layer = &n->module();
            r.out = shapes.at(n);
            for (const Edge& e : n->bwds()) {
                const size_t outs = e.node->module().outputCount();
                for (int s : e.slots) {
                    r.from.emplace_back(outs > 1 ? e.node->name() + ":" + std::to_string(s) : e.node->name(),
                                        shapes.at(e.node).at(static_cast<size_t>(s)));
                }
            }
            auto in = inputIndex.find(n);
            if (in != inputIndex.end()) {
                r.isInput = true;
                r.from.emplace_back(inputName(in->second, inputs.size()), inputs[in->second]);
            }
            r.isOutput = outputs.count(n) > 0;
            countParams(n->module(), seen, r);
            r.flops = flopsOf(n->module(), r.in, r.out);
            r.activationBytes = bytesOf(r.out);
            r.attributes = attributesOf(n->module());
            rows.push_back(std::move(r));
        }
        return rows;
    }
    if (auto* seq = dynamic_cast<Sequential*>(&model)) {
        Shapes cur = inputs;
        std::string prev = "input";
        const auto children = seq->namedChildren();
        for (size_t i = 0; i < children.size(); ++i) {
            const auto& [name, child] = children[i];
            SummaryRow r;
            r.name = name;
            r.module = child->classname();
            r.layer = child;
            r.in = cur;
            try {
                r.out = child->inferDataShape(cur);
            } catch (const Error&) {
                return fail();
            }
            r.from.emplace_back(prev, cur.at(0));
            r.isInput = i == 0;
            r.isOutput = i + 1 == children.size();
            countParams(*child, seen, r);
            r.flops = flopsOf(*child, cur, r.out);
            r.activationBytes = bytesOf(r.out);
            r.attributes = attributesOf(*child);
            prev = name;
            cur = r.out;
            rows.push_back(std::move(r));
        }
        return rows;
    }
    SummaryRow r;
    r.name = model.name().empty() ? model.classname() : model.name();
    r.module = model.classname();
    r.layer = &model;
    r.in = inputs;
    r.out = model.inferDataShape(inputs);
    for (size_t k = 0; k < inputs.size(); ++k) r.from.emplace_back(inputName(k, inputs.size()), inputs[k]);
    r.isInput = r.isOutput = true;
    countParams(model, seen, r);
    r.flops = flopsOf(model, inputs, r.out);
    r.activationBytes = bytesOf(r.out);
    r.attributes = attributesOf(model);
    rows.push_back(std::move(r));
    return rows;
}

namespace {
// The first `depth` parts of a name; parts are separated by '.' and '_'.
std::string prefixOf(const std::string& name, int depth) {
    int parts = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '.' || name[i] == '_') {
            if (++parts == depth) return name.substr(0, i);
        }
    }
    return name;
}
} // namespace

std::vector<SummaryRow> groupRows(const std::vector<SummaryRow>& rows, int depth, std::vector<size_t>* groupIndex) {
    if (groupIndex) {
        groupIndex->resize(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) (*groupIndex)[i] = i;
    }
    if (depth <= 0) return rows;
    std::vector<SummaryRow> out;
    std::vector<size_t> members; // rows in the current group
    std::unordered_map<std::string, std::string> groupOf;
    auto close = [&]() {
        if (members.empty()) return;
        if (members.size() == 1) {
            out.push_back(rows[members[0]]);
        } else {
            SummaryRow g;
            g.name = prefixOf(rows[members[0]].name, depth);
            g.module = std::to_string(members.size()) + " layers";
            g.in = rows[members.front()].in;
            g.out = rows[members.back()].out;
            for (size_t m : members) {
                const SummaryRow& r = rows[m];
                g.trainable += r.trainable;
                g.nonTrainable += r.nonTrainable;
                g.flops += r.flops;
                g.activationBytes += r.activationBytes;
                g.isInput = g.isInput || r.isInput;
                g.isOutput = g.isOutput || r.isOutput;
                for (const auto& f : r.from) g.from.push_back(f);
            }
            out.push_back(std::move(g));
        }
        for (size_t m : members) {
            groupOf[rows[m].name] = out.back().name;
            if (groupIndex) (*groupIndex)[m] = out.size() - 1;
        }
        members.clear();
    };
    for (size_t i = 0; i < rows.size(); ++i) {
        if (!members.empty() && prefixOf(rows[i].name, depth) != prefixOf(rows[members[0]].name, depth)) close();
        members.push_back(i);
    }
    close();
    // Edges between groups: sources renamed to their group, edges inside a group dropped.
    for (SummaryRow& r : out) {
        std::vector<std::pair<std::string, Shape>> from;
        for (const auto& [src, shape] : r.from) {
            const std::string base = src.substr(0, src.find(':'));
            auto it = groupOf.find(base);
            const std::string name = it == groupOf.end() ? src : (it->second == base ? src : it->second);
            if (name == r.name) continue;
            bool dup = false;
            for (const auto& f : from) dup = dup || (f.first == name && f.second == shape);
            if (!dup) from.emplace_back(name, shape);
        }
        r.from = std::move(from);
    }
    return out;
}

std::string thousands(int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return (n < 0 ? "-" : "") + out;
}

std::string flopsText(double flops) {
    const char* units[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    while (flops >= 1000 && u < 5) {
        flops /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %sFLOPs" : "%.2f %sFLOPs", flops, units[u]);
    return buf;
}

std::string bytesText(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
    return buf;
}

namespace {
std::string clip(const std::string& s, size_t width) { return s.size() <= width ? s : s.substr(0, width - 3) + "..."; }
} // namespace

std::string summaryTable(const std::vector<SummaryRow>& rows, bool connections) {
    std::string out;
    char line[512];
    auto row = [&](const std::string& name, const std::string& module, const std::string& output,
                   const std::string& attrs, const std::string& from, const std::string& trainable,
                   const std::string& buffers, const std::string& flops, const std::string& act) {
        if (connections) {
            std::snprintf(line, sizeof line, "%-28s %-13s %-20s %-12s %-26s %12s %10s %13s %11s\n",
                          clip(name, 28).c_str(), clip(module, 13).c_str(), clip(output, 20).c_str(),
                          clip(attrs, 12).c_str(), clip(from, 26).c_str(), trainable.c_str(), buffers.c_str(),
                          flops.c_str(), act.c_str());
        } else {
            std::snprintf(line, sizeof line, "%-28s %-13s %-20s %-12s %12s %10s %13s %11s\n", clip(name, 28).c_str(),
                          clip(module, 13).c_str(), clip(output, 20).c_str(), clip(attrs, 12).c_str(),
                          trainable.c_str(), buffers.c_str(), flops.c_str(), act.c_str());
        }
        out += line;
    };
    // "buffers": elements that are not trained (batch norm's running statistics), PyTorch's word
    row("layer", "module", "output", "kernel", "connected to", "trainable", "buffers", "FLOPs", "activations");
    int64_t trainable = 0, buffers = 0;
    double flops = 0, act = 0;
    for (const SummaryRow& r : rows) {
        std::string from;
        for (const auto& f : r.from) from += (from.empty() ? "" : ", ") + f.first;
        row(r.name, r.module, str(r.out), r.attributes, from, thousands(r.trainable), thousands(r.nonTrainable),
            r.flops > 0 ? flopsText(r.flops) : "0", bytesText(r.activationBytes));
        trainable += r.trainable;
        buffers += r.nonTrainable;
        flops += r.flops;
        act += r.activationBytes;
    }
    out += "\ntotal: " + thousands(trainable) + " trainable parameters (" + bytesText(4.0 * trainable) + "), " +
           thousands(buffers) + " in buffers (running statistics, not trained); " + flopsText(flops) + " forward; " +
           bytesText(act) + " of activations\n";
    return out;
}

namespace {
std::string dotEscape(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '"' ? std::string("\\\"") : std::string(1, c);
    return out;
}
} // namespace

std::string toDot(const std::vector<SummaryRow>& rows, const std::string& title) {
    std::string dot = "digraph \"" + dotEscape(title) +
                      "\" {\n  rankdir=TB;\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n"
                      "  edge [fontname=\"Helvetica\", fontsize=10];\n";
    std::unordered_set<std::string> inputsDrawn;
    int outputs = 0;
    for (const SummaryRow& r : rows) {
        // A graph input that only passes its data on (an Identity node) is drawn once, as
        // the input's ellipse.
        if (r.isInput && r.module == "Identity" && r.from.size() == 1 && r.out.size() == 1) {
            dot += "  \"" + dotEscape(r.name) + "\" [shape=ellipse, style=filled, fillcolor=\"#dbe8f5\", label=\"" +
                   dotEscape(r.name) + "\\n" + r.out[0].str() + "\"];\n";
        } else {
            std::string label = r.name + "\\n" + r.module;
            if (const auto* act = dynamic_cast<const Activation*>(r.layer)) label += " (" + str(act->kind()) + ")";
            if (!r.attributes.empty()) label += "\\n" + r.attributes;
            if (r.trainable) label += "\\n" + thousands(r.trainable) + " params";
            dot += "  \"" + dotEscape(r.name) + "\" [label=\"" + dotEscape(label) + "\"];\n";
        }
        for (const auto& [src, shape] : r.from) {
            if (src.rfind("input", 0) == 0 && r.isInput) {                  // a model input: an ellipse of its own
                if (r.module == "Identity" && r.from.size() == 1) continue; // drawn above, as the node
                const std::string id = "__" + src + "__" + r.name;
                dot += "  \"" + dotEscape(id) + "\" [shape=ellipse, style=filled, fillcolor=\"#dbe8f5\", label=\"" +
                       dotEscape(r.name) + "\\n" + shape.str() + "\"];\n";
                dot += "  \"" + dotEscape(id) + "\" -> \"" + dotEscape(r.name) + "\";\n";
                inputsDrawn.insert(id);
                continue;
            }
            const std::string base = src.substr(0, src.find(':'));
            dot += "  \"" + dotEscape(base) + "\" -> \"" + dotEscape(r.name) + "\" [label=\"" + shape.str() + "\"];\n";
        }
        if (r.isOutput) {
            for (size_t k = 0; k < r.out.size(); ++k) {
                const std::string id = "__output" + std::to_string(outputs++);
                const std::string what = r.out.size() > 1 ? r.name + ":" + std::to_string(k) : r.name;
                dot += "  \"" + id + "\" [shape=ellipse, style=filled, fillcolor=\"#e3f1dc\", label=\"output " +
                       std::to_string(outputs - 1) + ": " + dotEscape(what) + "\\n" + r.out[k].str() + "\"];\n";
                dot += "  \"" + dotEscape(r.name) + "\" -> \"" + id + "\";\n";
            }
        }
    }
    return dot + "}\n";
}

} // namespace tessera
