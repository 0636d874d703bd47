// tessera eval: a trained classifier on a data set's test (or training) images, without
// training: accuracy, top-5, the mean cross-entropy, per-class accuracy and the confusion
// matrix, read by the same loaders and transforms as tessera train.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "Commands.h"
#include "backend/Backend.h"
#include "backend/Files.h"
#include "data/Loader.h"
#include "io/Hdf5.h"
#include "io/Onnx.h"
#include "io/Summary.h"
#include "training/CrossEntropy.h"

namespace tessera::cli {

namespace {

struct EvalArgs {
    std::string model;
    DataOptions in;
    std::string split = "test";
    int64_t batch = 128;
    std::string device = "cpu";
    std::string precision = "fp32";
    bool perClass = false;
    std::string confusion;
    bool quiet = false;
    const CLI::Option* channelsOption = nullptr; // --channels: given or not
};

/// What a pass over the data counted.
struct Counts {
    int64_t samples = 0, top1 = 0, top5 = 0;
    std::vector<int64_t> confusion; ///< [true class][predicted class], classes x classes
};

/// Adds one batch of scores [B, C] (C >= classes; a prediction past the classes counts as
/// wrong) and labels [B] to `c`.
void count(const Tensor& scores, const Tensor& labels, int64_t classes, Counts& c) {
    const std::vector<float> s = scores.toVector<float>();
    const std::vector<int32_t> y = labels.toVector<int32_t>();
    const int64_t width = scores.shape()[1];
    for (size_t i = 0; i < y.size(); ++i) {
        const float* row = s.data() + static_cast<int64_t>(i) * width;
        const int64_t predicted = std::max_element(row, row + width) - row;
        const float mine = row[y[i]];
        const auto above = std::count_if(row, row + width, [&](float v) { return v > mine; });
        c.top1 += predicted == y[i];
        c.top5 += above < 5;
        if (predicted < classes) ++c.confusion[static_cast<size_t>(y[i] * classes + predicted)];
    }
    c.samples += static_cast<int64_t>(y.size());
}

std::string percent(int64_t part, int64_t whole) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f%%", whole ? 100.0 * static_cast<double>(part) / whole : 0.0);
    return text;
}

int runEval(const EvalArgs& a) {
    const Device device = parseDevice(a.device);
    const DType compute = parsePrecision(a.precision, device);
    if (!a.confusion.empty()) requireWritableDestination("--confusion", a.confusion);
    ModulePtr net = loadModel(a.model, /*train=*/true); // the file's weights (a zoo name: fresh ones)
    net->calcMode(compute);
    // What the model file says of its input: the channels and size it was saved for, and
    // the transforms training applied (used unless --channels and --augment say otherwise).
    // [N, C, H, W], -1 for a size the file leaves free (an ONNX model that takes any image size).
    std::vector<int64_t> saved;
    if (isHdf5File(a.model) || isOnnxPath(a.model)) { // not a zoo name's typical input
        const std::vector<std::vector<int64_t>> in = declaredInputs(a.model);
        if (in.size() == 1 && in[0].size() == 4) saved = in[0];
    }
    const std::string savedTransforms = a.in.augment.empty() ? modelTransforms(a.model) : "";
    const bool channelsGiven = a.channelsOption && a.channelsOption->count() > 0;
    const int channels = !channelsGiven && saved.size() == 4 && (saved[1] == 1 || saved[1] == 3)
                             ? static_cast<int>(saved[1])
                             : a.in.channels;
    const DataSets data = openData(a.in.data, a.in.limit, channels);
    const DatasetPtr set = a.split == "train" ? data.train : data.test;
    const bool pinned = !device.isCpu();
    auto loaderWith = [&](const Transforms& t) {
        return std::make_unique<Loader>(set, t,
                                        LoaderOptions{.batchsize = a.batch,
                                                      .shuffle = false,
                                                      .train = false,
                                                      .workers = a.in.workers,
                                                      .pinned = pinned,
                                                      .scaledDecode = !a.in.fullDecode});
    };
    Transforms transforms = parseAugment(a.in.augment.empty() ? savedTransforms : a.in.augment);
    std::unique_ptr<Loader> loaderPtr = loaderWith(transforms);
    const Shape sample = loaderPtr->sampleShape();
    if (a.in.augment.empty() && savedTransforms.empty() && saved.size() == 4 && saved[2] > 0 && saved[3] > 0 &&
        sample.rank() == 3 && (sample[1] != saved[2] || sample[2] != saved[3])) {
        // No transforms anywhere, but the model was saved for another image size: resize to it.
        transforms = parseAugment("resize:" + std::to_string(saved[2]) + "x" + std::to_string(saved[3]));
        loaderPtr = loaderWith(transforms);
    }
    Loader& loader = *loaderPtr;
    const int64_t classes = set->classes();
    std::printf("data: %s, %lld %s images of %s, %lld classes; %s%s, %d worker%s\n", data.what.c_str(),
                static_cast<long long>(loader.size()), a.split.c_str(), loader.sampleShape().str().c_str(),
                static_cast<long long>(classes), transforms.empty() ? "no transforms" : "transforms ",
                transforms.str().c_str(), a.in.workers, a.in.workers == 1 ? "" : "s");
    std::vector<int64_t> dims = loader.sampleShape().dims();
    dims.insert(dims.begin(), std::min<int64_t>(a.batch, loader.size()));
    requireClassifier(*net, a.model, Shape(dims), classes);
    std::printf("model: %s, %s parameters; device %s, precision %s\n", a.model.c_str(),
                thousands(net->numOfParams()).c_str(), device.str().c_str(), a.precision.c_str());
    std::fflush(stdout);

    net->evalMode();
    net->to(device);
    net->packWeights(); // the weights stay converted for the kernels from one batch to the next
    CrossEntropy cost;
    Counts counts;
    counts.confusion.assign(static_cast<size_t>(classes * classes), 0);
    const bool progress = !a.quiet && isatty(fileno(stderr)) != 0;
    const auto start = std::chrono::steady_clock::now();
    loader.start(0);
    while (std::optional<DataBatch> b = loader.next()) {
        const Tensor images = device.isCpu() ? b->images : backendFor(device).upload(b->images);
        const Tensor labels = device.isCpu() ? b->labels : backendFor(device).upload(b->labels);
        const Tensors& y = (*net)(Tensors{images});
        cost(y[0], labels); // accumulates the batch's mean cross-entropy, weighted by its size
        count(y[0], b->labels, classes, counts);
        if (progress) {
            std::fprintf(stderr, "\rbatch %lld/%lld", static_cast<long long>(b->index + 1),
                         static_cast<long long>(loader.batches()));
            std::fflush(stderr);
        }
    }
    if (progress) std::fprintf(stderr, "\r%40s\r", "");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("accuracy %s (%lld of %lld)", percent(counts.top1, counts.samples).c_str(),
                static_cast<long long>(counts.top1), static_cast<long long>(counts.samples));
    if (classes > 5) std::printf(", top-5 %s", percent(counts.top5, counts.samples).c_str());
    std::printf(", mean cross-entropy %.4f (%.0f images/s)\n", cost.getMeanError(),
                static_cast<double>(counts.samples) / seconds);

    // The classes' names: those saved with the model, else the data's; indices when neither has them.
    std::vector<std::string> names = modelClassNames(a.model);
    if (names.size() != static_cast<size_t>(classes)) names = set->classNames();
    auto nameOf = [&](int64_t k) {
        return names.size() == static_cast<size_t>(classes) ? std::to_string(k) + " " + names[static_cast<size_t>(k)]
                                                            : std::to_string(k);
    };
    if (a.perClass) {
        std::printf("\n%-16s images  correct  accuracy  most often taken for\n", "class");
        for (int64_t t = 0; t < classes; ++t) {
            const int64_t* row = counts.confusion.data() + t * classes;
            int64_t images = 0, worst = -1;
            for (int64_t p = 0; p < classes; ++p) {
                images += row[p];
                if (p != t && row[p] > 0 && (worst < 0 || row[p] > row[worst])) worst = p;
            }
            std::printf("%-16s %6lld  %7lld  %8s  %s\n", nameOf(t).c_str(), static_cast<long long>(images),
                        static_cast<long long>(row[t]), percent(row[t], images).c_str(),
                        worst < 0 ? "-" : (nameOf(worst) + " (" + std::to_string(row[worst]) + " times)").c_str());
        }
    }
    if (!a.confusion.empty()) {
        auto field = [](const std::string& v) { // RFC 4180: quoted when it holds a comma, a quote or a newline
            if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
            std::string q = "\"";
            for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
            return q + "\"";
        };
        std::ostringstream file; // classes by number and name ("0 T-shirt/top") where the names are known
        file << "true\\predicted";
        for (int64_t p = 0; p < classes; ++p) file << ',' << field(nameOf(p));
        file << '\n';
        for (int64_t t = 0; t < classes; ++t) {
            file << field(nameOf(t));
            for (int64_t p = 0; p < classes; ++p) file << ',' << counts.confusion[static_cast<size_t>(t * classes + p)];
            file << '\n';
        }
        writeFileAtomically(a.confusion, "--confusion", file.str());
        std::printf("wrote the confusion matrix to %s\n", a.confusion.c_str());
    }
    return 0;
}

} // namespace

std::function<int()> addEval(CLI::App& app) {
    auto args = std::make_shared<EvalArgs>();
    CLI::App* cmd = app.add_subcommand(
        "eval", "Evaluate a trained classifier on a data set: accuracy, top-5, cross-entropy, per-class accuracy");
    cmd->add_option("model", args->model,
                    "an HDF5 model file (tessera train --save), an ONNX file, a blueprint JSON file or a zoo name")
        ->required();
    addDataOptions(cmd, args->in);
    args->channelsOption = cmd->get_option("--channels");
    cmd->add_option("--split", args->split, "which images: the data set's test or train split")
        ->capture_default_str()
        ->check(CLI::IsMember({"test", "train"}));
    cmd->add_option("--batch", args->batch, "batch size")->capture_default_str()->check(positiveInteger());
    addDeviceAndPrecision(cmd, args->device, args->precision);
    cmd->add_flag("--per-class", args->perClass,
                  "a table of each class's images, accuracy and the class it is most often taken for");
    cmd->add_option("--confusion", args->confusion,
                    "write the confusion matrix to this CSV file (a row per true class, a column per predicted one)");
    cmd->add_flag("--quiet", args->quiet, "no progress line");
    return [args] { return runEval(*args); };
}

} // namespace tessera::cli
