#pragma once
/// \file NoiseInjector: random noise added to or multiplied into the data in train mode.

#include "backend/Random.h"
#include "modules/Module.h"

namespace tessera {

enum class NoiseMode { add, mul };
enum class NoiseType { uniform, gaussian };

struct NoiseInjectorOptions {
    NoiseMode mode = NoiseMode::add;
    NoiseType noisetype = NoiseType::uniform;
    float param1 = 0.0f; ///< uniform: low; gaussian: mean
    float param2 = 1.0f; ///< uniform: high; gaussian: standard deviation
    int64_t seed = -1;
    std::string name = {};
};

/// x: any shape -> y: same shape. Train mode: y = x + noise (add) or x * noise (mul), a
/// fresh noise tensor per forward; dx = dy (add) or dy * noise (mul). Eval mode: y = x.
class NoiseInjector : public Module {
public:
    explicit NoiseInjector(const NoiseInjectorOptions& options = {});
    std::string classname() const override { return "NoiseInjector"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Generator& generator() { return gen_; }
    Generator* randomStream() override { return &gen_; }
    /// The noise of the last train-mode forward.
    const Tensor& noise() const { return noise_; }
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    void checkDataShape(const Shapes& inShapes) const override { requireCount(inShapes, 1, "input"); }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&noise_}; }

private:
    NoiseInjectorOptions options_;
    Generator gen_;
    Tensor noise_;
};

} // namespace tessera
