// tessera train: trains a model from the zoo on an MNIST-format data set, printing
// progress, the test accuracy after each epoch and the total time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "Commands.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "io/Hdf5.h"
#include "models/LeNet.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Idx.h"
#include "training/Optimizer.h"

namespace tessera::cli {

namespace {
struct TrainArgs {
    std::string model = "lenet";
    std::string data = "fashion-mnist";
    int64_t epochs = 10;
    int64_t batch = 128;
    float lr = -1.0f;
    std::string optimizer = "adam";
    uint64_t seed = 1;
    int64_t limit = 0;
    bool quiet = false;
    std::string save;
    std::string device = "cpu";
};

// "cpu", "cuda" or "cuda:N"; a CUDA device must exist.
Device parseDevice(const std::string& text) {
    if (text == "cpu") return Device::cpu();
    int index = 0;
    if (text != "cuda") {
        size_t used = 0;
        if (text.rfind("cuda:", 0) != 0)
            throw std::invalid_argument("--device: expected cpu, cuda or cuda:N, got '" + text + "'");
        try {
            index = std::stoi(text.substr(5), &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != text.size() - 5 || index < 0) {
            throw std::invalid_argument("--device: expected cpu, cuda or cuda:N, got '" + text + "'");
        }
    }
    if (index >= cudaDeviceCount()) {
        throw std::invalid_argument(
            "--device " + text + ": this process sees " + std::to_string(cudaDeviceCount()) + " CUDA device(s)" +
            (cudaDeviceCount() == 0 ? " (no GPU or driver, or Tessera built without CUDA)" : ""));
    }
    return Device::cuda(index);
}

int runTrain(const TrainArgs& a) {
    const auto t0 = std::chrono::steady_clock::now();
    const Device device = parseDevice(a.device);
    const std::string dir = a.data == "fashion-mnist" ? kFashionMnistDir : a.data;
    const ImageSet train = loadMnistFormat(dir, "train", a.limit);
    const ImageSet test = loadMnistFormat(dir, "t10k", a.limit);
    std::printf("data: %s, %lld training and %lld test images of %s\n", dir.c_str(),
                static_cast<long long>(train.images.shape()[0]), static_cast<long long>(test.images.shape()[0]),
                train.images.shape().str().c_str());

    manualSeed(a.seed);
    std::shared_ptr<Sequential> net;
    if (a.model == "lenet") {
        net = loadLeNet();
    } else if (a.model == "mlp") {
        net = loadMLP({train.images.numel() / train.images.shape()[0], 1024, 1024, 10});
    } else {
        throw std::invalid_argument("unknown model '" + a.model + "'; expected lenet or mlp");
    }
    std::printf("model: %s, %lld parameters; optimizer: %s", a.model.c_str(),
                static_cast<long long>(net->numOfParams()), a.optimizer.c_str());
    auto optimizer = makeOptimizer(a.optimizer, a.lr);
    std::printf(" (learning rate %g), batch %lld, seed %llu, device %s\n", optimizer->learnRate(),
                static_cast<long long>(a.batch), static_cast<unsigned long long>(a.seed), device.str().c_str());
    net->to(device); // before the optimizer: its state lives beside the parameters
    optimizer->setupOn(*net, true);
    if (!device.isCpu()) {
        // Time the convolution algorithms once for the batch shape (cuDNN's heuristic can
        // be far off); a smaller last batch keeps the heuristic's choice.
        std::vector<int64_t> dims = train.images.shape().dims();
        dims[0] = std::min<int64_t>(a.batch, dims[0]);
        net->optimizeForShape({Shape(dims)}, size_t{512} << 20);
    }

    CrossEntropy cost;
    HandlerOptions options{.batchsize = a.batch, .seed = a.seed, .progress = !a.quiet, .out = stdout, .device = device};
    Trainer trainer(*net, cost, *optimizer, options);
    CrossEntropy validationCost;
    Validator validator(*net, validationCost, options);
    double accuracy = 0.0;
    for (int64_t e = 0; e < a.epochs; ++e) {
        const double loss = trainer.train(train.images, train.labels);
        accuracy = 1.0 - validator.validate(test.images, test.labels);
        std::printf("epoch %lld/%lld: train loss %.4f, test accuracy %.2f%% (%.0f images/s)\n",
                    static_cast<long long>(e + 1), static_cast<long long>(a.epochs), loss, 100.0 * accuracy,
                    trainer.samplesPerSecond());
        std::fflush(stdout);
    }
    if (!a.save.empty()) {
        saveModel(*net, a.save);
        std::printf("saved the model (blueprint included) to %s\n", a.save.c_str());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("final test accuracy %.2f%%, total time %.1f s\n", 100.0 * accuracy, seconds);
    return 0;
}
} // namespace

std::function<int()> addTrain(CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    CLI::App* cmd = app.add_subcommand("train", "Train a model on an MNIST-format data set");
    cmd->add_option("--model", args->model, "lenet or mlp")->capture_default_str();
    cmd->add_option("--data", args->data, "fashion-mnist (the Debian package) or a directory of IDX files")
        ->capture_default_str();
    cmd->add_option("--epochs", args->epochs, "passes over the training set")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cmd->add_option("--batch", args->batch, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--lr", args->lr, "learning rate (default: the optimizer's)");
    cmd->add_option("--optimizer", args->optimizer,
                    "sgd, momentum, nesterov, adam, adagrad, adadelta, rmsprop, rmspropgraves or smorms3")
        ->capture_default_str();
    cmd->add_option("--seed", args->seed, "seed of the initialisation and the batch order")->capture_default_str();
    cmd->add_option("--limit", args->limit, "use only the first N images of each split (0: all)")
        ->capture_default_str();
    cmd->add_flag("--quiet", args->quiet, "no progress line");
    cmd->add_option("--save", args->save, "write the trained model to this HDF5 file (blueprint included)");
    cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
    return [args] { return runTrain(*args); };
}

} // namespace tessera::cli
