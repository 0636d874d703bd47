#pragma once
/// \file ToList: passes n inputs through as n outputs. PuzzleLib's ToList.

#include "modules/Module.h"

namespace tessera {

/// x_1 .. x_count (any shapes and dtypes) -> the same tensors (no copies) as outputs
/// 0 .. count - 1; gradients pass back likewise. In a graph it gathers several parents'
/// outputs into one node whose slots name them (a list), as PuzzleLib's ToList turns a
/// module's output into a list.
class ToList : public Module {
public:
    explicit ToList(int64_t count = 1, std::string name = {});
    std::string classname() const override { return "ToList"; }
    size_t outputCount() const override { return static_cast<size_t>(count_); }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// Exactly `count` inputs.
    void checkDataShape(const Shapes& inShapes) const override {
        requireCount(inShapes, static_cast<size_t>(count_), "input");
    }
    void checkDataType(const std::vector<DType>& /*dtypes*/) const override {}
    bool handlesLayouts() const override { return true; }
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override { return data; }
    Tensors updateGrad(const Tensors& grad) override { return grad; }

private:
    int64_t count_;
};

} // namespace tessera
