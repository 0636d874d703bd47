#pragma once
/// \file Container: a module made of named child modules.

#include <unordered_set>

#include "modules/Module.h"

namespace tessera {

/// Holds child modules by name. Parameters are reported with dotted names
/// (`block1.fc1.W`); train/eval mode and reset reach every descendant.
class Container : public Module {
public:
    using Module::Module;

    /// Number of direct children.
    size_t size() const { return children_.size(); }
    /// The child at `index`; throws ContainerError when out of range.
    Module& operator[](size_t index) const;
    /// A descendant by dotted name (`block1.fc1`); throws ContainerError naming the missing part.
    Module& getByName(const std::string& dottedName) const;
    /// The child at `index` as the pointer the container holds (ContainerError when out of
    /// range).
    const ModulePtr& childPtr(size_t index) const;
    /// The name the child at `index` is known by.
    const std::string& childName(size_t index) const;
    /// Puts `module` where the child `name` is (a head swap: a classifier's last Linear for
    /// one of other classes), under the same name, on the container's device; returns the
    /// child it replaced. The next forward checks the shapes again. ContainerError (GraphError
    /// in a Graph) for an unknown name, a null module, or one that is a child already.
    virtual ModulePtr replace(const std::string& name, ModulePtr module);

    std::vector<std::pair<std::string, Module*>> namedChildren() const override;
    /// Adds the children's blueprints in order.
    Blueprint blueprint() const override;
    /// Children receive whatever layouts their producers made; each converts as it needs.
    bool handlesLayouts() const override { return true; }
    /// Children receive whatever dtypes their producers made; each converts as it needs.
    bool takes16Bit(const Tensors&) const override { return true; }

    /// Whether backward drops what each child kept for it (its inputs, outputs and masks)
    /// once the child's backward has run, as PyTorch frees saved tensors: a training step
    /// then holds the values still to be differentiated, not all of them (a graph's
    /// outputs stay). On by default. A second backward after one forward is then a
    /// ModuleError. Off keeps every child's `data()` readable after backward (PuzzleLib's
    /// way). Sets this container and every container below it.
    void setReleaseInBackward(bool on);
    bool releasesInBackward() const { return releaseInBackward_; }

    /// A number that changes whenever any container anywhere gains or loses a child or a
    /// graph is built: cached plans compare it to know that the structure under them is
    /// the one they checked.
    static uint64_t structureVersion();

protected:
    /// Marks every cached plan stale (see structureVersion).
    static void structureChanged();

    /// Input gradients only: backwardFrom without parameter gradients. Every container
    /// overrides backwardFrom to drive its children.
    Tensors updateGrad(const Tensors& grad) override { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

    /// Insert `mod` at `pos` (0..size()). Named modules keep their name; unnamed ones get
    /// the smallest free number at or after `pos`. Throws ContainerError on a null module,
    /// a duplicate name or a bad position.
    void insertChild(size_t pos, ModulePtr mod, const char* op);
    ModulePtr removeChild(size_t pos, const char* op);

    /// backward's check: throws ModuleError when a backward since the last forward has
    /// released the values (setReleaseInBackward). Then marks this backward's release.
    void beginBackward();
    /// forward's: the values are there again.
    void beginForward() { spent_ = false; }

    std::vector<std::pair<std::string, ModulePtr>> children_;
    bool releaseInBackward_ = true;
    bool spent_ = false; // a releasing backward ran since the last forward
};

/// Parameters that several of `modules` update in one backward (one module listed twice,
/// as when it runs in two graph nodes, or modules given one Variable with setVar) must
/// sum their contributions. Their gradients take `momentum` here, once; the modules
/// returned must then run their backward with momentum 1. Containers call it before
/// their children's backward.
std::unordered_set<const Module*> prepareSharedGrads(const std::vector<const Module*>& modules, float momentum);

} // namespace tessera
