// libFuzzer harness: the array data sets read whole into memory (data/Dataset.h): the input
// as a CIFAR-10 test file, as a CIFAR-100 file, as the tar (or .tar.gz) archive of either,
// as the images of a .npy pair, and as a CSV and a .txt image list; every sample of what was read is then
// fetched.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "FuzzInput.h"
#include "data/Dataset.h"
#include "data/Npy.h"

namespace {
// The input's bytes again under another name (the readers take fixed file names).
void writeAs(const std::string& path, const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
}

void readAll(const tessera::DatasetPtr& d) {
    for (int64_t i = 0; i < d->size() && i < 64; ++i) (void)d->get(i);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".bin");
    const std::string dir = std::filesystem::path(file.path()).parent_path().string();
    tessera::fuzz::expectCleanFailure([&] {
        writeAs(dir + "/test_batch.bin", data, size);
        readAll(tessera::cifar10(dir, "test"));
    });
    tessera::fuzz::expectCleanFailure([&] {
        writeAs(dir + "/test.bin", data, size);
        readAll(tessera::cifar100(dir, "test"));
    });
    tessera::fuzz::expectCleanFailure([&] { readAll(tessera::cifar10(file.path(), "test")); });
    tessera::fuzz::expectCleanFailure([&] { readAll(tessera::cifar100(file.path(), "test")); });
    tessera::fuzz::expectCleanFailure([&] {
        tessera::writeNpy(tessera::Tensor::fromVector({2}, std::vector<int32_t>{0, 1}), dir + "/labels.npy");
        readAll(tessera::npyDataset(file.path(), dir + "/labels.npy"));
    });
    tessera::fuzz::expectCleanFailure([&] { readAll(tessera::imageList(file.path())); });
    tessera::fuzz::expectCleanFailure([&] {
        writeAs(dir + "/list.txt", data, size);
        readAll(tessera::imageList(dir + "/list.txt"));
    });
    std::filesystem::remove(dir + "/test_batch.bin");
    std::filesystem::remove(dir + "/test.bin");
    std::filesystem::remove(dir + "/labels.npy");
    std::filesystem::remove(dir + "/list.txt");
    return 0;
}
