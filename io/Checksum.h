#pragma once
/// \file HDF5's Fletcher-32 checksum, as libhdf5 computes it (io/Hdf5.cpp checks the chunks
/// Tessera saved with it). Private to io/.

#include <cstddef>
#include <cstdint>

namespace tessera::io_detail {

/// The Fletcher-32 checksum of `n` bytes: big-endian 16-bit words (an odd last byte as a
/// word's high byte), both sums folded to 16 bits after every 360 words; libhdf5's filter
/// stores it little-endian after a chunk.
uint32_t fletcher32(const unsigned char* data, std::size_t n);

} // namespace tessera::io_detail
