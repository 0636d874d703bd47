// Whole training steps (forward, cost, backward, optimizer update) and inference, in
// images per second. tools/bench/pytorch_side_by_side.py
// runs the same workloads in PyTorch and compares.
#include <string>

#include "BenchUtil.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "containers/Sequential.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "models/Zoo.h"
#include "modules/Linear.h"
#include "modules/RNN.h"
#include "training/CrossEntropy.h"
#include "training/Optimizer.h"

namespace {

using namespace tessera;

// The workloads: MLP, LeNet and the zoo's vit-tiny on 28x28 images at batch 128, ResNet-18 (CIFAR stem) on
// 32x32 colour images at batch 64; a 2-layer LSTM and GRU (input 256, hidden 512) over 50
// time steps at batch 64, a Linear(512, 10) on the last step (their "images" are sequences).
bool recurrent(const std::string& model) { return model == "lstm" || model == "gru"; }

int64_t batchOf(const std::string& model) { return model == "resnet18" || recurrent(model) ? 64 : 128; }

ModulePtr modelOf(const std::string& name) {
    if (name == "resnet18") return loadResNet(18, ResNetStem::cifar, 10);
    if (name == "vit-tiny") return loadZooModel("vit-tiny");
    if (recurrent(name)) {
        auto net = std::make_shared<Sequential>(name);
        net->append(std::make_shared<RNN>(
                        256, 512, RNNOptions{.layers = 2, .mode = name == "lstm" ? RnnMode::lstm : RnnMode::gru}))
            .append(std::make_shared<Linear>(512, 10));
        return net;
    }
    return name == "lenet" ? ModulePtr(loadLeNet()) : ModulePtr(loadMLP());
}

// Fixed random images (or [T, N, C] sequences) and labels.
std::pair<Tensor, Tensor> batchOf(const std::string& model, int64_t kBatch) {
    Generator gen(7);
    Tensor x = model == "resnet18" ? Tensor::empty({kBatch, 3, 32, 32})
               : recurrent(model)  ? Tensor::empty({50, kBatch, 256})
                                   : Tensor::empty({kBatch, 1, 28, 28});
    backendOf(x).fillUniform(x, 0.0f, 1.0f, gen);
    std::vector<int32_t> y;
    for (int64_t i = 0; i < kBatch; ++i) y.push_back(static_cast<int32_t>(i % 10));
    return {x, Tensor::fromVector({kBatch}, y)};
}

void BM_TrainStep(benchmark::State& state, std::string model, DType compute, bool checkNumerics, float clipNorm,
                  std::string rule) {
    struct Numerics { // Module::setCheckNumerics for this row only
        explicit Numerics(bool on) { Module::setCheckNumerics(on); }
        ~Numerics() { Module::setCheckNumerics(false); }
    } numerics(checkNumerics);
    manualSeed(1);
    auto net = modelOf(model);
    net->calcMode(compute);
    auto optimizer = rule.empty() ? std::make_unique<MomentumSGD>(0.01f, 0.9f) : makeOptimizer(rule);
    Optimizer& sgd = *optimizer;
    sgd.setupOn(*net, true);
    sgd.setGradientClipping(clipNorm); // 0: off
    CrossEntropy cost;
    const int64_t kBatch = batchOf(model);
    auto [x, y] = batchOf(model, kBatch);
    auto step = [&] {
        Tensor out = (*net)(x);
        CostResult r = cost(out, y);
        sgd.zeroGradParams();
        net->backward(r.grad, true, false, 1.0f, 0.0f); // no gradient for the data
        sgd.update();
    };
    // Warm-up, untimed: primitives are built and JIT-compiled on first use (the PyTorch
    // script warms up too).
    for (int i = 0; i < 3; ++i) step();
    for (auto _ : state) step();
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(kBatch), benchmark::Counter::kIsIterationInvariantRate);
}

// Eval-mode forwards; batch 0: the model's training batch; packed: Module::packWeights.
void BM_Inference(benchmark::State& state, std::string model, DType compute, int64_t batch, bool packed) {
    manualSeed(1);
    auto net = modelOf(model);
    net->calcMode(compute);
    net->evalMode();
    net->packWeights(packed);
    const int64_t kBatch = batch > 0 ? batch : batchOf(model);
    auto [x, y] = batchOf(model, kBatch);
    for (int i = 0; i < 3; ++i) (*net)(x); // warm-up, untimed
    for (auto _ : state) benchmark::DoNotOptimize((*net)(x).raw());
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(kBatch), benchmark::Counter::kIsIterationInvariantRate);
}

// One optimizer update over every parameter of a model (its flat global state), alone:
// the pass over weights, gradients and the rule's state that ends each training step.
void BM_Update(benchmark::State& state, std::string model, std::string rule) {
    manualSeed(1);
    auto net = modelOf(model);
    auto optimizer = makeOptimizer(rule);
    optimizer->setupOn(*net, true);
    Generator gen(3);
    for (const auto& [name, v] : net->namedParams()) backendOf(v->grad).fillNormal(v->grad, 0.0f, 1e-3f, gen);
    for (int i = 0; i < 3; ++i) optimizer->update(); // warm-up, untimed
    for (auto _ : state) optimizer->update();
    state.counters["params/s"] =
        benchmark::Counter(static_cast<double>(net->numOfParams()), benchmark::Counter::kIsIterationInvariantRate);
}

int registerAll() {
    // bfloat16 (calcMode) rows for the convolutional and dense networks, after the float32 ones.
    for (DType compute : {DType::float32, DType::bfloat16}) {
        for (const char* model : {"mlp", "lenet", "resnet18", "lstm", "gru", "vit-tiny"}) {
            if (compute == DType::bfloat16 && recurrent(model)) continue; // RNNs compute in float32
            const std::string prefix = std::string("Train/") + model + "/batch" + std::to_string(batchOf(model));
            const std::string suffix = compute == DType::float32 ? "" : "/bf16";
            benchmark::RegisterBenchmark((prefix + "/train" + suffix).c_str(), BM_TrainStep, model, compute, false,
                                         0.0f, std::string())
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
            benchmark::RegisterBenchmark((prefix + "/inference" + suffix).c_str(), BM_Inference, model, compute,
                                         int64_t{0}, false)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    // The convolutional networks' inference with packed weights, which also folds each
    // batch norm into its convolution (containers/Fusion.h): .../inference/packed[/bf16].
    for (DType compute : {DType::float32, DType::bfloat16}) {
        for (const char* model : {"lenet", "resnet18"}) {
            const std::string name = std::string("Train/") + model + "/batch" + std::to_string(batchOf(model)) +
                                     "/inference/packed" + (compute == DType::float32 ? "" : "/bf16");
            benchmark::RegisterBenchmark(name.c_str(), BM_Inference, model, compute, int64_t{0}, true)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    // One image at a time, the weights converted on every forward or packed once
    // (Module::packWeights): Train/<model>/batch1/inference[/packed][/bf16].
    for (DType compute : {DType::float32, DType::bfloat16}) {
        for (const char* model : {"mlp", "lenet", "resnet18"}) {
            for (bool packed : {false, true}) {
                const std::string name = std::string("Train/") + model + "/batch1/inference" +
                                         (packed ? "/packed" : "") + (compute == DType::float32 ? "" : "/bf16");
                benchmark::RegisterBenchmark(name.c_str(), BM_Inference, model, compute, int64_t{1}, packed)
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime();
            }
        }
    }
    // Float32 training steps with one option on: Train/<model>/batch<N>/train/<variant>.
    auto variant = [](const char* model, const char* name, bool checkNumerics, float clipNorm,
                      const std::string& rule = {}) {
        const std::string full =
            std::string("Train/") + model + "/batch" + std::to_string(batchOf(model)) + "/train/" + name;
        benchmark::RegisterBenchmark(full.c_str(), BM_TrainStep, model, DType::float32, checkNumerics, clipNorm, rule)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    };
    // The cost of Module::setCheckNumerics(true): every output and gradient scanned.
    for (const char* model : {"lenet", "resnet18"}) variant(model, "check-numerics", true, 0.0f);
    // The cost of gradient clipping by global norm (a sum of squares over the gradients).
    for (const char* model : {"mlp", "lstm"}) variant(model, "clip-norm", false, 1.0f);
    // Adam (tessera train's default) in place of momentum SGD.
    for (const char* model : {"mlp", "lenet", "resnet18"}) variant(model, "adam", false, 0.0f, "adam");
    // Update/<rule>/resnet18: the update alone, 11.2 million parameters.
    for (const char* rule : {"sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop"}) {
        benchmark::RegisterBenchmark((std::string("Update/") + rule + "/resnet18").c_str(), BM_Update, "resnet18", rule)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
    return 0;
}

const int registered = registerAll();

} // namespace
