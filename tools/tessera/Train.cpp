// tessera train: trains a model (a zoo name, a blueprint, or a saved HDF5 model to
// fine-tune) on a data set (MNIST-format IDX files, CIFAR-10/100, an image folder or .npy
// files) read by background workers, printing progress, the test accuracy after each epoch
// and the total time; optionally a metrics CSV and a PNG of the curves.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "Commands.h"
#include "backend/Backend.h"
#include "backend/Files.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"
#include "data/Idx.h"
#include "data/Loader.h"
#include "distributed/DataParallel.h"
#include "io/Hdf5.h"
#include "io/Summary.h"
#include "models/Zoo.h"
#include "training/Checkpoint.h"
#include "training/CrossEntropy.h"
#include "training/Fit.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"
#include "training/Schedule.h"

namespace tessera::cli {

// "cpu", "cuda" or "cuda:N"; a CUDA device must exist, else the reason there is none.
Device parseDevice(const std::string& text) {
    if (text == "cpu") return Device::cpu();
    int index = 0;
    if (text != "cuda") {
        size_t used = 0;
        if (text.rfind("cuda:", 0) != 0) throw UsageError("--device: expected cpu, cuda or cuda:N, got '" + text + "'");
        try {
            index = std::stoi(text.substr(5), &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != text.size() - 5 || index < 0) {
            throw UsageError("--device: expected cpu, cuda or cuda:N, got '" + text + "'");
        }
    }
    const std::string why = cudaUnavailableReason();
    if (!why.empty()) throw UsageError("--device " + text + ": " + why);
    if (index >= cudaDeviceCount()) {
        throw UsageError("--device " + text + ": this process sees " + std::to_string(cudaDeviceCount()) +
                         " CUDA device(s)");
    }
    return Device::cuda(index);
}

DType parsePrecision(const std::string& text, Device device) {
    if (text != "fp32" && text != "bf16" && text != "fp16") {
        throw UsageError("--precision: expected fp32, bf16 or fp16, got '" + text + "'");
    }
    if (text == "fp16" && device.isCpu()) {
        throw UsageError("--precision fp16 runs on CUDA devices (--device cuda); on the CPU use bf16");
    }
    return text == "bf16" ? DType::bfloat16 : text == "fp16" ? DType::float16 : DType::float32;
}

Transforms parseAugment(const std::string& text) {
    try {
        return Transforms::parse(text);
    } catch (const ModuleError& e) {
        throw UsageError(std::string("--augment: ") + e.what());
    }
}

int64_t requireClassifier(Module& net, const std::string& model, const Shape& batchShape, int64_t classes) {
    Shapes outShapes;
    try {
        outShapes = net.inferDataShape({batchShape});
    } catch (const ShapeError& e) {
        throw UsageError("model " + model + " does not take this data's batches " + batchShape.str() + ": " + e.what());
    }
    if (outShapes.size() != 1 || outShapes[0].rank() != 2 || outShapes[0][1] < classes) {
        throw UsageError("model " + model + " gives " + str(outShapes) + " for a batch, but this data has " +
                         std::to_string(classes) + " classes: it needs [batch, " + std::to_string(classes) +
                         "] scores (or more)");
    }
    return outShapes[0][1];
}

// What a test set would otherwise reveal only after a whole training epoch: images of
// another size, or labels the model has no score for (checked by the data sets' own labels,
// without decoding an image).
void requireTestFitsTraining(const DataSets& data, const Shape& testSample, const Shape& trainSample, int64_t scores) {
    if (testSample != trainSample) {
        throw UsageError("the test images are " + testSample.str() + " after the transforms, the training images " +
                         trainSample.str() + " (" + data.test->where(0) +
                         "): give both one size, e.g. --augment resize:HxW");
    }
    for (const auto& [split, set] : {std::pair{"training", data.train}, std::pair{"test", data.test}}) {
        for (int64_t i = 0; i < set->size(); ++i) {
            const int32_t label = set->label(i);
            if (label < 0 || label >= scores) {
                throw UsageError("the " + std::string(split) + " label of " + set->where(i) + " is " +
                                 std::to_string(label) + ", but the model gives " + std::to_string(scores) +
                                 " scores (classes 0.." + std::to_string(scores - 1) + ")");
            }
        }
    }
}

void addDeviceAndPrecision(CLI::App* cmd, std::string& device, std::string& precision, const std::string& note) {
    cmd->add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--precision", precision,
                    "fp32; bf16 or fp16 (CUDA): convolutions and linear layers compute in the 16-bit type" + note)
        ->capture_default_str()
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
}

void addDataOptions(CLI::App* cmd, DataOptions& in) {
    cmd->add_option(
           "--data", in.data,
           "fashion-mnist (the Debian package), a directory of IDX files (or mnist:DIR), cifar10:DIR, "
           "cifar100:DIR (the binary versions; DIR may be their .tar.gz), folder:DIR (DIR/train/<class>/ and "
           "DIR/test/<class>/ of "
           "JPEG and PNG files; DIR may be a .tar, .tar.gz or .zip of them), csv:DIR (DIR/train.csv and "
           "DIR/test.csv: a header row, then each image's file and class; or train.txt and test.txt of FILE CLASS "
           "lines) or npy:DIR (train_images.npy, "
           "train_labels.npy, test_images.npy, "
           "test_labels.npy)")
        ->capture_default_str();
    cmd->add_option("--augment", in.augment,
                    "per-image transforms, e.g. crop:32:4,flip,normalize:cifar10 (resize:S|HxW, crop:S[:PAD], "
                    "center:S, rrc:S[:MIN] (random-resized crop), flip[:P], rotate:DEG, "
                    "affine:DEG[:T[:LO/HI[:SHEAR]]], jitter:B[:C[:S[:H]]] (colour), "
                    "erase[:P[:MIN:MAX]] (random erasing), trivial (TrivialAugmentWide), randaugment[:N[:M]], "
                    "normalize:M1/M2/M3:S1/S2/S3 or cifar10|cifar100|imagenet|mnist); random ones act in training "
                    "only, the test set gets centre crops");
    cmd->add_option("--workers", in.workers,
                    "threads that read and transform the next batches while a step runs (0: none; the batches "
                    "are the same for any number)")
        ->capture_default_str()
        ->check(CLI::Range(0, 64));
    cmd->add_option("--channels", in.channels, "folder:DIR: decode images as 1 (grayscale) or 3 (RGB) channels")
        ->capture_default_str()
        ->check(CLI::IsMember({1, 3}));
    cmd->add_option("--limit", in.limit,
                    "use only N images of each split, taken from the classes in turn (each class's first, then "
                    "each one's second, ...; 0: all)")
        ->capture_default_str()
        ->check(nonNegativeInteger());
    cmd->add_flag("--full-decode", in.fullDecode,
                  "decode every JPEG at full size (by default one the first transform shrinks is decoded at M/8 of "
                  "its size, as far as that transform allows: several times faster on large photos)");
}

std::unique_ptr<Optimizer> optimizerOption(const std::string& name, float lr) {
    try {
        return makeOptimizer(name, lr);
    } catch (const ModuleError& e) {
        throw UsageError(std::string("--optimizer: ") + e.what());
    }
}

std::unique_ptr<Schedule> scheduleOption(const std::string& text, float base, int64_t epochs) {
    if (text.empty()) return nullptr;
    try {
        return parseSchedule(text, base, epochs);
    } catch (const ModuleError& e) {
        throw UsageError(std::string("--schedule: ") + e.what());
    }
}

// Weight decay on the weights of convolutions, linear and recurrent layers (every
// parameter of two or more dimensions), not on biases or normalisation scales.
float setWeightDecayOption(Module& net, Optimizer& optimizer, const std::string& name, float weightDecay,
                           int64_t& decayed) {
    const float decay = weightDecay > 0.0f ? weightDecay : name == "adamw" ? 0.01f : 0.0f;
    if (decay <= 0.0f) return decay;
    std::map<std::string, int64_t> rank;
    for (const auto& [param, var] : net.namedParams()) rank[param] = var->data.shape().rank();
    optimizer.setWeightDecay(decay, [&decayed, rank](const std::string& param) {
        const bool decays = rank.at(param) >= 2;
        decayed += decays;
        return decays;
    });
    return decay;
}

namespace {
struct TrainArgs {
    std::string model = "lenet";
    int64_t classes = 0; // --classes: a zoo model's head (0: the data's classes)
    DataOptions in;      // --data, --augment, --workers, --channels, --limit
    int64_t epochs = 10;
    int64_t batch = 128;
    float lr = -1.0f;
    std::string optimizer = "adam";
    float weightDecay = 0.0f;
    float clipNorm = 0.0f;
    float labelSmoothing = 0.0f;
    float mixup = 0.0f, cutmix = 0.0f; // Beta alphas of the Loader's mixing (0: off)
    bool balance = false;              // --balance: class-balanced epochs (LoaderOptions::balanced)
    float ema = 0.0f;
    int64_t accumulate = 1;
    std::string schedule;
    int64_t warmup = 0;
    uint64_t seed = 1;
    bool quiet = false;
    std::string save;
    std::string device = "cpu";
    std::string precision = "fp32";
    std::string metrics;
    std::string plot;
    bool checkNumerics = false;
    bool syncBatchNorm = false;
    std::string checkpoint;
    std::string every;      // N or Nsteps, or Nepochs
    std::string validation; // a fraction in (0, 1) or a whole number of training images
    std::string saveBest;
    int64_t earlyStop = 0;
    int64_t everySteps = 0, everyEpochs = 1;
    std::string resume;
    bool overwrite = false; // replace an existing --checkpoint file in a run that does not resume it
    bool pinMemory = true;
    bool deterministic = false;
    int64_t sample = 200; // text: characters written after training
    std::string prompt;
    float temperature = 0.8f;
};

// Language models on text take fewer options than classifiers on images: a UsageError
// naming the first given option that has no meaning there.
TextTrainOptions textOptions(const TrainArgs& a, const CommunicatorPtr& comm) {
    const std::pair<const char*, bool> imageOnly[] = {
        {"--augment", !a.in.augment.empty()},
        {"--channels", a.in.channels != 3},
        {"--label-smoothing", a.labelSmoothing > 0.0f},
        {"--mixup", a.mixup > 0.0f},
        {"--cutmix", a.cutmix > 0.0f},
        {"--balance", a.balance},
        {"--ema", a.ema > 0.0f},
        {"--accumulate", a.accumulate > 1},
        {"--validation (text holds every 10th entry out)", !a.validation.empty()},
        {"--save-best", !a.saveBest.empty()},
        {"--early-stop", a.earlyStop > 0},
        {"--checkpoint", !a.checkpoint.empty()},
        {"--resume", !a.resume.empty()},
        {"--metrics", !a.metrics.empty()},
        {"--plot", !a.plot.empty()},
        {"--sync-bn", a.syncBatchNorm},
        {"mpirun (data-parallel training)", comm != nullptr},
    };
    for (const auto& [option, given] : imageOnly) {
        if (given) throw UsageError(std::string(option) + " is not available for text data (--data " + a.in.data + ")");
    }
    return {.model = a.model,
            .data = a.in.data,
            .epochs = a.epochs,
            .batch = a.batch,
            .limit = a.in.limit,
            .warmup = a.warmup,
            .lr = a.lr,
            .weightDecay = a.weightDecay,
            .clipNorm = a.clipNorm,
            .optimizer = a.optimizer,
            .schedule = a.schedule,
            .save = a.save,
            .device = a.device,
            .precision = a.precision,
            .seed = a.seed,
            .quiet = a.quiet,
            .sample = a.sample,
            .prompt = a.prompt,
            .temperature = a.temperature};
}

} // namespace

DataSets openData(const std::string& d, int64_t limit, int channels) {
    const size_t colon = d.find(':');
    const std::string kind = colon == std::string::npos ? "" : d.substr(0, colon);
    const std::string dir = colon == std::string::npos ? d : d.substr(colon + 1);
    auto needDir = [&] {
        if (dir.empty()) throw UsageError("--data " + d + ": a directory must follow '" + kind + ":'");
        if (!std::filesystem::is_directory(dir)) throw UsageError("--data " + d + ": no such directory " + dir);
    };
    DataSets s;
    if (d == "fashion-mnist" || kind.empty() || kind == "mnist" || std::filesystem::is_directory(d)) {
        if (kind == "mnist") needDir();
        const std::string idx = d == "fashion-mnist" ? kFashionMnistDir : kind == "mnist" ? dir : d;
        s = {idxDataset(idx, "train"), idxDataset(idx, "t10k"), "IDX files in " + idx, {}};
        if (d == "fashion-mnist") {
            s.train = withClassNames(s.train, fashionMnistClassNames());
            s.test = withClassNames(s.test, fashionMnistClassNames());
        }
    } else if (kind == "cifar10" || kind == "cifar100") {
        if (!std::filesystem::is_regular_file(dir)) needDir(); // else the archive as distributed
        if (kind == "cifar10") {
            s = {cifar10(dir, "train"), cifar10(dir, "test"), "CIFAR-10 in " + dir, {}};
        } else {
            s = {cifar100(dir, "train"), cifar100(dir, "test"), "CIFAR-100 in " + dir, {}};
        }
    } else if (kind == "folder" && std::filesystem::is_regular_file(dir)) { // a tar or zip archive of the folders
        s = {imageArchive(dir, "train", channels),
             imageArchive(dir, "test", channels),
             "image archive " + dir + " (train/ and test/)",
             {}};
    } else if (kind == "folder") {
        needDir();
        s = {imageFolder(dir + "/train", channels),
             imageFolder(dir + "/test", channels),
             "image folders " + dir + "/train and " + dir + "/test",
             {}};
    } else if (kind == "csv") {
        needDir();
        auto list = [&](const std::string& split) { // SPLIT.csv, else SPLIT.txt ("FILE CLASS" lines)
            for (const char* ext : {".csv", ".txt"}) {
                if (std::filesystem::exists(dir + "/" + split + ext)) return dir + "/" + split + ext;
            }
            throw UsageError("--data " + d + ": no " + dir + "/" + split + ".csv (or " + split + ".txt)");
        };
        // The test list's classes are the training list's, by name.
        const std::string trainList = list("train"), testList = list("test");
        const DatasetPtr train = imageList(trainList, {.channels = channels});
        s = {train,
             imageList(testList, {.channels = channels, .classes = train->classNames()}),
             "image lists " + trainList + " and " + testList,
             {}};
    } else if (kind == "npy") {
        needDir();
        s = {npyDataset(dir + "/train_images.npy", dir + "/train_labels.npy"),
             npyDataset(dir + "/test_images.npy", dir + "/test_labels.npy"),
             ".npy files in " + dir,
             {}};
    } else {
        throw UsageError("--data " + d +
                         ": expected fashion-mnist, a directory of IDX files, mnist:DIR, cifar10:DIR, cifar100:DIR, "
                         "folder:DIR, csv:DIR or npy:DIR");
    }
    if (kind == "folder" && s.train->classNames() != s.test->classNames()) {
        const std::vector<std::string> a = s.train->classNames(), b = s.test->classNames();
        size_t k = 0;
        while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
        throw IoError("--data " + d + ": train/ has " + std::to_string(a.size()) + " class folders and test/ " +
                      std::to_string(b.size()) + ", which differ at class " + std::to_string(k) + " (" +
                      (k < a.size() ? a[k] : "none") + " in train/, " + (k < b.size() ? b[k] : "none") +
                      " in test/): both need the same classes, or the labels would not agree");
    }
    if (limit > 0) { // every class its share, also where the files are sorted by class
        auto counted = [](const DatasetPtr& d, const std::vector<int64_t>& perClass) {
            const bool even =
                std::adjacent_find(perClass.begin(), perClass.end(), std::not_equal_to<>()) == perClass.end();
            if (even && !perClass.empty()) {
                return std::to_string(perClass[0]) + " of each of " + std::to_string(perClass.size()) + " classes";
            }
            const std::vector<std::string> names = d->classNames();
            std::string text;
            for (size_t c = 0; c < perClass.size(); ++c) {
                text += (c ? ", " : "") + (c < names.size() ? names[c] : "class " + std::to_string(c)) + " " +
                        std::to_string(perClass[c]);
            }
            return text;
        };
        std::vector<int64_t> trainCounts, testCounts;
        s.train = firstOfEachClass(s.train, limit, &trainCounts);
        s.test = firstOfEachClass(s.test, limit, &testCounts);
        s.limited = "--limit " + std::to_string(limit) + ": training " + counted(s.train, trainCounts) + "; test " +
                    counted(s.test, testCounts);
    }
    return s;
}

namespace {

// SIGINT and SIGTERM during training: the signal's number, read after each batch.
volatile std::sig_atomic_t stopSignal = 0;
extern "C" void onStopSignal(int sig) { stopSignal = sig; }

// A gnuplot single-quoted string ('' stands for ').
std::string gnuplotQuoted(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
}

// The loss and accuracy curves of a metrics CSV, drawn by gnuplot into a PNG.
// `validation`: the CSV has a validation accuracy column before the test accuracy; both
// are drawn.
void plotMetrics(const std::string& csv, const std::string& png, const std::string& title, int64_t epochs,
                 bool validation) {
    const std::string script =
        "set terminal pngcairo noenhanced size 1000,420 font 'Sans,10'\n"
        "set output " +
        gnuplotQuoted(png) +
        "\n"
        "set datafile separator ','\n"
        "set key off\n"
        "set grid\n"
        "set xlabel 'epoch'\n" +
        (epochs <= 20 ? "set xtics 1\n" : "set format x '%g'\n") + "set multiplot layout 1,2 title " +
        gnuplotQuoted(title) +
        "\n"
        "set ylabel 'training loss'\n"
        "plot " +
        gnuplotQuoted(csv) + " using 1:2 skip 1 with linespoints lw 2 pt 7\n" +
        (validation ? "set ylabel 'accuracy (%)'\nset key bottom right\nplot " + gnuplotQuoted(csv) +
                          " using 1:3 skip 1 with linespoints lw 2 pt 7 lc 3 title "
                          "'validation', '' using 1:4 skip 1 with linespoints lw 2 pt 7 lc 2 "
                          "title 'test'\n"
                    : "set ylabel 'test accuracy (%)'\nplot " + gnuplotQuoted(csv) +
                          " using 1:3 skip 1 with linespoints lw 2 pt 7 lc 2\n") +
        "unset multiplot\n";
    std::FILE* pipe = popen("gnuplot 2>&1", "w");
    if (!pipe) throw IoError("--plot: cannot start gnuplot");
    std::fputs(script.c_str(), pipe);
    if (pclose(pipe) != 0) throw IoError("--plot: gnuplot failed to write " + png);
}

// --validation's value: a fraction of `images` (at least 1) or a whole number of them;
// UsageError unless 1 <= the count < images.
int64_t validationCount(const std::string& text, int64_t images) {
    double v = 0;
    size_t used = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    const bool whole = used == text.size() && v >= 1 && v == std::floor(v);
    if (used != text.size() || !(v > 0) || (v >= 1 && !whole)) {
        throw UsageError("--validation: expected a fraction in (0, 1) or a whole number of images >= 1, got '" + text +
                         "'");
    }
    const int64_t count = whole ? static_cast<int64_t>(v) : std::max<int64_t>(1, std::llround(v * images));
    if (count >= images) {
        throw UsageError("--validation " + text + ": holds out " + std::to_string(count) + " of the " +
                         std::to_string(images) + " training images, leaving none to train on");
    }
    return count;
}

// `comm`: the job's ranks under mpirun or NCCL (rank 0 prints and writes files), else null.
int runTrain(const TrainArgs& a, const CommunicatorPtr& comm) {
    if (isTextData(a.in.data)) return runTrainText(textOptions(a, comm));
    const auto t0 = std::chrono::steady_clock::now();
    const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
    const bool writer = rank == 0; // the rank that saves, checkpoints and writes metrics
    const Device device = parseDevice(a.device);
    if (a.syncBatchNorm && !comm) {
        throw UsageError("--sync-bn synchronises batch norm across the processes of mpirun -np N; this is one process");
    }
    const DType compute = parsePrecision(a.precision, device);
    if (!(a.labelSmoothing >= 0.0f && a.labelSmoothing < 1.0f)) {
        throw UsageError("--label-smoothing: expected a number in [0, 1), got " + formatRate(a.labelSmoothing));
    }
    for (auto [flag, alpha] : {std::pair{"--mixup", a.mixup}, std::pair{"--cutmix", a.cutmix}}) {
        if (!(alpha >= 0.0f && alpha <= 1e4f)) {
            throw UsageError(std::string(flag) + ": expected a Beta alpha > 0 such as 0.2 or 1 (0: off), got " +
                             formatRate(alpha));
        }
    }
    if (!(a.ema >= 0.0f && a.ema < 1.0f)) {
        throw UsageError("--ema: expected a decay in [0, 1) such as 0.999, got " + formatRate(a.ema));
    }
    if (!a.plot.empty() && std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
        throw UsageError("--plot needs gnuplot (Debian: gnuplot-nox; tools/setup.sh installs it)");
    }
    // Where results go is checked before any work, so a long run does not fail at its end.
    if (!a.save.empty()) requireWritableDestination("--save", a.save);
    if (!a.metrics.empty()) requireWritableDestination("--metrics", a.metrics);
    if (!a.plot.empty()) requireWritableDestination("--plot", a.plot);
    if (!a.checkpoint.empty()) requireWritableDestination("--checkpoint", a.checkpoint);
    if (!a.saveBest.empty() && a.validation.empty()) {
        throw UsageError("--save-best keeps the model of the best validation accuracy: it needs --validation");
    }
    if (a.earlyStop > 0 && a.validation.empty()) {
        throw UsageError("--early-stop watches the validation accuracy: it needs --validation");
    }
    if (!a.saveBest.empty()) requireWritableDestination("--save-best", a.saveBest);
    if (!a.every.empty() && a.checkpoint.empty()) throw UsageError("--every needs --checkpoint PATH to write to");
    if (!a.resume.empty() && !std::filesystem::exists(a.resume)) {
        throw UsageError("--resume " + a.resume + ": no such file");
    }
    requireDistinctDestinations({{"--save", a.save},
                                 {"--checkpoint", a.checkpoint},
                                 {"--save-best", a.saveBest},
                                 {"--metrics", a.metrics},
                                 {"--plot", a.plot},
                                 {"--plot's metrics", a.metrics.empty() && !a.plot.empty() ? a.plot + ".csv" : ""}});
    if (!a.checkpoint.empty() && std::filesystem::exists(a.checkpoint) && !a.overwrite &&
        (a.resume.empty() || !std::filesystem::equivalent(a.checkpoint, a.resume))) {
        throw UsageError("--checkpoint " + a.checkpoint +
                         ": the file exists (an earlier run's checkpoint?) and this run would replace it; add "
                         "--resume " +
                         a.checkpoint + " to continue that run, or --overwrite to start again over it");
    }
    // The optimizer's name and the schedule are checked before any work too.
    std::unique_ptr<Optimizer> optimizer = optimizerOption(a.optimizer, a.lr);
    const float baseRate = optimizer->learnRate();
    std::unique_ptr<Schedule> schedule = scheduleOption(a.schedule, baseRate, a.epochs);
    Module::setCheckNumerics(a.checkNumerics);
    // The model first: a bad name or file fails before any data is read.
    manualSeed(a.seed);
    ModulePtr net = loadModel(a.model, /*train=*/true);
    net->calcMode(compute);

    const Transforms transforms = parseAugment(a.in.augment);
    DataSets data = openData(a.in.data, a.in.limit, a.in.channels);
    // --validation holds out training images, drawn by the seed, for choosing the model.
    DatasetPtr heldOut;
    if (!a.validation.empty()) {
        std::tie(data.train, heldOut) = holdOut(data.train, validationCount(a.validation, data.train->size()), a.seed);
    }
    // On a GPU, batches are made in page-locked memory and copied while the device computes.
    const bool pinned = a.pinMemory && !device.isCpu();
    if (a.deterministic) setCudaDeterministic(true); // the CPU's kernels are reproducible already
    const LoaderOptions evalOptions{.batchsize = a.batch,
                                    .shuffle = false,
                                    .train = false,
                                    .workers = a.in.workers,
                                    .pinned = pinned,
                                    .scaledDecode = !a.in.fullDecode};
    Loader test(data.test, transforms, evalOptions);
    std::unique_ptr<Loader> valid;
    if (heldOut) valid = std::make_unique<Loader>(heldOut, transforms, evalOptions);
    const Shape sample =
        Loader(data.train, transforms, {.train = false, .scaledDecode = !a.in.fullDecode}).sampleShape();
    const std::string heldText =
        valid ? " (" + std::to_string(valid->size()) + " more held out for validation)" : std::string();
    std::printf("data: %s, %lld training%s and %lld test images of %s, %lld classes; %s%s, %d worker%s%s\n",
                data.what.c_str(), static_cast<long long>(data.train->size()), heldText.c_str(),
                static_cast<long long>(test.size()), sample.str().c_str(),
                static_cast<long long>(data.train->classes()), transforms.empty() ? "no transforms" : "transforms ",
                transforms.str().c_str(), a.in.workers, a.in.workers == 1 ? "" : "s",
                pinned ? ", batches in page-locked memory" : "");
    if (!data.limited.empty()) std::printf("data: %s\n", data.limited.c_str());
    std::vector<int64_t> dims = sample.dims();
    dims.insert(dims.begin(), std::min<int64_t>(a.batch, data.train->size()));
    const Shape batchShape(dims);
    // A zoo model gets a head for the data's classes (or --classes); any other model must
    // score exactly the data's classes.
    const int64_t dataClasses = data.train->classes();
    const bool zoo = isZooModel(a.model);
    if (a.classes > 0 && !zoo) {
        throw UsageError("--classes sets a zoo model's head; " + a.model +
                         " is a model file, whose head is its own (swap it with replace: docs/graphs.md)");
    }
    if (a.classes > 0 && a.classes != dataClasses) {
        throw UsageError("--classes " + std::to_string(a.classes) + ", but the data has " +
                         std::to_string(dataClasses) + " classes");
    }
    if (zoo) {
        Shapes out;
        try {
            out = net->inferDataShape({batchShape});
        } catch (const ShapeError&) {}
        if (out.size() == 1 && out[0].rank() == 2 && out[0][1] != dataClasses) {
            manualSeed(a.seed); // the same initialisation as a model built for these classes at once
            net = loadZooModel(a.model, dataClasses);
            net->calcMode(compute);
            std::printf("model: %s with a head for the data's %lld classes (its own has %lld)\n", a.model.c_str(),
                        static_cast<long long>(dataClasses), static_cast<long long>(out[0][1]));
        }
    }
    const int64_t scores = requireClassifier(*net, a.model, batchShape, dataClasses);
    if (scores != dataClasses) {
        throw UsageError("model " + a.model + " gives " + std::to_string(scores) + " scores, but the data has " +
                         std::to_string(dataClasses) +
                         " classes: its extra scores would be classes no image has (predict would print them); "
                         "give it a head of " +
                         std::to_string(dataClasses) +
                         " scores (replace, docs/graphs.md), or start from a zoo model, "
                         "which gets one");
    }
    if (test.size() > 0) requireTestFitsTraining(data, test.sampleShape(), sample, scores);
    // Mixed labels are probabilities over the model's scores (which may outnumber the classes).
    const LoaderOptions trainOptions{.batchsize = a.batch,
                                     .seed = a.seed,
                                     .workers = a.in.workers,
                                     .pinned = pinned,
                                     .rank = rank,
                                     .ranks = ranks,
                                     .mixup = a.mixup,
                                     .cutmix = a.cutmix,
                                     .classes = scores,
                                     .scaledDecode = !a.in.fullDecode,
                                     .balanced = a.balance};
    Loader train(data.train, transforms, trainOptions);

    std::printf("model: %s, %s parameters; optimizer: %s", a.model.c_str(), thousands(net->numOfParams()).c_str(),
                a.optimizer.c_str());
    // float16's gradients underflow without a loss scale; bfloat16 has float32's range.
    if (a.precision == "fp16") optimizer->enableLossScaling();
    if (a.clipNorm > 0.0f) optimizer->setGradientClipping(a.clipNorm);
    // bfloat16 on a CPU without bfloat16 kernels is emulated (rounded operands, float32 kernels): no faster.
    const bool emulated = a.precision == "bf16" && device.isCpu() && !CpuBackend::bfloat16Kernels();
    net->to(device); // before the optimizer: its state lives beside the parameters
    optimizer->setupOn(*net, true);
    int64_t decayed = 0;
    const float decay = setWeightDecayOption(*net, *optimizer, a.optimizer, a.weightDecay, decayed);
    std::printf(" (learning rate %g", baseRate);
    if (schedule) std::printf(", schedule %s", a.schedule.c_str());
    if (a.warmup > 0) std::printf(", warm-up over %lld steps", static_cast<long long>(a.warmup));
    if (decay > 0.0f) {
        std::printf(", %sweight decay %g on %lld weight tensors", a.optimizer == "adamw" ? "decoupled " : "", decay,
                    static_cast<long long>(decayed));
    }
    if (a.clipNorm > 0.0f) std::printf(", gradients clipped to norm %g", a.clipNorm);
    if (a.labelSmoothing > 0.0f) std::printf(", label smoothing %g", a.labelSmoothing);
    if (a.mixup > 0.0f) std::printf(", mixup %g", a.mixup);
    if (a.cutmix > 0.0f) std::printf(", CutMix %g", a.cutmix);
    if (a.balance) std::printf(", class-balanced epochs");
    if (a.ema > 0.0f) std::printf(", weight average with decay %g", a.ema);
    std::printf("), batch %lld", static_cast<long long>(a.batch));
    if (a.accumulate > 1) {
        std::printf(" (gradients of %lld batches per update: %lld images a step%s)",
                    static_cast<long long>(a.accumulate), static_cast<long long>(a.accumulate * a.batch * ranks),
                    ranks > 1 ? " over all ranks" : "");
    }
    std::printf(", seed %llu, device %s, precision %s%s\n", static_cast<unsigned long long>(a.seed),
                device.str().c_str(), a.precision.c_str(),
                emulated ? " (emulated: this CPU has no bfloat16 kernels)" : "");
    std::unique_ptr<DataParallel> parallel;
    if (comm) {
        parallel = std::make_unique<DataParallel>(*net, *optimizer, comm,
                                                  DataParallelOptions{.syncBatchNorm = a.syncBatchNorm});
        const size_t buckets = parallel->buckets().size();
        std::printf("data parallel: %d ranks over %s, batch %lld per rank, %lld in all; %zu gradient bucket%s%s\n",
                    ranks, comm->describe().c_str(), static_cast<long long>(a.batch),
                    static_cast<long long>(a.batch) * ranks, buckets, buckets == 1 ? "" : "s",
                    a.syncBatchNorm ? "; batch norm synchronised" : "");
    }
    // The weight average starts from the weights every rank has (after the broadcast).
    std::unique_ptr<WeightAverage> average;
    if (a.ema > 0.0f) average = std::make_unique<WeightAverage>(*net, a.ema);
    // Time the convolution algorithms once for the batch shape (cuDNN's heuristic can be
    // far off); a smaller last batch keeps the heuristic's choice. Nothing to do on a CPU.
    if (!device.isCpu()) net->optimizeForShape({batchShape}, size_t{512} << 20);

    CrossEntropy cost({.labelSmoothing = a.labelSmoothing});
    HandlerOptions options{.batchsize = a.batch,
                           .seed = a.seed,
                           .progress = !a.quiet,
                           .out = stdout,
                           .device = device,
                           .accumulate = a.accumulate};
    Trainer trainer(*net, cost, *optimizer, options);
    trainer.setDataParallel(parallel.get());
    trainer.setWeightAverage(average.get());
    // The metrics CSV: --metrics, or beside --plot's PNG while it is drawn.
    const std::string metricsPath = !a.metrics.empty() ? a.metrics : (a.plot.empty() ? "" : a.plot + ".csv");
    const bool metrics = !metricsPath.empty() && writer;
    auto withAverage = [&](const auto& work) { withAverages(average.get(), work); };
    std::vector<int64_t> one = sample.dims(); // the input shape at batch 1, for later checks and exports
    one.insert(one.begin(), 1);
    // The transforms go with the model: predict, eval and Python apply them to new images.
    const SaveOptions saveOptions{
        .inputs = {Shape(one)}, .classes = data.train->classNames(), .transforms = transforms.str()};
    FitOptions fitOptions{.epochs = a.epochs,
                          .schedule = schedule.get(),
                          .warmup = a.warmup,
                          .validation = valid.get(),
                          .test = &test,
                          .earlyStop = a.earlyStop,
                          .saveBest = a.saveBest,
                          .save = saveOptions,
                          .checkpoint = a.checkpoint,
                          .checkpointEpochs = a.everyEpochs,
                          .checkpointSteps = a.everySteps,
                          .resume = a.resume,
                          .metrics = metricsPath,
                          .writer = writer,
                          .out = stdout};
    FitCallbacks fitCallbacks;
    // SIGINT/SIGTERM stop after the batch in progress; the ranks stop after the same batch,
    // when any of them was signalled.
    fitCallbacks.stop = [&] {
        bool stop = stopSignal != 0;
        if (comm) {
            for (int64_t s : comm->allGather(stopSignal)) {
                if (s && !stopSignal) stopSignal = static_cast<std::sig_atomic_t>(s);
                stop = stop || s != 0;
            }
        }
        return stop;
    };
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    const FitResult result = fit(trainer, train, fitOptions, fitCallbacks);
    // After SIGINT/SIGTERM (fit wrote the checkpoint): how to go on; exit code 128 + the signal.
    if (result.stopped) {
        const int sig = stopSignal ? static_cast<int>(stopSignal) : SIGINT;
        std::printf("\nstopped by %s at epoch %lld, batch %lld (step %lld)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                    static_cast<long long>(trainer.position().epoch + 1),
                    static_cast<long long>(trainer.position().batch), static_cast<long long>(optimizer->steps()));
        if (a.checkpoint.empty()) {
            std::printf("; no --checkpoint was given, so nothing was saved\n");
        } else {
            std::printf("; checkpoint written to %s\nresume with the same command and --resume %s\n",
                        a.checkpoint.c_str(), a.checkpoint.c_str());
        }
        std::fflush(stdout);
        return 128 + sig;
    }
    const double accuracy = result.testAccuracy;
    if (metrics && !a.metrics.empty()) std::printf("wrote the metrics to %s\n", a.metrics.c_str());
    if (!a.plot.empty() && writer) {
        writeAtomically(a.plot, "--plot", [&](const std::string& tmp) {
            plotMetrics(metricsPath, tmp, "tessera train --model " + a.model, a.epochs, valid != nullptr);
        });
        if (a.metrics.empty()) std::remove(metricsPath.c_str());
        std::printf("wrote the loss and accuracy curves to %s\n", a.plot.c_str());
    }
    if (!a.save.empty() && writer) {
        withAverage([&] { saveModel(*net, a.save, saveOptions); });
        std::printf("saved the model%s (blueprint included) to %s\n", average ? " with its averaged weights" : "",
                    a.save.c_str());
    }
    if (parallel) {
        const double reduce = parallel->reduceSeconds(), exposed = parallel->exposedSeconds();
        std::printf("gradient all-reduce: %.1f s in all, %.0f%% of it hidden behind backward\n", reduce,
                    reduce > 0 ? 100.0 * std::max(0.0, reduce - exposed) / reduce : 0.0);
    }
    if (a.precision == "fp16") {
        std::printf("loss scaling: scale %g at the end, %lld steps skipped for overflowing gradients\n",
                    optimizer->lossScale(), static_cast<long long>(optimizer->skippedSteps()));
    }
    if (valid && result.bestEpoch > 0) {
        std::printf("best validation accuracy %.2f%% after epoch %lld%s\n", 100.0 * result.bestValidationAccuracy,
                    static_cast<long long>(result.bestEpoch),
                    a.saveBest.empty() ? "" : ("; that model is in " + a.saveBest).c_str());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("final test accuracy %.2f%%, total time %.1f s\n", 100.0 * accuracy, seconds);
    return 0;
}
} // namespace

std::function<int()> addTrain(CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    CLI::App* cmd = app.add_subcommand("train", "Train a model on a data set");
    cmd->add_option("--model", args->model,
                    "a zoo name (lenet, mlp, ...), a blueprint JSON file, an HDF5 model file with a blueprint or an "
                    "ONNX file (their weights are the starting point)")
        ->capture_default_str();
    addDataOptions(cmd, args->in);
    CLI::Option* data = cmd->get_option("--data");
    data->description(data->get_description() +
                      "; or text for a language model over byte ids (gpt-mini): fortunes (Debian's fortunes "
                      "package) or text:PATH (a text file, or a folder of them), every 10th entry held out");
    cmd->add_flag("--pin-memory,!--no-pin-memory", args->pinMemory,
                  "with --device cuda: make batches in page-locked memory and copy them to the GPU while it "
                  "computes (default; --no-pin-memory: ordinary memory, copied at each step)");
    cmd->add_flag("--deterministic", args->deterministic,
                  "with --device cuda: only cuDNN algorithms that give the same bits on every run, so a seeded run "
                  "repeats exactly (slower; docs/gpu.md)");
    cmd->add_option("--epochs", args->epochs, "passes over the training set")
        ->capture_default_str()
        ->check(positiveInteger());
    cmd->add_option("--batch", args->batch, "batch size")->capture_default_str()->check(positiveInteger());
    cmd->add_option("--lr", args->lr, "learning rate (default: the optimizer's)")->check(positiveNumber());
    cmd->add_option("--optimizer", args->optimizer,
                    "sgd, momentum, nesterov, adam, adamw (decoupled weight decay), adagrad, adadelta, rmsprop, "
                    "rmspropgraves or smorms3")
        ->capture_default_str();
    cmd->add_option("--weight-decay", args->weightDecay,
                    "weight decay on the weights of convolutions, linear and recurrent layers (parameters of 2 or "
                    "more dimensions; not biases or normalisation scales): L2 in the gradient, decoupled for adamw "
                    "(whose default is 0.01)")
        ->check(positiveNumber());
    cmd->add_option("--clip-norm", args->clipNorm,
                    "clip the gradients to this global L2 norm before each update (all parameters together)")
        ->check(positiveNumber());
    cmd->add_option("--label-smoothing", args->labelSmoothing,
                    "train against (1 - E) onehot(label) + E / classes instead of the one-hot label (0 <= E < 1)");
    cmd->add_option("--mixup", args->mixup,
                    "blend each training batch with itself reversed by a weight drawn from Beta(A, A) per batch, "
                    "images and labels alike (A such as 0.2; 0: off)");
    cmd->add_option("--cutmix", args->cutmix,
                    "paste a box of each training image's partner (the batch reversed) covering a Beta(A, A) share, "
                    "labels weighed by its area (A such as 1; with --mixup, each batch uses one, half the time each)");
    cmd->add_flag("--balance", args->balance,
                  "draw each training epoch's samples with replacement, every class equally likely (for classes "
                  "unevenly represented)");
    cmd->add_option("--accumulate", args->accumulate,
                    "add up the gradients of N batches before each update: steps as of a batch N times larger, in "
                    "the memory of one (--every counts updates)")
        ->capture_default_str()
        ->check(positiveInteger());
    cmd->add_option("--ema", args->ema,
                    "keep an exponential moving average of the weights with this decay (e.g. 0.999), updated after "
                    "each step; the test accuracy and --save use the averaged weights, checkpoints keep them");
    cmd->add_option("--schedule", args->schedule,
                    "learning-rate schedule over the epochs: step:N:G (times G every N epochs), exp:G (times G each "
                    "epoch), cosine or cosine:MIN (half a cosine wave from the rate towards MIN, 0 by default, over "
                    "--epochs)");
    cmd->add_option("--warmup", args->warmup, "ramp the learning rate up linearly over the first N training steps")
        ->check(nonNegativeInteger());
    cmd->add_option("--classes", args->classes,
                    "a zoo model's number of classes (its head); default: the data's (a model file must score "
                    "exactly the data's classes)")
        ->check(positiveInteger());
    cmd->add_option("--seed", args->seed, "seed of the initialisation and the batch order")->capture_default_str();
    cmd->add_option("--sample", args->sample,
                    "text data: characters the trained model writes at the end, continuing --prompt (0: none)")
        ->capture_default_str()
        ->check(nonNegativeInteger());
    cmd->add_option("--prompt", args->prompt, "text data: what --sample continues (default: a new line)");
    cmd->add_option("--temperature", args->temperature,
                    "text data: --sample's scores are divided by this before the softmax (below 1: likelier "
                    "characters)")
        ->capture_default_str()
        ->check(positiveNumber());
    cmd->add_flag("--quiet", args->quiet, "no progress line");
    cmd->add_option("--checkpoint", args->checkpoint,
                    "write a checkpoint (model, optimizer, position, random state) to this file at the end of each "
                    "epoch, every --every steps, and on SIGINT/SIGTERM");
    cmd->add_flag("--overwrite", args->overwrite,
                  "let a run that does not --resume the --checkpoint file replace it (refused otherwise)");
    cmd->add_option("--every", args->every,
                    "when to checkpoint besides on SIGINT/SIGTERM and after the last epoch: N or Nsteps (every N "
                    "training steps, and at each epoch's end), Nepochs (at the end of every Nth epoch only); "
                    "default: at each epoch's end")
        ->check(CLI::Validator(
            [args](std::string& v) -> std::string {
                size_t used = 0;
                long long n = 0;
                try {
                    n = std::stoll(v, &used);
                } catch (const std::exception&) {
                    used = 0;
                }
                const std::string unit = used > 0 ? v.substr(used) : "";
                if (used == 0 || n <= 0 || v[0] == '+' || v[0] == ' ' ||
                    (unit != "" && unit != "steps" && unit != "step" && unit != "epochs" && unit != "epoch")) {
                    return "expected N, Nsteps or Nepochs with a whole number N > 0, got '" + v + "'";
                }
                if (unit.rfind("epoch", 0) == 0) {
                    args->everyEpochs = n;
                } else {
                    args->everySteps = n;
                }
                return "";
            },
            "N|Nsteps|Nepochs"));
    cmd->add_option("--validation", args->validation,
                    "hold out this fraction (0.1) or number (5000) of the training images, drawn by --seed, and "
                    "report their accuracy after each epoch (for --save-best and --early-stop)");
    cmd->add_option("--save-best", args->saveBest,
                    "write the model to this HDF5 file whenever the validation accuracy is the best so far");
    cmd->add_option("--early-stop", args->earlyStop, "stop when the validation accuracy has not improved for N epochs")
        ->check(positiveInteger());
    cmd->add_option("--resume", args->resume,
                    "continue from this checkpoint, bit-identical to an uninterrupted run (give the same options)");
    cmd->add_flag("--check-numerics", args->checkNumerics,
                  "check every layer's outputs and gradients for NaN and infinity; stop at the first, naming the "
                  "layer (slower)");
    cmd->add_flag("--sync-bn", args->syncBatchNorm,
                  "under mpirun: batch norm uses the statistics of the whole global batch (else each rank's own)");
    cmd->add_option("--save", args->save, "write the trained model to this HDF5 file (blueprint included)");
    cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--precision", args->precision,
                    "fp32; bf16: convolutions and linear layers compute in bfloat16 (float32 master weights); fp16 "
                    "(CUDA): the same in float16, with dynamic loss scaling")
        ->capture_default_str();
    cmd->add_option("--metrics", args->metrics, "write one CSV row per epoch to this file (loss, accuracy, time)");
    cmd->add_option("--plot", args->plot, "draw the loss and accuracy curves into this PNG file (needs gnuplot)");
    return [args]() -> int {
        // One process, unless started by mpirun or asked for NCCL by the environment
        // (TESSERA_NCCL_SIZE, docs/distributed.md).
        const bool mpi = launchedByMpi();
        if (!mpi && !ncclRequestedByEnvironment()) return runTrain(*args, nullptr);
        if (mpi && !mpiBuilt()) {
            throw UsageError("started by mpirun, but this build of tessera has no MPI (install libopenmpi-dev, e.g. "
                             "with tools/setup.sh, and build again)");
        }
        CommunicatorPtr comm = mpi ? mpiWorld() : nullptr;
        // An error on one rank ends the whole job (the others would wait for it forever).
        auto fail = [&](const char* what, int code) {
            std::fprintf(stderr, "tessera: rank %d of %d: %s\n", comm->rank(), comm->size(), what);
            std::fflush(stderr);
            comm->abort(code);
        };
        try {
            // Models on GPUs reduce their gradients over NCCL (bootstrapped through MPI under
            // mpirun), one GPU per rank: --device cuda gives rank r the GPU r modulo the
            // GPUs the process sees; cuda:N is taken as given.
            const Device device = parseDevice(args->device);
            if (!device.isCpu()) {
                const Device mine =
                    comm && args->device == "cuda" ? Device::cuda(comm->rank() % cudaDeviceCount()) : device;
                comm = ncclWorld(mine, comm);
                args->device = mine.str();
            } else if (!mpi) {
                throw UsageError("TESSERA_NCCL_SIZE is set (data parallelism over NCCL), which needs --device cuda");
            }
            if (comm->rank() != 0 && !std::freopen("/dev/null", "w", stdout)) std::fclose(stdout); // rank 0 reports
            return runTrain(*args, comm);
        } catch (const UsageError& e) {
            if (!comm) throw;
            fail(e.what(), 2);
        } catch (const std::exception& e) {
            if (!comm) throw;
            fail(e.what(), 1);
        }
        return 1; // not reached: fail() ends the process
    };
}

} // namespace tessera::cli
