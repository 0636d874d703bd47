// libFuzzer harness: the array data sets read whole into memory (data/Dataset.h): the input
// as a CIFAR-10 test file, as a CIFAR-100 file, and as the images of a .npy pair; every
// sample of what was read is then fetched.
#include <filesystem>

#include "FuzzInput.h"
#include "data/Dataset.h"
#include "io/Npy.h"

namespace {
void readAll(const tessera::DatasetPtr& d) {
    for (int64_t i = 0; i < d->size() && i < 64; ++i) (void)d->get(i);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".bin");
    const std::string dir = std::filesystem::path(file.path()).parent_path().string();
    tessera::fuzz::expectCleanFailure([&] {
        std::filesystem::copy_file(file.path(), dir + "/test_batch.bin",
                                   std::filesystem::copy_options::overwrite_existing);
        readAll(tessera::cifar10(dir, "test"));
    });
    tessera::fuzz::expectCleanFailure([&] {
        std::filesystem::copy_file(file.path(), dir + "/test.bin", std::filesystem::copy_options::overwrite_existing);
        readAll(tessera::cifar100(dir, "test"));
    });
    tessera::fuzz::expectCleanFailure([&] {
        tessera::writeNpy(tessera::Tensor::fromVector({2}, std::vector<int32_t>{0, 1}), dir + "/labels.npy");
        readAll(tessera::npyDataset(file.path(), dir + "/labels.npy"));
    });
    std::filesystem::remove(dir + "/test_batch.bin");
    std::filesystem::remove(dir + "/test.bin");
    std::filesystem::remove(dir + "/labels.npy");
    return 0;
}
