// libFuzzer harness: JPEG and PNG decoding (data/Image.h), in colour and in grayscale, and
// a transform over what was decoded.
#include "FuzzInput.h"
#include "data/Image.h"
#include "data/Transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".png");
    tessera::fuzz::expectCleanFailure([&] {
        const tessera::Image img = tessera::readImage(file.path(), 3);
        (void)tessera::readImage(file.path(), 1);
        (void)tessera::Transforms().resize(8).centerCrop(8, 8).flip(1.0).apply(img, 1, 0, 0, true);
    });
    return 0;
}
