#pragma once
// The HDF5 harnesses' extra check: a reader that returns or throws leaves no HDF5 object
// (file, group, dataset, type, space) open behind it.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>

namespace tessera::fuzz {

inline void requireNoOpenHdf5Objects(const char* after) {
    const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (open != 0) {
        std::fprintf(stderr, "FINDING: %zd HDF5 object(s) left open after %s\n", open, after);
        std::abort();
    }
}

} // namespace tessera::fuzz
