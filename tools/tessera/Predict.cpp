// tessera predict: a classifier on image files (JPEG, PNG): each file's most likely classes
// with their probabilities, by name when the model file keeps the classes' names.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "Commands.h"
#include "backend/Backend.h"
#include "backend/Files.h"
#include "data/Image.h"

namespace tessera::cli {

namespace {

struct PredictArgs {
    std::string model;
    std::vector<std::string> images;
    std::string augment;
    int channels = 0; // 0: the model's input channels, else 3
    int64_t top = 3;
    int64_t batch = 64;
    std::string device = "cpu";
    std::string precision = "fp32";
    std::string csv;
    bool quiet = false;
    bool fullDecode = false;
};

int runPredict(const PredictArgs& a) {
    const Device device = parseDevice(a.device);
    const DType compute = parsePrecision(a.precision, device);
    if (!a.csv.empty()) requireWritableDestination("--csv", a.csv);
    ModulePtr net = loadModel(a.model, /*train=*/true);
    // The input a model file was saved for gives the channels and, without --augment, the
    // size every image is resized to.
    // [N, C, H, W], -1 for a size the file leaves free (an ONNX model that takes any image size).
    std::vector<int64_t> saved;
    const std::vector<std::vector<int64_t>> in = declaredInputs(a.model);
    if (in.size() == 1 && in[0].size() == 4) saved = in[0];
    const int channels = a.channels                                              ? a.channels
                         : saved.size() == 4 && (saved[1] == 1 || saved[1] == 3) ? static_cast<int>(saved[1])
                                                                                 : 3;
    // The transforms: --augment's, else the ones saved with the model (what training
    // applied, in evaluation mode), else a resize to the saved input's size where it has one.
    std::string spec = a.augment.empty() ? modelTransforms(a.model) : a.augment;
    if (spec.empty() && saved.size() == 4 && saved[2] > 0 && saved[3] > 0)
        spec = "resize:" + std::to_string(saved[2]) + "x" + std::to_string(saved[3]);
    const Transforms transforms = parseAugment(spec);
    // JPEGs decoded smaller where the transforms allow, as tessera eval decodes them.
    const DecodeScale shrink = a.fullDecode ? DecodeScale{} : transforms.decodeScale(false);
    std::vector<std::string> names = modelClassNames(a.model);
    net->evalMode();
    net->calcMode(compute);
    net->to(device);
    net->packWeights();

    std::string csv; // written whole at the end
    int64_t classes = 0;
    const auto n = static_cast<int64_t>(a.images.size());
    for (int64_t from = 0; from < n; from += a.batch) {
        const int64_t to = std::min(n, from + a.batch);
        std::vector<Image> images;
        for (int64_t i = from; i < to; ++i) {
            // Evaluation mode: random transforms act as in a test set (centre crops, no flips).
            images.push_back(
                transforms.apply(readImage(a.images[static_cast<size_t>(i)], channels, shrink), 0, 0, i, false));
            const Image& first = images.front();
            const Image& img = images.back();
            if (img.height != first.height || img.width != first.width) {
                throw UsageError(a.images[static_cast<size_t>(i)] + " is " + std::to_string(img.height) + "x" +
                                 std::to_string(img.width) + " after the transforms, " +
                                 a.images[static_cast<size_t>(from)] + " " + std::to_string(first.height) + "x" +
                                 std::to_string(first.width) + ": give every image one size with --augment resize:HxW");
            }
        }
        const Image& first = images.front();
        Tensor x = Tensor::empty({to - from, first.channels, first.height, first.width});
        float* px = x.data<float>();
        for (const Image& img : images) px = std::copy(img.pixels.begin(), img.pixels.end(), px);
        Shapes out;
        try {
            out = net->inferDataShape({x.shape()});
        } catch (const ShapeError& e) {
            throw UsageError("model " + a.model + " does not take these images " + x.shape().str() + ": " + e.what() +
                             (a.augment.empty() ? " (resize them with --augment resize:HxW)" : ""));
        }
        if (out.size() != 1 || out[0].rank() != 2) {
            throw UsageError("model " + a.model + " gives " + str(out) + " for images " + x.shape().str() +
                             ": a classifier gives [images, classes] scores");
        }
        classes = out[0][1];
        if (names.size() != static_cast<size_t>(classes)) names.clear();
        if (!a.csv.empty() && from == 0) {
            csv = "image";
            for (int64_t k = 0; k < classes; ++k) csv += "," + (names.empty() ? std::to_string(k) : names[k]);
            csv += '\n';
        }
        const std::vector<float> scores = (*net)(x.to(device)).toVector<float>();
        for (int64_t i = 0; i < to - from; ++i) {
            // Softmax of the scores; scores that already are probabilities (a model that ends
            // in SoftMax: none negative, summing to 1) are taken as they are.
            const float* s = scores.data() + i * classes;
            std::vector<double> p(s, s + classes);
            const double total = std::accumulate(p.begin(), p.end(), 0.0);
            const bool probabilities =
                std::all_of(p.begin(), p.end(), [](double v) { return v >= 0; }) && std::abs(total - 1.0) < 1e-4;
            if (!probabilities) {
                const double top = *std::max_element(p.begin(), p.end());
                double sum = 0;
                for (double& v : p) sum += v = std::exp(v - top);
                for (double& v : p) v /= sum;
            }
            std::vector<int64_t> order(static_cast<size_t>(classes));
            std::iota(order.begin(), order.end(), int64_t{0});
            const auto shown = static_cast<size_t>(std::min(a.top, classes));
            std::partial_sort(
                order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown), order.end(),
                [&](int64_t l, int64_t r) { return p[static_cast<size_t>(l)] > p[static_cast<size_t>(r)]; });
            std::printf("%s:", a.images[static_cast<size_t>(from + i)].c_str());
            for (size_t j = 0; j < shown; ++j) {
                const int64_t k = order[j];
                std::printf("%s %s %.1f%%", j ? "," : "",
                            names.empty() ? ("class " + std::to_string(k)).c_str()
                                          : names[static_cast<size_t>(k)].c_str(),
                            100.0 * p[static_cast<size_t>(k)]);
            }
            std::printf("\n");
            if (!a.csv.empty()) {
                csv += a.images[static_cast<size_t>(from + i)];
                char number[32];
                for (double v : p) {
                    std::snprintf(number, sizeof number, ",%.6f", v);
                    csv += number;
                }
                csv += '\n';
            }
        }
    }
    if (!a.csv.empty()) {
        writeFileAtomically(a.csv, "--csv", csv);
        if (!a.quiet) std::printf("wrote every class's probability to %s\n", a.csv.c_str());
    }
    return 0;
}

} // namespace

std::function<int()> addPredict(CLI::App& app) {
    auto args = std::make_shared<PredictArgs>();
    CLI::App* cmd = app.add_subcommand("predict", "Classify image files (JPEG, PNG) with a trained model");
    cmd->add_option("model", args->model,
                    "an HDF5 model file (tessera train --save: it keeps the classes' names and input size), an ONNX "
                    "file, a blueprint JSON file or a zoo name")
        ->required();
    cmd->add_option("images", args->images, "image files")->required();
    cmd->add_option(
        "--augment", args->augment,
        "transforms, as tessera train takes them (random ones act as on a test set); default: the ones saved "
        "with the model (tessera train saves its --augment), else resize to "
        "the input size saved with the model");
    cmd->add_option("--channels", args->channels,
                    "decode images as 1 (grayscale) or 3 (RGB) channels (default: the model's saved input's, else 3)")
        ->check(CLI::IsMember({1, 3}));
    cmd->add_flag("--full-decode", args->fullDecode,
                  "decode every JPEG at full size (by default one the first transform shrinks is decoded at M/8 of "
                  "its size, as tessera train and eval do)");
    cmd->add_option("--top", args->top, "how many of the most likely classes to print")
        ->capture_default_str()
        ->check(positiveInteger());
    cmd->add_option("--batch", args->batch, "images per forward")->capture_default_str()->check(positiveInteger());
    addDeviceAndPrecision(cmd, args->device, args->precision);
    cmd->add_option("--csv", args->csv, "write every image's probability of every class to this CSV file");
    cmd->add_flag("--quiet", args->quiet, "no line about the CSV file");
    return [args] { return runPredict(*args); };
}

} // namespace tessera::cli
