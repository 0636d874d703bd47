#include "modules/PositionalEncoding.h"

#include <cmath>

#include "backend/Backend.h"

namespace tessera {

PositionalEncoding::PositionalEncoding(const PositionalEncodingOptions& options)
    : Module(options.name), options_(options) {
    if (!(options.base > 1.0f) || std::isinf(options.base)) {
        throw ModuleError("PositionalEncoding: base must be finite and above 1, got " + std::to_string(options.base));
    }
}

void PositionalEncoding::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() < 2) throw shapeError("expects input [..., T, D], got " + inShapes[0].str());
}

Tensor PositionalEncoding::table(int64_t T, int64_t D, float base) {
    std::vector<float> pe(static_cast<size_t>(T * D));
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < D; ++c) {
            const double angle =
                static_cast<double>(t) / std::pow(static_cast<double>(base), static_cast<double>(c - c % 2) / D);
            pe[static_cast<size_t>(t * D + c)] = static_cast<float>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
        }
    }
    return Tensor::fromVector({T, D}, pe);
}

Tensors PositionalEncoding::updateData(const Tensors& data) {
    const Tensor x = data[0].plain();
    const Shape& s = x.shape();
    const int64_t T = s[s.rank() - 2], D = s[s.rank() - 1];
    if (!table_.defined() || table_.shape() != Shape{T, D} || table_.device() != x.device()) {
        table_ = table(T, D, options_.base).to(x.device());
    }
    Tensor y = Tensor::empty(s, DType::float32, x.device());
    backendOf(x).binaryBroadcast(BinaryOp::add, x, table_, y);
    return {y};
}

MemoryUse PositionalEncoding::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                        Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    use.gradViews = {0}; // dx is dy
    return use;
}

Blueprint PositionalEncoding::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("base", static_cast<double>(options_.base));
    return bp;
}

} // namespace tessera
