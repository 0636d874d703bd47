#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "GradCheck.h"
#include "containers/Graph.h"
#include "data/Idx.h"
#include "models/LeNet.h"
#include "models/Zoo.h"
#include "modules/Concat.h"
#include "modules/Identity.h"
#include "modules/Linear.h"
#include "training/Average.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Multi.h"
#include "training/Optimizer.h"
#include "training/PointwiseCosts.h"

namespace tessera {
namespace {
using namespace testing;

std::string tempDir(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "tessera_" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

std::vector<uint8_t> idxBytes(std::vector<int64_t> dims, const std::vector<uint8_t>& data, uint8_t type = 0x08) {
    std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
    for (int64_t d : dims) {
        for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    }
    b.insert(b.end(), data.begin(), data.end());
    return b;
}

void writePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void writeGz(const std::string& path, const std::vector<uint8_t>& bytes) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
}

TEST(Idx, ReadsPlainAndGzip) {
    const std::string dir = tempDir("idx");
    const std::vector<uint8_t> pixels = {0, 255, 51, 102, 1, 2, 3, 4};
    writeGz(dir + "/train-images-idx3-ubyte.gz", idxBytes({2, 2, 2}, pixels));
    writePlain(dir + "/train-labels-idx1-ubyte", idxBytes({2}, {7, 3}));
    const IdxArray a = readIdx(dir + "/train-images-idx3-ubyte.gz");
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 2, 2}));
    EXPECT_EQ(a.data, pixels);
    const ImageSet set = loadMnistFormat(dir, "train");
    EXPECT_EQ(set.images.shape(), (Shape{2, 1, 2, 2}));
    EXPECT_TRUE(allClose(set.images, {0, 1, 0.2f, 0.4f, 1 / 255.0f, 2 / 255.0f, 3 / 255.0f, 4 / 255.0f}));
    EXPECT_EQ(set.labels.toVector<int32_t>(), (std::vector<int32_t>{7, 3}));
    EXPECT_EQ(loadMnistFormat(dir, "train", 1).labels.numel(), 1);
}

TEST(Idx, BadFilesGiveClearErrors) {
    const std::string dir = tempDir("idx_bad");
    writePlain(dir + "/magic", idxBytes({2}, {1, 2}, 0x0D));
    EXPECT_NE(errorOf([&] { readIdx(dir + "/magic"); }).find("bad magic number 0x00000d01"), std::string::npos);
    const auto whole = idxBytes({3, 2, 2}, std::vector<uint8_t>(12, 1));
    const std::vector<uint8_t> truncated(whole.begin(), whole.end() - 5);
    writeGz(dir + "/short.gz", truncated);
    EXPECT_NE(errorOf([&] { readIdx(dir + "/short.gz"); }).find("truncated; the header promises 12 bytes"),
              std::string::npos);
    EXPECT_NE(errorOf([&] { readIdx(dir + "/missing"); }).find("cannot open"), std::string::npos);
    writePlain(dir + "/t10k-images-idx3-ubyte", idxBytes({3, 1, 1}, {1, 2, 3}));
    writePlain(dir + "/t10k-labels-idx1-ubyte", idxBytes({2}, {1, 2}));
    EXPECT_NE(errorOf([&] { loadMnistFormat(dir, "t10k"); }).find("3 images but 2 labels"), std::string::npos);
    EXPECT_NE(errorOf([&] { loadMnistFormat(dir, "train"); }).find("train-images-idx3-ubyte[.gz] not found"),
              std::string::npos);
}

// Headers as an attacker writes them: dims whose product wraps 64 bits, dims past the
// limit, a tiny file claiming gigabytes. Each is a clear error naming the file, and no
// allocation follows the header's claim (the 16-byte file claiming 4.3 GB is refused after
// reading what it holds).
TEST(Idx, HostileHeadersAreClearErrorsWithoutHugeAllocations) {
    const std::string dir = tempDir("idx_hostile");
    writePlain(dir + "/wrap", idxBytes({65536, 1 << 24, 1 << 24}, {}));
    std::string e = errorOf([&] { readIdx(dir + "/wrap"); });
    EXPECT_NE(e.find(dir + "/wrap: dims 65536 x 16777216 x 16777216 give more than 1099511627776 bytes"),
              std::string::npos)
        << e;
    writePlain(dir + "/huge", idxBytes({0xFFFFFFFF, 3}, {})); // 12.9 GB claimed, none allocated
    e = errorOf([&] { readIdx(dir + "/huge"); });
    EXPECT_NE(e.find("truncated; the header promises 12884901885 bytes of data, the file holds 0"), std::string::npos)
        << e;
    writePlain(dir + "/claims", idxBytes({1, 65535, 65535}, {}));
    e = errorOf([&] { readIdx(dir + "/claims"); });
    EXPECT_NE(e.find(dir + "/claims: truncated; the header promises 4294836225 bytes of data, the file holds 0"),
              std::string::npos)
        << e;
    writeGz(dir + "/claims.gz", idxBytes({1, 65535, 65535}, {1, 2, 3}));
    e = errorOf([&] { readIdx(dir + "/claims.gz"); });
    EXPECT_NE(e.find("the file holds 3"), std::string::npos) << e;
    // An empty but well-formed set is not an error.
    writePlain(dir + "/empty", idxBytes({0, 28, 28}, {}));
    EXPECT_EQ(readIdx(dir + "/empty").data.size(), 0u);
}

// A linearly separable toy set: class = which of two features is larger.
std::pair<Tensor, Tensor> toySet(int64_t n) {
    Tensor x = randomTensor({n, 2}, 11);
    std::vector<int32_t> y;
    const auto xs = x.toVector<float>();
    for (int64_t i = 0; i < n; ++i) y.push_back(xs[static_cast<size_t>(2 * i)] > xs[static_cast<size_t>(2 * i + 1)]);
    return {x, Tensor::fromVector({n}, y)};
}

TEST(Handlers, TrainValidateCalculate) {
    manualSeed(4);
    auto net = loadMLP({2, 16, 2});
    auto [x, y] = toySet(500);
    CrossEntropy cost, vcost;
    auto opt = makeOptimizer("adam", 0.01f);
    opt->setupOn(*net, true);
    std::FILE* log = std::tmpfile();
    HandlerOptions options{.batchsize = 32, .seed = 5, .out = log};
    Trainer trainer(*net, cost, *opt, options);
    int batches = 0, epochs = 0;
    trainer.onBatchFinish = [&](const BatchInfo& b) {
        EXPECT_EQ(b.batch, batches % 16);
        ++batches;
    };
    trainer.onEpochFinish = [&](const BatchInfo& b) {
        EXPECT_EQ(b.epoch, epochs);
        ++epochs;
    };
    Validator validator(*net, vcost, options);
    const double before = validator.validate(x, y);
    double first = 0, last = 0;
    for (int e = 0; e < 5; ++e) {
        last = trainer.train(x, y);
        if (e == 0) first = last;
    }
    EXPECT_EQ(batches, 5 * 16); // 500 samples in batches of 32
    EXPECT_EQ(epochs, 5);
    EXPECT_LT(last, 0.5 * first);
    const double after = validator.validate(x, y);
    EXPECT_LT(after, 0.05);
    EXPECT_LT(after, before);
    EXPECT_TRUE(net->isTrain()); // the validator restores the mode
    // Off a terminal the progress is plain lines, each ending in a newline.
    std::rewind(log);
    char line[256];
    int lines = 0;
    while (std::fgets(line, sizeof line, log)) {
        ++lines;
        EXPECT_NE(std::string(line).find("samples/s"), std::string::npos) << line;
    }
    std::fclose(log);
    EXPECT_GE(lines, 5 * 10);

    Calculator calc(*net, {.batchsize = 64, .progress = false});
    Tensor scores = calc.calc(x);
    EXPECT_EQ(scores.shape(), (Shape{500, 2}));
    Tensor direct = (*net)(x.slice(0, 10));
    EXPECT_TRUE(allClose(scores.slice(0, 10), direct.toVector<float>(), 1e-5f));
}

// Trainer scales the loss gradient by the optimizer's loss scale: with a power-of-two
// scale an epoch gives exactly the weights it gives without.
TEST(Handlers, TrainerAppliesLossScaling) {
    auto [x, y] = toySet(40);
    auto run = [&, x = x, y = y](bool scaled) {
        manualSeed(1);
        auto net = loadMLP({2, 4, 2});
        CrossEntropy cost;
        SGD sgd(0.1f);
        sgd.setupOn(*net, true);
        if (scaled) sgd.enableLossScaling({.initialScale = 4096.0f, .growthInterval = 2});
        Trainer t(*net, cost, sgd, {.batchsize = 8, .progress = false});
        t.train(x, y);
        if (scaled) {
            EXPECT_EQ(sgd.lossScale(), 4096.0f * 4); // 5 clean steps: grew twice
        }
        return net->getByName("fc1").getVar("W")->data.toVector<float>();
    };
    EXPECT_EQ(run(true), run(false));
}

// Gradient accumulation: batches of 16 in groups of 4 step as batches of 64 (LeNet's
// convolutions, pooling and linear layers; the zoo's 2-layer LSTM), over 136 samples, so
// the epoch's last group is one batch of 8 either way. Equal within float summation order.
// A stop request waits for its group's end; a position inside a group is refused.
TEST(Handlers, AccumulatedBatchesStepAsOneLargeBatch) {
    const Tensor x = randomTensor({136, 1, 28, 28}, 5, 0, 1);
    std::vector<int32_t> labels;
    for (int32_t i = 0; i < 136; ++i) labels.push_back(i * 7 % 10);
    const Tensor y = Tensor::fromVector({136}, labels);
    for (const char* model : {"lenet", "lstm"}) {
        SCOPED_TRACE(model);
        auto run = [&](int64_t batchsize, int64_t accumulate, std::vector<bool>* updated) {
            manualSeed(3);
            ModulePtr net = loadZooModel(model);
            CrossEntropy cost;
            MomentumSGD sgd(0.05f);
            sgd.setupOn(*net, true);
            Trainer t(*net, cost, sgd,
                      {.batchsize = batchsize, .seed = 4, .progress = false, .accumulate = accumulate});
            if (updated) t.onBatchFinish = [&](const BatchInfo& info) { updated->push_back(info.updated); };
            for (int epoch = 0; epoch < 2; ++epoch) t.train(x, y);
            EXPECT_EQ(sgd.steps(), 6);
            std::vector<float> w;
            for (const auto& [name, v] : net->namedParams()) {
                const std::vector<float> p = v->data.toVector<float>();
                w.insert(w.end(), p.begin(), p.end());
            }
            return w;
        };
        std::vector<bool> updated;
        const std::vector<float> small = run(16, 4, &updated), large = run(64, 1, nullptr);
        ASSERT_EQ(small.size(), large.size());
        double worst = 0;
        for (size_t i = 0; i < small.size(); ++i) {
            worst = std::max(worst, std::fabs(static_cast<double>(small[i]) - large[i]) / (1e-3 + std::fabs(large[i])));
        }
        EXPECT_LT(worst, 1e-4);
        const std::vector<bool> group{false, false, false, true, false, false, false, true, true};
        std::vector<bool> both = group;
        both.insert(both.end(), group.begin(), group.end());
        EXPECT_EQ(updated, both);
    }
    auto net = loadMLP({784, 8, 10});
    CrossEntropy cost;
    SGD sgd;
    sgd.setupOn(*net, true);
    Trainer t(*net, cost, sgd, {.batchsize = 16, .progress = false, .accumulate = 4});
    t.onBatchFinish = [&](const BatchInfo& info) {
        if (info.batch == 1) t.requestStop();
    };
    t.train(x.reshape({136, 784}), y);
    EXPECT_EQ(t.position().batch, 4); // after the group, not after batch 1
    EXPECT_EQ(sgd.steps(), 1);
    EXPECT_NE(errorOf([&] {
                  t.setPosition({0, 2, 0.0, 0});
              }).find("inside a group of 4 accumulated batches"),
              std::string::npos);
    EXPECT_THROW(Trainer(*net, cost, sgd, {.accumulate = 0}), ModuleError);
}

// A Trainer given a weight average updates it after each applied update: with
// accumulation over 2 batches, once per 2 batches; and not after a step loss scaling skips.
TEST(Handlers, TrainerUpdatesItsWeightAverage) {
    auto [x, y] = toySet(40);
    manualSeed(1);
    auto net = loadMLP({2, 4, 2});
    CrossEntropy cost;
    SGD sgd(0.1f);
    sgd.setupOn(*net, true);
    WeightAverage average(*net, 0.9f);
    Trainer t(*net, cost, sgd, {.batchsize = 8, .progress = false, .accumulate = 2});
    t.setWeightAverage(&average);
    t.train(x, y); // 5 batches: groups of 2, 2, 1
    EXPECT_EQ(sgd.steps(), 3);
    EXPECT_EQ(average.updates(), 3);
    // With loss scaling, the group holding an infinite input has non-finite gradients: its
    // step is skipped, and the average is not updated for it.
    sgd.enableLossScaling({.initialScale = 1024.0f});
    std::vector<float> bad = x.toVector<float>();
    bad[0] = std::numeric_limits<float>::infinity();
    t.train(Tensor::fromVector(x.shape(), bad), y);
    EXPECT_EQ(sgd.skippedSteps(), 1);
    EXPECT_EQ(average.updates(), 3 + (3 - sgd.skippedSteps()));
    EXPECT_EQ(sgd.steps(), average.updates());
}

TEST(Handlers, ShuffleIsSeededAndBadSetsAreErrors) {
    auto [x, y] = toySet(40);
    auto run = [&, x = x, y = y](uint64_t seed) {
        manualSeed(1);
        auto net = loadMLP({2, 4, 2});
        CrossEntropy cost;
        SGD sgd(0.1f);
        sgd.setupOn(*net);
        Trainer t(*net, cost, sgd, {.batchsize = 8, .seed = seed, .progress = false});
        t.train(x, y);
        return net->getByName("fc1").getVar("W")->data.toVector<float>();
    };
    EXPECT_EQ(run(1), run(1));
    EXPECT_NE(run(1), run(2));
    auto net = loadMLP({2, 4, 2});
    CrossEntropy cost;
    SGD sgd;
    sgd.setupOn(*net);
    Trainer t(*net, cost, sgd, {.progress = false});
    EXPECT_TRUE(throwsShapeError([&] { t.train(x, y.slice(0, 10)); }, {"Trainer", "40 samples", "[10]"}));
    EXPECT_TRUE(throwsShapeError([&] { t.train(Tensor(), y); }, {"Trainer", "empty"}));
    // Lists of sets: every set has the first one's sample count.
    EXPECT_TRUE(throwsShapeError(
        [&] {
            t.train(Tensors{x, x.slice(0, 39)}, Tensors{y});
        },
        {"Trainer", "data set 0 has 40 samples but data set 1 has 39"}));
    EXPECT_TRUE(throwsShapeError([&] { t.train(Tensors{x}, Tensors{}); }, {"Trainer", "no target set"}));
    Validator v(*net, cost, {.progress = false});
    EXPECT_TRUE(
        throwsShapeError([&] { v.validate(Tensors{x}, Tensors{y.slice(0, 5)}); }, {"Validator", "target set 0 has 5"}));
}

// Two inputs: sample i of each set goes into the same batch, and the calculator returns
// every output.
TEST(Handlers, SeveralInputsAndOutputs) {
    manualSeed(6);
    auto left = node(std::make_shared<Identity>(), {}, "left");
    auto right = node(std::make_shared<Identity>(), {}, "right");
    auto cat = node(std::make_shared<Concat>(1), {left, right}, "cat");
    auto fc = node(std::make_shared<Linear>(4, 2), cat, "fc");
    auto copy = node(std::make_shared<Identity>(), cat, "copy");
    Graph net({left, right}, {fc, copy});
    auto [x, y] = toySet(400);
    // The two features of the toy set split over two inputs (x[:, 0] and x[:, 1] each padded by one noise dim).
    Tensor a = Tensor::randn({400, 2}), b = Tensor::randn({400, 2});
    for (int i = 0; i < 400; ++i) {
        a.data<float>()[i * 2] = x.data<float>()[i * 2];
        b.data<float>()[i * 2] = x.data<float>()[i * 2 + 1];
    }
    Multi cost({std::make_shared<CrossEntropy>(), std::make_shared<MSE>()});
    Adam adam(0.02f);
    adam.setupOn(net);
    const Tensor cat4 = [&] { // the copy output's target: the inputs themselves
        Tensor t = Tensor::empty({400, 4});
        for (int i = 0; i < 400; ++i) {
            for (int k = 0; k < 2; ++k) {
                t.data<float>()[i * 4 + k] = a.data<float>()[i * 2 + k];
                t.data<float>()[i * 4 + 2 + k] = b.data<float>()[i * 2 + k];
            }
        }
        return t;
    }();
    Trainer trainer(net, cost, adam, {.batchsize = 25, .progress = false});
    const double first = trainer.train(Tensors{a, b}, Tensors{y, cat4});
    double last = first;
    for (int e = 0; e < 10; ++e) last = trainer.train(Tensors{a, b}, Tensors{y, cat4});
    EXPECT_LT(last, 0.5 * first);
    CrossEntropy ce;
    net.evalMode();
    Calculator calc(net, {.batchsize = 64, .progress = false});
    const Tensors outs = calc.calc(Tensors{a, b});
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs[0].shape(), (Shape{400, 2}));
    EXPECT_TRUE(allClose(outs[1], cat4.toVector<float>())); // the copy output is the joined inputs
    int correct = 0;
    for (int i = 0; i < 400; ++i) {
        const float* s = outs[0].data<float>() + i * 2;
        correct += (s[1] > s[0] ? 1 : 0) == y.data<int32_t>()[i];
    }
    EXPECT_GT(correct, 0.9 * 400) << correct << " of 400";
}

TEST(LeNet, ShapesAndParameterCount) {
    auto lenet = loadLeNet();
    EXPECT_EQ(lenet->dataShapeFrom(Shape{7, 1, 28, 28}), (Shape{7, 10}));
    // 16*9+16 + 32*16*16+32 + 800*1024+1024 + 1024*10+10
    EXPECT_EQ(lenet->numOfParams(), 160 + 8224 + 820224 + 10250);
    EXPECT_EQ(loadMLP()->numOfParams(), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
    EXPECT_TRUE(checkShapes(*lenet, {randomTensor({2, 1, 28, 28}, 1)}));
}

// One epoch of LeNet on Fashion-MNIST (Debian's dataset-fashion-mnist, installed by
// tools/setup.sh) must reach 85% test accuracy.
TEST(LeNet, OneEpochOnFashionMnistReaches85Percent) {
    const ImageSet train = loadMnistFormat(kFashionMnistDir, "train");
    const ImageSet test = loadMnistFormat(kFashionMnistDir, "t10k");
    manualSeed(1);
    auto lenet = loadLeNet();
    Adam adam(1e-3f);
    adam.setupOn(*lenet, true);
    CrossEntropy cost, vcost;
    HandlerOptions options{.batchsize = 128, .seed = 1, .progress = false};
    Trainer trainer(*lenet, cost, adam, options);
    Validator validator(*lenet, vcost, options);
    const double before = validator.validate(test.images, test.labels);
    double firstBatches = 0;
    trainer.onBatchFinish = [&](const BatchInfo& b) {
        if (b.batch == 19) firstBatches = b.meanError;
    };
    const double loss = trainer.train(train.images, train.labels);
    const double accuracy = 1.0 - validator.validate(test.images, test.labels);
    std::printf("LeNet, 1 epoch: train loss %.4f (first 20 batches %.4f), test accuracy %.2f%% (before %.2f%%), %.0f "
                "images/s\n",
                loss, firstBatches, 100 * accuracy, 100 * (1 - before), trainer.samplesPerSecond());
    EXPECT_LT(loss, 0.7 * firstBatches);
    EXPECT_GE(accuracy, 0.85);
}

} // namespace
} // namespace tessera
