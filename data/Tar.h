#pragma once
/// \file Tar archives for the readers of data/: one 512-byte header parsed and checked, the
/// long names of GNU and pax records, and the members of a whole archive read in one pass
/// (plain or gzip-compressed, as `cifar-10-binary.tar.gz` is distributed). Internal: not
/// installed.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::data_detail {

/// What one tar header announces.
struct TarHeader {
    enum Kind { End, File, Name, Other };
    Kind kind = Other; ///< End: an all-zero block; Name: a GNU 'L' or pax 'x' record for the next member
    char type = 0;     ///< the header's type flag
    std::string name;  ///< from the header itself (prefix/name)
    uint64_t size = 0; ///< the bytes that follow it (before padding to 512)
};

/// Parses the 512 bytes at `h` (byte `offset` of the archive). IoError "<what>: ..." naming
/// the offset for a wrong checksum or a malformed number.
TarHeader parseTarHeader(const uint8_t* h, uint64_t offset, const std::string& what);

/// The name each member goes by: its header's, unless a GNU or pax record before it gave a
/// longer one.
class TarNames {
public:
    /// Takes the body of a Name record.
    void take(const TarHeader& record, const std::vector<uint8_t>& body);
    /// The name of the member `header` announces (and forgets the pending long name).
    std::string nameOf(const TarHeader& header);

private:
    std::string longName_;
};

/// Reads the tar archive `path` (gzip-compressed or not: zlib tells them apart) from start to
/// end and returns the regular members whose names `want` accepts, as (name, bytes), in
/// archive order; the others are skipped unread. IoError "<what> <path>: ..." for a file
/// that cannot be opened, is not a tar archive, or is truncated or damaged, and when the
/// accepted members exceed `maxBytes` together (the message ends with `tooMuch`, what to do).
std::vector<std::pair<std::string, std::vector<uint8_t>>>
readTarMembers(const std::string& path, const std::function<bool(const std::string&)>& want, const std::string& what,
               uint64_t maxBytes = uint64_t{1} << 32, const std::string& tooMuch = "damaged, or not the data expected");

/// The names between a member name's slashes, without empty and "." ones ("./a//b" gives a, b).
std::vector<std::string> pathComponents(const std::string& name);

/// Whether the file at `path` starts with gzip's magic bytes.
bool isGzipFile(const std::string& path);

} // namespace tessera::data_detail
