#pragma once
/// \file Glue: a layer made of user-supplied functions, so a user adds a layer without
/// subclassing Module or touching the library. PuzzleLib's Glue.

#include <functional>

#include "modules/Module.h"

namespace tessera {

class Glue;

/// What a Glue layer does. `shapes` and `forward` are required; without `backward` the
/// layer has no input gradient (backward throws ModuleError). Inside the functions,
/// `self.inDataList()` and `self.dataList()` are the last forward's inputs and outputs and
/// `self.getVar(name)` its parameters.
struct GlueSpec {
    /// How many outputs (graph slots) it has.
    size_t outputs = 1;
    /// Output shapes for input shapes; throws ShapeError (say what it expects and what it
    /// got) for inputs it does not take. The layer's whole shape check.
    std::function<Shapes(const Shapes& inShapes)> shapes;
    /// Outputs (float32, the shapes `shapes` gives) from float32 inputs.
    std::function<Tensors(Glue& self, const Tensors& inputs)> forward;
    /// Input gradients (one per input, each the input's shape) from output gradients.
    std::function<Tensors(Glue& self, const Tensors& grads)> backward;
    /// Parameter gradients: var->grad = scale * (d loss / d var) + momentum * var->grad.
    std::function<void(Glue& self, const Tensors& grads, float scale, float momentum)> paramGrads;
    /// Parameters, created with the layer: name -> initial value (copied).
    std::vector<std::pair<std::string, Tensor>> params;
};

/// Makes `kind` known to blueprints and model files: a Glue blueprint names its kind, and
/// the factory rebuilds it with `make`. Registering a kind again replaces it.
void registerGlue(const std::string& kind, std::function<GlueSpec()> make);
/// True when `kind` is registered.
bool isGlueRegistered(const std::string& kind);

/// A layer from a GlueSpec. Its blueprint is {"classname": "Glue", "scheme": {"kind": ...}}:
/// rebuilding it needs the kind registered (ModuleError naming it otherwise). The outputs'
/// shapes and dtypes, and the gradients' count and shapes, are checked after each call:
/// a function that breaks its contract is a ModuleError naming the layer.
class Glue : public Module {
public:
    /// The registered kind's spec (ModuleError when `kind` is not registered).
    explicit Glue(const std::string& kind, std::string name = {});
    Glue(const std::string& kind, GlueSpec spec, std::string name = {});

    std::string classname() const override { return "Glue"; }
    const std::string& kind() const { return kind_; }
    size_t outputCount() const override { return spec_.outputs; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;

private:
    std::string kind_;
    GlueSpec spec_;
};

} // namespace tessera
