#include "modules/Glue.h"

#include <map>
#include <mutex>

namespace tessera {

namespace {
struct Registry {
    std::mutex mutex;
    std::map<std::string, std::function<GlueSpec()>> makers;
};
Registry& registry() {
    static Registry r;
    return r;
}

GlueSpec specOf(const std::string& kind) {
    std::function<GlueSpec()> make;
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.makers.find(kind);
        if (it == r.makers.end()) {
            std::string known;
            for (const auto& [k, m] : r.makers) known += (known.empty() ? "" : ", ") + k;
            throw ModuleError("Glue kind '" + kind +
                              "' is not registered (registerGlue it before building or loading; " +
                              "registered: " + (known.empty() ? "none" : known) + ")");
        }
        make = it->second;
    }
    return make(); // outside the lock: a maker may take other locks (Python's GIL)
}
} // namespace

void registerGlue(const std::string& kind, std::function<GlueSpec()> make) {
    if (kind.empty() || !make) throw ModuleError("registerGlue: a kind name and a function are required");
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.makers[kind] = std::move(make);
}

bool isGlueRegistered(const std::string& kind) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    return r.makers.count(kind) > 0;
}

Glue::Glue(const std::string& kind, std::string name) : Glue(kind, specOf(kind), std::move(name)) {}

Glue::Glue(const std::string& kind, GlueSpec spec, std::string name)
    : Module(std::move(name)), kind_(kind), spec_(std::move(spec)) {
    if (kind_.empty()) throw ModuleError("Glue: a kind name is required");
    if (!spec_.shapes || !spec_.forward) throw ModuleError("Glue '" + kind_ + "': shapes and forward are required");
    if (spec_.outputs < 1) throw ModuleError("Glue '" + kind_ + "': at least one output");
    for (const auto& [n, t] : spec_.params) setVar(n, Variable::of(t.clone()));
}

void Glue::checkDataShape(const Shapes& inShapes) const {
    if (inShapes.empty()) throw shapeError("expects at least one input tensor, got none");
    try {
        const Shapes out = spec_.shapes(inShapes);
        if (out.size() != spec_.outputs) {
            throw moduleError("its shape function gives " + std::to_string(out.size()) + " shapes for " +
                              std::to_string(spec_.outputs) + " outputs");
        }
    } catch (const ShapeError& e) {
        throw shapeError(e.what());
    }
}

Shapes Glue::dataShapeFrom(const Shapes& inShapes) const { return spec_.shapes(inShapes); }

Shapes Glue::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors Glue::updateData(const Tensors& data) {
    Tensors out = spec_.forward(*this, data);
    const Shapes want = spec_.shapes(shapesOf(data));
    if (out.size() != want.size()) {
        throw moduleError("forward returned " + std::to_string(out.size()) + " outputs, its shape function says " +
                          std::to_string(want.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
        if (!out[i].defined() || out[i].shape() != want[i] || out[i].dtype() != DType::float32) {
            throw moduleError(
                "forward's output " + std::to_string(i) + " is " +
                (out[i].defined() ? tessera::str(out[i].dtype()) + " " + out[i].shape().str() : "undefined") +
                ", expected float32 " + want[i].str());
        }
    }
    return out;
}

Tensors Glue::updateGrad(const Tensors& grad) {
    if (!spec_.backward) throw moduleError("has no backward function: its inputs get no gradient");
    Tensors dx = spec_.backward(*this, grad);
    const Tensors& in = inDataList();
    if (dx.size() != in.size()) {
        throw moduleError("backward returned " + std::to_string(dx.size()) + " input gradients for " +
                          std::to_string(in.size()) + " inputs");
    }
    for (size_t i = 0; i < dx.size(); ++i) {
        if (dx[i].defined() && dx[i].shape() != in[i].shape()) {
            throw moduleError("backward's gradient " + std::to_string(i) + " is " + dx[i].shape().str() + ", input " +
                              std::to_string(i) + " is " + in[i].shape().str());
        }
    }
    return dx;
}

void Glue::accGradParams(const Tensors& grad, float scale, float momentum) {
    if (spec_.paramGrads) spec_.paramGrads(*this, grad, scale, momentum);
}

Blueprint Glue::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("kind", kind_);
    return bp;
}

} // namespace tessera
