// libFuzzer harness: the ONNX importer (the declared input shapes, then the whole graph
// with its weights).
#include "FuzzInput.h"
#include "io/Onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tessera::fuzz::InputFile file(data, size, ".onnx");
    tessera::fuzz::expectCleanFailure([&] { (void)tessera::onnxInputShapes(file.path()); });
    tessera::fuzz::expectCleanFailure([&] { (void)tessera::importOnnx(file.path()); });
    return 0;
}
