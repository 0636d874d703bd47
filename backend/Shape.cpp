#include "backend/Shape.h"

#include <sstream>

#include "backend/Errors.h"

namespace tessera {

namespace {
size_t index(int64_t i, size_t rank) {
    int64_t j = i < 0 ? i + static_cast<int64_t>(rank) : i;
    if (j < 0 || j >= static_cast<int64_t>(rank)) {
        throw ShapeError("Shape: dim " + std::to_string(i) + " out of range for rank " + std::to_string(rank));
    }
    return static_cast<size_t>(j);
}
} // namespace

int64_t Shape::operator[](int64_t i) const { return dims_[index(i, dims_.size())]; }
int64_t& Shape::operator[](int64_t i) { return dims_[index(i, dims_.size())]; }

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
}

std::string Shape::str() const {
    std::string s = "[";
    for (size_t i = 0; i < dims_.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(dims_[i]);
    }
    return s + "]";
}

std::string str(const Shapes& shapes) {
    if (shapes.size() == 1) return shapes[0].str();
    std::string s = "[";
    for (size_t i = 0; i < shapes.size(); ++i) {
        if (i) s += ", ";
        s += shapes[i].str();
    }
    return s + "]";
}

Shape parseShape(const std::string& text) {
    std::vector<int64_t> dims;
    std::stringstream in(text);
    std::string part;
    while (std::getline(in, part, 'x')) {
        size_t used = 0;
        int64_t d = -1;
        try {
            d = std::stoll(part, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != part.size() || d <= 0) {
            throw ShapeError("'" + text + "' is not a shape like 1x3x224x224 (positive dims joined by 'x')");
        }
        dims.push_back(d);
    }
    if (dims.empty()) throw ShapeError("an empty shape; expected one like 1x3x224x224");
    return Shape(dims);
}

} // namespace tessera
