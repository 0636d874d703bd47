// libFuzzer harness: the IDX reader (MNIST's format, plain or gzip).
#include "FuzzInput.h"
#include "data/Idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".idx");
    tessera::fuzz::expectCleanFailure([&] { (void)tessera::readIdx(file.path()); });
    return 0;
}
