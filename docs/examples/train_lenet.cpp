// Train LeNet on part of Fashion-MNIST for one epoch and report the test accuracy.
#include <cstdio>

#include "backend/Random.h"
#include "data/Idx.h"
#include "models/LeNet.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

int main() {
    using namespace tessera;
    // The first 6000 training and 2000 test images of Debian's dataset-fashion-mnist.
    ImageSet train = loadMnistFormat(kFashionMnistDir, "train", 6000);
    ImageSet test = loadMnistFormat(kFashionMnistDir, "t10k", 2000);

    manualSeed(1);
    auto net = loadLeNet();
    Adam adam(1e-3f);
    adam.setupOn(*net, /*useGlobalState=*/true);

    CrossEntropy cost, validationCost;
    Trainer trainer(*net, cost, adam, {.batchsize = 64, .seed = 1, .progress = false});
    Validator validator(*net, validationCost, {.batchsize = 500});
    trainer.onEpochFinish = [](const BatchInfo& b) {
        std::printf("epoch %lld: mean loss %.4f\n", static_cast<long long>(b.epoch + 1), b.meanError);
    };
    trainer.train(train.images, train.labels);
    const double accuracy = 1.0 - validator.validate(test.images, test.labels);
    std::printf("test accuracy %.1f%%\n", 100.0 * accuracy);
    return accuracy > 0.6 ? 0 : 1;
}
