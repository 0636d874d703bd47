#pragma once
/// \file Fresh anonymous memory for large buffers that are written once (a model's elements
/// as the HDF5 reader reads them, an ONNX file's weights). Private to io/.

#include <cstddef>
#include <memory>

namespace tessera::io_detail {

/// `n` bytes of zero pages mapped from the OS, in huge pages from 2 MiB where the system
/// gives them (fewer page faults and TLB misses), unmapped when the last owner lets go.
/// Null when `n` is 0 or the OS has none to give.
std::shared_ptr<char> mapPages(std::size_t n);

} // namespace tessera::io_detail
