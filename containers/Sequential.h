#pragma once
/// \file Sequential: children run one after another.

#include "containers/Container.h"

namespace tessera {

/// y = m_k(... m_1(m_0(x))). Shape checks run through the whole chain and a failure names
/// the path to the failing child (`input -> fc1 -> fc2: Linear 'fc2': expects ...`).
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
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// The first child checks the input dtypes.
    void checkDataType(const std::vector<DType>& dtypes) const override;
    size_t outputCount() const override { return children_.empty() ? 1 : children_.back().second->outputCount(); }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale,
                         float momentum) override;
};

} // namespace tessera
