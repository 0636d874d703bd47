#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "GradCheck.h"
#include "modules/BatchNormND.h"
#include "modules/Conv.h"
#include "modules/InstanceNorm2D.h"
#include "modules/LRN.h"

namespace tessera {
namespace {
using namespace testing;
using F = std::vector<float>;

// Per-channel normalisation over the given groups of elements (a reference for batch and
// instance norm): every element of a group shares a mean and a biased variance.
std::vector<float> normalise(const std::vector<float>& x, int64_t n, int64_t c, int64_t inner, bool perSample,
                             const std::vector<float>& scale, const std::vector<float>& bias, float eps) {
    std::vector<float> y(x.size());
    for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t s0 = 0; s0 < (perSample ? n : 1); ++s0) {
            double sum = 0, sq = 0;
            int64_t count = 0;
            auto each = [&](auto f) {
                for (int64_t s = perSample ? s0 : 0; s < (perSample ? s0 + 1 : n); ++s)
                    for (int64_t i = 0; i < inner; ++i) f(static_cast<size_t>((s * c + ch) * inner + i));
            };
            each([&](size_t at) {
                sum += x[at];
                ++count;
            });
            const double mean = sum / count;
            each([&](size_t at) { sq += (x[at] - mean) * (x[at] - mean); });
            const double inv = 1.0 / std::sqrt(sq / count + eps);
            each([&](size_t at) {
                y[at] = static_cast<float>(scale[static_cast<size_t>(ch)] * (x[at] - mean) * inv +
                                           bias[static_cast<size_t>(ch)]);
            });
        }
    }
    return y;
}

void setParams(Module& m, std::vector<float> scale, std::vector<float> bias) {
    m.getVar("scale")->data.copyFrom(Tensor::fromVector({static_cast<int64_t>(scale.size())}, scale));
    m.getVar("bias")->data.copyFrom(Tensor::fromVector({static_cast<int64_t>(bias.size())}, bias));
}

TEST(BatchNorm, ReferenceInTrainAndEvalMode) {
    BatchNorm2D bn(3);
    setParams(bn, {1.0f, 2.0f, 0.5f}, {0.0f, -1.0f, 3.0f});
    Tensor x = randomTensor({4, 3, 2, 5}, 1, -2.0f, 3.0f);
    const auto xs = x.toVector<float>();
    EXPECT_TRUE(allClose(bn(x), normalise(xs, 4, 3, 10, false, {1, 2, 0.5f}, {0, -1, 3}, 1e-5f), 1e-4f));
    // Running statistics after the first batch (factor 1): the batch mean and the
    // unbiased variance.
    std::vector<float> mean(3), var(3);
    for (int c = 0; c < 3; ++c) {
        double s = 0, q = 0;
        for (int n = 0; n < 4; ++n)
            for (int i = 0; i < 10; ++i) s += xs[static_cast<size_t>((n * 3 + c) * 10 + i)];
        mean[c] = static_cast<float>(s / 40);
        for (int n = 0; n < 4; ++n)
            for (int i = 0; i < 10; ++i) q += std::pow(xs[static_cast<size_t>((n * 3 + c) * 10 + i)] - mean[c], 2);
        var[c] = static_cast<float>(q / 39);
    }
    EXPECT_TRUE(allClose(bn.getAttr("mean"), mean, 1e-5f));
    EXPECT_TRUE(allClose(bn.getAttr("var"), var, 1e-4f));
    bn.evalMode();
    Tensor y = bn(x);
    std::vector<float> expected;
    for (size_t i = 0; i < xs.size(); ++i) {
        const size_t c = i / 10 % 3;
        const float s[] = {1, 2, 0.5f}, b[] = {0, -1, 3};
        expected.push_back(s[c] * (xs[i] - mean[c]) / std::sqrt(var[c] + 1e-5f) + b[c]);
    }
    EXPECT_TRUE(allClose(y, expected, 1e-4f));
}

TEST(BatchNorm, RunningAveragesUseTheFactor) {
    BatchNorm1D bn(2, {.initFactor = 1.0f, .minFactor = 0.5f});
    bn(Tensor::fromVector({2, 2}, F{1, 10, 3, 30})); // mean (2, 20), factor 1
    bn(Tensor::fromVector({2, 2}, F{5, 0, 7, 20}));  // mean (6, 10), factor max(1/2, 0.5)
    EXPECT_TRUE(allClose(bn.getAttr("mean"), {4.0f, 15.0f}));
}

TEST(BatchNorm, Gradient) {
    BatchNorm1D bn1(3);
    GradCheckOptions loose;
    loose.atol = 5e-3f;
    EXPECT_TRUE(checkGradients(bn1, {randomTensor({5, 3}, 2)}, loose));
    BatchNorm1D bn1l(3);
    EXPECT_TRUE(checkGradients(bn1l, {randomTensor({2, 3, 4}, 3)}));
    BatchNorm2D bn2(4);
    setParams(bn2, {1.5f, 0.5f, 1, 2}, {0.1f, 0.2f, 0.3f, 0.4f});
    EXPECT_TRUE(checkGradients(bn2, {randomTensor({2, 4, 3, 3}, 4)}));
    BatchNorm3D bn3(2);
    EXPECT_TRUE(checkGradients(bn3, {randomTensor({2, 2, 2, 3, 2}, 5)}));
}

TEST(BatchNorm, BlockedInputFromConvolution) {
    Conv2D conv(8, 16, 3, {.pad = {1}});
    BatchNorm2D bn(16);
    Tensor h = conv(randomTensor({2, 8, 4, 4}, 6));
    Tensor y = bn(h);
    EXPECT_EQ(y.layout(), h.layout());
    EXPECT_TRUE(allClose(y,
                         normalise(h.toVector<float>(), 2, 16, 16, false, std::vector<float>(16, 1.0f),
                                   std::vector<float>(16, 0.0f), 1e-5f),
                         1e-4f));
    EXPECT_TRUE(checkGradients(bn, {h.plain()}));
}

TEST(BatchNorm, Shape) {
    BatchNorm1D bn1(3);
    EXPECT_TRUE(checkShapes(bn1, {randomTensor({4, 3}, 1)}));
    BatchNorm2D bn2(3);
    EXPECT_TRUE(checkShapes(bn2, {randomTensor({2, 3, 2, 2}, 1)}));
    BatchNorm3D bn3(3);
    EXPECT_TRUE(checkShapes(bn3, {randomTensor({2, 3, 2, 2, 2}, 1)}));
}

TEST(BatchNorm, BadInputAndBlueprint) {
    BatchNorm2D bn(8, {.name = "bn1"});
    EXPECT_TRUE(throwsShapeError(
        [&] {
            bn(Tensor::zeros({2, 4, 3, 3}));
        },
        {"BatchNorm2D 'bn1'", "[N, 8, H, W]", "[2, 4, 3, 3]"}));
    EXPECT_TRUE(throwsShapeError([&] { bn(Tensor::zeros({1, 8, 1, 1})); }, {"bn1", "at least 2 values"}));
    BatchNorm1D bn1(4);
    EXPECT_TRUE(throwsShapeError([&] { bn1(Tensor::zeros({2, 4, 3, 3})); }, {"[N, 4] or [N, 4, W]"}));
    EXPECT_NE(bn.blueprint().toJson().find("\"maps\": 8"), std::string::npos);
    EXPECT_EQ(bn.namedAttrs().size(), 2u);
}

TEST(InstanceNorm2D, ReferenceGradientShape) {
    InstanceNorm2D in(3);
    setParams(in, {1.0f, 2.0f, 0.5f}, {0.0f, -1.0f, 3.0f});
    Tensor x = randomTensor({2, 3, 3, 4}, 7, -2.0f, 2.0f);
    EXPECT_TRUE(
        allClose(in(x), normalise(x.toVector<float>(), 2, 3, 12, true, {1, 2, 0.5f}, {0, -1, 3}, 1e-5f), 1e-4f));
    EXPECT_TRUE(checkGradients(in, {x}));
    EXPECT_TRUE(checkShapes(in, {x}));
    EXPECT_TRUE(throwsShapeError([&] { in(Tensor::zeros({2, 4, 3, 3})); }, {"InstanceNorm2D", "[N, 3, H, W]"}));
    EXPECT_TRUE(throwsShapeError([&] { in(Tensor::zeros({2, 3, 1, 1})); }, {"at least 2 positions"}));
    EXPECT_NE(in.blueprint().toJson().find("InstanceNorm2D"), std::string::npos);
}

// y = x / (k + alpha / n * sum x^2)^beta over the window.
std::vector<float> lrnReference(const Tensor& xt, bool across, int64_t size, float alpha, float beta, float k) {
    const Shape& s = xt.shape();
    const auto x = xt.toVector<float>();
    std::vector<float> y(x.size());
    const int64_t h = s[2], w = s[3], half = size / 2;
    for (int64_t n = 0; n < s[0]; ++n)
        for (int64_t c = 0; c < s[1]; ++c)
            for (int64_t i = 0; i < h; ++i)
                for (int64_t j = 0; j < w; ++j) {
                    double sum = 0;
                    auto at = [&](int64_t cc, int64_t ii, int64_t jj) {
                        return x[static_cast<size_t>(((n * s[1] + cc) * h + ii) * w + jj)];
                    };
                    if (across) {
                        for (int64_t cc = std::max<int64_t>(0, c - half); cc <= std::min(s[1] - 1, c + half); ++cc)
                            sum += at(cc, i, j) * at(cc, i, j);
                    } else {
                        for (int64_t ii = std::max<int64_t>(0, i - half); ii <= std::min(h - 1, i + half); ++ii)
                            for (int64_t jj = std::max<int64_t>(0, j - half); jj <= std::min(w - 1, j + half); ++jj)
                                sum += at(c, ii, jj) * at(c, ii, jj);
                    }
                    const double n2 = across ? size : size * size;
                    y[static_cast<size_t>(((n * s[1] + c) * h + i) * w + j)] =
                        static_cast<float>(at(c, i, j) / std::pow(k + alpha / n2 * sum, beta));
                }
    return y;
}

TEST(LRN, Reference) {
    Tensor x = randomTensor({2, 7, 4, 5}, 8, -3.0f, 3.0f);
    CrossMapLRN cross({.N = 5, .alpha = 0.5f, .beta = 0.75f, .K = 2.0f});
    EXPECT_TRUE(allClose(cross(x), lrnReference(x, true, 5, 0.5f, 0.75f, 2.0f), 1e-4f));
    MapLRN map({.N = 3, .alpha = 0.5f, .beta = 0.75f, .K = 1.0f});
    EXPECT_TRUE(allClose(map(x), lrnReference(x, false, 3, 0.5f, 0.75f, 1.0f), 1e-4f));
}

// Windows from 1 to wider than the channels or the plane, AlexNet's beta (0.75, its own
// path) and others, against the reference; on plain input the CPU runs its loops, on
// blocked and channels-last input oneDNN's primitives: both give the same outputs and
// gradients.
TEST(LRN, EveryWindowAndLayoutMatches) {
    const Tensor x = randomTensor({2, 6, 5, 7}, 10, -3.0f, 3.0f);
    const Tensor dy = randomTensor({2, 6, 5, 7}, 11);
    for (bool across : {true, false}) {
        for (int64_t size : {1, 3, 5, 9, 13}) {
            for (float beta : {0.75f, 0.5f, 1.3f}) {
                SCOPED_TRACE(std::string(across ? "across" : "within") + " size " + std::to_string(size) + " beta " +
                             std::to_string(beta));
                const LRNOptions o{.N = size, .alpha = 0.7f, .beta = beta, .K = 1.5f};
                std::unique_ptr<LRN> m =
                    across ? std::unique_ptr<LRN>(new CrossMapLRN(o)) : std::make_unique<MapLRN>(o);
                m->trainMode();
                const Tensor y = (*m)(x);
                EXPECT_TRUE(allClose(y, lrnReference(x, across, size, 0.7f, beta, 1.5f), 1e-5f));
                const std::vector<float> dx = m->backward(dy).toVector<float>();
                for (Layout layout : {Layout::blocked8, Layout::blocked16, Layout::channelsLast}) {
                    SCOPED_TRACE(str(layout));
                    const Tensor yl = (*m)(x.toLayout(layout));
                    EXPECT_EQ(yl.layout(), layout);
                    EXPECT_TRUE(allClose(yl.plain(), y.toVector<float>(), 1e-5f));
                    EXPECT_TRUE(allClose(m->backward(dy.toLayout(layout)).plain(), dx, 1e-5f));
                }
                if (size == 5) {
                    EXPECT_TRUE(checkGradients(*m, {x}));
                }
            }
        }
    }
}

TEST(LRN, GradientShapeBadInput) {
    CrossMapLRN cross({.N = 3, .alpha = 0.5f, .beta = 0.75f, .K = 1.0f, .name = "lrn"});
    MapLRN map({.N = 3, .alpha = 0.5f});
    Tensor x = randomTensor({2, 5, 4, 4}, 9);
    EXPECT_TRUE(checkGradients(cross, {x}));
    EXPECT_TRUE(checkGradients(map, {x}));
    EXPECT_TRUE(checkShapes(cross, {x}));
    EXPECT_TRUE(checkShapes(map, {x}));
    EXPECT_TRUE(throwsShapeError([&] { cross(Tensor::zeros({2, 5, 4})); }, {"CrossMapLRN 'lrn'", "[N, C, H, W]"}));
    EXPECT_THROW(MapLRN({.N = 4}), ModuleError);
    EXPECT_NE(cross.blueprint().toJson().find("\"N\": 3"), std::string::npos);
}

} // namespace
} // namespace tessera

namespace tessera {
namespace {

// Two "processes" as two threads: allGather waits for both and hands each the two
// contributions in rank order; the weights are each one's share of the global batch.
class TwoThreadSync : public BatchNormSync {
public:
    explicit TwoThreadSync(double w0) : weights_{w0, 1.0 - w0} {}
    static thread_local int rank;
    std::vector<float> allGather(const std::vector<float>& mine) override {
        std::unique_lock<std::mutex> lock(mutex_);
        slots_[rank] = mine;
        if (++arrived_ == 2) {
            result_ = slots_[0];
            result_.insert(result_.end(), slots_[1].begin(), slots_[1].end());
            arrived_ = 0;
            ++generation_;
            changed_.notify_all();
        } else {
            const uint64_t g = generation_;
            changed_.wait(lock, [&] { return generation_ != g; });
        }
        ++gathers_;
        return result_;
    }
    double gradientWeight() const override { return weights_[rank]; }
    int gathers() const { return gathers_; }

private:
    double weights_[2];
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<float> slots_[2], result_;
    int arrived_ = 0, gathers_ = 0;
    uint64_t generation_ = 0;
};
thread_local int TwoThreadSync::rank = 0;

// Rows [begin, end) of x as a tensor of their own.
Tensor rows(const Tensor& x, int64_t begin, int64_t end) { return x.slice(begin, end).clone(); }

TEST(BatchNorm, SynchronisedAcrossProcessesComputesTheWholeBatch) {
    manualSeed(9);
    const Tensor x = Tensor::randn({8, 4, 3, 3}, 1.5f, 2.0f), dy = Tensor::randn({8, 4, 3, 3});
    auto make = [] {
        auto bn = std::make_shared<BatchNorm2D>(4);
        setParams(*bn, {1.0f, 2.0f, 0.5f, -1.0f}, {0.1f, 0.2f, 0.3f, 0.4f});
        return bn;
    };
    // The whole batch in one module.
    auto whole = make();
    const std::vector<float> y = (*whole)(x).toVector<float>();
    whole->zeroGradParams();
    const std::vector<float> dx = whole->backward(dy).toVector<float>();
    const std::vector<float> dscale = whole->getVar("scale")->grad.toVector<float>();
    const std::vector<float> dbias = whole->getVar("bias")->grad.toVector<float>();

    // Rows 0-4 and 5-7 in two synchronised modules; each one's output gradient carries
    // 1 / its share, as a cost's mean over its own rows gives.
    const int64_t split = 5;
    TwoThreadSync sync(5.0 / 8.0);
    BatchNormND::setSync(&sync);
    std::shared_ptr<BatchNorm2D> part[2] = {make(), make()};
    std::vector<float> py[2], pdx[2], pscale[2], pbias[2];
    auto run = [&](int r) {
        TwoThreadSync::rank = r;
        const int64_t b = r == 0 ? 0 : split, e = r == 0 ? split : 8;
        const double w = sync.gradientWeight();
        Tensor g = rows(dy, b, e);
        backendOf(g).axpby(static_cast<float>(1.0 / w), g, 0.0f, g);
        py[r] = (*part[r])(rows(x, b, e)).toVector<float>();
        part[r]->zeroGradParams();
        pdx[r] = part[r]->backward(g).toVector<float>();
        for (float& v : pdx[r]) v = static_cast<float>(v * w);
        pscale[r] = part[r]->getVar("scale")->grad.toVector<float>();
        pbias[r] = part[r]->getVar("bias")->grad.toVector<float>();
        for (float& v : pscale[r]) v = static_cast<float>(v * w);
        for (float& v : pbias[r]) v = static_cast<float>(v * w);
    };
    std::thread other(run, 1);
    run(0);
    other.join();
    BatchNormND::setSync(nullptr);
    EXPECT_EQ(sync.gathers(), 4); // forward and backward, on both

    const size_t at = static_cast<size_t>(split * 36);
    for (size_t i = 0; i < y.size(); ++i) {
        const int r = i < at ? 0 : 1;
        const size_t j = r == 0 ? i : i - at;
        ASSERT_NEAR(py[r][j], y[i], 1e-4) << "y " << i;
        ASSERT_NEAR(pdx[r][j], dx[i], 1e-4) << "dx " << i;
    }
    for (size_t c = 0; c < 4; ++c) {
        EXPECT_NEAR(pscale[0][c] + pscale[1][c], dscale[c], 1e-4) << c;
        EXPECT_NEAR(pbias[0][c] + pbias[1][c], dbias[c], 1e-4) << c;
    }
    // The running statistics are the whole batch's too (its count for the unbiased variance).
    EXPECT_EQ(part[0]->getAttr("var").toVector<float>(), part[1]->getAttr("var").toVector<float>());
    const std::vector<float> rv = whole->getAttr("var").toVector<float>(),
                             pv = part[0]->getAttr("var").toVector<float>();
    for (size_t c = 0; c < 4; ++c) EXPECT_NEAR(pv[c], rv[c], 1e-4) << c;
}

} // namespace
} // namespace tessera
