#include "modules/GridSample.h"

#include "backend/Backend.h"

namespace tessera {

GridSampleMode gridSampleModeFromString(const std::string& s) {
    if (s == "bilinear" || s == "linear") return GridSampleMode::bilinear;
    if (s == "nearest") return GridSampleMode::nearest;
    if (s == "bicubic" || s == "cubic") return GridSampleMode::bicubic;
    throw ModuleError("GridSample: unknown mode '" + s + "' (expected bilinear, nearest or bicubic)");
}

std::string str(GridSampleMode m) {
    switch (m) {
    case GridSampleMode::bilinear: return "bilinear";
    case GridSampleMode::nearest: return "nearest";
    case GridSampleMode::bicubic: return "bicubic";
    }
    return "?";
}

GridPadding gridPaddingFromString(const std::string& s) {
    if (s == "zeros") return GridPadding::zeros;
    if (s == "border") return GridPadding::border;
    if (s == "reflection") return GridPadding::reflection;
    throw ModuleError("GridSample: unknown padding '" + s + "' (expected zeros, border or reflection)");
}

std::string str(GridPadding p) {
    switch (p) {
    case GridPadding::zeros: return "zeros";
    case GridPadding::border: return "border";
    case GridPadding::reflection: return "reflection";
    }
    return "?";
}

namespace {
constexpr float kCubicA = -0.75f; // Keys' kernel, as PyTorch's bicubic

// One axis's share of a tap: the pixel it reads along the axis (`at`, a whole number in
// [0, size)), its weight (0 where zeros padding leaves the tap outside the image) and the
// weight's derivative by the grid coordinate (undefined when no gradient is wanted).
struct Tap {
    Tensor at, w, dw;
};

// Element-wise math on [N, P] float32 tensors of one device, each result a new tensor.
class AxisMath {
public:
    explicit AxisMath(const Tensor& like) : be_(backendOf(like)), shape_(like.shape()), dev_(like.device()) {}
    Tensor make() const { return Tensor::empty(shape_, DType::float32, dev_); }
    Tensor full(float v) const { return Tensor::full(shape_, v, dev_); }
    Tensor affine(const Tensor& x, float a, float b) const {
        Tensor y = make();
        be_.affine(x, a, b, y);
        return y;
    }
    Tensor mul(const Tensor& a, const Tensor& b) const {
        Tensor y = make();
        be_.mul(a, b, y);
        return y;
    }
    // a * x + y
    Tensor axpy(float a, const Tensor& x, const Tensor& y) const {
        Tensor z = make();
        be_.axpbyz(a, x, 1.0f, y, z);
        return z;
    }
    Tensor clip(const Tensor& x, float lo, float hi) const {
        Tensor y = make();
        be_.activationForward(ActivationParams{ActivationKind::clip, lo, hi}, x, y);
        return y;
    }
    // 1 where clip(x, lo, hi) follows x, 0 where it holds x at a bound: the clip's derivative.
    Tensor clipSlope(const Tensor& x, float lo, float hi) const {
        Tensor y = make(), d = make();
        const ActivationParams p{ActivationKind::clip, lo, hi};
        be_.activationForward(p, x, y);
        be_.activationBackward(p, x, y, full(1.0f), d);
        return d;
    }
    // 1 where x > 0, else 0: x scaled past 1 (by 2^149 in two steps), clipped to [0, 1].
    Tensor step(const Tensor& x) const {
        Tensor y = affine(x, 0x1p127f, 0.0f);
        be_.affine(y, 0x1p22f, 0.0f, y);
        be_.activationForward(ActivationParams{ActivationKind::clip, 0.0f, 1.0f}, y, y);
        return y;
    }
    // Rounded toward zero (|x| below 2^31).
    Tensor trunc(const Tensor& x) const {
        Tensor i = Tensor::empty(shape_, DType::int32, dev_), y = make();
        be_.cast(x, i);
        be_.cast(i, y);
        return y;
    }
    // The whole number at or below x (|x| below 2^31): the truncation, less 1 where it is above x.
    Tensor floor(const Tensor& x) const {
        const Tensor t = trunc(x);
        return axpy(-1.0f, step(axpy(-1.0f, x, t)), t);
    }
    // To the nearest whole number, halves to the even one (|x| below 2^22): float32's own
    // rounding of x + 1.5 * 2^23.
    Tensor rint(const Tensor& x) const {
        Tensor y = affine(x, 1.0f, 0x1.8p23f);
        be_.affine(y, 1.0f, -0x1.8p23f, y);
        return y;
    }
    // 1 where a whole number k lies in [0, size), else 0.
    Tensor inside(const Tensor& k, int64_t size) const {
        return mul(clip(affine(k, 1.0f, 1.0f), 0.0f, 1.0f),
                   clip(affine(k, -1.0f, static_cast<float>(size)), 0.0f, 1.0f));
    }
    Tensor abs(const Tensor& x) const {
        Tensor y = make();
        be_.activationForward(ActivationParams{ActivationKind::abs}, x, y);
        return y;
    }
    // The sign of x (0 at 0): |x|'s derivative.
    Tensor sign(const Tensor& x) const {
        Tensor y = abs(x), d = make();
        be_.activationBackward(ActivationParams{ActivationKind::abs}, x, y, full(1.0f), d);
        return d;
    }
    Tensor divide(const Tensor& x, float by) const {
        Tensor y = make();
        be_.binaryBroadcast(BinaryOp::div, x, Tensor::full({1}, by, dev_), y);
        return y;
    }
    // x mirrored into [low, high] (PyTorch's reflect_coordinates, with twice the bounds given
    // as whole numbers) and, when `slope` is given, the mirror's derivative (+-1) into it.
    Tensor reflect(const Tensor& x, int64_t twiceLow, int64_t twiceHigh, Tensor* slope) const {
        if (twiceLow == twiceHigh) {
            if (slope) *slope = full(0.0f);
            return full(0.0f);
        }
        const float low = static_cast<float>(twiceLow) / 2, span = static_cast<float>(twiceHigh - twiceLow) / 2;
        const Tensor u = affine(x, 1.0f, -low);
        const Tensor a = clip(abs(u), 0.0f, 0x1p22f);
        const Tensor flips = trunc(divide(a, span));
        const Tensor extra = axpy(-span, flips, a);
        // odd = flips - 2 * trunc(flips / 2): 1 where the mirror flipped an odd number of times
        const Tensor odd = axpy(-2.0f, trunc(affine(flips, 0.5f, 0.0f)), flips);
        // extra + low, or span - extra + low where odd
        Tensor y = axpy(1.0f, mul(affine(extra, -2.0f, span), odd), extra);
        be_.affine(y, 1.0f, low, y);
        if (slope) *slope = mul(sign(u), affine(odd, -2.0f, 1.0f));
        return y;
    }

private:
    Backend& be_;
    Shape shape_;
    Device dev_;
};

// The taps along one axis of `size` pixels for grid coordinates g [N, P].
std::vector<Tap> axisTaps(const GridSampleOptions& o, const Tensor& g, int64_t size, bool withGrad) {
    const AxisMath m(g);
    const float s = static_cast<float>(size);
    // pixel coordinate i = a * g + b: -1 and 1 are the corner pixels' centres or the outer edges
    const float a = o.alignCorners ? (s - 1) / 2 : s / 2, b = (s - 1) / 2;
    Tensor i = m.affine(g, a, b);
    // the mirror's bounds, doubled: at the corner centres, or half a pixel outside them
    const int64_t twiceLow = o.alignCorners ? 0 : -1, twiceHigh = o.alignCorners ? 2 * (size - 1) : 2 * size - 1;
    // d i / d g
    Tensor di;
    if (o.mode == GridSampleMode::bicubic) {
        // the padding applies to each tap's pixel below; outside [-3, size + 2] (zeros, border)
        // every tap reads what the bound's taps read, and the weights' derivatives sum to 0
        i = o.padding == GridPadding::reflection ? m.clip(i, -0x1p22f, 0x1p22f) : m.clip(i, -3.0f, s + 2);
        const Tensor f = m.floor(i), t = m.axpy(-1.0f, f, i);
        // Keys' kernel at distance x: 1 - (a + 3) x^2 + (a + 2) x^3 within 1, 4a (-1 + 2x - 1.25 x^2 + 0.25 x^3)
        // from 1 to 2; Horner's scheme through the backend's affine and mul
        const float A = kCubicA;
        auto cubic = [&](const Tensor& x, float c3, float c2, float c1, float c0) {
            Tensor r = m.affine(x, c3, c2);
            r = m.affine(m.mul(r, x), 1.0f, c1);
            return m.affine(m.mul(r, x), 1.0f, c0);
        };
        auto quadratic = [&](const Tensor& x, float c2, float c1, float c0) {
            return m.affine(m.mul(m.affine(x, c2, c1), x), 1.0f, c0);
        };
        std::vector<Tap> taps;
        for (int j = 0; j < 4; ++j) {
            // distance from the tap (f - 1 + j) to i: t + 1, t, 1 - t, 2 - t
            const float sign = j < 2 ? 1.0f : -1.0f, offset = j == 0 ? 1.0f : j == 1 ? 0.0f : static_cast<float>(j - 1);
            const Tensor x = m.affine(t, sign, offset);
            const bool near = j == 1 || j == 2;
            Tensor w = near ? cubic(x, A + 2, -(A + 3), 0.0f, 1.0f) : cubic(x, A, -5 * A, 8 * A, -4 * A);
            Tensor dw;
            if (withGrad) {
                dw = near ? quadratic(x, 3 * (A + 2), -2 * (A + 3), 0.0f) : quadratic(x, 3 * A, -10 * A, 8 * A);
                dw = m.affine(dw, sign * a, 0.0f); // d x / d t = sign, d t / d g = a
            }
            Tensor k = m.affine(f, 1.0f, static_cast<float>(j - 1));
            if (o.padding == GridPadding::zeros) {
                const Tensor in = m.inside(k, size);
                w = m.mul(w, in);
                if (withGrad) dw = m.mul(dw, in);
            } else if (o.padding == GridPadding::reflection) {
                k = m.reflect(k, twiceLow, twiceHigh, nullptr);
            }
            taps.push_back({m.clip(k, 0.0f, s - 1), w, dw});
        }
        return taps;
    }
    if (o.padding == GridPadding::zeros) {
        if (withGrad) di = m.full(a);
    } else {
        Tensor slope;
        if (o.padding == GridPadding::reflection) i = m.reflect(i, twiceLow, twiceHigh, withGrad ? &slope : nullptr);
        if (withGrad) {
            const Tensor held = m.clipSlope(i, 0.0f, s - 1);
            di = m.affine(slope.defined() ? m.mul(slope, held) : held, a, 0.0f);
        }
        i = m.clip(i, 0.0f, s - 1);
    }
    // outside [-2, size + 1] every tap is outside the image: nothing is read there
    i = m.clip(i, -2.0f, s + 1);
    if (o.mode == GridSampleMode::nearest) {
        const Tensor k = m.rint(i);
        return {{m.clip(k, 0.0f, s - 1), m.inside(k, size), Tensor()}};
    }
    const Tensor f = m.floor(i), t = m.axpy(-1.0f, f, i);
    const Tensor k1 = m.affine(f, 1.0f, 1.0f);
    const Tensor in0 = m.inside(f, size), in1 = m.inside(k1, size);
    Tap t0{m.clip(f, 0.0f, s - 1), m.mul(m.affine(t, -1.0f, 1.0f), in0), Tensor()};
    Tap t1{m.clip(k1, 0.0f, s - 1), m.mul(t, in1), Tensor()};
    if (withGrad) {
        t0.dw = m.mul(m.affine(di, -1.0f, 0.0f), in0);
        t1.dw = m.mul(di, in1);
    }
    return {t0, t1};
}

// What forward and backward share: the taps of both axes, and each pair's positions into x
// as [N * C, Ho * Wo, 1] (x seen as [N * C, H * W, 1]) and weight [N, 1, Ho * Wo].
struct Sampling {
    int64_t n = 0, c = 0, h = 0, w = 0, p = 0;
    std::vector<Tap> ys, xs;

    Sampling(const GridSampleOptions& o, const Shape& x, const Tensor& grid, bool withGrad)
        : n(x[0]), c(x[1]), h(x[2]), w(x[3]), p(grid.shape()[1] * grid.shape()[2]) {
        // [N, P, 2] -> [2, N, P]: the u and v coordinates each a contiguous [N, P]
        Tensor uv = Tensor::empty({2, n, p}, DType::float32, grid.device());
        backendOf(grid).permute(grid.reshape({n, p, 2}), {2, 0, 1}, uv);
        xs = axisTaps(o, uv.slice(0, 1).reshape({n, p}), w, withGrad);
        ys = axisTaps(o, uv.slice(1, 2).reshape({n, p}), h, withGrad);
    }
    Tensor positions(const Tap& ty, const Tap& tx) const {
        Backend& be = backendOf(tx.at);
        const Device dev = tx.at.device();
        Tensor flat = Tensor::empty({n, p}, DType::float32, dev);
        be.axpbyz(static_cast<float>(w), ty.at, 1.0f, tx.at, flat);
        Tensor spread = Tensor::empty({n, c, p}, DType::float32, dev);
        be.binaryBroadcast(BinaryOp::add, flat.reshape({n, 1, p}), Tensor::zeros({1, 1, 1}, DType::float32, dev),
                           spread);
        Tensor at = Tensor::empty({n * c, p, 1}, DType::int32, dev);
        be.cast(spread.reshape({n * c, p, 1}), at);
        return at;
    }
    // Every pair's positions into x's planes as [T, N, P] int32 and weights [T, N, P], for
    // the backend's gatherTaps: T = 4 (bilinear), 16 (bicubic) or 1 (nearest), y's taps
    // outer.
    std::pair<Tensor, Tensor> table() const {
        const Tensor& like = xs.front().at;
        Backend& be = backendOf(like);
        const Device dev = like.device();
        const int64_t taps = static_cast<int64_t>(ys.size() * xs.size());
        Tensor flat = Tensor::empty({taps, n, p}, DType::float32, dev);
        Tensor wt = Tensor::empty({taps, n, p}, DType::float32, dev);
        int64_t t = 0;
        for (const Tap& ty : ys) {
            for (const Tap& tx : xs) {
                be.axpbyz(static_cast<float>(w), ty.at, 1.0f, tx.at, flat.slice(t, t + 1).reshape({n, p}));
                be.mul(ty.w, tx.w, wt.slice(t, t + 1).reshape({n, p}));
                ++t;
            }
        }
        Tensor at = Tensor::empty({taps, n, p}, DType::int32, dev);
        be.cast(flat, at);
        return {at, wt};
    }
    Tensor weight(const Tap& ty, const Tap& tx) const {
        Tensor wt = Tensor::empty({n, 1, p}, DType::float32, tx.w.device());
        backendOf(wt).mul(ty.w, tx.w, wt);
        return wt;
    }
};

Tensor float32Plain(const Tensor& t) { return t.plain().convertedTo(DType::float32); }
} // namespace

GridSample::GridSample(const GridSampleOptions& options) : Module(options.name), options_(options) {}

void GridSample::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 2, "input");
    const Shape &x = inShapes[0], &g = inShapes[1];
    if (x.rank() != 4) throw shapeError("expects data [N, C, H, W] as input 0, got " + x.str());
    if (g.rank() != 4 || g[0] != x[0] || g[3] != 2) {
        throw shapeError("expects the grid [N, Ho, Wo, 2] with N = " + std::to_string(x[0]) + " as input 1, got " +
                         g.str());
    }
    if (x[2] * x[3] > (int64_t{1} << 24)) { // positions into the image are computed in float32
        throw shapeError("an image of " + std::to_string(x[2]) + " x " + std::to_string(x[3]) +
                         " pixels is more than it samples (2^24 pixels)");
    }
}

Shapes GridSample::dataShapeFrom(const Shapes& inShapes) const {
    const Shape &x = inShapes[0], &g = inShapes[1];
    return {Shape{x[0], x[1], g[1], g[2]}};
}

Shapes GridSample::gradShapeFrom(const Shapes& /*outGradShapes*/) const { return lastInShapes("gradShapeFrom"); }

Tensors GridSample::updateData(const Tensors& data) {
    const Tensor x = float32Plain(data[0]);
    const Sampling s(options_, x.shape(), float32Plain(data[1]), false);
    Backend& be = backendOf(x);
    const Device dev = x.device();
    Tensor y = Tensor::empty({s.n, s.c, s.p}, DType::float32, dev);
    if (be.gathersTaps()) {
        const auto [at, wt] = s.table();
        if (be.gatherTaps(x.reshape({s.n, s.c, s.h * s.w}), at, wt, y))
            return {y.reshape(dataShapeFrom(shapesOf(data))[0])};
    }
    // a gather per tap
    be.fill(y, 0.0f);
    Tensor read = Tensor::empty({s.n, s.c, s.p}, DType::float32, dev);
    const Tensor lines = x.reshape({s.n * s.c, s.h * s.w, 1});
    for (const Tap& ty : s.ys) {
        for (const Tap& tx : s.xs) {
            be.gatherAxis(lines, s.positions(ty, tx), read.reshape({s.n * s.c, s.p, 1}));
            be.binaryBroadcast(BinaryOp::mul, read, s.weight(ty, tx), read);
            be.axpby(1.0f, read, 1.0f, y);
        }
    }
    return {y.reshape(dataShapeFrom(shapesOf(data))[0])};
}

Tensors GridSample::updateGrad(const Tensors& grad) {
    const Tensors& in = inDataList();
    const Tensor x = float32Plain(in[0]), grid = float32Plain(in[1]);
    const bool gridGrad = options_.mode != GridSampleMode::nearest;
    const Sampling s(options_, x.shape(), grid, gridGrad);
    Backend& be = backendOf(x);
    const Device dev = x.device();
    const Tensor dy = float32Plain(grad[0]).reshape({s.n, s.c, s.p});
    Tensor dx = Tensor::zeros(x.shape(), DType::float32, dev);
    Tensor duv = Tensor::zeros({2, s.n, s.p}, DType::float32, dev);
    const Tensor du = duv.slice(0, 1).reshape({s.n, s.p}), dv = duv.slice(1, 2).reshape({s.n, s.p});
    const auto gridGradient = [&] {
        Tensor dgrid = Tensor::empty({s.n, s.p, 2}, DType::float32, dev);
        be.permute(duv, {1, 2, 0}, dgrid);
        return dgrid.reshape(grid.shape());
    };
    Tensor term = Tensor::empty({s.n, s.p}, DType::float32, dev);
    // du += ty.w tx.dw g, dv += ty.dw tx.w g for g the sum over the channels of dy * x at the tap
    const auto addTap = [&](const Tap& ty, const Tap& tx, const Tensor& g) {
        be.mul(ty.w, tx.dw, term);
        be.mul(term, g, term);
        be.axpby(1.0f, term, 1.0f, du);
        be.mul(ty.dw, tx.w, term);
        be.mul(term, g, term);
        be.axpby(1.0f, term, 1.0f, dv);
    };
    if (be.gathersTaps()) {
        const auto [at, wt] = s.table();
        const Tensor byTaps = gridGrad ? Tensor::empty(at.shape(), DType::float32, dev) : Tensor();
        if (be.gatherTapsBackward(x.reshape({s.n, s.c, s.h * s.w}), at, wt, dy, dx.reshape({s.n, s.c, s.h * s.w}),
                                  byTaps)) {
            int64_t t = 0;
            for (const Tap& ty : s.ys) {
                for (const Tap& tx : s.xs) {
                    if (gridGrad) addTap(ty, tx, byTaps.slice(t, t + 1).reshape({s.n, s.p}));
                    ++t;
                }
            }
            return {dx, gridGradient()};
        }
    }
    // a scatter and a gather per tap
    const Tensor dxLines = dx.reshape({s.n * s.c, s.h * s.w, 1});
    const Tensor lines = x.reshape({s.n * s.c, s.h * s.w, 1});
    Tensor part = Tensor::empty({s.n, s.c, s.p}, DType::float32, dev);
    Tensor read = Tensor::empty({s.n, s.c, s.p}, DType::float32, dev);
    Tensor byTap = Tensor::empty({s.n, 1, s.p}, DType::float32, dev);
    for (const Tap& ty : s.ys) {
        for (const Tap& tx : s.xs) {
            const Tensor at = s.positions(ty, tx);
            be.binaryBroadcast(BinaryOp::mul, dy, s.weight(ty, tx), part);
            be.scatterAddAxis(part.reshape({s.n * s.c, s.p, 1}), at, dxLines);
            if (!gridGrad) continue;
            be.gatherAxis(lines, at, read.reshape({s.n * s.c, s.p, 1}));
            be.mul(read, dy, read);
            be.sumTo(read, 1.0f, byTap);
            addTap(ty, tx, byTap.reshape({s.n, s.p}));
        }
    }
    return {dx, gridGradient()};
}

Blueprint GridSample::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("mode", tessera::str(options_.mode));
    bp.scheme.emplace_back("padding", tessera::str(options_.padding));
    bp.scheme.emplace_back("alignCorners", options_.alignCorners);
    return bp;
}

} // namespace tessera
