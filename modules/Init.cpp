#include "modules/Init.h"
#include "backend/Errors.h"

#include <cmath>
#include <stdexcept>

#include "backend/Backend.h"
#include "backend/Random.h"

namespace tessera {

namespace {
constexpr std::pair<InitScheme, const char*> kNames[] = {{InitScheme::none, "none"},
                                                         {InitScheme::xavier, "xavier"},
                                                         {InitScheme::xavierUniform, "xavier_uniform"},
                                                         {InitScheme::xavierNormal, "xavier_normal"},
                                                         {InitScheme::he, "he"},
                                                         {InitScheme::gaussian, "gaussian"},
                                                         {InitScheme::uniform, "uniform"}};
} // namespace

std::string str(InitScheme scheme) {
    for (auto [s, name] : kNames) {
        if (s == scheme) return name;
    }
    return "?";
}

InitScheme initSchemeFromString(const std::string& name) {
    std::string known;
    for (auto [s, n] : kNames) {
        if (name == n) return s;
        known += (known.empty() ? "" : ", ") + std::string(n);
    }
    throw ModuleError("unknown init scheme '" + name + "'; expected one of: " + known);
}

namespace {
thread_local int skipInit = 0;
} // namespace

ShapeOnlyBuild::ShapeOnlyBuild() { ++skipInit; }
ShapeOnlyBuild::~ShapeOnlyBuild() { --skipInit; }

Tensor newWeights(const Shape& shape, InitScheme scheme, int64_t fanIn, int64_t fanOut, float wscale) {
    if (scheme == InitScheme::none) return Tensor::zeros(shape);
    Tensor w = Tensor::empty(shape);
    initTensor(w, scheme, fanIn, fanOut, wscale);
    return w;
}

void initTensor(const Tensor& w, InitScheme scheme, int64_t fanIn, int64_t fanOut, float wscale) {
    if (skipInit) return;
    Backend& be = backendOf(w);
    Generator& gen = globalGenerator();
    const auto fans = static_cast<float>(fanIn + fanOut);
    switch (scheme) {
    case InitScheme::none: be.fill(w, 0.0f); return;
    case InitScheme::xavier:
    case InitScheme::xavierUniform: {
        const float a = wscale * std::sqrt(6.0f / fans);
        be.fillUniform(w, -a, a, gen);
        return;
    }
    case InitScheme::xavierNormal: be.fillNormal(w, 0.0f, wscale * std::sqrt(2.0f / fans), gen); return;
    case InitScheme::he: be.fillNormal(w, 0.0f, wscale * std::sqrt(2.0f / static_cast<float>(fanIn)), gen); return;
    case InitScheme::gaussian: be.fillNormal(w, 0.0f, wscale, gen); return;
    case InitScheme::uniform: be.fillUniform(w, -wscale, wscale, gen); return;
    }
}

} // namespace tessera
