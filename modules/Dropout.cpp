#include "modules/Dropout.h"

#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

Dropout::Dropout(const DropoutOptions& options) : Module(options.name), p_(options.p), gen_(resolveSeed(options.seed)) {
    if (!(p_ >= 0.0f && p_ < 1.0f)) {
        throw ModuleError("Dropout: p must be in [0, 1), got " + std::to_string(p_));
    }
}

// The counters are the ones Backend::dropoutForward would take from the generator, so the
// masks are the same as ever for a seed. At p = 0 train mode is the identity too: no mask is
// drawn (nor numbers taken from the generator).
Tensors Dropout::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    counters_ = Tensor();
    if (!isTrain() || p_ == 0.0f) return {x};
    const uint64_t seed = gen_.seed(), first = gen_.advance(static_cast<uint64_t>(x.numel()));
    std::vector<int32_t> halves;
    for (uint64_t v : {seed, first}) {
        halves.push_back(static_cast<int32_t>(static_cast<uint32_t>(v)));
        halves.push_back(static_cast<int32_t>(static_cast<uint32_t>(v >> 32)));
    }
    counters_ = Tensor::fromVector({4}, halves);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    backendOf(x).dropoutApply(x, p_, seed, first, y);
    return {y};
}

std::pair<uint64_t, uint64_t> Dropout::counters() const {
    const std::vector<int32_t> h = counters_.toVector<int32_t>();
    auto whole = [&](size_t i) {
        return static_cast<uint64_t>(static_cast<uint32_t>(h[i])) |
               static_cast<uint64_t>(static_cast<uint32_t>(h[i + 1])) << 32;
    };
    return {whole(0), whole(2)};
}

Tensors Dropout::updateGrad(const Tensors& grad) {
    const Tensor& dy = grad[0];
    if (!counters_.defined()) return {dy}; // the forward ran in eval mode
    const auto [seed, first] = counters();
    Tensor dx = Tensor::empty(dy.shape(), inData().dtype(), dy.device());
    backendOf(dy).dropoutApply(dy.plain(), p_, seed, first, dx);
    return {dx};
}

Tensor Dropout::mask() const {
    if (!counters_.defined() || inDataList().empty()) return Tensor();
    const auto [seed, first] = counters();
    Tensor m = Tensor::full(inData().shape(), 1.0f, inData().device());
    backendOf(m).dropoutApply(m, p_, seed, first, m);
    return m;
}

std::vector<DType> Dropout::outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const {
    return inDTypes; // its input's (a float32 copy where it does not take the 16-bit type)
}

Blueprint Dropout::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("p", static_cast<double>(p_));
    return bp;
}

MemoryUse Dropout::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                             Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (!train || p_ == 0.0f) use.outputViews[0] = 0; // the output is the input (train: no mask kept)
    return use;
}

} // namespace tessera
