// Modules run from several threads at once: each thread with its own model must get what one
// thread alone gets (docs/python.md, "Threads and speed"). The backend's cached primitives and
// their staging buffers are per thread, so models of the same shapes in two threads share none.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#include <thread>
#include <unordered_set>
#include <vector>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "containers/Sequential.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "modules/Activation.h"
#include "modules/Glue.h"
#include "modules/Linear.h"

namespace tessera {
namespace {
using namespace testing;

// Everything a training step computes: the output, the input gradient and every parameter's
// gradient, on the host.
std::vector<std::vector<float>> step(Module& net, const Tensor& x) {
    net.zeroGradParams();
    const Tensor y = net(x);
    const Tensor dx = net.backward(randomTensor(y.shape(), 99));
    std::vector<std::vector<float>> out{y.toHost().plain().toVector<float>(), dx.toHost().plain().toVector<float>()};
    for (const auto& [name, v] : net.namedParams()) out.push_back(v->grad.toHost().plain().toVector<float>());
    return out;
}

// The largest difference between two steps' results, relative to the largest magnitude of each.
double difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return INFINITY;
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return INFINITY;
        double scale = 1e-12, diff = 0.0;
        for (size_t e = 0; e < a[i].size(); ++e) {
            scale = std::max(scale, static_cast<double>(std::fabs(a[i][e])));
            diff = std::max(diff, static_cast<double>(std::fabs(a[i][e] - b[i][e])));
        }
        if (!std::isfinite(diff)) return INFINITY;
        worst = std::max(worst, diff / scale);
    }
    return worst;
}

// Two copies of a model (the same weights) in two threads, each stepping on its own input of
// the same shape many times while the other does: every step equals the one-thread step.
void expectThreadsMatchOneThread(const std::function<ModulePtr()>& make, const Shape& inShape, DType compute) {
    manualSeed(5);
    ModulePtr a = make();
    manualSeed(5);
    ModulePtr b = make();
    a->calcMode(compute);
    b->calcMode(compute);
    const Tensor xs[2] = {randomTensor(inShape, 1), randomTensor(inShape, 2)};
    // One thread first: the reference results, and each model warmed up on its input.
    const std::vector<std::vector<float>> expected[2] = {step(*a, xs[0]), step(*b, xs[1])};
    ASSERT_GT(difference(expected[0], expected[1]), 1e-3) << "the two inputs must give different results";

    constexpr int kSteps = 12;
    double worst[2] = {0.0, 0.0};
    std::atomic<bool> failed{false};
    std::string errors[2];
    auto run = [&](int t) {
        try {
            Module& net = t == 0 ? *a : *b;
            for (int i = 0; i < kSteps && !failed; ++i)
                worst[t] = std::max(worst[t], difference(step(net, xs[t]), expected[t]));
        } catch (const std::exception& e) {
            errors[t] = e.what();
            failed = true;
        }
    };
    std::thread other(run, 1);
    run(0);
    other.join();
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
    // The same kernels on the same data: equal up to the summation order a library may pick
    // by thread count. A shared staging buffer or primitive gives another input's numbers.
    const double tol = compute == DType::bfloat16 ? 1e-2 : 1e-5;
    std::printf("%s: largest relative difference from one thread: %.3g and %.3g (tolerance %.0e)\n",
                str(compute).c_str(), worst[0], worst[1], tol);
    EXPECT_LE(worst[0], tol) << "thread 0, " << str(compute);
    EXPECT_LE(worst[1], tol) << "thread 1, " << str(compute);
}

TEST(Threads, ConvolutionalModelsInTwoThreadsGetOneThreadResults) {
    auto resnet = [] { return ModulePtr(loadResNet(18, ResNetStem::cifar, 10)); };
    expectThreadsMatchOneThread(resnet, {2, 3, 32, 32}, DType::float32);
    expectThreadsMatchOneThread(resnet, {2, 3, 32, 32}, DType::bfloat16);
}

TEST(Threads, RecurrentAndDenseModelsInTwoThreadsGetOneThreadResults) {
    expectThreadsMatchOneThread([] { return ModulePtr(loadLSTM(32)); }, {4, 1, 28, 28}, DType::float32);
    expectThreadsMatchOneThread([] { return ModulePtr(loadLeNet()); }, {4, 1, 28, 28}, DType::float32);
}

// One module run by two threads at once is an error in the second (a module keeps its last
// run for backward), not a silent mix of their data; the first finishes normally, and the
// module serves the second thread once the first is done.
TEST(Threads, OneModuleInTwoThreadsAtOnceIsAnError) {
    std::mutex mutex;
    std::condition_variable changed;
    bool inside = false, tried = false;
    GlueSpec spec;
    spec.shapes = [](const Shapes& in) { return in; };
    spec.forward = [&](Glue&, const Tensors& in) {
        std::unique_lock<std::mutex> lock(mutex);
        if (!inside) { // the first call waits inside until the other thread has tried
            inside = true;
            changed.notify_all();
            changed.wait(lock, [&] { return tried; });
        }
        return Tensors{in[0].clone()};
    };
    auto net = std::make_shared<Sequential>("shared");
    net->append(std::make_shared<Glue>("wait", spec)).append(std::make_shared<Activation>(ActivationKind::relu));
    const Tensor x = randomTensor({2, 3}, 4);
    Tensor first;
    std::thread other([&] { first = (*net)(x); });
    {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return inside; });
    }
    const std::string error = errorOf([&] { (*net)(x); });
    {
        std::lock_guard<std::mutex> lock(mutex);
        tried = true;
    }
    changed.notify_all();
    other.join();
    EXPECT_NE(error.find("Sequential 'shared': is running in another thread"), std::string::npos) << error;
    EXPECT_NE(error.find("Module.copy()"), std::string::npos) << error;
    ASSERT_TRUE(first.defined());
    EXPECT_EQ((*net)(x).toVector<float>(), first.toVector<float>()); // this thread's turn now
}

// A thread whose floating-point mode does not flush denormals (one started before the
// backend existed) gets the backend's mode at its first op, so it computes as every other
// thread does: a product in the denormal range is zero there too.
TEST(Threads, EveryThreadFlushesDenormalsAsTheFirstDoes) {
#if defined(__SSE__)
    const char* env = std::getenv("TESSERA_FLUSH_DENORMALS");
    if (env && std::string(env) == "0") GTEST_SKIP() << "TESSERA_FLUSH_DENORMALS=0";
    constexpr unsigned kFtzDaz = 0x8040;
    const Tensor a = Tensor::full({64}, 1e-20f), b = Tensor::full({64}, 1e-20f);
    auto product = [&] {
        Tensor c = Tensor::empty({64});
        backendOf(a).mul(a, b, c); // 1e-40: denormal unless flushed
        return c.toVector<float>();
    };
    const std::vector<float> here = product();
    EXPECT_EQ(here[0], 0.0f) << "the first thread flushes denormals";
    unsigned before = 0, after = 0;
    std::vector<float> there;
    std::thread other([&] {
        _mm_setcsr(_mm_getcsr() & ~kFtzDaz);
        before = _mm_getcsr() & kFtzDaz;
        there = product();
        after = _mm_getcsr() & kFtzDaz;
    });
    other.join();
    EXPECT_EQ(before, 0u);
    EXPECT_EQ(after, kFtzDaz);
    EXPECT_EQ(there, here);
#else
    GTEST_SKIP() << "no SSE control register on this architecture";
#endif
}

// Modules built in two threads at once each draw distinct initial weights from the global
// generator (its counter is taken atomically), and none is lost.
TEST(Threads, TheGlobalGeneratorHandsOutEachCounterOnce) {
    manualSeed(3);
    Generator& g = globalGenerator();
    constexpr int kDraws = 100000;
    std::vector<uint64_t> firsts[2];
    auto draw = [&](int t) {
        for (int i = 0; i < kDraws; ++i) firsts[t].push_back(g.advance(3));
    };
    std::thread other(draw, 1);
    draw(0);
    other.join();
    EXPECT_EQ(g.offset(), 3u * 2 * kDraws);
    std::vector<uint64_t> all(firsts[0]);
    all.insert(all.end(), firsts[1].begin(), firsts[1].end());
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], 3 * i) << "a counter handed out twice or skipped";
}

// Each model's gradient hook hears its own modules only, with models training in two
// threads at once (as two data-parallel jobs in one process would).
TEST(Threads, GradientHooksHearOnlyTheirOwnModel) {
    struct Model {
        Sequential net{"net"};
        std::unordered_set<const Module*> mine;
        std::atomic<int> heard{0}, foreign{0};
    };
    Model models[2];
    for (Model& m : models) {
        auto fc1 = std::make_shared<Linear>(16, 32);
        auto fc2 = std::make_shared<Linear>(32, 4);
        m.net.append(fc1).append(std::make_shared<Activation>(ActivationKind::tanh)).append(fc2);
        m.mine = {fc1.get(), fc2.get()};
        m.net.setGradientHook([&m](const Module& done) { ++(m.mine.count(&done) ? m.heard : m.foreign); });
    }
    constexpr int kSteps = 50;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
            const Tensor x = randomTensor({8, 16}, 30 + t), dy = randomTensor({8, 4}, 40 + t);
            for (int k = 0; k < kSteps; ++k) {
                models[t].net(x);
                models[t].net.backward(dy);
            }
        });
    }
    for (std::thread& th : threads) th.join();
    // A model without a hook calls none, on a thread where hooked models ran.
    Sequential silent("silent");
    silent.append(std::make_shared<Linear>(16, 4));
    silent(randomTensor({8, 16}, 50));
    silent.backward(randomTensor({8, 4}, 51));
    for (Model& m : models) {
        EXPECT_EQ(m.heard.load(), 2 * kSteps); // two Linears per step
        EXPECT_EQ(m.foreign.load(), 0);
    }
    // A hook set to empty stops.
    models[0].net.setGradientHook({});
    models[0].heard = 0;
    models[0].net(randomTensor({8, 16}, 60));
    models[0].net.backward(randomTensor({8, 4}, 61));
    EXPECT_EQ(models[0].heard.load(), 0);
}

} // namespace
} // namespace tessera
