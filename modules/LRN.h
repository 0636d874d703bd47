#pragma once
/// \file CrossMapLRN and MapLRN: local response normalisation across channels and within
/// each channel.

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

struct LRNOptions {
    int64_t N = 5; ///< window: N channels (CrossMapLRN) or N x N positions (MapLRN); odd
    float alpha = 1e-4f;
    float beta = 0.75f;
    float K = 2.0f;
    std::string name = {};
};

/// x: [N, C, H, W] -> y: same shape, y = x / (K + alpha / n * sum_window x^2)^beta with
/// n = N (across channels) or N^2 (within a channel). Keeps the input's layout.
class LRN : public Module {
public:
    LRN(bool acrossChannels, const LRNOptions& options);
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input [N, C, H, W].
    void checkDataShape(const Shapes& inShapes) const override;
    bool handlesLayouts() const override { return true; }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&workspace_}; }

private:
    LrnParams params_;
    Tensor workspace_;
};

class CrossMapLRN : public LRN {
public:
    explicit CrossMapLRN(const LRNOptions& options = {}) : LRN(true, options) {}
    std::string classname() const override { return "CrossMapLRN"; }
};

class MapLRN : public LRN {
public:
    explicit MapLRN(const LRNOptions& options = {}) : LRN(false, options) {}
    std::string classname() const override { return "MapLRN"; }
};

} // namespace tessera
