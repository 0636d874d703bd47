#pragma once
/// \file Dropout: random zeroing in train mode, identity in eval mode.

#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {

struct DropoutOptions {
    float p = 0.5f;    ///< probability of zeroing an element, in [0, 1)
    int64_t seed = -1; ///< -1: drawn from the global generator when built
    std::string name = {};
};

/// x: any shape -> y: same shape. Train mode: y = x * mask with mask = 0 (probability p)
/// or 1 / (1 - p), a fresh mask per forward; dx = dy * mask. Eval mode (and p = 0): y = x, dx = dy.
/// The mask is not kept: backward draws it again from the counters the forward used
/// (Backend::dropoutApply), so dropout holds no memory between forward and backward. On
/// 16-bit activations the backend carries (bfloat16 on the CPU; both types on CUDA under
/// setCuda16BitActivations) it reads and writes their type.
class Dropout : public Module {
public:
    explicit Dropout(const DropoutOptions& options = {});

    std::string classname() const override { return "Dropout"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    float p() const { return p_; }
    /// The generator masks are drawn from (reseed it to replay masks).
    Generator& generator() { return gen_; }
    Generator* randomStream() override { return &gen_; }
    /// The mask of the last train-mode forward, drawn again from its counters (undefined
    /// before one, after an eval-mode one, at p = 0, and once the module's run is released).
    Tensor mask() const;

    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input of any shape.
    void checkDataShape(const Shapes& inShapes) const override { requireCount(inShapes, 1, "input"); }
    bool takes16Bit(const Tensors& data) const override { return backendCarries(data); }
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    Blueprint blueprint() const override;

    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&counters_}; }

private:
    float p_;
    Generator gen_;
    /// The last train-mode forward's counters, Generator::seed and the first of x.numel(),
    /// as 32-bit halves in a host tensor (kept with the module's run state, as a mask
    /// would be); undefined before one and after an eval-mode one.
    Tensor counters_;
    /// Its seed and first counter (counters_ defined).
    std::pair<uint64_t, uint64_t> counters() const;
};

} // namespace tessera
