#pragma once
// The subcommands of the `tessera` program.

#include <CLI/CLI.hpp>

#include "data/Dataset.h"
#include "data/Transform.h"
#include "modules/Module.h"

namespace tessera {
class Optimizer;
class Schedule;
} // namespace tessera

namespace tessera::cli {

/// Each adds its subcommand to `app`; the returned function runs it (exit code).
std::function<int()> addTrain(CLI::App& app);
std::function<int()> addCheck(CLI::App& app);
std::function<int()> addSummary(CLI::App& app);
std::function<int()> addDraw(CLI::App& app);
std::function<int()> addConvert(CLI::App& app);
std::function<int()> addRun(CLI::App& app);
std::function<int()> addProfile(CLI::App& app);
std::function<int()> addEval(CLI::App& app);
std::function<int()> addPredict(CLI::App& app);
std::function<int()> addLayers(CLI::App& app);
std::function<int()> addSample(CLI::App& app);

/// --optimizer's optimizer (UsageError naming the option for an unknown name).
std::unique_ptr<Optimizer> optimizerOption(const std::string& name, float lr);
/// --schedule's schedule (nullptr for empty text; UsageError naming the option for bad text).
std::unique_ptr<Schedule> scheduleOption(const std::string& text, float base, int64_t epochs);
/// --weight-decay (adamw's default 0.01) on `net`'s parameters of 2 or more dims; returns
/// the decay (0: none) and counts the tensors it applies to into `decayed` as the
/// optimizer asks.
float setWeightDecayOption(Module& net, Optimizer& optimizer, const std::string& name, float weightDecay,
                           int64_t& decayed);

/// Whether --data names text (fortunes, or text:PATH) rather than images.
bool isTextData(const std::string& data);
/// What tessera train takes for a language model on text (TrainText.cpp).
struct TextTrainOptions {
    std::string model, data; ///< data: fortunes (Debian's package) or text:PATH (a file or a folder)
    int64_t epochs = 10, batch = 128, limit = 0, warmup = 0;
    float lr = -1.0f, weightDecay = 0.0f, clipNorm = 0.0f;
    std::string optimizer = "adam", schedule, save, device = "cpu", precision = "fp32";
    uint64_t seed = 1;
    bool quiet = false;
    int64_t sample = 200;     ///< characters written after training (0: none)
    std::string prompt;       ///< what the sample continues
    float temperature = 0.8f; ///< of the sample's draws
};
/// Trains a language model over byte ids on text: each epoch one pass over the training
/// windows, then the held-out loss; then --save and a sample of its writing.
int runTrainText(const TextTrainOptions& options);

/// "cpu", "cuda" or "cuda:N"; UsageError when no such device can be used, saying why.
Device parseDevice(const std::string& text);
/// "fp32", "bf16" or "fp16" (CUDA devices only) as the dtype calcMode takes; UsageError
/// for another name, or fp16 on the CPU.
DType parsePrecision(const std::string& text, Device device);

/// The --input shapes ("1x3x224x224" each), with the batch dim replaced when batch > 0.
/// std::invalid_argument when there are none or one does not parse.
Shapes parseInputs(const std::vector<std::string>& inputs, int64_t batch);
/// The input shapes a model takes, as far as it says: a zoo model's typical input, the
/// shapes an HDF5 file was saved for, the shapes an ONNX file declares (-1 for a free dim);
/// none when unknown.
std::vector<std::vector<int64_t>> declaredInputs(const std::string& model);
/// parseInputs, with the declared inputs when none is given (a free batch dim is 1);
/// UsageError asking for --input when a declared input leaves another dim free.
Shapes inputsFor(const std::string& model, const std::vector<std::string>& inputs, int64_t batch);
/// A model named on the command line: a zoo name, a blueprint JSON file, an HDF5 model
/// file with a blueprint, or an ONNX file. `train`: weights initialised (from the global
/// generator) and an HDF5 file's weights loaded; else left uninitialised (shape work). A
/// name that is none of these is std::invalid_argument; a bad file an IoError naming it.
/// `inputs` (the shapes given), for an ONNX file: its named free dims besides the batch (a
/// sequence length "seq") take the sizes given there (onnxDimSizes); UsageError when one
/// name gets two sizes.
ModulePtr loadModel(const std::string& model, bool train = false, const Shapes& inputs = {});
/// parseInputs of --input's shapes as given; none when none is.
Shapes givenInputs(const std::vector<std::string>& inputs);
/// Whether `model` names a zoo model (rather than a file).
bool isZooModel(const std::string& model);

/// The training and test sets that --data names (fashion-mnist, an IDX directory or
/// mnist:DIR, cifar10:DIR, cifar100:DIR, folder:DIR, npy:DIR), each cut to `limit` samples
/// taken from the classes in turn (firstOfEachClass) when limit > 0; `channels` for image folders. UsageError for a
/// name of another kind or a missing directory, IoError for a bad file.
struct DataSets {
    DatasetPtr train, test;
    std::string what;
    /// With a limit: the samples taken of each class ("--limit 600: 200 of each of 3
    /// classes; test: ..."); empty without one.
    std::string limited;
};
DataSets openData(const std::string& data, int64_t limit, int channels);
/// The options that say what data to read and how (train and eval take them alike).
struct DataOptions {
    std::string data = "fashion-mnist"; ///< --data, as openData takes it
    std::string augment;                ///< --augment: Transforms::parse's text
    int workers = 2;                    ///< --workers
    int channels = 3;                   ///< --channels: image folders' 1 or 3
    int64_t limit = 0;                  ///< --limit: the first N samples of each split
    bool fullDecode = false;            ///< --full-decode: LoaderOptions::scaledDecode off
};
/// --augment's transforms; UsageError naming the option for text Transforms::parse refuses.
Transforms parseAugment(const std::string& text);
/// UsageError naming `model` unless `net` gives one output of [batch, classes or more]
/// scores for a batch of `batchShape` (shape inference only).
int64_t requireClassifier(Module& net, const std::string& model, const Shape& batchShape, int64_t classes);
/// Adds --device (cpu, cuda or cuda:N) and --precision (fp32, bf16, fp16) to `cmd`, for
/// the commands that run a model without training it; `note` ends --precision's help.
void addDeviceAndPrecision(CLI::App* cmd, std::string& device, std::string& precision, const std::string& note = "");
/// Adds --data, --augment, --workers, --channels and --limit to `cmd`, writing into `in`.
void addDataOptions(CLI::App* cmd, DataOptions& in);

/// The class names saved with a model file (an HDF5 file from tessera train --save, or an
/// ONNX file whose metadata holds them); empty for other models or a file without them.
std::vector<std::string> modelClassNames(const std::string& model);
/// The transforms saved with a model file (HDF5's "transforms", ONNX's metadata); empty for
/// zoo names, blueprints and files without them.
std::string modelTransforms(const std::string& model);

/// Checks of option values, run by the parser before any work starts; a bad value is a
/// usage error naming the option, what was expected and what was given.
CLI::Validator positiveInteger();    ///< a whole number > 0
CLI::Validator nonNegativeInteger(); ///< a whole number >= 0
CLI::Validator positiveNumber();     ///< a finite number > 0
/// The directory a file is to be written into exists and is writable (checked before any
/// work starts, so a long run does not fail at its end); UsageError naming `option`.
void requireWritableDestination(const std::string& option, const std::string& path);
/// UsageError when two of the (option, path) pairs name the same file (through links and
/// relative paths alike; empty paths are skipped): a later write would destroy an earlier one.
void requireDistinctDestinations(const std::vector<std::pair<std::string, std::string>>& destinations);

/// A usage error of the command line (exit code 2).
struct UsageError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

} // namespace tessera::cli
