// Writes the fuzzers' seed corpora: small valid files of each format, made by Tessera
// itself. usage: fuzz_seeds DIR  (creates DIR/{idx,blueprint,hdf5,checkpoint,onnx,image,dataset}/)
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "FuzzModels.h"
#include "data/Image.h"
#include "io/Hdf5.h"
#include "io/Npy.h"
#include "io/Onnx.h"
#include "models/Zoo.h"
#include "training/Checkpoint.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

std::vector<uint8_t> idx(uint8_t typeCode, const std::vector<uint32_t>& dims, size_t elemSize) {
    std::vector<uint8_t> b = {0, 0, typeCode, static_cast<uint8_t>(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
        for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
        n *= d;
    }
    for (size_t i = 0; i < n * elemSize; ++i) b.push_back(static_cast<uint8_t>(i * 37));
    return b;
}

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void writeGzip(const fs::path& path, const std::vector<uint8_t>& bytes) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const fs::path dir = argv[1];
    for (const char* d : {"idx", "blueprint", "hdf5", "checkpoint", "onnx", "image", "dataset"}) {
        fs::create_directories(dir / d);
    }

    // Images: PNG in colour and gray, JPEG in colour and gray.
    Image colour(3, 5, 7), gray(1, 6, 3);
    for (size_t i = 0; i < colour.pixels.size(); ++i) colour.pixels[i] = static_cast<float>(i % 11) / 10.0f;
    for (size_t i = 0; i < gray.pixels.size(); ++i) gray.pixels[i] = static_cast<float>(i % 7) / 6.0f;
    writePng((dir / "image/colour.png").string(), colour);
    writePng((dir / "image/gray.png").string(), gray);
    writeJpeg((dir / "image/colour.jpg").string(), colour, 80);
    writeJpeg((dir / "image/gray.jpg").string(), gray, 80);

    // Array data sets: two CIFAR-10 records, one CIFAR-100 record, .npy images of both kinds.
    std::vector<uint8_t> cifar;
    for (int r = 0; r < 2; ++r) {
        cifar.push_back(static_cast<uint8_t>(r + 3));
        for (int p = 0; p < 3072; ++p) cifar.push_back(static_cast<uint8_t>(p * 7 + r));
    }
    write(dir / "dataset/cifar10.bin", cifar);
    write(dir / "dataset/cifar100.bin", std::vector<uint8_t>(cifar.begin(), cifar.begin() + 3074));
    writeNpy(Tensor::rand({2, 1, 3, 3}), (dir / "dataset/images.npy").string());

    write(dir / "idx/images-idx3-ubyte", idx(0x08, {3, 4, 5}, 1));
    write(dir / "idx/labels-idx1-ubyte", idx(0x08, {7}, 1));
    write(dir / "idx/floats-idx2", idx(0x0D, {2, 3}, 4));
    writeGzip(dir / "idx/images-idx3-ubyte.gz", idx(0x08, {2, 3, 3}, 1));

    auto net = fuzz::smallNet();
    std::ofstream(dir / "blueprint/small.json") << net->blueprint().toJson();
    for (const char* name : {"lenet", "lstm"}) {
        std::ofstream(dir / "blueprint" / (std::string(name) + ".json")) << loadZooModel(name)->blueprint().toJson();
    }

    saveModel(*net, (dir / "hdf5/small.h5").string());
    saveModel(*net, (dir / "hdf5/small_bf16.h5").string(), {.dtype = DType::bfloat16});

    {
        Adam adam(0.01f);
        adam.setupOn(*net, true);
        CrossEntropy cost;
        Trainer trainer(*net, cost, adam, fuzz::trainerOptions());
        const Tensor x = Tensor::randn({24, 6});
        const Tensor y = Tensor::randint({24}, 3);
        WeightAverage average(*net, 0.9f);
        trainer.onBatchFinish = [&](const BatchInfo&) { average.update(); };
        trainer.train(x, y);
        saveCheckpoint((dir / "checkpoint/small.h5").string(), *net, adam, trainer);
        saveCheckpoint((dir / "checkpoint/average.h5").string(), *net, adam, trainer, &average);
    }

    net->evalMode();
    exportOnnx(*net, {Shape({2, 6})}, (dir / "onnx/small.onnx").string());
    ModulePtr lenet = loadZooModel("lenet");
    lenet->evalMode();
    exportOnnx(*lenet, {Shape({1, 1, 28, 28})}, (dir / "onnx/lenet.onnx").string());
    std::printf("seed corpora written under %s\n", dir.c_str());
    return 0;
}
