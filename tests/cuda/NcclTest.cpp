// The NCCL communicator in a single-rank job on the first GPU: its collectives, and
// DataParallel training through it against the same training without it. The GPU cases
// skip without a CUDA device; the error cases run everywhere.
#include <gtest/gtest.h>

#include <cstdlib>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "data/Dataset.h"
#include "data/Loader.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "models/LeNet.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {

#define REQUIRE_GPU()                                                                                                  \
    do {                                                                                                               \
        if (cudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";                                                  \
        if (!ncclBuilt()) GTEST_SKIP() << "this build has no NCCL";                                                    \
    } while (0)

// A single-rank job from the environment's defaults.
CommunicatorPtr singleRank() {
    unsetenv("TESSERA_NCCL_RANK");
    unsetenv("TESSERA_NCCL_SIZE");
    return ncclWorld(Device::cuda(0));
}

TEST(Nccl, SingleRankCollectivesOnTheDevice) {
    REQUIRE_GPU();
    const CommunicatorPtr comm = singleRank();
    EXPECT_EQ(comm->rank(), 0);
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->device(), Device::cuda(0));
    EXPECT_NE(comm->describe().find("NCCL"), std::string::npos) << comm->describe();
    const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
    const Tensor t = Tensor::fromVector({5}, values, Device::cuda(0));
    comm->allReduceSum(t); // the sum over one rank
    EXPECT_EQ(t.toVector<float>(), values);
    comm->broadcast(t, 0);
    EXPECT_EQ(t.toVector<float>(), values);
    EXPECT_EQ(comm->allGather(42), std::vector<int64_t>{42});
    try {
        comm->allReduceSum(Tensor::fromVector({5}, values));
        ADD_FAILURE() << "a host tensor went to NCCL";
    } catch (const BackendError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
        EXPECT_NE(what.find("cpu"), std::string::npos) << what;
    }
}

DatasetPtr lenetData(int64_t n) {
    const auto [x, y] = testing::pixelTask(n);
    return tensorDataset(x, y, 10);
}

// 20 steps of LeNet on the GPU through Trainer, with DataParallel over `comm` or without.
std::vector<float> trainOnGpu(const CommunicatorPtr& comm) {
    manualSeed(3);
    ModulePtr net = loadLeNet();
    net->to(Device::cuda(0));
    MomentumSGD sgd(0.05f, 0.9f);
    sgd.setupOn(*net, true);
    CrossEntropy cost;
    Trainer trainer(*net, cost, sgd, {.batchsize = 32, .progress = false, .device = Device::cuda(0)});
    std::unique_ptr<DataParallel> parallel;
    if (comm) {
        parallel = std::make_unique<DataParallel>(*net, sgd, comm);
        trainer.setDataParallel(parallel.get());
    }
    Loader loader(lenetData(640), {}, {.batchsize = 32, .seed = 5, .workers = 1});
    int done = 0;
    trainer.onBatchFinish = [&](const BatchInfo&) {
        if (++done == 20) trainer.requestStop();
    };
    while (done < 20) trainer.train(loader);
    return sgd.globalParams().toVector<float>();
}

// The trainer's data-parallel path over NCCL: weights broadcast from rank 0, gradients
// reduced in buckets; over one rank it must give exactly the weights plain training gives.
TEST(Nccl, SingleRankDataParallelTrainingEqualsPlainTraining) {
    REQUIRE_GPU();
    testing::CudaDeterministic deterministic; // the same algorithms, the same bits, in both runs
    const std::vector<float> parallel = trainOnGpu(singleRank());
    const std::vector<float> plain = trainOnGpu(nullptr);
    ASSERT_EQ(parallel.size(), plain.size());
    EXPECT_EQ(parallel, plain);
    const std::vector<float> start = [] {
        manualSeed(3);
        return loadLeNet()->namedParams().at(0).second->data.toVector<float>();
    }();
    EXPECT_NE(std::vector<float>(parallel.begin(), parallel.begin() + static_cast<int64_t>(start.size())), start)
        << "the weights did not move";
}

// A communicator that carries nothing, on a device of its choice (a GPU that need not exist).
class OneRankOn : public Communicator {
public:
    explicit OneRankOn(Device d) : d_(d) {}
    int rank() const override { return 0; }
    int size() const override { return 1; }
    Device device() const override { return d_; }
    void allReduceSum(const Tensor&) override {}
    void broadcast(const Tensor&, int) override {}
    std::vector<int64_t> allGather(int64_t v) override { return {v}; }
    std::string describe() const override { return "one rank on " + d_.str(); }
    [[noreturn]] void abort(int code) override { std::_Exit(code); }

private:
    Device d_;
};

TEST(Nccl, AModelOnAnotherDeviceThanTheCommunicatorsIsNamed) {
    ModulePtr net = loadLeNet(); // on the CPU
    SGD sgd(0.1f);
    sgd.setupOn(*net, true);
    try {
        DataParallel dp(*net, sgd, std::make_shared<OneRankOn>(Device::cuda(0)));
        ADD_FAILURE() << "a CPU model went to a GPU communicator";
    } catch (const ModuleError& e) {
        const std::string what = e.what();
        for (const char* part : {"cpu", "cuda:0", "NCCL"}) EXPECT_NE(what.find(part), std::string::npos) << what;
    }
}

TEST(Nccl, WithoutAGpuOrNcclIsAClearError) {
    if (cudaDeviceCount() > 0 && ncclBuilt()) GTEST_SKIP() << "this machine has a GPU and NCCL";
    EXPECT_THROW(ncclWorld(Device::cuda(0)), BackendError);
    EXPECT_THROW(ncclWorld(Device::cpu()), BackendError);
}

} // namespace
} // namespace tessera
