#pragma once
/// \file DType and Device: what a tensor holds and where it lives.

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

/// Element type. float32 is what layers compute in; int32 holds labels and indices;
/// bfloat16 and float16 are the 16-bit floats of reduced-precision storage and compute
/// (`Module::calcMode`).
enum class DType : uint8_t { float32, int32, bfloat16, float16 };

/// Bytes per element.
size_t sizeOf(DType dtype);
/// "float32", "int32", "bfloat16", "float16".
std::string str(DType dtype);
/// DType by its name (str's inverse); ShapeError listing the names otherwise.
DType dtypeFromString(const std::string& name);
/// True for the floating types (float32, bfloat16, float16).
inline bool isFloating(DType dtype) { return dtype != DType::int32; }
/// True for the 16-bit floating types (bfloat16, float16).
inline bool is16Bit(DType dtype) { return dtype == DType::bfloat16 || dtype == DType::float16; }

/// A bfloat16 value: the upper half of a float32 (8 bits of exponent, 7 of mantissa).
struct bfloat16 {
    uint16_t bits = 0;
};
/// An IEEE half-precision value (5 bits of exponent, 10 of mantissa).
struct float16 {
    uint16_t bits = 0;
};

/// float -> bfloat16, rounding to nearest even (NaN stays NaN). Inline, so loops over
/// it vectorise.
inline bfloat16 toBfloat16(float v) {
    const uint32_t u = __builtin_bit_cast(uint32_t, v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)}; // a quiet NaN
    return {static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};                 // to nearest even
}
inline float toFloat(bfloat16 v) { return __builtin_bit_cast(float, static_cast<uint32_t>(v.bits) << 16); }
/// float -> float16, rounding to nearest even; overflow gives infinity.
float16 toFloat16(float v);
float toFloat(float16 v);

/// C++ element type -> DType, for `Tensor::data<T>()`.
template <class T> constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::float32; }
template <> constexpr DType dtypeOf<int32_t>() { return DType::int32; }
template <> constexpr DType dtypeOf<bfloat16>() { return DType::bfloat16; }
template <> constexpr DType dtypeOf<float16>() { return DType::float16; }

/// How a tensor's elements sit in memory. `plain` is row-major over the logical shape.
/// The blocked layouts keep a [N, C, spatial...] tensor (rank 3 to 5) as N, ceil(C/b),
/// spatial..., b with the channel dim split into blocks of b = 8 or 16, zero-padded up to
/// a whole block (oneDNN's nCw16c / nChw16c / nCdhw16c and their 8c forms); convolutions
/// run several times faster on them. `channelsLast` keeps it as N, spatial..., C (oneDNN's
/// nwc / nhwc / ndhwc), the layout bfloat16 convolutions run fastest on. Only backends
/// produce non-plain tensors.
enum class Layout : uint8_t { plain, blocked8, blocked16, channelsLast };
/// "plain", "blocked8", "blocked16", "channelsLast".
std::string str(Layout layout);
/// Channel block of a layout (1 for plain and channelsLast: no padding).
inline int64_t blockOf(Layout layout) { return layout == Layout::blocked16 ? 16 : layout == Layout::blocked8 ? 8 : 1; }
/// Whether tensors of `dtype` may be in `layout`: plain always; the blocked layouts for
/// float32 and bfloat16 (the CPU's activations); channelsLast for float16 too (the CUDA
/// backend's 16-bit activations, setCudaChannelsLast).
inline bool takesLayout(DType dtype, Layout layout) {
    return layout == Layout::plain || dtype == DType::float32 || dtype == DType::bfloat16 ||
           (dtype == DType::float16 && layout == Layout::channelsLast);
}

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
