#include "modules/NoiseInjector.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

NoiseInjector::NoiseInjector(const NoiseInjectorOptions& options)
    : Module(options.name), options_(options), gen_(resolveSeed(options.seed)) {
    if (options.noisetype == NoiseType::uniform && !(options.param1 < options.param2)) {
        throw ModuleError("NoiseInjector: uniform noise needs low < high");
    }
    if (options.noisetype == NoiseType::gaussian && !(options.param2 >= 0.0f)) {
        throw ModuleError("NoiseInjector: gaussian noise needs a standard deviation >= 0");
    }
}

Tensors NoiseInjector::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    if (!isTrain()) {
        noise_ = Tensor();
        return {x};
    }
    Backend& be = backendOf(x);
    noise_ = Tensor::empty(x.shape(), DType::float32, x.device());
    if (options_.noisetype == NoiseType::uniform) {
        be.fillUniform(noise_, options_.param1, options_.param2, gen_);
    } else {
        be.fillNormal(noise_, options_.param1, options_.param2, gen_);
    }
    Tensor y = Tensor::empty(x.shape(), DType::float32, x.device());
    if (options_.mode == NoiseMode::add) {
        be.copy(noise_, y);
        be.axpby(1.0f, x, 1.0f, y);
    } else {
        be.mul(x, noise_, y);
    }
    return {y};
}

Tensors NoiseInjector::updateGrad(const Tensors& grad) {
    if (!noise_.defined() || options_.mode == NoiseMode::add) return {grad[0]};
    Tensor dx = Tensor::empty(grad[0].shape(), DType::float32, grad[0].device());
    backendOf(dx).mul(grad[0], noise_, dx);
    return {dx};
}

Blueprint NoiseInjector::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("mode", std::string(options_.mode == NoiseMode::add ? "add" : "mul"));
    bp.scheme.emplace_back("noisetype", std::string(options_.noisetype == NoiseType::uniform ? "uniform" : "gaussian"));
    bp.scheme.emplace_back("params", std::vector<double>{options_.param1, options_.param2});
    return bp;
}

} // namespace tessera
