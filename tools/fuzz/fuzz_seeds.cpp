// Writes the fuzzers' seed corpora: small valid files of each format, made by Tessera
// itself. usage: fuzz_seeds DIR  (creates DIR/{idx,blueprint,hdf5,checkpoint,onnx,image,dataset,archive}/)
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "FuzzModels.h"
#include "data/Image.h"
#include "data/Npy.h"
#include "io/Hdf5.h"
#include "io/Onnx.h"
#include "models/Zoo.h"
#include "modules/MultiheadAttention.h"
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

std::vector<uint8_t> readBytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A ustar archive of (name, bytes) members.
std::vector<uint8_t> tarOf(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& members) {
    std::vector<uint8_t> out;
    for (const auto& [name, bytes] : members) {
        uint8_t h[512] = {};
        std::snprintf(reinterpret_cast<char*>(h), 100, "%s", name.c_str());
        std::snprintf(reinterpret_cast<char*>(h) + 100, 8, "%07o", 0644);
        std::snprintf(reinterpret_cast<char*>(h) + 124, 12, "%011o", static_cast<unsigned>(bytes.size()));
        h[156] = '0';
        std::memcpy(h + 257,
                    "ustar\0"
                    "00",
                    8);
        std::memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (uint8_t b : h) sum += b;
        std::snprintf(reinterpret_cast<char*>(h) + 148, 8, "%06o", sum);
        out.insert(out.end(), h, h + 512);
        out.insert(out.end(), bytes.begin(), bytes.end());
        out.resize((out.size() + 511) / 512 * 512, 0);
    }
    out.resize(out.size() + 1024, 0); // the two end blocks
    return out;
}

void put16(std::vector<uint8_t>& b, uint32_t v) {
    for (int s = 0; s < 16; s += 8) b.push_back(static_cast<uint8_t>(v >> s));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
    for (int s = 0; s < 32; s += 8) b.push_back(static_cast<uint8_t>(v >> s));
}

void put64(std::vector<uint8_t>& b, uint64_t v) {
    for (int s = 0; s < 64; s += 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// A zip archive of (name, bytes) members, stored or deflated; with `zip64`, every size and
// offset in ZIP64 extra fields and the counts in ZIP64 end records, as for archives over
// 4 GiB or 65,535 members.
std::vector<uint8_t> zipOf(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& members, bool deflated,
                           bool zip64 = false) {
    std::vector<uint8_t> out, dir;
    for (const auto& [name, bytes] : members) {
        std::vector<uint8_t> packed = bytes;
        if (deflated) {
            packed.assign(compressBound(static_cast<uLong>(bytes.size())) + 64, 0);
            z_stream z{};
            deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
            z.next_in = const_cast<uint8_t*>(bytes.data());
            z.avail_in = static_cast<uInt>(bytes.size());
            z.next_out = packed.data();
            z.avail_out = static_cast<uInt>(packed.size());
            deflate(&z, Z_FINISH);
            packed.resize(z.total_out);
            deflateEnd(&z);
        }
        const auto crc = static_cast<uint32_t>(crc32(0, bytes.data(), static_cast<uInt>(bytes.size())));
        const auto offset = static_cast<uint32_t>(out.size());
        const uint32_t method = deflated ? 8 : 0;
        put32(out, 0x04034b50), put16(out, 20), put16(out, 0), put16(out, method), put32(out, 0), put32(out, crc);
        put32(out, static_cast<uint32_t>(packed.size())), put32(out, static_cast<uint32_t>(bytes.size()));
        put16(out, static_cast<uint32_t>(name.size())), put16(out, 0);
        out.insert(out.end(), name.begin(), name.end());
        out.insert(out.end(), packed.begin(), packed.end());
        put32(dir, 0x02014b50), put16(dir, 20), put16(dir, 20), put16(dir, 0), put16(dir, method), put32(dir, 0);
        put32(dir, crc), put32(dir, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(packed.size())),
            put32(dir, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(bytes.size()));
        put16(dir, static_cast<uint32_t>(name.size())), put16(dir, zip64 ? 28 : 0), put16(dir, 0), put16(dir, 0);
        put16(dir, 0), put32(dir, 0), put32(dir, zip64 ? 0xFFFFFFFF : offset);
        dir.insert(dir.end(), name.begin(), name.end());
        if (zip64)
            put16(dir, 1), put16(dir, 24), put64(dir, bytes.size()), put64(dir, packed.size()), put64(dir, offset);
    }
    const auto dirOffset = static_cast<uint32_t>(out.size());
    out.insert(out.end(), dir.begin(), dir.end());
    if (zip64) {
        const uint64_t recordAt = out.size();
        put32(out, 0x06064b50), put64(out, 44), put16(out, 45), put16(out, 45), put32(out, 0), put32(out, 0);
        put64(out, members.size()), put64(out, members.size()), put64(out, dir.size()), put64(out, dirOffset);
        put32(out, 0x07064b50), put32(out, 0), put64(out, recordAt), put32(out, 1);
    }
    put32(out, 0x06054b50), put16(out, 0), put16(out, 0);
    put16(out, zip64 ? 0xFFFF : static_cast<uint32_t>(members.size()));
    put16(out, zip64 ? 0xFFFF : static_cast<uint32_t>(members.size()));
    put32(out, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(dir.size()));
    put32(out, zip64 ? 0xFFFFFFFF : dirOffset), put16(out, 0);
    return out;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const fs::path dir = argv[1];
    for (const char* d : {"idx", "blueprint", "hdf5", "checkpoint", "onnx", "image", "dataset", "archive"}) {
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

    // Image folders in archives: a tar (plain and gzip-compressed), a zip of stored members,
    // one of deflated ones and one in ZIP64's records.
    {
        const std::vector<std::pair<std::string, std::vector<uint8_t>>> members = {
            {"train/a/1.png", readBytes(dir / "image/colour.png")},
            {"train/b/2.jpg", readBytes(dir / "image/colour.jpg")},
            {"test/a/3.png", readBytes(dir / "image/gray.png")},
            {"test/b/4.jpg", readBytes(dir / "image/gray.jpg")}};
        write(dir / "archive/folders.tar", tarOf(members));
        writeGzip(dir / "archive/folders.tar.gz", tarOf(members));
        write(dir / "archive/stored.zip", zipOf(members, false));
        write(dir / "archive/deflated.zip", zipOf(members, true));
        write(dir / "archive/zip64.zip", zipOf(members, true, true));
    }

    // Array data sets: two CIFAR-10 records, one CIFAR-100 record, .npy images of both kinds.
    std::vector<uint8_t> cifar;
    for (int r = 0; r < 2; ++r) {
        cifar.push_back(static_cast<uint8_t>(r + 3));
        for (int p = 0; p < 3072; ++p) cifar.push_back(static_cast<uint8_t>(p * 7 + r));
    }
    write(dir / "dataset/cifar10.bin", cifar);
    write(dir / "dataset/cifar100.bin", std::vector<uint8_t>(cifar.begin(), cifar.begin() + 3074));
    // ... and as the archives are distributed, plain and gzip-compressed.
    const std::vector<uint8_t> cifarTar = tarOf({{"cifar-10-batches-bin/readme.html", {'h', 'i'}},
                                                 {"cifar-10-batches-bin/test_batch.bin", cifar},
                                                 {"cifar-100-binary/test.bin", {cifar.begin(), cifar.begin() + 3074}}});
    write(dir / "dataset/cifar.tar", cifarTar);
    writeGzip(dir / "dataset/cifar.tar.gz", cifarTar);
    // An image list: its images by absolute name (the list is read from elsewhere), a quoted one.
    {
        const std::string colour = fs::absolute(dir / "image/colour.png").string();
        const std::string gray = fs::absolute(dir / "image/gray.jpg").string();
        const std::string list = "file,class,note\r\n" + colour + ",cat,x\r\n\"" + gray + "\",dog,\"a, b\"\r\n";
        write(dir / "dataset/list.csv", std::vector<uint8_t>(list.begin(), list.end()));
    }
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
    // causal self-attention: the nodes the import reads back as one ScaledDotProductAttention
    Sequential attention("attention");
    attention.append(std::make_shared<MultiheadAttention>(8, 2, MultiheadAttentionOptions{.causal = true}));
    attention.evalMode();
    exportOnnx(attention, {Shape({1, 4, 8})}, (dir / "onnx/attention.onnx").string());
    std::printf("seed corpora written under %s\n", dir.c_str());
    return 0;
}
