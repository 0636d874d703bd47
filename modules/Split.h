#pragma once
/// \file Split: cut a tensor into sections along an axis.

#include "modules/Module.h"

namespace tessera {

/// x: [..., sum(sections), ...] -> [y_0: [..., sections[0], ...], y_1, ...] along `axis`.
/// One output per section (graph slots 0 .. sections.size() - 1).
class Split : public Module {
public:
    Split(int axis, std::vector<int64_t> sections, std::string name = {});

    std::string classname() const override { return "Split"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input whose size along the axis is the sum of the sections.
    void checkDataShape(const Shapes& inShapes) const override;
    size_t outputCount() const override { return sections_.size(); }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int axis_;
    std::vector<int64_t> sections_;
};

} // namespace tessera
