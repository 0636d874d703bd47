// Train LeNet on part of Fashion-MNIST on the first GPU, save it, and load it on the CPU.
#include <cstdio>

#include "backend/Backend.h"
#include "backend/Random.h"
#include "data/Idx.h"
#include "io/Hdf5.h"
#include "models/LeNet.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

int main() {
    using namespace tessera;
    if (cudaDeviceCount() == 0) {
        std::printf("no CUDA device: nothing to train on\n");
        return 0;
    }
    const Device gpu = Device::cuda(0);
    ImageSet train = loadMnistFormat(kFashionMnistDir, "train", 6000);
    ImageSet test = loadMnistFormat(kFashionMnistDir, "t10k", 2000);

    manualSeed(1);
    auto net = loadLeNet();
    net->to(gpu); // parameters and attributes
    Adam adam(1e-3f);
    adam.setupOn(*net, /*useGlobalState=*/true); // after the move: state beside the parameters

    CrossEntropy cost, validationCost;
    Trainer trainer(*net, cost, adam, {.batchsize = 64, .seed = 1, .progress = false, .device = gpu});
    Validator validator(*net, validationCost, {.batchsize = 500, .device = gpu});
    trainer.train(train.images, train.labels); // batches are copied to the GPU
    const double accuracy = 1.0 - validator.validate(test.images, test.labels);
    std::printf("test accuracy on %s: %.1f%%\n", gpu.str().c_str(), 100.0 * accuracy);

    saveModel(*net, "lenet_gpu.h5"); // copied to the host as it is written
    auto onCpu = loadLeNet();
    loadModel(*onCpu, "lenet_gpu.h5");
    CrossEntropy cpuCost;
    const double cpuAccuracy = 1.0 - Validator(*onCpu, cpuCost, {.batchsize = 500}).validate(test.images, test.labels);
    std::printf("the same model on the CPU: %.1f%%\n", 100.0 * cpuAccuracy);
    return accuracy > 0.6 && cpuAccuracy > accuracy - 0.01 ? 0 : 1;
}
