// libFuzzer harness: JPEG and PNG decoding (data/Image.h), in colour and in grayscale, at
// full size, scaled down as a random-resized crop first allows and as its window alone, and
// transforms over what was decoded.
#include "FuzzInput.h"
#include "data/Image.h"
#include "data/Transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".png");
    tessera::fuzz::expectCleanFailure([&] {
        // A grey eighth first: a few hundred bytes may declare tens of millions of pixels,
        // whose every decode takes seconds under the sanitizers; such a picture is decoded
        // that way only.
        const tessera::Image probe =
            tessera::readImage(file.path(), 1, [](int64_t, int64_t) { return tessera::DecodePlan{.least = 0.125}; });
        const int64_t pixels = probe.fullHeight > 0 ? probe.fullHeight * probe.fullWidth : probe.height * probe.width;
        if (pixels > (int64_t{1} << 22)) return;
        const tessera::Transforms rrc = tessera::Transforms().randomResizedCrop(4, 4, 0.5);
        const tessera::Image small = tessera::readImage(file.path(), 3, rrc.decodeScale(true));
        (void)rrc.apply(small, 1, 0, 0, true);
        // The crop's own window decoded alone (rows skipped, columns cut), and cropped.
        const tessera::Image window = tessera::readImage(file.path(), 3, rrc.decodeScale(true, 1, 0, 0));
        (void)rrc.apply(window, 1, 0, 0, true);
        for (int64_t index = 0; index < 4; ++index) { // four draws of TrivialAugmentWide's operations
            (void)tessera::Transforms().trivialAugment().apply(small, size, 0, index, true);
        }
        const tessera::Image img = tessera::readImage(file.path(), 3);
        (void)tessera::readImage(file.path(), 1);
        (void)tessera::Transforms().resize(8).centerCrop(8, 8).flip(1.0).apply(img, 1, 0, 0, true);
    });
    return 0;
}
