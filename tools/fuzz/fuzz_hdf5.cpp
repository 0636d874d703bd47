// libFuzzer harness: the HDF5 model reader. The blueprint and the stored input shapes are
// read (as `tessera check` does), and the weights are loaded into the harness's own model (as a program
// that knows its model does).
#include "FuzzInput.h"
#include "FuzzModels.h"
#include "io/Factory.h"
#include "io/Hdf5.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace tessera;
    fuzz::InputFile file(data, size, ".h5");
    fuzz::expectCleanFailure([&] { (void)blueprintFromJson(readBlueprint(file.path())); });
    fuzz::expectCleanFailure([&] { (void)readInputShapes(file.path()); });
    static std::shared_ptr<Sequential> net = fuzz::smallNet();
    fuzz::expectCleanFailure([&] { loadModel(*net, file.path()); });
    return 0;
}
