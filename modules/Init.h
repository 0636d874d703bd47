#pragma once
/// \file Parameter initialisation schemes.

#include <cstdint>
#include <string>

#include "backend/Tensor.h"

namespace tessera {

/// How a weight tensor is filled when a module is built. All draw from the global
/// generator (`manualSeed` makes construction reproducible).
enum class InitScheme {
    none,          ///< zeros
    xavier,        ///< = xavierUniform
    xavierUniform, ///< U(-a, a), a = wscale * sqrt(6 / (fanIn + fanOut))
    xavierNormal,  ///< N(0, s^2), s = wscale * sqrt(2 / (fanIn + fanOut))
    he,            ///< N(0, s^2), s = wscale * sqrt(2 / fanIn)
    gaussian,      ///< N(0, wscale^2)
    uniform,       ///< U(-wscale, wscale)
};

std::string str(InitScheme scheme);
/// Inverse of str(); throws ModuleError naming the accepted names.
InitScheme initSchemeFromString(const std::string& name);

/// While one is alive (on this thread), modules built are shape-only: their parameters,
/// gradients and attributes are placeholders without memory (ShapeOnlyTensors) and
/// initTensor draws nothing, so checking a 100-billion-parameter blueprint costs what
/// checking LeNet does. For models built only to check or summarise their shapes; the
/// global generator is not advanced. Running such a model is a ShapeError.
class ShapeOnlyBuild {
public:
    ShapeOnlyBuild();
    ~ShapeOnlyBuild();
    ShapeOnlyBuild(const ShapeOnlyBuild&) = delete;
    ShapeOnlyBuild& operator=(const ShapeOnlyBuild&) = delete;

private:
    ShapeOnlyTensors placeholders_;
};

/// Fill `w` (float32) by `scheme` with the given fans.
void initTensor(const Tensor& w, InitScheme scheme, int64_t fanIn, int64_t fanOut, float wscale = 1.0f);

/// A new float32 tensor of `shape` filled by `scheme`: for `none`, Tensor::zeros (whose
/// fresh pages the CPU need not clear: weights an importer writes next cost no fill).
Tensor newWeights(const Shape& shape, InitScheme scheme, int64_t fanIn, int64_t fanOut, float wscale = 1.0f);

} // namespace tessera
