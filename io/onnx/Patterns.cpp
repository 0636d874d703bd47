#include "io/onnx/Importer.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "backend/ElementMath.h"
#include "backend/Errors.h"
#include "containers/Parallel.h"
#include "containers/Sequential.h"
#include "modules/Activation.h"
#include "modules/Add.h"
#include "modules/BatchNormND.h"
#include "modules/Concat.h"
#include "modules/Conv.h"
#include "modules/Deconv.h"
#include "modules/Dropout.h"
#include "modules/Embedder.h"
#include "modules/Flatten.h"
#include "modules/Gelu.h"
#include "modules/Identity.h"
#include "modules/Init.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"
#include "modules/Linear.h"
#include "modules/MulAddConst.h"
#include "modules/PRelu.h"
#include "modules/Pad.h"
#include "modules/Pool.h"
#include "modules/PoolND.h"
#include "modules/RNN.h"
#include "modules/Reduce.h"
#include "modules/Reshape.h"
#include "modules/Slice.h"
#include "modules/SoftMax.h"
#include "modules/SpatialTf.h"
#include "modules/Split.h"
#include "modules/Tile.h"
#include "modules/Transpose.h"
#include "modules/Upsample.h"

namespace tessera::onnx_io {

void Importer::findGelus() {
    const onnx::GraphProto& g = model_.graph();
    std::unordered_map<std::string, float> scalars; // float scalar constants by name
    auto note = [&](const std::string& name, const onnx::TensorProto& t) {
        if (t.data_type() != onnx::TensorProto::FLOAT) return;
        try {
            const Constant c = constantOf(t, name);
            if (c.tensor.numel() == 1) scalars[name] = c.tensor.toVector<float>()[0];
        } catch (const Error&) {}
    };
    for (const onnx::TensorProto& t : g.initializer()) {
        if (shapeOf(t).numel() == 1) note(t.name(), t);
    }
    std::unordered_map<std::string, int> producer;
    std::unordered_map<std::string, std::vector<int>> consumers;
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& n = g.node(i);
        if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value")
            note(n.output(0), n.attribute(0).t());
        for (const std::string& o : n.output()) producer[o] = i;
        for (const std::string& in : n.input()) consumers[in].push_back(i);
    }
    auto near = [](float a, float b) { return std::fabs(a - b) <= 1e-3f * std::fabs(b); };
    // The one consumer of `value`, when it is a binary `op` with `value` and another input.
    auto only = [&](const std::string& value, const char* op, std::string* other) -> int {
        auto c = consumers.find(value);
        if (c == consumers.end() || c->second.size() != 1) return -1;
        const onnx::NodeProto& n = g.node(c->second[0]);
        if (n.op_type() != op || n.input_size() != 2) return -1;
        *other = n.input(0) == value ? n.input(1) : n.input(0);
        return c->second[0];
    };
    auto scalar = [&](const std::string& name, float want) {
        auto it = scalars.find(name);
        return it != scalars.end() && near(it->second, want);
    };
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& erf = g.node(i);
        if (erf.op_type() != "Erf" || erf.input_size() != 1) continue;
        auto p = producer.find(erf.input(0));
        if (p == producer.end()) continue;
        const onnx::NodeProto& scale = g.node(p->second);
        if (scale.input_size() != 2 || consumers[scale.output(0)].size() != 1) continue;
        std::string x;
        if (scale.op_type() == "Div" && scalar(scale.input(1), 1.41421356f)) x = scale.input(0);
        if (scale.op_type() == "Mul" && scalar(scale.input(1), 0.70710678f)) x = scale.input(0);
        if (scale.op_type() == "Mul" && scalar(scale.input(0), 0.70710678f)) x = scale.input(1);
        if (x.empty()) continue;
        std::string one, other, half;
        const int add = only(erf.output(0), "Add", &one);
        if (add < 0 || !scalar(one, 1.0f)) continue;
        const int mul = only(g.node(add).output(0), "Mul", &other);
        if (mul < 0) continue;
        std::vector<int> nodes{p->second, i, add, mul};
        int last = mul;
        if (other == x) { // x (1 + erf), then times 0.5
            const int m2 = only(g.node(mul).output(0), "Mul", &half);
            if (m2 < 0 || !scalar(half, 0.5f)) continue;
            nodes.push_back(m2);
            last = m2;
        } else { // (0.5 x) (1 + erf)
            auto h = producer.find(other);
            if (h == producer.end()) continue;
            const onnx::NodeProto& hn = g.node(h->second);
            if (hn.op_type() != "Mul" || hn.input_size() != 2 || consumers[other].size() != 1) continue;
            const bool ok =
                (hn.input(0) == x && scalar(hn.input(1), 0.5f)) || (hn.input(1) == x && scalar(hn.input(0), 0.5f));
            if (!ok) continue;
            nodes.push_back(h->second);
        }
        for (int k : nodes) {
            if (k != last) absorbed_[k] = last;
        }
        gelus_[last] = x;
    }
}

void Importer::findSpatialTfs() {
    const onnx::GraphProto& g = model_.graph();
    std::unordered_map<std::string, int> producer;
    std::unordered_map<std::string, int> uses;
    std::unordered_map<std::string, const onnx::TensorProto*> constantNodes;
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& n = g.node(i);
        for (const std::string& o : n.output()) producer[o] = i;
        for (const std::string& in : n.input()) ++uses[in];
        if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value")
            constantNodes[n.output(0)] = &n.attribute(0).t();
    }
    for (const onnx::ValueInfoProto& v : g.output()) ++uses[v.name()];
    auto constant = [&](const std::string& name) -> std::optional<Constant> {
        if (auto c = constants_.find(name); c != constants_.end()) return c->second;
        if (auto c = constantNodes.find(name); c != constantNodes.end()) return constantOf(*c->second, name);
        return std::nullopt;
    };
    // The node producing `value` when it has op `op` and `value` has no other use.
    auto from = [&](const std::string& value, const char* op) -> const onnx::NodeProto* {
        auto p = producer.find(value);
        if (p == producer.end() || uses[value] != 1 || g.node(p->second).op_type() != op) return nullptr;
        return &g.node(p->second);
    };
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& gs = g.node(i);
        if (gs.op_type() != "GridSample" || gs.input_size() != 2) continue;
        const Attributes a(gs);
        const std::string mode = a.s("mode", "bilinear");
        if ((mode != "bilinear" && mode != "linear") || a.s("padding_mode", "zeros") != "zeros" ||
            a.i("align_corners", 0) != 1)
            continue;
        const onnx::NodeProto* reshape = from(gs.input(1), "Reshape");
        if (!reshape || reshape->input_size() != 2) continue;
        const std::optional<Constant> to = constant(reshape->input(1));
        if (!to || !to->isInt || to->ints.size() != 4 || to->ints[3] != 2) continue;
        const int64_t Ho = to->ints[1], Wo = to->ints[2];
        if (Ho < 1 || Wo < 1) continue;
        const onnx::NodeProto* matmul = from(reshape->input(0), "MatMul");
        if (!matmul || matmul->input_size() != 2) continue;
        const onnx::NodeProto* transpose = from(matmul->input(1), "Transpose");
        if (!transpose || Attributes(*transpose).ints("perm") != std::vector<int64_t>{0, 2, 1}) continue;
        const std::optional<Constant> base = constant(matmul->input(0));
        if (!base || base->isInt || base->tensor.numel() != Ho * Wo * 3 || base->dims.size() < 2 ||
            base->dims.back() != 3)
            continue;
        const std::vector<float> b = base->tensor.toVector<float>();
        bool grid = true;
        for (int64_t r = 0; r < Ho && grid; ++r) {
            for (int64_t c = 0; c < Wo && grid; ++c) {
                const float* row = &b[static_cast<size_t>((r * Wo + c) * 3)];
                grid = std::fabs(row[0] - element::gridCoord(c, Wo)) <= 1e-6f &&
                       std::fabs(row[1] - element::gridCoord(r, Ho)) <= 1e-6f && row[2] == 1.0f;
            }
        }
        if (!grid) continue;
        spatialTfs_[i] = {{gs.input(0), transpose->input(0)}, Ho, Wo};
        for (const onnx::NodeProto* n : {reshape, matmul, transpose}) absorbed_[producer[n->output(0)]] = i;
    }
}

} // namespace tessera::onnx_io
