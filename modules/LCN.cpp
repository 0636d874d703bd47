#include "modules/LCN.h"

#include "modules/SpatialUtil.h"

namespace tessera {

LCN::LCN(const LCNOptions& options) : Module(options.name), options_(options) {
    if (options.N < 3 || options.N % 2 != 1)
        throw ModuleError("LCN: N must be odd and > 1, got " + std::to_string(options.N));
    if (!(options.K > 0.0f) || !(options.alpha >= 0.0f))
        throw ModuleError("LCN: K must be positive and alpha non-negative");
}

PoolParams LCN::sumPool() const { return spatial::centredWindow(PoolKind::avgWithPad, options_.N); }

PoolParams LCN::meanPool() const {
    return spatial::centredWindow(options_.includePad ? PoolKind::avgWithPad : PoolKind::avgNoPad, options_.N);
}

void LCN::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    if (inShapes[0].rank() != 4) throw shapeError("expects input [N, C, H, W], got " + inShapes[0].str());
}

// With S1, S2 the window sums of x and x^2 over the inside, c the inside count and m the
// mean: sum_j (x_j - m)^2 = S2 - 2 m S1 + c m^2. Each sum is N^2 times a padded average.
Tensors LCN::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    Backend& be = backendOf(x);
    const Shape& s = x.shape();
    const auto area = static_cast<float>(options_.N * options_.N);
    auto empty = [&] { return Tensor::empty(s, DType::float32, x.device()); };
    auto pool = [&](const PoolParams& p, const Tensor& t, float scale) {
        Tensor unused;
        Tensor r = be.poolForward(p, t, s, false, unused).plain();
        if (scale != 1.0f) be.affine(r, scale, 0.0f, r);
        return r;
    };
    Tensor sq = empty();
    be.mul(x, x, sq);
    mean_ = pool(meanPool(), x, 1.0f);
    sum_ = pool(sumPool(), x, area);
    count_ = pool(sumPool(), Tensor::ones(s, x.device()), area);
    const Tensor sum2 = pool(sumPool(), sq, area);
    // spread = S2 - 2 m S1 + c m^2
    Tensor t = empty(), spread = empty();
    be.mul(mean_, sum_, t);
    be.axpbyz(-2.0f, t, 1.0f, sum2, spread);
    be.mul(mean_, mean_, t);
    be.mul(t, count_, t);
    be.axpby(1.0f, t, 1.0f, spread);
    norm_ = empty();
    be.affine(spread, options_.alpha / area, options_.K, norm_);
    Tensor y = empty();
    be.power(norm_, -options_.beta, t);
    be.mul(x, t, y);
    if (!isTrain()) mean_ = sum_ = count_ = norm_ = Tensor(); // kept for backward only in training
    return {y};
}

// dy/dx directly: norm^-beta; through the norm: h = dL/dnorm = -beta g y / norm, and
// d norm = alpha / N^2 (dS2 - 2 m dS1 + (2 c m - 2 S1) dm).
Tensors LCN::updateGrad(const Tensors& grad) {
    if (!norm_.defined()) throw moduleError("backward needs a forward in train mode (it keeps the window statistics)");
    const Tensor& g = grad[0];
    const Tensor& x = inData();
    const Tensor& y = data();
    Backend& be = backendOf(g);
    const Shape& s = x.shape();
    const auto area = static_cast<float>(options_.N * options_.N);
    const float a = options_.alpha / area;
    auto empty = [&] { return Tensor::empty(s, DType::float32, x.device()); };
    auto poolBack = [&](const PoolParams& p, const Tensor& t) {
        return be.poolBackward(p, t, Tensor(), s, Layout::plain).plain();
    };
    Tensor dx = empty(), t = empty(), h = empty();
    be.power(norm_, -options_.beta, t);
    be.mul(g, t, dx);
    // h = -beta g y / norm
    be.mul(g, y, h);
    be.power(norm_, -1.0f, t);
    be.mul(h, t, h);
    be.affine(h, -options_.beta, 0.0f, h);
    // dS2 = a h: back through the padded average (times N^2) and x^2
    be.affine(h, a * area, 0.0f, t);
    Tensor d2 = poolBack(sumPool(), t);
    be.mul(d2, x, d2);
    be.axpby(2.0f, d2, 1.0f, dx);
    // dS1 = -2 a m h
    be.mul(mean_, h, t);
    be.affine(t, -2.0f * a * area, 0.0f, t);
    be.axpby(1.0f, poolBack(sumPool(), t), 1.0f, dx);
    // dm = a (2 c m - 2 S1) h
    Tensor u = empty();
    be.mul(count_, mean_, u);
    be.axpbyz(-2.0f, sum_, 2.0f, u, u);
    be.mul(u, h, u);
    be.affine(u, a, 0.0f, u);
    be.axpby(1.0f, poolBack(meanPool(), u), 1.0f, dx);
    return {dx};
}

MemoryUse LCN::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                         Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (train) use.keptBytes = 4 * backendFor(device).allocationBytes(inShapes[0].numel() * 4);
    return use;
}

Blueprint LCN::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("N", options_.N);
    bp.scheme.emplace_back("alpha", static_cast<double>(options_.alpha));
    bp.scheme.emplace_back("beta", static_cast<double>(options_.beta));
    bp.scheme.emplace_back("K", static_cast<double>(options_.K));
    bp.scheme.emplace_back("includePad", options_.includePad);
    return bp;
}

} // namespace tessera
