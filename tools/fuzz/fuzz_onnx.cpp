// libFuzzer harness: the ONNX importer (the declared input shapes, then the whole graph
// with its weights).
#include "FuzzInput.h"
#include "io/Onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".onnx");
    tessera::fuzz::expectCleanFailure([&] { (void)tessera::onnxInputShapes(file.path()); });
    // Computations on constants capped at 2^22 values in all: the default (2^30, some 15 s
    // unsanitized) would take minutes under the sanitizers and coverage, past the 10 s an
    // input may take; the limit's check is what runs here (a file past it must stop cleanly).
    tessera::OnnxImportOptions options;
    options.foldLimit = int64_t{1} << 22;
    tessera::fuzz::expectCleanFailure([&] { (void)tessera::importOnnx(file.path(), options); });
    return 0;
}
