#pragma once
/// \file Shape, the dims of a tensor.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tessera {

/// A small vector of int64 dims; row-major, batch first (`[N, C, H, W]`).
class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
    explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

    /// Number of dims.
    size_t rank() const { return dims_.size(); }
    /// Dim `i`; negative `i` counts from the end. Throws ShapeError when out of range.
    int64_t operator[](int64_t i) const;
    int64_t& operator[](int64_t i);
    /// Product of the dims (1 for a rank-0 shape).
    int64_t numel() const;
    const std::vector<int64_t>& dims() const { return dims_; }

    bool operator==(const Shape&) const = default;

    /// `[128, 1, 28, 28]`.
    std::string str() const;

private:
    std::vector<int64_t> dims_;
};

/// One shape per tensor of a module's input or output list.
using Shapes = std::vector<Shape>;

/// `[[128, 784], [128, 10]]`.
std::string str(const Shapes& shapes);

/// "1x3x224x224" -> [1, 3, 224, 224]. Throws ShapeError unless the text is
/// positive integers joined by 'x'.
Shape parseShape(const std::string& text);
/// [1, 3, 224, 224] -> "1x3x224x224" (parseShape's text).
std::string shapeText(const Shape& shape);

/// NumPy's broadcasting: the shape of `a op b`, dims aligned from the right, each pair
/// equal or one of them 1. Throws ShapeError naming both shapes and the dim that differs
/// when they do not broadcast.
Shape broadcastShapes(const Shape& a, const Shape& b);
/// True when `small` broadcasts to exactly `big` (every dim of `small`, aligned from the
/// right, equals `big`'s or is 1, and `small` has no more dims).
bool broadcastsTo(const Shape& small, const Shape& big);

} // namespace tessera
