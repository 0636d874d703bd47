// Checkpoints: a run stopped in the middle of an epoch and resumed from its checkpoint by
// fresh objects gives bit-identical losses and weights to a run never stopped (Adam's state
// and step count, batch norm's running statistics, dropout's stream, the batch order and
// the epoch's mean error all carry over); mismatches are clear errors.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "containers/Sequential.h"
#include "io/Hdf5.h"
#include "modules/Activation.h"
#include "modules/BatchNormND.h"
#include "modules/Dropout.h"
#include "modules/Linear.h"
#include "training/Checkpoint.h"
#include "training/CrossEntropy.h"

namespace tessera {
namespace {
using namespace testing;

std::shared_ptr<Sequential> smallNet(uint64_t seed, int64_t hidden = 16) {
    manualSeed(seed);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(6, hidden))
        .append(std::make_shared<BatchNorm1D>(hidden))
        .append(std::make_shared<Activation>(ActivationKind::relu))
        .append(std::make_shared<Dropout>(DropoutOptions{.p = 0.2f}))
        .append(std::make_shared<Linear>(hidden, 3));
    return net;
}

struct Data {
    Tensor x, y;
};

Data dataSet() {
    const Tensor x = randomTensor({200, 6}, 3);
    std::vector<int32_t> y;
    const std::vector<float> v = x.toVector<float>();
    for (size_t i = 0; i < 200; ++i) y.push_back(v[i * 6] > 0 ? (v[i * 6 + 1] > 0 ? 2 : 1) : 0);
    return {x, Tensor::fromVector({200}, y)};
}

std::vector<float> weights(const Module& m) {
    std::vector<float> all;
    for (const auto& [name, v] : m.namedParams()) {
        const std::vector<float> w = v->data.toVector<float>();
        all.insert(all.end(), w.begin(), w.end());
    }
    for (const auto& [name, t] : m.namedAttrs()) {
        const std::vector<float> w = t.toVector<float>();
        all.insert(all.end(), w.begin(), w.end());
    }
    return all;
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const HandlerOptions kOptions{.batchsize = 32, .seed = 9, .progress = false};

TEST(Checkpoint, ResumedRunIsBitIdentical) {
    const Data d = dataSet();
    // Uninterrupted: three epochs.
    auto a = smallNet(1);
    Adam adamA(0.01f);
    adamA.setupOn(*a, true);
    CrossEntropy costA;
    Trainer trainerA(*a, costA, adamA, kOptions);
    std::vector<double> lossesA;
    for (int e = 0; e < 3; ++e) lossesA.push_back(trainerA.train(d.x, d.y));

    // Stopped after batch 3 of epoch 1, checkpointed; then resumed by fresh objects.
    const std::string path = ::testing::TempDir() + "tessera_checkpoint.h5";
    std::vector<double> lossesB;
    std::vector<float> atCheckpoint;
    {
        auto b = smallNet(1);
        Adam adam(0.01f);
        adam.setupOn(*b, true);
        CrossEntropy cost;
        Trainer trainer(*b, cost, adam, kOptions);
        trainer.onBatchFinish = [&](const BatchInfo& info) {
            if (info.epoch == 1 && info.batch == 3) {
                saveCheckpoint(path, *b, adam, trainer);
                atCheckpoint = weights(*b);
                trainer.requestStop();
            }
        };
        lossesB.push_back(trainer.train(d.x, d.y));
        trainer.train(d.x, d.y); // stops early
        EXPECT_EQ(trainer.position().epoch, 1);
        EXPECT_EQ(trainer.position().batch, 4);
    }
    manualSeed(12345); // the resumed process's own state differs: the checkpoint restores it
    auto c = smallNet(2);
    Adam adam(0.01f);
    adam.setupOn(*c, true);
    CrossEntropy cost;
    Trainer trainer(*c, cost, adam, kOptions);
    loadCheckpoint(path, *c, adam, trainer);
    EXPECT_EQ(adam.steps(), 7 + 4);
    EXPECT_TRUE(bitEqual(weights(*c), atCheckpoint));
    lossesB.push_back(trainer.train(d.x, d.y)); // the rest of epoch 1
    lossesB.push_back(trainer.train(d.x, d.y));
    ASSERT_EQ(lossesB.size(), 3u);
    for (int e = 0; e < 3; ++e) EXPECT_EQ(lossesB[e], lossesA[e]) << "epoch " << e; // exactly
    EXPECT_TRUE(bitEqual(weights(*c), weights(*a)));
    for (const auto& [name, v] : a->namedParams()) {
        for (const auto& [n2, v2] : c->namedParams()) {
            if (n2 == name) {
                EXPECT_TRUE(bitEqual(v->data.toVector<float>(), v2->data.toVector<float>())) << name;
            }
        }
    }
    for (const auto& [name, t] : a->namedAttrs()) {
        for (const auto& [n2, t2] : c->namedAttrs()) {
            if (n2 == name) {
                EXPECT_TRUE(bitEqual(t.toVector<float>(), t2.toVector<float>())) << name;
            }
        }
    }
    // A checkpoint is a model file too.
    auto plain = smallNet(3);
    loadModel(*plain, path);
}

// Resident pages of this process.
int64_t residentBytes() {
    std::ifstream statm("/proc/self/statm");
    int64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * 4096;
}

// 10,000 training steps (batch norm, dropout, Adam) leave the backend's live memory and
// the process's resident size where they were after the first hundred: nothing grows per
// step.
// A loop of one's own, without a Trainer: a checkpoint keeps the model, the optimizer's
// state and the random streams, so the steps after loading equal the steps never stopped;
// loading it into a Trainer asks for a position it does not have.
TEST(Checkpoint, WithoutATrainer) {
    const Data d = dataSet();
    const std::string path = ::testing::TempDir() + "tessera_own_loop.ckpt";
    auto step = [&](Module& net, Optimizer& opt, int64_t i) {
        CrossEntropy cost;
        const CostResult r = cost(net(d.x.slice(i * 20, i * 20 + 20).clone()), d.y.slice(i * 20, i * 20 + 20).clone());
        opt.zeroGradParams();
        net.backward(r.grad[0]);
        opt.update();
    };
    auto a = smallNet(5);
    Adam adamA(1e-2f);
    adamA.setupOn(*a, true);
    for (int64_t i = 0; i < 3; ++i) step(*a, adamA, i);
    saveCheckpoint(path, *a, adamA, nullptr, "own loop");
    for (int64_t i = 3; i < 6; ++i) step(*a, adamA, i);

    auto b = smallNet(77); // other weights, overwritten by the load
    Adam adamB(1e-2f);
    adamB.setupOn(*b, true);
    std::string notes;
    loadCheckpoint(path, *b, adamB, nullptr, &notes);
    EXPECT_EQ(notes, "own loop");
    EXPECT_EQ(adamB.steps(), 3);
    for (int64_t i = 3; i < 6; ++i) step(*b, adamB, i);
    EXPECT_TRUE(bitEqual(weights(*a), weights(*b)));

    CrossEntropy cost;
    Trainer trainer(*b, cost, adamB, kOptions);
    EXPECT_TRUE(throwsModuleError([&] { loadCheckpoint(path, *b, adamB, trainer); }, {"saved without a Trainer"}));
    std::filesystem::remove(path);
}

TEST(Checkpoint, MemoryStaysFlatOverTenThousandSteps) {
    const Data d = dataSet();
    auto net = smallNet(1);
    Adam adam(0.01f);
    adam.setupOn(*net, true);
    CrossEntropy cost;
    const Tensor x = d.x.slice(0, 16), y = d.y.slice(0, 16);
    Backend& be = backendOf(x);
    auto step = [&] {
        CostResult r = cost((*net)(x), y);
        adam.zeroGradParams();
        net->backward(r.grad, true, false, 1.0f, 1.0f);
        adam.update();
    };
    for (int i = 0; i < 100; ++i) step();
    const size_t live = be.memoryStats().current;
    const int64_t rss = residentBytes();
    for (int i = 0; i < 9900; ++i) step();
    EXPECT_EQ(be.memoryStats().current, live);
#if defined(__SANITIZE_ADDRESS__)
    (void)rss; // AddressSanitizer's quarantine holds freed blocks back: resident size grows by design
#else
    EXPECT_LT(residentBytes() - rss, int64_t{2} << 20)
        << "resident size grew by " << (residentBytes() - rss) << " bytes";
#endif
}

// The weight average: each update is avg <- d avg + (1 - d) w against a hand loop (d
// warming up as min(decay, (1 + t) / (10 + t))), over the parameters and batch norm's
// running statistics; swap exchanges, twice restores; a checkpoint keeps it and a resumed
// average goes on exactly; the mismatches are errors.
TEST(WeightAverage, AveragesSwapsAndResumes) {
    const Data d = dataSet();
    auto net = smallNet(1);
    MomentumSGD sgd(0.05f);
    sgd.setupOn(*net, true);
    WeightAverage avg(*net, 0.9f);
    EXPECT_EQ(avg.state().size(), net->namedParams().size() + net->namedAttrs().size());
    std::vector<double> want;
    for (float v : weights(*net)) want.push_back(v);
    CrossEntropy cost;
    Trainer trainer(*net, cost, sgd, kOptions);
    trainer.onBatchFinish = [&](const BatchInfo&) {
        const double dt = std::min(0.9, (1.0 + avg.updates()) / (10.0 + avg.updates()));
        EXPECT_FLOAT_EQ(avg.currentDecay(), static_cast<float>(dt));
        const std::vector<float> w = weights(*net);
        for (size_t i = 0; i < w.size(); ++i) want[i] = dt * want[i] + (1 - dt) * w[i];
        avg.update();
    };
    trainer.train(d.x, d.y); // 7 batches
    EXPECT_EQ(avg.updates(), 7);
    const std::vector<float> live = weights(*net);
    avg.swap();
    EXPECT_TRUE(avg.swapped());
    const std::vector<float> averaged = weights(*net);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(averaged[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
    EXPECT_THROW(avg.update(), ModuleError);
    const std::string path = ::testing::TempDir() + "tessera_checkpoint_avg.h5";
    EXPECT_NE(errorOf([&] { saveCheckpoint(path, *net, sgd, trainer, &avg); }).find("swap them back first"),
              std::string::npos);
    avg.swap();
    EXPECT_TRUE(bitEqual(weights(*net), live));
    // withAverages puts the averages in for the work and takes them out after, also when the
    // work throws.
    withAverages(&avg, [&] { EXPECT_TRUE(bitEqual(weights(*net), averaged)); });
    EXPECT_THROW(withAverages(&avg, [] { throw IoError("disk full"); }), IoError);
    EXPECT_FALSE(avg.swapped());
    EXPECT_TRUE(bitEqual(weights(*net), live));
    saveCheckpoint(path, *net, sgd, trainer, &avg);

    // Resumed by fresh objects: the same average, and the next update is the same too.
    auto other = smallNet(2);
    MomentumSGD sgd2(0.05f);
    sgd2.setupOn(*other, true);
    CrossEntropy cost2;
    Trainer trainer2(*other, cost2, sgd2, kOptions);
    WeightAverage avg2(*other, 0.9f);
    loadCheckpoint(path, *other, sgd2, trainer2, &avg2);
    EXPECT_EQ(avg2.updates(), 7);
    avg.update();
    avg2.update();
    const auto s1 = avg.state(), s2 = avg2.state();
    ASSERT_EQ(s1.size(), s2.size());
    for (size_t i = 0; i < s1.size(); ++i) {
        EXPECT_EQ(s1[i].first, s2[i].first);
        EXPECT_TRUE(bitEqual(s1[i].second.toVector<float>(), s2[i].second.toVector<float>())) << s1[i].first;
    }
    // Saved with an average and resumed without (or the other way round), another decay.
    EXPECT_NE(errorOf([&] { loadCheckpoint(path, *other, sgd2, trainer2); }).find("saved with a weight average"),
              std::string::npos);
    WeightAverage slower(*other, 0.99f);
    EXPECT_NE(errorOf([&] { loadCheckpoint(path, *other, sgd2, trainer2, &slower); }).find("weight-average decay"),
              std::string::npos);
    saveCheckpoint(path, *net, sgd, trainer);
    EXPECT_NE(errorOf([&] { loadCheckpoint(path, *other, sgd2, trainer2, &avg2); }).find("saved without a weight"),
              std::string::npos);
    EXPECT_THROW(WeightAverage(*net, 1.0f), ModuleError);
    EXPECT_THROW(WeightAverage(*net, -0.5f), ModuleError);
    std::filesystem::remove(path);
}

TEST(Checkpoint, MismatchesAreClearErrors) {
    const Data d = dataSet();
    auto net = smallNet(1);
    Adam adam;
    adam.setupOn(*net, true);
    CrossEntropy cost;
    Trainer trainer(*net, cost, adam, kOptions);
    const std::string path = ::testing::TempDir() + "tessera_checkpoint_m.h5";
    saveCheckpoint(path, *net, adam, trainer);
    {
        auto other = smallNet(1);
        Adam a2;
        a2.setupOn(*other, true);
        CrossEntropy c2;
        HandlerOptions o = kOptions;
        o.batchsize = 16;
        Trainer t2(*other, c2, a2, o);
        EXPECT_NE(
            errorOf([&] { loadCheckpoint(path, *other, a2, t2); }).find("saved with batch size 32, resumed with 16"),
            std::string::npos);
        MomentumSGD sgd;
        sgd.setupOn(*other, true);
        Trainer t3(*other, c2, sgd, kOptions);
        EXPECT_NE(errorOf([&] { loadCheckpoint(path, *other, sgd, t3); }).find("saved with optimizer Adam"),
                  std::string::npos);
        HandlerOptions accumulating = kOptions;
        accumulating.accumulate = 2;
        Trainer t5(*other, c2, a2, accumulating);
        EXPECT_NE(errorOf([&] {
                      loadCheckpoint(path, *other, a2, t5);
                  }).find("saved with gradient accumulation over 1 batches, resumed with 2 batches"),
                  std::string::npos);
    }
    // A model file without checkpoint data.
    const std::string model = ::testing::TempDir() + "tessera_plain_model.h5";
    saveModel(*net, model);
    EXPECT_NE(errorOf([&] { loadCheckpoint(model, *net, adam, trainer); }).find("without checkpoint data"),
              std::string::npos);
    // A model of another shape: the strict load names the parameters; nothing changes.
    auto wide = smallNet(1, 17);
    Adam a4;
    a4.setupOn(*wide, true);
    Trainer t4(*wide, cost, a4, kOptions);
    const std::vector<float> before = weights(*wide);
    EXPECT_FALSE(errorOf([&] { loadCheckpoint(path, *wide, a4, t4); }).empty());
    EXPECT_TRUE(bitEqual(weights(*wide), before));
    // A record whose numbers do not fit their types (hand-edited, or damaged): an IoError
    // naming the file, nothing converted out of range.
    const std::string record = loadExtras(path).record;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"\"batchsize\":32", "\"batchsize\":1e40"},
             {"\"batchsize\":32", "\"batchsize\":166666666666666666666666666666666"},
             {"\"steps\":0", "\"steps\":2.5"},
             {"\"lossScale\":1.0", "\"lossScale\":1e300"}}) {
        const size_t at = record.find(from);
        ASSERT_NE(at, std::string::npos) << from << " in " << record;
        FileExtras extras = loadExtras(path);
        extras.record = std::string(record).replace(at, from.size(), to);
        const std::string bad = ::testing::TempDir() + "tessera_checkpoint_bad.h5";
        saveModel(*net, bad, SaveOptions{}, extras);
        const std::string e = errorOf([&] { loadCheckpoint(bad, *net, adam, trainer); });
        EXPECT_NE(e.find("checkpoint " + bad), std::string::npos) << to << ": " << e;
        EXPECT_TRUE(e.find("expected an integer") != std::string::npos || e.find("beyond float") != std::string::npos)
            << to << ": " << e;
        std::filesystem::remove(bad);
    }
    std::filesystem::remove(path);
    std::filesystem::remove(model);
}

} // namespace
} // namespace tessera
