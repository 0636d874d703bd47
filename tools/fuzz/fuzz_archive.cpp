// libFuzzer harness: image folders inside tar and zip archives (data/Dataset.h's
// imageArchive): the listing of both splits, then every image (up to 64) read and decoded.
#include "FuzzInput.h"
#include "data/Dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".archive");
    for (const char* split : {"train", "test"}) {
        tessera::fuzz::expectCleanFailure([&] {
            const tessera::DatasetPtr d = tessera::imageArchive(file.path(), split, 3);
            for (int64_t i = 0; i < d->size() && i < 64; ++i) {
                tessera::fuzz::expectCleanFailure([&] { (void)d->get(i); }); // one bad image, the rest still read
            }
        });
    }
    return 0;
}
