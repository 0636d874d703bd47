// Data-parallel training across MPI ranks. The suite runs this program with
// `mpirun --oversubscribe -np 2`; every rank runs every test, in the same order (the tests
// make collective calls), and each rank also computes the single-process reference itself.
#include <gtest/gtest.h>

#include <cmath>

#include "GradCheck.h"

#include "backend/Random.h"
#include "containers/Sequential.h"
#include "data/Dataset.h"
#include "data/Loader.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "modules/Activation.h"
#include "modules/Linear.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {

CommunicatorPtr world() { return mpiWorld(); }

// Random 1x28x28 images with labels that depend on them (a learnable task).
DatasetPtr lenetData(int64_t n) {
    const auto [x, y] = testing::pixelTask(n);
    return tensorDataset(x, y, 10);
}

// Trains `steps` steps of `perRank` samples per rank on `ranks` ranks (this process being
// `rank`), or, with ranks == 1 and no DataParallel, one process on batches of the global
// size; returns the flat parameters.
// `accumulate` > 1: the gradients of that many batches per update (`steps` counts batches).
std::vector<float> train(const std::function<ModulePtr()>& make, const DatasetPtr& data, int64_t batch, int rank,
                         int ranks, const CommunicatorPtr& comm, const DataParallelOptions& options, int steps,
                         float lr = 0.05f, int64_t accumulate = 1) {
    manualSeed(3 + static_cast<uint64_t>(rank) * 100); // different starting points: the broadcast must fix them
    ModulePtr net = make();
    MomentumSGD sgd(lr, 0.9f);
    sgd.setupOn(*net, true);
    CrossEntropy cost;
    Trainer trainer(*net, cost, sgd, {.batchsize = batch, .progress = false, .accumulate = accumulate});
    std::unique_ptr<DataParallel> parallel;
    if (comm) {
        parallel = std::make_unique<DataParallel>(*net, sgd, comm, options);
        trainer.setDataParallel(parallel.get());
    }
    Loader loader(data, {}, {.batchsize = batch, .seed = 5, .workers = 1, .rank = rank, .ranks = ranks});
    int done = 0;
    trainer.onBatchFinish = [&](const BatchInfo&) {
        if (++done == steps) trainer.requestStop();
    };
    while (done < steps) trainer.train(loader);
    return sgd.globalParams().toVector<float>();
}

// 64 random 3x16x16 images, labelled by their index.
DatasetPtr cifarLikeData(uint64_t seed) {
    Generator gen(seed);
    Tensor x = Tensor::empty({64, 3, 16, 16});
    backendOf(x).fillUniform(x, 0.0f, 1.0f, gen);
    std::vector<int32_t> y(64);
    for (int i = 0; i < 64; ++i) y[size_t(i)] = i % 10;
    return tensorDataset(x, Tensor::fromVector({64}, y));
}

double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / (1e-3 + std::abs(double(b[i]))));
    }
    return worst;
}

TEST(DataParallel, TwoRanksOfBatchBMatchOneProcessOfBatch2B) {
    const CommunicatorPtr comm = world();
    ASSERT_EQ(comm->size(), 2) << "run with mpirun -np 2";
    const DatasetPtr data = lenetData(640);
    auto make = [] { return ModulePtr(loadLeNet()); };
    const std::vector<float> ranked = train(make, data, 16, comm->rank(), 2, comm, {}, 20);
    const std::vector<float> single = train(make, data, 32, 0, 1, nullptr, {}, 20);
    ASSERT_EQ(ranked.size(), single.size());
    // Same samples, same order, gradients averaged: equal up to float32 summation order.
    EXPECT_LT(maxRelativeDifference(ranked, single), 1e-3);
    // And not trivially: training moved the weights.
    manualSeed(3);
    const std::vector<float> start = [&] {
        ModulePtr net = make();
        MomentumSGD sgd(0.05f, 0.9f);
        sgd.setupOn(*net, true);
        return sgd.globalParams().toVector<float>();
    }();
    EXPECT_GT(maxRelativeDifference(single, start), 0.05);
}

// Gradient accumulation across ranks: 2 ranks adding up 2 batches of 8 each make the
// updates of one process on batches of 32 (the same 32 samples: global batches 2k and
// 2k+1 of 16 are the one process's batch k). 330 samples: each epoch ends with a global
// batch of 10 (5 per rank) alone in its group, as the one process's last batch of 10,
// so the shares and the short group are checked too; 22 updates span two epochs.
TEST(DataParallel, TwoRanksAccumulatingTwoBatchesMatchOneProcessOfTheirSum) {
    const CommunicatorPtr comm = world();
    const DatasetPtr data = lenetData(330);
    auto make = [] { return ModulePtr(loadLeNet()); };
    const std::vector<float> ranked =
        train(make, data, 8, comm->rank(), 2, comm, {.bucketBytes = 64 << 10}, 42, 0.05f, /*accumulate=*/2);
    const std::vector<float> single = train(make, data, 32, 0, 1, nullptr, {}, 22);
    EXPECT_LT(maxRelativeDifference(ranked, single), 1e-3);
    // Not the same as reducing every batch (4 ranks' worth of updates of 16 would differ).
    const std::vector<float> unaccumulated = train(make, data, 8, comm->rank(), 2, comm, {}, 22);
    EXPECT_GT(maxRelativeDifference(unaccumulated, single), 1e-2);
}

// With synchronised batch norm, the batches that do not reduce still gather the batch
// norms' statistics (forward) and gradient sums (backward) across the ranks; every rank
// ends with the same weights.
TEST(DataParallel, AccumulationWithSynchronisedBatchNormKeepsTheRanksTogether) {
    const CommunicatorPtr comm = world();
    const DatasetPtr data = cifarLikeData(8);
    auto make = [] { return ModulePtr(loadResNet(18, ResNetStem::cifar, 10)); };
    const DataParallelOptions synced{.bucketBytes = 4 << 20, .syncBatchNorm = true};
    const std::vector<float> mine = train(make, data, 4, comm->rank(), 2, comm, synced, 6, 0.01f, 3);
    Tensor theirs = Tensor::fromVector({static_cast<int64_t>(mine.size())}, mine);
    comm->broadcast(theirs, 0);
    EXPECT_EQ(theirs.toVector<float>(), mine);
    EXPECT_EQ(BatchNormND::sync(), nullptr);
}

TEST(DataParallel, BucketsReducedDuringBackwardEqualOneReductionAfterIt) {
    const CommunicatorPtr comm = world();
    const DatasetPtr data = lenetData(320);
    auto make = [] { return ModulePtr(loadLeNet()); };
    // LeNet's parameters in buckets of 64 KB: several, reduced while backward runs.
    const std::vector<float> bucketed =
        train(make, data, 16, comm->rank(), 2, comm, {.bucketBytes = 64 << 10, .overlap = true}, 8);
    const std::vector<float> whole =
        train(make, data, 16, comm->rank(), 2, comm, {.bucketBytes = size_t{1} << 40, .overlap = false}, 8);
    EXPECT_EQ(bucketed, whole); // two ranks: every element is one exact sum either way
}

TEST(DataParallel, BucketsHoldWholeParametersInBackwardOrder) {
    const CommunicatorPtr comm = world();
    manualSeed(1);
    auto net = loadLeNet();
    SGD sgd(0.1f);
    sgd.setupOn(*net, true);
    DataParallel parallel(*net, sgd, comm, {.bucketBytes = 64 << 10});
    const auto& b = parallel.buckets();
    ASSERT_GT(b.size(), 2u);
    EXPECT_EQ(b.front().second, net->numOfParams()); // the last parameters first
    EXPECT_EQ(b.back().first, 0);
    for (size_t i = 1; i < b.size(); ++i) EXPECT_EQ(b[i].second, b[i - 1].first);
}

TEST(DataParallel, EveryRankOfAResNetWithBatchNormEndsWithTheSameWeights) {
    const CommunicatorPtr comm = world();
    const DatasetPtr data = cifarLikeData(4);
    auto make = [] { return ModulePtr(loadResNet(18, ResNetStem::cifar, 10)); };
    const std::vector<float> mine = train(make, data, 8, comm->rank(), 2, comm, {.bucketBytes = 4 << 20}, 3);
    // Batch-norm statistics are per rank (the default), so this is not the 2B run (the
    // synchronised case is the test above); but the updates are
    // the same everywhere: rank 0's weights arrive unchanged at rank 1.
    Tensor theirs = Tensor::fromVector({static_cast<int64_t>(mine.size())}, mine);
    comm->broadcast(theirs, 0);
    EXPECT_EQ(theirs.toVector<float>(), mine);
}

TEST(DataParallel, TwoRanksWithSynchronisedBatchNormMatchOneProcessOfBatch2B) {
    const CommunicatorPtr comm = world();
    Generator gen(6);
    const int64_t n = 320, global = 16, steps = 20;
    Tensor x = Tensor::empty({n, 3, 16, 16});
    backendOf(x).fillUniform(x, 0.0f, 1.0f, gen);
    std::vector<int32_t> y(static_cast<size_t>(n));
    const float* p = x.data<float>();
    for (size_t i = 0; i < y.size(); ++i) y[i] = p[i * 768] > 0.5f ? 1 : (p[i * 768 + 300] > 0.5f ? 2 : 0);
    const DatasetPtr data = tensorDataset(x, Tensor::fromVector({n}, y), 10);
    // The tolerance is float32's own: the one-process run against itself with the samples
    // of every batch in reverse order (the same sums, added in another order).
    const std::vector<int64_t> order = epochOrder(n, 5, 0, true); // the loader's (seed 5)
    Tensor xr = x.clone();
    std::vector<int32_t> yr(y.size());
    for (int64_t b = 0; b < n / global; ++b) {
        for (int64_t k = 0; k < global; ++k) {
            const int64_t to = order[size_t(b * global + k)], from = order[size_t(b * global + global - 1 - k)];
            std::copy(p + from * 768, p + (from + 1) * 768, xr.data<float>() + to * 768);
            yr[size_t(to)] = y[size_t(from)];
        }
    }
    const DatasetPtr reversed = tensorDataset(xr, Tensor::fromVector({n}, yr), 10);
    auto make = [] { return ModulePtr(loadResNet(18, ResNetStem::cifar, 10)); };
    // A small step: batch norm makes ResNet-18's trajectory on 16 random images per step
    // chaotic, and at lr 0.05 even float32's reduction order moves the weights as far as
    // training does; at 5e-4 it moves them ~9% of that, and per-rank statistics ~70%.
    const float lr = 0.0005f;
    const std::vector<float> start = train(make, data, global, 0, 1, nullptr, {}, 0, lr);
    const std::vector<float> single = train(make, data, global, 0, 1, nullptr, {}, steps, lr);
    // Distances in units of how far training moved the weights (a max over elements would
    // be ruled by parameters near zero, which batch norm makes sensitive).
    double moved = 0;
    for (size_t i = 0; i < start.size(); ++i) moved += (double(single[i]) - start[i]) * (double(single[i]) - start[i]);
    auto distance = [&](const std::vector<float>& a) {
        double d = 0;
        for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - single[i]) * (double(a[i]) - single[i]);
        return std::sqrt(d / moved);
    };
    const double noise = distance(train(make, reversed, global, 0, 1, nullptr, {}, steps, lr));
    const DataParallelOptions synced{.bucketBytes = 4 << 20, .syncBatchNorm = true};
    const double ranked = distance(train(make, data, global / 2, comm->rank(), 2, comm, synced, steps, lr));
    const double perRank =
        distance(train(make, data, global / 2, comm->rank(), 2, comm, {.bucketBytes = 4 << 20}, steps, lr));
    std::printf("rank %d: after %lld steps, distance from the one-process run (over the distance training moved it): "
                "synchronised %.3g, per-rank statistics %.3g; float32 reduction order alone %.3g\n",
                comm->rank(), static_cast<long long>(steps), ranked, perRank, noise);
    EXPECT_LT(ranked, 3 * noise + 1e-4);
    // Per-rank statistics (the default) are another computation, visibly so.
    EXPECT_GT(perRank, 3 * std::max(ranked, noise));
    // The link is released with its DataParallel.
    EXPECT_EQ(BatchNormND::sync(), nullptr);
}

TEST(DataParallel, RanksWithDifferentModelsAreNamedAtStartUp) {
    const CommunicatorPtr comm = world();
    manualSeed(1);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(4, comm->rank() == 1 ? 5 : 3));
    SGD sgd(0.1f);
    sgd.setupOn(*net, true);
    try {
        DataParallel parallel(*net, sgd, comm);
        ADD_FAILURE() << "different models went unnoticed";
    } catch (const ModuleError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("rank 1 (25 parameters)"), std::string::npos) << what;
        EXPECT_NE(what.find("rank 0 has 15 parameters"), std::string::npos) << what;
    }
}

TEST(DataParallel, NeedsGlobalState) {
    const CommunicatorPtr comm = world();
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Linear>(4, 3));
    SGD sgd(0.1f);
    sgd.setupOn(*net, false);
    EXPECT_THROW(DataParallel(*net, sgd, comm), ModuleError);
}

TEST(DataParallel, ShardsCoverTheGlobalBatchOnce) {
    const CommunicatorPtr comm = world();
    std::vector<int32_t> ids(21);
    for (int i = 0; i < 21; ++i) ids[size_t(i)] = i;
    const Tensor x = Tensor::zeros({21, 1, 1, 1});
    Loader loader(tensorDataset(x, Tensor::fromVector({21}, ids), 21), {},
                  {.batchsize = 4, .seed = 2, .rank = comm->rank(), .ranks = 2});
    EXPECT_EQ(loader.batches(), 3); // 8 + 8 + 5 samples
    const std::vector<int64_t> order = epochOrder(21, 2, 0, true);
    loader.start(0);
    for (int64_t b = 0; b < 3; ++b) {
        const DataBatch batch = *loader.next();
        const int64_t start = b * 8, m = std::min<int64_t>(21, start + 8) - start;
        EXPECT_EQ(batch.globalSamples, m);
        const int64_t begin = start + m * comm->rank() / 2, end = start + m * (comm->rank() + 1) / 2;
        std::vector<int32_t> want;
        for (int64_t i = begin; i < end; ++i) want.push_back(static_cast<int32_t>(order[size_t(i)]));
        EXPECT_EQ(batch.labels.toVector<int32_t>(), want) << "batch " << b;
    }
}

} // namespace
} // namespace tessera
