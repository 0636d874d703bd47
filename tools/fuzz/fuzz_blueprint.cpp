// libFuzzer harness: the blueprint JSON parser and the module factory, as `tessera check`
// uses them: parsed, built shape-only (no parameter memory), written back out.
#include <string>

#include "FuzzInput.h"
#include "io/Factory.h"
#include "modules/Init.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    tessera::fuzz::expectCleanFailure([&] {
        const tessera::Blueprint bp = tessera::blueprintFromJson(text);
        tessera::ShapeOnlyBuild shapeOnly;
        tessera::ModulePtr m = tessera::buildModule(bp);
        (void)m->numOfParams();
        (void)m->blueprint().toJson();
    });
    return 0;
}
