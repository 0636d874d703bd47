#pragma once
// Where the test data lives: the source tree the tests were built from, or the directory
// the environment variable TESSERA_SOURCE_DIR names (a relocated test program,
// tools/bundle.sh). Only SourceDir.cpp sees the build's path, so the other test files
// compile the same from any checkout (one compiler cache serves every clone).

#include <string>

namespace tessera::testing {

std::string sourceDir();

} // namespace tessera::testing
