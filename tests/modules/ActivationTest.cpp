#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "modules/Activation.h"

namespace tessera {
namespace {
using namespace testing;

const std::vector<float> kX = {-4.0f, -0.5f, 0.25f, 1.0f, 3.5f, 7.0f};

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

struct Case {
    ActivationKind kind;
    ActivationOptions options;
    float (*f)(float);  // reference forward
    float (*df)(float); // reference derivative
};

const Case kCases[] = {
    {ActivationKind::sigmoid, {}, sigmoid, [](float x) { return sigmoid(x) * (1 - sigmoid(x)); }},
    {ActivationKind::tanh,
     {},
     [](float x) { return std::tanh(x); },
     [](float x) { return 1 - std::tanh(x) * std::tanh(x); }},
    {ActivationKind::relu, {}, [](float x) { return x > 0 ? x : 0.0f; }, [](float x) { return x > 0 ? 1.0f : 0.0f; }},
    {ActivationKind::leakyRelu,
     {.slope = 0.1f},
     [](float x) { return x > 0 ? x : 0.1f * x; },
     [](float x) { return x > 0 ? 1.0f : 0.1f; }},
    {ActivationKind::elu,
     {.alpha = 1.5f},
     [](float x) { return x > 0 ? x : 1.5f * (std::exp(x) - 1); },
     [](float x) { return x > 0 ? 1.0f : 1.5f * std::exp(x); }},
    {ActivationKind::softPlus, {}, [](float x) { return std::log1p(std::exp(x)); }, sigmoid},
    {ActivationKind::clip,
     {.min = -1.0f, .max = 2.0f},
     [](float x) { return std::fmin(std::fmax(x, -1.0f), 2.0f); },
     [](float x) { return x > -1.0f && x < 2.0f ? 1.0f : 0.0f; }},
    // ONNX's default HardSigmoid (alpha 0.2, beta 0.5): kinks at -2.5 and 2.5.
    {ActivationKind::hardSigmoid,
     {.hardSlope = 0.2f, .hardOffset = 0.5f},
     [](float x) { return std::fmin(std::fmax(0.2f * x + 0.5f, 0.0f), 1.0f); },
     [](float x) { return x > -2.5f && x < 2.5f ? 0.2f : 0.0f; }},
    // x * relu6(x + 3) / 6: kinks at -3 and 3.
    {ActivationKind::hardSwish,
     {},
     [](float x) { return x * std::fmin(std::fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f; },
     [](float x) { return x < -3.0f  ? 0.0f
                          : x > 3.0f ? 1.0f
                                     : x / 3.0f + 0.5f; }},
    // x sigmoid(x) (PyTorch's SiLU)
    {ActivationKind::silu,
     {},
     [](float x) { return x * sigmoid(x); },
     [](float x) { return sigmoid(x) * (1 + x * (1 - sigmoid(x))); }},
    // x tanh(softplus(x))
    {ActivationKind::mish,
     {},
     [](float x) { return x * std::tanh(std::log1p(std::exp(x))); },
     [](float x) {
         const float t = std::tanh(std::log1p(std::exp(x)));
         return t + x * sigmoid(x) * (1 - t * t);
     }},
    {ActivationKind::exp, {}, [](float x) { return std::exp(x); }, [](float x) { return std::exp(x); }},
    // (log's inputs made positive: inputFor below)
    {ActivationKind::log, {}, [](float x) { return std::log(x); }, [](float x) { return 1.0f / x; }},
    {ActivationKind::abs, {}, [](float x) { return std::fabs(x); }, [](float x) { return x > 0 ? 1.0f : -1.0f; }},
    {ActivationKind::sin, {}, [](float x) { return std::sin(x); }, [](float x) { return std::cos(x); }},
    {ActivationKind::cos, {}, [](float x) { return std::cos(x); }, [](float x) { return -std::sin(x); }},
    // (tan's inputs within (-1, 1), asin's, acos's and atanh's within (-0.9, 0.9), acosh's above 1.2: inputFor)
    {ActivationKind::tan,
     {},
     [](float x) { return std::tan(x); },
     [](float x) { return 1.0f / (std::cos(x) * std::cos(x)); }},
    {ActivationKind::asin,
     {},
     [](float x) { return std::asin(x); },
     [](float x) { return 1.0f / std::sqrt(1.0f - x * x); }},
    {ActivationKind::acos,
     {},
     [](float x) { return std::acos(x); },
     [](float x) { return -1.0f / std::sqrt(1.0f - x * x); }},
    {ActivationKind::atan, {}, [](float x) { return std::atan(x); }, [](float x) { return 1.0f / (1.0f + x * x); }},
    {ActivationKind::sinh, {}, [](float x) { return std::sinh(x); }, [](float x) { return std::cosh(x); }},
    {ActivationKind::cosh, {}, [](float x) { return std::cosh(x); }, [](float x) { return std::sinh(x); }},
    {ActivationKind::asinh,
     {},
     [](float x) { return std::log(x + std::sqrt(x * x + 1.0f)); },
     [](float x) { return 1.0f / std::sqrt(x * x + 1.0f); }},
    {ActivationKind::acosh,
     {},
     [](float x) { return std::log(x + std::sqrt(x * x - 1.0f)); },
     [](float x) { return 1.0f / std::sqrt(x * x - 1.0f); }},
    {ActivationKind::atanh,
     {},
     [](float x) { return 0.5f * std::log((1.0f + x) / (1.0f - x)); },
     [](float x) { return 1.0f / (1.0f - x * x); }},
    {ActivationKind::erf,
     {},
     [](float x) { return std::erf(x); },
     [](float x) { return 2.0f / std::sqrt(3.14159265358979f) * std::exp(-x * x); }},
    {ActivationKind::sign, {}, [](float x) { return x > 0   ? 1.0f
                                                    : x < 0 ? -1.0f
                                                            : 0.0f; }, [](float) { return 0.0f; }},
};

// x moved into the domain of c's function: log's inputs are made positive, tan's kept
// between its poles, and so on.
float inputFor(const Case& c, float x) {
    switch (c.kind) {
    case ActivationKind::log: return std::fabs(x) + 0.2f;
    case ActivationKind::tan: return x / 7.5f;
    case ActivationKind::asin:
    case ActivationKind::acos:
    case ActivationKind::atanh: return x / 8.0f;
    case ActivationKind::acosh: return std::fabs(x) + 1.2f;
    default: return x;
    }
}

// The points where `kind` is not smooth (besides a single GradCheckOptions::kink).
std::vector<float> kinksOf(const Case& c) {
    switch (c.kind) {
    case ActivationKind::clip: return {c.options.min, c.options.max};
    case ActivationKind::hardSigmoid:
        return {-c.options.hardOffset / c.options.hardSlope, (1.0f - c.options.hardOffset) / c.options.hardSlope};
    case ActivationKind::hardSwish: return {-3.0f, 3.0f};
    case ActivationKind::abs:
    case ActivationKind::sign: return {0.0f};
    default: return {};
    }
}

TEST(Activation, Reference) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(str(c.kind));
        Activation act(c.kind, c.options);
        std::vector<float> x, y, dx, dy;
        for (size_t i = 0; i < kX.size(); ++i) {
            x.push_back(inputFor(c, kX[i]));
            dy.push_back(0.5f + static_cast<float>(i));
            y.push_back(c.f(x.back()));
            dx.push_back(c.df(x.back()) * dy.back());
        }
        EXPECT_TRUE(allClose(act(Tensor::fromVector({2, 3}, x)), y, 1e-5f));
        EXPECT_TRUE(allClose(act.backward(Tensor::fromVector({2, 3}, dy)), dx, 1e-5f));
    }
}

TEST(Activation, Gradient) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(str(c.kind));
        Activation act(c.kind, c.options);
        GradCheckOptions opts;
        if (c.kind == ActivationKind::relu || c.kind == ActivationKind::leakyRelu || c.kind == ActivationKind::elu) {
            opts.kink = 0.0f;
        }
        Tensor x = randomTensor({3, 4, 5}, 5, -4.0f, 4.0f);
        for (float k : kinksOf(c)) { // keep away from the kinks
            for (float& v : std::span(x.data<float>(), 60)) {
                if (std::fabs(v - k) < 0.03f) v += 0.1f;
            }
        }
        for (float& v : std::span(x.data<float>(), 60)) v = inputFor(c, v);
        EXPECT_TRUE(checkGradients(act, {x}, opts));
    }
}

// In calcMode(bfloat16), fed bfloat16 inputs: every kind gives its float32 results within
// bfloat16's rounding (the float32 loops, hardSigmoid and log, on a float32 copy).
TEST(Activation, Bfloat16InputsGiveTheFloat32ResultsRounded) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(str(c.kind));
        std::vector<float> x, dy;
        for (size_t i = 0; i < kX.size(); ++i) {
            x.push_back(inputFor(c, kX[i]));
            dy.push_back(0.5f + static_cast<float>(i));
        }
        const Tensor x16 = Tensor::fromVector({2, 3}, x).convertedTo(DType::bfloat16);
        const std::vector<float> xr = x16.convertedTo(DType::float32).toVector<float>();
        std::vector<float> y, dx;
        for (size_t i = 0; i < xr.size(); ++i) {
            y.push_back(c.f(xr[i]));
            dx.push_back(c.df(xr[i]) * dy[i]);
        }
        Activation act(c.kind, c.options);
        act.calcMode(DType::bfloat16);
        EXPECT_TRUE(allClose(act(x16).convertedTo(DType::float32), y, 1e-2f));
        EXPECT_TRUE(allClose(
            act.backward(Tensor::fromVector({2, 3}, dy).convertedTo(DType::bfloat16)).convertedTo(DType::float32), dx,
            2e-2f));
    }
}

TEST(Activation, Shape) {
    for (const Case& c : kCases) {
        Activation act(c.kind, c.options);
        EXPECT_TRUE(checkShapes(act, {randomTensor({2, 3, 4, 5}, 1)}));
    }
}

TEST(Activation, BadInput) {
    Activation act(ActivationKind::relu, {.name = "act1"});
    EXPECT_TRUE(throwsShapeError([&] { act(Tensor::zeros({2, 3}, DType::int32)); }, {"Activation 'act1'", "int32"}));
    EXPECT_TRUE(throwsShapeError([&] { act(Tensor::empty({0, 3})); }, {"act1", "empty"}));
    EXPECT_TRUE(throwsShapeError(
        [&] {
            act(Tensors{randomTensor({2}, 1), randomTensor({2}, 1)});
        },
        {"expects 1 input tensor, got 2"}));
    EXPECT_THROW(Activation(ActivationKind::clip, {.min = 1.0f, .max = 0.0f}), ModuleError);
    EXPECT_THROW(Activation(ActivationKind::hardSigmoid, {.hardSlope = 0.0f}), ModuleError);
    EXPECT_THROW(activationFromString("swish"), ModuleError);
    EXPECT_EQ(activationFromString("leakyRelu"), ActivationKind::leakyRelu);
}

// NaN gives 0 in the CPU's ReLU (oneDNN's max), in the fused sum + ReLU and in the
// hardSigmoid loop alike, over more elements than one thread takes (the vector loops).
TEST(Activation, NaNGivesZeroInTheClampingLoops) {
    std::vector<float> xs(70000, 0.5f);
    for (size_t i = 0; i < xs.size(); i += 7) xs[i] = std::nanf("");
    const Tensor x = Tensor::fromVector({static_cast<int64_t>(xs.size())}, xs);
    Backend& be = backendOf(x);
    Tensor relu = Tensor::empty(x.shape()), hard = Tensor::empty(x.shape()), sum = Tensor::empty(x.shape());
    be.activationForward({ActivationKind::relu}, x, relu);
    be.activationForward({ActivationKind::hardSigmoid, 0.25f, 0.5f}, x, hard);
    be.axpbyzRelu(1.0f, x, 1.0f, Tensor::full(x.shape(), 0.25f), sum);
    const std::vector<float> r = relu.toVector<float>(), h = hard.toVector<float>(), z = sum.toVector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
        const bool nan = i % 7 == 0;
        ASSERT_EQ(r[i], nan ? 0.0f : 0.5f) << i;
        ASSERT_EQ(h[i], nan ? 0.0f : 0.625f) << i;
        ASSERT_EQ(z[i], nan ? 0.0f : 0.75f) << i;
    }
}

// The CPU's log loop (vectors with a tail and short tensors, one thread or several, in place)
// gives std::log's special values exactly and its finite values within 2 ulp: zeros, signed,
// infinities, NaN, negatives, denormals, 1 (exactly 0), and values across float's range.
// Denormals are 0 to a thread that flushes them (the backend's default), so their ln -inf.
TEST(Activation, LogGivesStdLogsValues) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    const Tensor probe = Tensor::fromVector({1}, std::vector<float>{1.0f});
    backendOf(probe); // the backend sets this thread's mode
    volatile float tiny = std::numeric_limits<float>::denorm_min();
    const bool flushes = tiny + 0.0f == 0.0f;
    std::vector<float> xs = {0.0f,
                             -0.0f,
                             inf,
                             -inf,
                             std::nanf(""),
                             -1.0f,
                             -1e-30f,
                             1.0f,
                             std::numeric_limits<float>::denorm_min(),
                             1e-40f,
                             1.17e-38f,
                             std::numeric_limits<float>::min(),
                             std::numeric_limits<float>::max(),
                             0.70710677f,
                             0.7071068f,
                             1.0000001f,
                             0.99999994f,
                             2.0f,
                             0.5f};
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu); // every positive finite float
    std::uniform_real_distribution<float> near1(0.5f, 2.0f);
    while (xs.size() < 70001) {
        const uint32_t b = bits(rng);
        float v;
        std::memcpy(&v, &b, sizeof v);
        xs.push_back(v);
        xs.push_back(near1(rng));
    }
    // ulps of the float nearest to ln x between got and ln x in double
    const auto ulps = [](float x, float got) {
        const double ref = std::log(static_cast<double>(x));
        return std::fabs(got - ref) / std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
    };
    const auto check = [&](const std::vector<float>& in, const std::vector<float>& out) {
        for (size_t i = 0; i < in.size(); ++i) {
            uint32_t bits; // by its bits: comparisons too read a denormal as 0 in a flushing thread
            std::memcpy(&bits, &in[i], sizeof bits);
            const bool denormal = (bits & 0x7F800000u) == 0 && (bits & 0x007FFFFFu) != 0;
            const float want = flushes && denormal ? -inf : std::log(in[i]);
            if (!std::isfinite(want) || want == 0.0f) {
                ASSERT_TRUE(std::isnan(want) ? std::isnan(out[i]) : out[i] == want)
                    << "ln " << in[i] << " = " << out[i] << ", std::log gives " << want;
            } else {
                ASSERT_LE(ulps(in[i], out[i]), 2.0) << "ln " << in[i] << " = " << out[i] << ", std::log gives " << want;
            }
        }
    };
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{15}, int64_t{17}, int64_t{33},
                      int64_t{16385}, static_cast<int64_t>(xs.size())}) {
        SCOPED_TRACE(n);
        const std::vector<float> in(xs.begin(), xs.begin() + n);
        const Tensor x = Tensor::fromVector({n}, in);
        Backend& be = backendOf(x);
        Tensor y = Tensor::empty(x.shape());
        be.activationForward({ActivationKind::log}, x, y);
        check(in, y.toVector<float>());
        be.activationForward({ActivationKind::log}, x, x); // in place
        check(in, x.toVector<float>());
    }
}

// tan, the inverse and hyperbolic functions, erf and sign on the CPU (libmvec's vector forms
// where the C library has them, the scalar ones otherwise: the suite runs once more with
// TESSERA_LIBMVEC=0), forward and backward over tensors of 1 to 70,001 values (vectors with
// a tail, blocks over threads, in place), against the double-precision functions: within 4
// ulp of the float result (libmvec's bound) plus 1e-7 of the argument's scale, and the same
// value for one element wherever it sits.
TEST(Activation, LibraryFunctionsGiveTheirValues) {
    struct Fn {
        ActivationKind kind;
        double (*f)(double);
        double (*df)(double);
        float lo, hi; // the arguments drawn
    };
    const Fn fns[] = {
        {ActivationKind::tan, [](double x) { return std::tan(x); },
         [](double x) { return 1.0 / (std::cos(x) * std::cos(x)); }, -1.4f, 1.4f},
        {ActivationKind::asin, [](double x) { return std::asin(x); },
         [](double x) { return 1.0 / std::sqrt(1.0 - x * x); }, -0.99f, 0.99f},
        {ActivationKind::acos, [](double x) { return std::acos(x); },
         [](double x) { return -1.0 / std::sqrt(1.0 - x * x); }, -0.99f, 0.99f},
        {ActivationKind::atan, [](double x) { return std::atan(x); }, [](double x) { return 1.0 / (1.0 + x * x); },
         -50.0f, 50.0f},
        {ActivationKind::sinh, [](double x) { return std::sinh(x); }, [](double x) { return std::cosh(x); }, -20.0f,
         20.0f},
        {ActivationKind::cosh, [](double x) { return std::cosh(x); }, [](double x) { return std::sinh(x); }, -20.0f,
         20.0f},
        {ActivationKind::asinh, [](double x) { return std::asinh(x); },
         [](double x) { return 1.0 / std::sqrt(x * x + 1.0); }, -100.0f, 100.0f},
        {ActivationKind::acosh, [](double x) { return std::acosh(x); },
         [](double x) { return 1.0 / std::sqrt(x * x - 1.0); }, 1.01f, 100.0f},
        {ActivationKind::atanh, [](double x) { return std::atanh(x); }, [](double x) { return 1.0 / (1.0 - x * x); },
         -0.99f, 0.99f},
        {ActivationKind::erf, [](double x) { return std::erf(x); },
         [](double x) { return 2.0 / std::sqrt(3.14159265358979323846) * std::exp(-x * x); }, -5.0f, 5.0f},
        {ActivationKind::sign, [](double x) { return static_cast<double>((x > 0) - (x < 0)); },
         [](double) { return 0.0; }, -3.0f, 3.0f},
    };
    // got within 4 ulp of the float nearest want, and 1e-7 of scale
    const auto close = [](float got, double want, double scale) {
        const float w = static_cast<float>(want);
        const double ulp = std::ldexp(1.0, std::max(std::ilogb(w == 0.0f ? 1e-38f : w), -126) - 23);
        return std::fabs(got - want) <= 4 * ulp + 1e-7 * scale;
    };
    std::mt19937 rng(5);
    for (const Fn& fn : fns) {
        SCOPED_TRACE(str(fn.kind));
        std::uniform_real_distribution<float> draw(fn.lo, fn.hi);
        std::vector<float> xs(70001), dys(xs.size());
        for (size_t i = 0; i < xs.size(); ++i) {
            xs[i] = draw(rng);
            dys[i] = 0.5f + static_cast<float>(i % 7);
        }
        if (fn.kind == ActivationKind::sign) xs[0] = 0.0f, xs[1] = std::nanf("");
        std::vector<float> whole;
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{29}, static_cast<int64_t>(xs.size())}) {
            SCOPED_TRACE(n);
            const std::vector<float> in(xs.begin(), xs.begin() + n), dyIn(dys.begin(), dys.begin() + n);
            Tensor x = Tensor::fromVector({n}, in), dy = Tensor::fromVector({n}, dyIn);
            Backend& be = backendOf(x);
            Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
            be.activationForward({fn.kind}, x, y);
            be.activationBackward({fn.kind}, x, y, dy, dx);
            const std::vector<float> ys = y.toVector<float>(), dxs = dx.toVector<float>();
            int bad = 0;
            for (int64_t i = 0; i < n && bad < 5; ++i) {
                const double v = in[static_cast<size_t>(i)];
                if (std::isnan(v)) {
                    EXPECT_TRUE(std::isnan(ys[static_cast<size_t>(i)]));
                    continue;
                }
                const double want = fn.f(v), slope = fn.df(v) * dyIn[static_cast<size_t>(i)];
                if (!close(ys[static_cast<size_t>(i)], want, 1.0)) {
                    ADD_FAILURE() << "f(" << v << ") = " << ys[static_cast<size_t>(i)] << ", expected " << want;
                    ++bad;
                }
                // the derivative within 1e-5 of itself (it is computed from float values)
                if (!(std::fabs(dxs[static_cast<size_t>(i)] - slope) <= 1e-5 * std::fabs(slope) + 1e-30)) {
                    ADD_FAILURE() << "f'(" << v << ") dy = " << dxs[static_cast<size_t>(i)] << ", expected " << slope;
                    ++bad;
                }
            }
            if (whole.empty()) { // the values of the longest run, computed first below: the same wherever they sit
                Tensor all = Tensor::fromVector({static_cast<int64_t>(xs.size())}, xs);
                Tensor allY = Tensor::empty(all.shape());
                be.activationForward({fn.kind}, all, allY);
                whole = allY.toVector<float>();
            }
            for (int64_t i = 0; i < n; ++i) {
                const float a = ys[static_cast<size_t>(i)], b = whole[static_cast<size_t>(i)];
                ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "element " << i;
            }
            be.activationForward({fn.kind}, x, x); // in place
            const std::vector<float> again = x.toVector<float>();
            for (int64_t i = 0; i < n; ++i) {
                const float a = again[static_cast<size_t>(i)], b = ys[static_cast<size_t>(i)];
                ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "in place, element " << i;
            }
        }
    }
}

// The CPU's sin and cos loops, forward and backward (vectors with a tail and short tensors, one
// thread or several, in place), against std::sin and std::cos: within 2 ulp (the backward's
// product 3) where the value is at least 1/16 in magnitude and 1e-7 (times dy) and an ulp in
// absolute terms elsewhere, up to |x| = 8192; exact beyond, where a block holding such a
// value runs std::sin and std::cos; signed zeros, infinities and NaN.
TEST(Activation, SinAndCosGiveStdsValues) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    std::vector<float> xs = {0.0f,        -0.0f,       std::nanf(""), 1e-30f,  -1e-20f,  3.14159274f, -3.14159274f,
                             1.57079637f, 4.71238899f, 0.785398185f,  8191.9f, -8191.9f, 100.0f,      1000.5f};
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> small(-10.0f, 10.0f), wide(-8192.0f, 8192.0f);
    while (xs.size() < 70001) {
        xs.push_back(small(rng));
        xs.push_back(wide(rng));
    }
    // got against want = scale f(x): within `ulps` where |f| >= 1/16, else within 1e-7 scale
    // and an ulp of the result
    const auto close = [](float got, double want, double scale, double ulps) {
        if (std::isnan(want)) return std::isnan(got);
        if (want == 0.0) return got == 0.0f && std::signbit(got) == std::signbit(want);
        const double ulp = std::ldexp(1.0, std::max(std::ilogb(static_cast<float>(want)), -126) - 23);
        const double err = std::fabs(got - want);
        return std::fabs(want) >= 0.0625 * scale ? err <= ulps * ulp : err <= 1e-7 * scale + ulp;
    };
    std::vector<float> dys(xs.size());
    for (size_t i = 0; i < dys.size(); ++i) dys[i] = 0.5f + static_cast<float>(i % 7);
    for (bool far : {false, true}) { // far: one value beyond 8192 (or infinite) in the tensor
        for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{13}, int64_t{16}, int64_t{31},
                          static_cast<int64_t>(xs.size())}) {
            SCOPED_TRACE(std::to_string(n) + (far ? " with a value beyond 8192" : ""));
            std::vector<float> in(xs.begin(), xs.begin() + n), dy(dys.begin(), dys.begin() + n);
            if (far) in[static_cast<size_t>(n / 2)] = n % 2 ? 1e6f : -inf;
            for (ActivationKind kind : {ActivationKind::sin, ActivationKind::cos}) {
                const bool sine = kind == ActivationKind::sin;
                const Tensor x = Tensor::fromVector({n}, in);
                Backend& be = backendOf(x);
                Tensor y = Tensor::empty(x.shape()), dx = Tensor::fromVector({n}, dy);
                be.activationForward({kind}, x, y);
                be.activationBackward({kind}, x, y, dx, dx); // in place into dy
                const std::vector<float> yv = y.toVector<float>(), dxv = dx.toVector<float>();
                for (size_t i = 0; i < in.size(); ++i) {
                    const double v = in[i], f = sine ? std::sin(v) : std::cos(v), d = sine ? std::cos(v) : -std::sin(v);
                    const bool beyond = std::fabs(in[i]) > 8192.0f;
                    ASSERT_TRUE(beyond ? yv[i] == (sine ? std::sin(in[i]) : std::cos(in[i])) ||
                                             (std::isnan(yv[i]) && std::isinf(in[i]))
                                       : close(yv[i], f, 1.0, 2.0))
                        << str(kind) << "(" << in[i] << ") = " << yv[i] << ", want " << f;
                    // (3 ulp: the product's rounding more)
                    ASSERT_TRUE(close(dxv[i], dy[i] * d, dy[i], 3.0) ||
                                (beyond && std::isnan(d) == std::isnan(dxv[i]) && std::fabs(dxv[i] - dy[i] * d) < 1e-6))
                        << str(kind) << "'(" << in[i] << ") dy = " << dxv[i] << ", want " << dy[i] * d;
                }
                be.activationForward({kind}, x, x); // in place
                const std::vector<float> xv = x.toVector<float>();
                for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(std::memcmp(&xv[i], &yv[i], 4), 0) << i;
            }
        }
    }
}

TEST(Activation, Blueprint) {
    Activation act(ActivationKind::clip, {.min = -1.0f, .max = 2.0f});
    EXPECT_EQ(act.blueprint().toJson(),
              "{\"classname\": \"Activation\", \"scheme\": {\"activation\": \"clip\", \"min\": -1, \"max\": 2}}");
    Activation hard(ActivationKind::hardSigmoid, {.hardSlope = 0.25f, .hardOffset = 0.5f});
    EXPECT_EQ(hard.blueprint().toJson(), "{\"classname\": \"Activation\", \"scheme\": {\"activation\": "
                                         "\"hardSigmoid\", \"hardSlope\": 0.25, \"hardOffset\": 0.5}}");
}

} // namespace
} // namespace tessera
