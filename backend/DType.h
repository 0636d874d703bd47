#pragma once
/// \file DType and Device: what a tensor holds and where it lives.

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

/// Element type. float32 is first-class; int32 holds labels and indices.
enum class DType : uint8_t { float32, int32 };

/// Bytes per element.
size_t sizeOf(DType dtype);
/// "float32", "int32".
std::string str(DType dtype);

/// C++ element type -> DType, for `Tensor::data<T>()`.
template <class T> constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::float32; }
template <> constexpr DType dtypeOf<int32_t>() { return DType::int32; }

/// How a tensor's elements sit in memory. `plain` is row-major over the logical shape.
/// The blocked layouts keep a [N, C, spatial...] tensor (rank 3 to 5) as N, ceil(C/b),
/// spatial..., b with the channel dim split into blocks of b = 8 or 16, zero-padded up to
/// a whole block (oneDNN's nCw16c / nChw16c / nCdhw16c and their 8c forms); convolutions
/// run several times faster on them. Only backends produce blocked tensors.
enum class Layout : uint8_t { plain, blocked8, blocked16 };
/// "plain", "blocked8", "blocked16".
std::string str(Layout layout);
/// Channel block of a layout (1 for plain).
inline int64_t blockOf(Layout layout) { return layout == Layout::blocked16 ? 16 : layout == Layout::blocked8 ? 8 : 1; }

/// Where memory lives: the host, or a CUDA device by index.
struct Device {
    enum class Kind : uint8_t { CPU, CUDA };
    Kind kind = Kind::CPU;
    int index = 0;

    static Device cpu() { return {}; }
    static Device cuda(int index = 0) { return {Kind::CUDA, index}; }
    bool isCpu() const { return kind == Kind::CPU; }
    bool operator==(const Device&) const = default;
    /// "cpu", "cuda:0".
    std::string str() const;
};

} // namespace tessera
