#pragma once
/// \file Parallel: one module per element of a list.

#include "containers/Container.h"

namespace tessera {

/// [x_0, ..., x_k] -> [m_0(x_0), ..., m_k(x_k)]: child i takes input i (one tensor) and
/// gives one output. Shape errors name the failing child.
class Parallel : public Container {
public:
    explicit Parallel(std::string name = {}) : Container(std::move(name)) {}

    std::string classname() const override { return "Parallel"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    /// Add `mod` as the last branch; returns *this for chaining.
    Parallel& append(ModulePtr mod);

    /// One input per child.
    void checkDataShape(const Shapes& inShapes) const override;
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    size_t outputCount() const override { return children_.size(); }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
};

} // namespace tessera
