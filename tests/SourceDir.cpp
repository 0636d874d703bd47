#include "SourceDir.h"

#include <cstdlib>

namespace tessera::testing {

std::string sourceDir() {
    const char* dir = std::getenv("TESSERA_SOURCE_DIR");
    return dir && *dir ? dir : TESSERA_SOURCE_DIR;
}

} // namespace tessera::testing
