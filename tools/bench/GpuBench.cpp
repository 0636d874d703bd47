// Training steps and inference on the first CUDA device, in images per second: LeNet
// (28x28, batch 128), ResNet-18 (CIFAR stem, 32x32, batch 128), ResNet-50 (224x224,
// batch 128), the zoo's vit-tiny (28x28, batch 128) and ViT-B/16 (224x224, batch 64). Registered only when a CUDA
// device is present. Every timed iteration ends with a device synchronisation, so the time covers the GPU work, not
// just its launch. Convolution algorithms are chosen by timing (optimizeForShape) before the warm-up, as PyTorch's
// cudnn.benchmark does. With TESSERA_PROFILE_STEP set, one step after the warm-up runs inside cudaProfilerRange, for
// `ncu --profile-from-start off`. "peak MiB" is the most the allocator held live at once during the steps (weights,
// optimizer state, activations, gradients, workspaces), counted from after the search.
// Each runs in float32 (TF32 tensor cores allowed, the default), float16 (calcMode, with
// dynamic loss scaling in training) and bfloat16: the rows end in /fp32, /fp16 and /bf16.
#include <cstdlib>
#include <string>

#include "BenchUtil.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "models/Zoo.h"
#include "training/CrossEntropy.h"
#include "training/Optimizer.h"

namespace {

using namespace tessera;

struct GpuWorkload {
    const char* name;
    int64_t batch;
    Shape image; ///< one image
    int64_t classes;
};

constexpr size_t kConvWorkspaceLimit = size_t{512} << 20;

// Runs `step` once inside the profiler's range when TESSERA_PROFILE_STEP is set.
template <class F> void profiledStep(F&& step) {
    if (!std::getenv("TESSERA_PROFILE_STEP")) return;
    cudaProfilerRange(true);
    step();
    cudaProfilerRange(false);
}

const GpuWorkload kWorkloads[] = {
    {"lenet", 128, {1, 28, 28}, 10},        {"resnet18-cifar", 128, {3, 32, 32}, 10},
    {"resnet50", 128, {3, 224, 224}, 1000}, {"vit-tiny", 128, {1, 28, 28}, 10},
    {"vit-b16", 64, {3, 224, 224}, 1000},
};

ModulePtr gpuModel(const GpuWorkload& w) {
    const std::string n = w.name;
    if (n == "lenet") return loadLeNet();
    if (n == "resnet18-cifar") return loadResNet(18, ResNetStem::cifar, w.classes);
    if (n == "vit-tiny") return loadZooModel("vit-tiny");
    if (n == "vit-b16") return loadZooModel("vit");
    return loadResNet(50, ResNetStem::imagenet, w.classes);
}

std::pair<Tensor, Tensor> gpuBatch(const GpuWorkload& w, Device dev) {
    std::vector<int64_t> dims = {w.batch};
    dims.insert(dims.end(), w.image.dims().begin(), w.image.dims().end());
    Tensor x = Tensor::empty(Shape(dims), DType::float32, dev);
    Generator gen(7);
    backendFor(dev).fillUniform(x, 0.0f, 1.0f, gen);
    std::vector<int32_t> y;
    for (int64_t i = 0; i < w.batch; ++i) y.push_back(static_cast<int32_t>(i % w.classes));
    return {x, Tensor::fromVector({w.batch}, y, dev)};
}

void BM_GpuTrain(benchmark::State& state, GpuWorkload w, DType compute) {
    const Device dev = Device::cuda(0);
    manualSeed(1);
    auto net = gpuModel(w);
    net->to(dev);
    net->calcMode(compute);
    MomentumSGD sgd(0.01f, 0.9f);
    sgd.setupOn(*net, true);
    if (compute == DType::float16) sgd.enableLossScaling();
    CrossEntropy cost;
    auto [x, y] = gpuBatch(w, dev);
    auto step = [&] {
        Tensor out = (*net)(x);
        CostResult r = cost(out, y);
        sgd.scaleLossGradients(r.grad);
        sgd.zeroGradParams();
        net->backward(r.grad, true, false, 1.0f, 0.0f);
        sgd.update();
        backendFor(dev).synchronize();
    };
    net->optimizeForShape({x.shape()}, kConvWorkspaceLimit);
    backendFor(dev).resetPeak();
    for (int i = 0; i < 5; ++i) step(); // warm-up: allocator cache
    profiledStep(step);
    for (auto _ : state) step();
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(w.batch), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["peak MiB"] = static_cast<double>(backendFor(dev).memoryStats().peak) / (1 << 20);
}

// packed: Module::packWeights, which folds each batch norm into its convolution.
void BM_GpuInference(benchmark::State& state, GpuWorkload w, DType compute, bool packed) {
    const Device dev = Device::cuda(0);
    manualSeed(1);
    auto net = gpuModel(w);
    net->to(dev);
    net->calcMode(compute);
    net->evalMode();
    net->packWeights(packed);
    auto [x, y] = gpuBatch(w, dev);
    net->optimizeForShape({x.shape()}, kConvWorkspaceLimit);
    backendFor(dev).resetPeak();
    auto step = [&] {
        benchmark::DoNotOptimize((*net)(x).raw());
        backendFor(dev).synchronize();
    };
    for (int i = 0; i < 5; ++i) step();
    profiledStep(step);
    for (auto _ : state) step();
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(w.batch), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["peak MiB"] = static_cast<double>(backendFor(dev).memoryStats().peak) / (1 << 20);
}

int registerGpu() {
    if (cudaDeviceCount() == 0) return 0;
    const std::pair<const char*, DType> precisions[] = {
        {"fp32", DType::float32}, {"fp16", DType::float16}, {"bf16", DType::bfloat16}};
    for (const GpuWorkload& w : kWorkloads) {
        for (const auto& [suffix, compute] : precisions) {
            const std::string prefix = std::string("Gpu/") + w.name + "/batch" + std::to_string(w.batch);
            benchmark::RegisterBenchmark((prefix + "/train/" + suffix).c_str(), BM_GpuTrain, w, compute)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
            benchmark::RegisterBenchmark((prefix + "/inference/" + suffix).c_str(), BM_GpuInference, w, compute, false)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    // After every unpacked row, so that a filter ending in the precision picks those first.
    for (const GpuWorkload& w : kWorkloads) {
        for (const auto& [suffix, compute] : precisions) {
            const std::string prefix = std::string("Gpu/") + w.name + "/batch" + std::to_string(w.batch);
            benchmark::RegisterBenchmark((prefix + "/inference/" + suffix + "/packed").c_str(), BM_GpuInference, w,
                                         compute, true)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    return 0;
}

const int registered = registerGpu();

} // namespace
