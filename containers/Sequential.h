#pragma once
/// \file Sequential: children run one after another.

#include <memory>
#include <mutex>

#include "containers/Container.h"

namespace tessera {

/// y = m_k(... m_1(m_0(x))). Shape checks run through the whole chain, once per set of
/// input shapes (the plan), and a failure names the path to the failing child
/// (`input -> fc1 -> fc2: Linear 'fc2': expects ...`).
class Sequential : public Container {
public:
    explicit Sequential(std::string name = {}) : Container(std::move(name)) {}

    std::string classname() const override { return "Sequential"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    /// Add `mod` at the end; returns *this for chaining.
    Sequential& append(ModulePtr mod);
    /// Add every module of `mods` at the end, in order (all or none).
    Sequential& extend(const std::vector<ModulePtr>& mods);
    /// Insert `mod` before position `pos` (0..size()).
    Sequential& insert(size_t pos, ModulePtr mod);
    /// Remove and return the last module (or the one at `pos`).
    ModulePtr pop();
    ModulePtr pop(size_t pos);

    /// Runs every child's checks in order; the error names the failing child's path.
    void checkDataShape(const Shapes& inShapes) const override;
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Each child in turn, at the shape it receives.
    void optimizeForShape(const Shapes& inShapes, size_t memlimit) override;
    /// The input-gradient shapes for the last plan (throws ModuleError when there is none,
    /// ShapeError when `outGradShapes` are not its output shapes); each child's gradient
    /// checks run at its planned shapes.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// The first child checks the input dtypes.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    size_t outputCount() const override { return children_.empty() ? 1 : children_.back().second->outputCount(); }

    /// The checked shapes of one run: `shapes[i]` feeds child i, `shapes.back()` is the
    /// output. Built by the first shape query or forward at a set of input shapes (every
    /// child's checks, once) and kept until the input shapes, the mode or the structure
    /// change; forwards at the same shapes run the children without re-checking them.
    struct Plan {
        Shapes in;
        bool train = true;
        uint64_t version = 0;
        std::vector<Shapes> shapes;
    };
    /// The plan for `inShapes` (cached). Throws what the failing child throws, prefixed
    /// with the path to it (`input -> fc1 -> fc2: Linear 'fc2': expects ...`). Shape
    /// queries may come from several threads at once: each holds the plan it was given.
    std::shared_ptr<const Plan> planFor(const Shapes& inShapes) const;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;

private:
    std::string pathTo(size_t child) const;
    std::shared_ptr<const Plan> lastPlan() const;
    mutable std::mutex planMutex_;             // guards plan_ (not the children's checks)
    mutable std::shared_ptr<const Plan> plan_; // the last plan built
};

} // namespace tessera
