// tessera train on text (--data fortunes or text:PATH): a language model over byte ids
// (gpt-mini's kind) learns to predict each next character; and tessera sample, which
// continues a prompt with such a model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "Commands.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "data/Text.h"
#include "io/Hdf5.h"
#include "io/Summary.h"
#include "models/Transformer.h"
#include "training/CrossEntropy.h"
#include "training/Fit.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"
#include "training/Schedule.h"

namespace tessera::cli {

namespace {
// Debian's fortunes package: the English fortune files.
const char* const kFortunesDir = "/usr/share/games/fortunes";

// The model's context (from its zoo entry or saved input shape) and vocabulary (its
// scores' last dim); UsageError when it is not a model of ids [N, T] -> scores [N, T, V].
std::pair<int64_t, int64_t> languageModelShape(Module& net, const std::string& model) {
    Shapes in;
    try {
        in = inputsFor(model, {}, 1);
    } catch (const std::exception&) {}
    if (in.size() != 1 || in[0].rank() != 2) {
        throw UsageError("--model " + model +
                         ": training on text needs a language model over ids [N, T] (a zoo name such as gpt-mini, or "
                         "a model file saved with its input shape)");
    }
    const int64_t T = in[0][1];
    Shape out;
    try {
        out = net.dataShapeFrom(Shape{1, T});
    } catch (const std::exception& e) {
        throw UsageError("--model " + model + ": does not take ids [1, " + std::to_string(T) + "]: " + e.what());
    }
    if (out.rank() != 3 || out[1] != T || out[2] < 1 || out[2] > 256) {
        throw UsageError("--model " + model + ": training on text needs next-id scores [N, " + std::to_string(T) +
                         ", V] with V at most 256 byte values, got " + out.str() + " for ids [1, " + std::to_string(T) +
                         "]");
    }
    return {T, out[2]};
}

// The mean cross entropy (nats per id) of the model over the windows, in eval mode.
double meanLoss(Module& net, CrossEntropy& cost, const Tensor& x, const Tensor& y, int64_t batch, Device device) {
    const bool wasTrain = net.isTrain();
    net.evalMode();
    double sum = 0;
    const int64_t n = x.shape()[0];
    for (int64_t b = 0; b < n; b += batch) {
        const int64_t e = std::min(n, b + batch);
        const Tensor scores = net(x.slice(b, e).clone().to(device));
        sum += cost(scores, y.slice(b, e).clone().to(device)).error * static_cast<double>(e - b);
    }
    if (wasTrain) net.trainMode();
    return sum / static_cast<double>(n);
}
} // namespace

bool isTextData(const std::string& data) { return data == "fortunes" || data.rfind("text:", 0) == 0; }

int runTrainText(const TextTrainOptions& a) {
    const auto t0 = std::chrono::steady_clock::now();
    const Device device = parseDevice(a.device);
    const DType compute = parsePrecision(a.precision, device);
    if (!a.save.empty()) requireWritableDestination("--save", a.save);
    std::unique_ptr<Optimizer> optimizer = optimizerOption(a.optimizer, a.lr);
    const float baseRate = optimizer->learnRate();
    std::unique_ptr<Schedule> schedule = scheduleOption(a.schedule, baseRate, a.epochs);
    manualSeed(a.seed);
    ModulePtr net = loadModel(a.model, /*train=*/true);
    net->calcMode(compute);
    const auto [T, vocabulary] = languageModelShape(*net, a.model);

    const std::string path = a.data == "fortunes" ? kFortunesDir : a.data.substr(5);
    if (path.empty()) throw UsageError("--data text:PATH: a file or folder must follow 'text:'");
    TextCorpus corpus;
    try {
        corpus = readTextCorpus(path, {.vocabulary = vocabulary});
    } catch (const IoError& e) {
        throw UsageError("--data " + a.data + ": " + e.what() +
                         (a.data == "fortunes" ? " (Debian's fortunes package; tools/setup.sh installs it)" : ""));
    }
    auto [x, y] = nextIdWindows(corpus.train, T);
    if (a.limit > 0 && a.limit < x.shape()[0]) {
        x = x.slice(0, a.limit).clone();
        y = y.slice(0, a.limit).clone();
    }
    Tensor vx, vy;
    if (!corpus.heldOut.empty()) std::tie(vx, vy) = nextIdWindows(corpus.heldOut, T);
    std::printf("data: text, %s: %s entries, %s training characters in %lld windows of %lld, %s held out "
                "(every 10th entry) in %lld windows; %lld byte values",
                corpus.what.c_str(), thousands(corpus.entries).c_str(),
                thousands(static_cast<int64_t>(corpus.train.size())).c_str(), static_cast<long long>(x.shape()[0]),
                static_cast<long long>(T), thousands(static_cast<int64_t>(corpus.heldOut.size())).c_str(),
                static_cast<long long>(vx.defined() ? vx.shape()[0] : 0), static_cast<long long>(vocabulary));
    if (corpus.dropped) std::printf(" (%s bytes outside them dropped)", thousands(corpus.dropped).c_str());
    std::printf("\n");

    if (a.precision == "fp16") optimizer->enableLossScaling();
    if (a.clipNorm > 0.0f) optimizer->setGradientClipping(a.clipNorm);
    net->to(device);
    optimizer->setupOn(*net, true);
    int64_t decayed = 0;
    const float decay = setWeightDecayOption(*net, *optimizer, a.optimizer, a.weightDecay, decayed);
    std::printf("model: %s, %s parameters; optimizer: %s (learning rate %g", a.model.c_str(),
                thousands(net->numOfParams()).c_str(), a.optimizer.c_str(), baseRate);
    if (schedule) std::printf(", schedule %s", a.schedule.c_str());
    if (a.warmup > 0) std::printf(", warm-up over %lld steps", static_cast<long long>(a.warmup));
    if (decay > 0.0f) std::printf(", weight decay %g on %lld weight tensors", decay, static_cast<long long>(decayed));
    if (a.clipNorm > 0.0f) std::printf(", gradients clipped to norm %g", a.clipNorm);
    std::printf("), batch %lld, seed %llu, device %s, precision %s\n", static_cast<long long>(a.batch),
                static_cast<unsigned long long>(a.seed), device.str().c_str(), a.precision.c_str());

    CrossEntropy cost({.classesLast = true});
    Trainer trainer(*net, cost, *optimizer,
                    {.batchsize = a.batch, .seed = a.seed, .progress = !a.quiet, .out = stdout, .device = device});
    // The rate of a step: the schedule's for the epoch, ramped up over the first steps (as fit's).
    auto rateAt = [&](int64_t epoch, int64_t step) {
        float rate = schedule ? schedule->at(epoch) : baseRate;
        if (step < a.warmup) rate *= static_cast<float>(step + 1) / static_cast<float>(a.warmup);
        return rate;
    };
    trainer.onBatchFinish = [&](const BatchInfo& info) {
        if (a.warmup > 0) optimizer->setLearnRate(rateAt(info.epoch, optimizer->steps()));
    };
    double validation = std::nan("");
    for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
        optimizer->setLearnRate(rateAt(epoch, optimizer->steps()));
        const double loss = trainer.train(x, y);
        std::printf("epoch %lld/%lld: train loss %.4f", static_cast<long long>(epoch + 1),
                    static_cast<long long>(a.epochs), loss);
        if (vx.defined()) {
            validation = meanLoss(*net, cost, vx, vy, a.batch, device);
            std::printf(", validation loss %.4f (%.3f bits per character)", validation, validation / std::log(2.0));
        }
        std::printf(" (%.0f characters/s, %lld steps, learning rate %s)\n",
                    trainer.samplesPerSecond() * static_cast<double>(T), static_cast<long long>(optimizer->steps()),
                    formatRate(optimizer->learnRate()).c_str());
        std::fflush(stdout);
    }
    if (!a.save.empty()) {
        saveModel(*net, a.save, {.inputs = {Shape{1, T}}});
        std::printf("saved the model (blueprint included) to %s\n", a.save.c_str());
    }
    if (a.sample > 0) {
        const std::string text =
            sampleText(*net, a.prompt, T, {.count = a.sample, .temperature = a.temperature, .seed = a.seed});
        std::printf("sample (temperature %g):\n%s\n", a.temperature, text.c_str());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("final validation loss %.4f, total time %.1f s\n", validation, seconds);
    return 0;
}

std::function<int()> addSample(CLI::App& app) {
    struct Args {
        std::string model, prompt, device = "cpu";
        int64_t chars = 200;
        float temperature = 0.8f;
        uint64_t seed = 1;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand(
        "sample", "Continue a prompt with a character-level language model (a gpt-mini trained by tessera train)");
    cmd->add_option("model", args->model, "an HDF5 model file saved by tessera train --save (or a zoo name)")
        ->required();
    cmd->add_option("--prompt", args->prompt, "the text to continue (default: a new line)");
    cmd->add_option("--chars", args->chars, "characters to add")->capture_default_str()->check(positiveInteger());
    cmd->add_option("--temperature", args->temperature,
                    "divide the scores by this before the softmax (below 1: likelier characters)")
        ->capture_default_str()
        ->check(positiveNumber());
    cmd->add_option("--seed", args->seed, "seed of the draws (the same seed gives the same text)")
        ->capture_default_str();
    std::string precision = "fp32";
    addDeviceAndPrecision(cmd, args->device, precision);
    return [args] {
        const Device device = parseDevice(args->device);
        ModulePtr net = loadModel(args->model, /*train=*/true);
        const auto [T, vocabulary] = languageModelShape(*net, args->model);
        net->to(device);
        (void)vocabulary;
        std::printf("%s\n", sampleText(*net, args->prompt, T,
                                       {.count = args->chars, .temperature = args->temperature, .seed = args->seed})
                                .c_str());
        return 0;
    };
}

} // namespace tessera::cli
