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

/// While one is alive (on this thread), initTensor leaves weights as they are: for
/// models built only to check or summarise their shapes, where drawing millions of random
/// numbers would dominate. The global generator is not advanced either.
class ShapeOnlyBuild {
public:
    ShapeOnlyBuild();
    ~ShapeOnlyBuild();
    ShapeOnlyBuild(const ShapeOnlyBuild&) = delete;
    ShapeOnlyBuild& operator=(const ShapeOnlyBuild&) = delete;
};

/// Fill `w` (float32) by `scheme` with the given fans.
void initTensor(const Tensor& w, InitScheme scheme, int64_t fanIn, int64_t fanOut, float wscale = 1.0f);

} // namespace tessera
