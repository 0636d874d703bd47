#pragma once
/// \file Replicate: one input, n identical outputs.

#include "modules/Module.h"

namespace tessera {

/// x -> [x, x, ..., x] (n handles of the same tensor, no copy); dx = sum of the n gradients.
class Replicate : public Module {
public:
    explicit Replicate(int times, std::string name = {});

    std::string classname() const override { return "Replicate"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override {
        return Shapes(static_cast<size_t>(times_), inShapes[0]);
    }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return {outGradShapes[0]}; }
    /// One input of any shape.
    void checkDataShape(const Shapes& inShapes) const override { requireCount(inShapes, 1, "input"); }
    /// All gradients have the same shape.
    void checkGradShape(const Shapes& outGradShapes) const override;
    size_t outputCount() const override { return static_cast<size_t>(times_); }
    Blueprint blueprint() const override;

    /// Every output is the input itself; the input gradient (their sum) has storage of its own.
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override {
        MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
        use.outputViews.assign(use.outLayouts.size(), 0);
        return use;
    }

protected:
    Tensors updateData(const Tensors& data) override { return Tensors(static_cast<size_t>(times_), data[0]); }
    Tensors updateGrad(const Tensors& grad) override;

private:
    int times_;
};

} // namespace tessera
