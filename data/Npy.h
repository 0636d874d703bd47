#pragma once
/// \file NumPy `.npy` files: one array each, so any tool can feed Tessera and read what it
/// computes (`np.save` / `np.load`).

#include <cstdint>
#include <string>
#include <vector>

#include "backend/Tensor.h"

namespace tessera {

/// The array in `path` as a host tensor: float32 for float32 and float64 data (converted),
/// int32 for int32 and int64 data (IoError when a value does not fit) and for uint8 and bool
/// data (0 and 1: a mask). C order only. A missing, truncated or malformed file, or another
/// dtype, is an IoError naming the file and what is wrong. `dtype`, when given, receives the
/// file's own element type: "float32", "float64", "int32", "int64", "uint8" or "bool".
Tensor readNpy(const std::string& path, std::string* dtype = nullptr);

/// The element type of the array in `path` ("float32", "uint8", ... as readNpy names them;
/// the header's own code for others) and its shape, from the header alone.
std::string npyDtype(const std::string& path, Shape* shape = nullptr);

/// The uint8 array in `path` as its bytes in C order, and its shape in `shape`: read
/// straight into the vector, at one byte per element (readNpy holds such data as int32).
/// IoError as readNpy's, and for a file of another dtype.
std::vector<uint8_t> readNpyBytes(const std::string& path, Shape& shape);

/// Writes `t` (float32 or int32, any device and layout) to `path` as a C-order `.npy` (format
/// 1.0), through a temporary file renamed when complete. IoError when it cannot be written.
void writeNpy(const Tensor& t, const std::string& path);

} // namespace tessera
