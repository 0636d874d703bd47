// The data pipeline: images per second of a Loader decoding and augmenting files with 1
// and 2 workers, and the share of a training epoch spent waiting for data.
//
//   Data/decode/png32/workers:W      32x32 colour PNGs, crop:32:4,flip,normalize:cifar10
//   Data/decode/jpeg224/workers:W    224x224 colour JPEGs, crop:224:16,flip,normalize:imagenet
//   Data/decode/photo-resize/D/workers:W  2048x1536 colour JPEGs (photographs), resize:256,center:224,
//                                         normalize:imagenet; D: scaled (LoaderOptions::scaledDecode) or full
//   Data/decode/photo-rrc/D/workers:W     the same photographs, rrc:224,flip,normalize:imagenet
//   Data/rrc/F/H     a random-resized crop's decode alone (rrc:224,flip,normalize:imagenet, one
//                    thread) of the photographs (F photo) or the 224x224 JPEGs (jpeg224): H window
//                    (its own window at the scale it allows), smallest (whole, at the smallest
//                    window's scale) or full (whole)
//   Data/train/lenet-idx/workers:W     LeNet (batch 128) on Fashion-MNIST (IDX, in memory), crop:28:2,flip
//   Data/train/lenet-png28/workers:W   LeNet (batch 128) on 28x28 grayscale PNG files, crop:28:2,flip
//   Data/train/resnet18-cifar/workers:W  ResNet-18 CIFAR (batch 64) on CIFAR-10 binary
//                                        records, crop:32:4,flip,normalize:cifar10
// The train rows report "wait%": the epoch's time the loop spent waiting for batches.
// The files are generated once into a temporary directory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "BenchUtil.h"
#include "backend/Random.h"
#include "data/Idx.h"
#include "data/Image.h"
#include "data/Loader.h"
#include "models/LeNet.h"
#include "models/ResNet.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

Image noisePicture(int64_t channels, int64_t side, uint64_t seed, int64_t width = 0) {
    // Smooth content with some noise: JPEG and PNG compress it like photographs, not like noise.
    if (width == 0) width = side;
    Image img(channels, side, width);
    for (int64_t c = 0; c < channels; ++c) {
        for (int64_t y = 0; y < side; ++y) {
            for (int64_t x = 0; x < width; ++x) {
                const float smooth = 0.5f + 0.4f * std::sin(0.05f * static_cast<float>(x + 2 * y + 17 * c + seed % 97));
                img.at(c, y, x) =
                    smooth + 0.05f * randomUniform(seed, static_cast<uint64_t>((c * side + y) * width + x));
            }
        }
    }
    return img;
}

// `count` images (side x side, or side x width) in 10 class folders under `dir` (made once).
std::string imageFolderOf(const std::string& name, int64_t count, int64_t channels, int64_t side, bool jpeg,
                          int64_t width = 0) {
    const std::string dir = (fs::temp_directory_path() / ("tessera_bench_" + name)).string();
    if (fs::exists(dir + "/done-" + std::to_string(count))) return dir;
    fs::remove_all(dir);
    for (int64_t i = 0; i < count; ++i) {
        const std::string cls = dir + "/class" + std::to_string(i % 10);
        fs::create_directories(cls);
        const Image img = noisePicture(channels, side, static_cast<uint64_t>(i), width);
        if (jpeg) {
            writeJpeg(cls + "/" + std::to_string(i) + ".jpg", img, 90);
        } else {
            writePng(cls + "/" + std::to_string(i) + ".png", img);
        }
    }
    std::ofstream(dir + "/done-" + std::to_string(count)) << "generated\n";
    return dir;
}

std::string cifarDirOf(int64_t count) {
    const std::string dir = (fs::temp_directory_path() / "tessera_bench_cifar").string();
    fs::create_directories(dir);
    {
        std::ofstream f(dir + "/data_batch_1.bin", std::ios::binary);
        for (int64_t i = 0; i < count; ++i) {
            const Image img = noisePicture(3, 32, static_cast<uint64_t>(i));
            f.put(static_cast<char>(i % 10));
            for (float v : img.pixels)
                f.put(static_cast<char>(static_cast<uint8_t>(std::clamp(v, 0.0f, 1.0f) * 255.0f)));
        }
    } // closed before it is copied
    for (int b = 2; b <= 5; ++b)
        fs::copy_file(dir + "/data_batch_1.bin", dir + "/data_batch_" + std::to_string(b) + ".bin",
                      fs::copy_options::overwrite_existing);
    return dir;
}

void BM_Decode(benchmark::State& state, std::string kind, int workers) {
    // jpeg224-rrc: ImageNet-style augmentation (random-resized crop, flip, colour jitter).
    const bool rrc = kind == "jpeg224-rrc", jpeg = kind == "jpeg224" || rrc;
    const bool photo = kind.starts_with("photo"), full = kind.ends_with("/full");
    const std::string dir = photo  ? imageFolderOf("photo2048", 32, 3, 1536, true, 2048)
                            : jpeg ? imageFolderOf("jpeg224", 256, 3, 224, true)
                                   : imageFolderOf("png32", 2048, 3, 32, false);
    const Transforms t =
        Transforms::parse(photo  ? (kind.starts_with("photo-rrc") ? "rrc:224,flip,normalize:imagenet"
                                                                  : "resize:256,center:224,normalize:imagenet")
                          : rrc  ? "rrc:224,flip,jitter:0.4:0.4:0.4,normalize:imagenet"
                          : jpeg ? "crop:224:16,flip,normalize:imagenet"
                                 : "crop:32:4,flip,normalize:cifar10");
    Loader loader(imageFolder(dir), t,
                  {.batchsize = photo ? 16 : 64, .seed = 1, .workers = workers, .scaledDecode = !full});
    int64_t epoch = 0;
    for (auto _ : state) {
        loader.start(epoch++);
        while (std::optional<DataBatch> b = loader.next()) benchmark::DoNotOptimize(b->images.raw());
    }
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(loader.size()), benchmark::Counter::kIsIterationInvariantRate);
}

// A random-resized crop's decode alone, one thread, over the photo2048 (rrc:224) or
// jpeg224 (rrc:224) files: its own window only, at the scale it allows (`window`, the
// Loader's since it decodes windows), the whole picture at the scale of the smallest window
// (`smallest`: the Loader's before), or whole at full size (`full`).
void BM_DecodeCrop(benchmark::State& state, std::string files, std::string how) {
    const bool photo = files == "photo";
    const std::string dir =
        photo ? imageFolderOf("photo2048", 32, 3, 1536, true, 2048) : imageFolderOf("jpeg224", 256, 3, 224, true);
    std::vector<std::string> paths;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (e.path().extension() == ".jpg") paths.push_back(e.path().string());
    }
    std::sort(paths.begin(), paths.end());
    const Transforms t = Transforms::parse("rrc:224,flip,normalize:imagenet");
    // Under the heap settings a Loader's workers decode under (its first construction sets
    // them for the process): large buffers reused, not mapped afresh each time.
    (void)Loader(imageFolder(dir), t, {.batchsize = 1});
    int64_t epoch = 0, pixels = 0;
    for (auto _ : state) {
        for (size_t i = 0; i < paths.size(); ++i) {
            const auto index = static_cast<int64_t>(i);
            const DecodeScale plan = how == "window"     ? t.decodeScale(true, 1, epoch, index)
                                     : how == "smallest" ? t.decodeScale(true)
                                                         : DecodeScale{};
            Image img = readImage(paths[i], 3, plan);
            pixels += img.height * img.width;
            benchmark::DoNotOptimize(t.apply(std::move(img), 1, epoch, index, true).pixels.data());
        }
        ++epoch;
    }
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(paths.size()), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["decoded px/image"] =
        static_cast<double>(pixels) / static_cast<double>(epoch * static_cast<int64_t>(paths.size()));
}

void BM_TrainWait(benchmark::State& state, std::string model, int workers) {
    const bool lenet = model != "resnet18-cifar";
    DatasetPtr data = model == "lenet-png28" ? imageFolder(imageFolderOf("png28", 2048, 1, 28, false), 1)
                      : lenet                ? idxDataset(kFashionMnistDir, "train", 2048)
                                             : cifar10(cifarDirOf(64), "train");
    data = firstSamples(data, lenet ? 2048 : 320);
    const Transforms t = Transforms::parse(lenet ? "crop:28:2,flip" : "crop:32:4,flip,normalize:cifar10");
    const int64_t batch = lenet ? 128 : 64;
    Loader loader(data, t, {.batchsize = batch, .seed = 1, .workers = workers});
    manualSeed(1);
    ModulePtr net = lenet ? ModulePtr(loadLeNet()) : ModulePtr(loadResNet(18, ResNetStem::cifar, 10));
    MomentumSGD sgd(0.01f, 0.9f);
    sgd.setupOn(*net, true);
    CrossEntropy cost;
    Trainer trainer(*net, cost, sgd, {.batchsize = batch, .progress = false});
    trainer.train(loader); // warm-up epoch, untimed: primitives built, files in the page cache
    double waited = 0, total = 0;
    for (auto _ : state) {
        trainer.train(loader);
        waited += trainer.dataSeconds();
        total += trainer.epochSeconds();
    }
    state.counters["images/s"] =
        benchmark::Counter(static_cast<double>(loader.size()), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["wait%"] = 100.0 * waited / total;
}

int registerAll() {
    for (const char* kind : {"png32", "jpeg224", "jpeg224-rrc", "photo-resize/scaled", "photo-resize/full",
                             "photo-rrc/scaled", "photo-rrc/full"}) {
        for (int workers : {1, 2}) {
            const std::string name = std::string("Data/decode/") + kind + "/workers:" + std::to_string(workers);
            benchmark::RegisterBenchmark(name.c_str(), BM_Decode, kind, workers)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    for (const char* files : {"photo", "jpeg224"}) {
        for (const char* how : {"window", "smallest", "full"}) {
            const std::string name = std::string("Data/rrc/") + files + "/" + how;
            benchmark::RegisterBenchmark(name.c_str(), BM_DecodeCrop, files, how)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    for (const char* model : {"lenet-idx", "lenet-png28", "resnet18-cifar"}) {
        for (int workers : {0, 1, 2}) {
            const std::string name = std::string("Data/train/") + model + "/workers:" + std::to_string(workers);
            benchmark::RegisterBenchmark(name.c_str(), BM_TrainWait, model, workers)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime()
                ->Iterations(3);
        }
    }
    return 0;
}

const int registered = registerAll();

} // namespace
