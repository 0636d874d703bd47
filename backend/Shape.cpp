#include "backend/Shape.h"

#include <algorithm>
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
    for (int64_t d : dims_) {
        if (__builtin_mul_overflow(n, d, &n)) {
            throw ShapeError("Shape " + str() + ": the element count overflows 64 bits");
        }
    }
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
    if (!text.empty() && (text.front() == 'x' || text.back() == 'x')) {
        throw ShapeError("'" + text + "' is not a shape like 1x3x224x224 (positive dims joined by 'x')");
    }
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

std::string shapeText(const Shape& shape) {
    std::string text;
    for (size_t d = 0; d < shape.rank(); ++d) {
        if (d) text += 'x';
        text += std::to_string(shape[d]);
    }
    return text;
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
    const size_t rank = std::max(a.rank(), b.rank());
    std::vector<int64_t> dims(rank);
    for (size_t k = 0; k < rank; ++k) { // k-th dim from the right
        const int64_t da = k < a.rank() ? a.dims()[a.rank() - 1 - k] : 1;
        const int64_t db = k < b.rank() ? b.dims()[b.rank() - 1 - k] : 1;
        if (da != db && da != 1 && db != 1) {
            throw ShapeError(a.str() + " and " + b.str() + " do not broadcast: dim " +
                             std::to_string(static_cast<int64_t>(rank - 1 - k)) + " of the result would be " +
                             std::to_string(da) + " and " + std::to_string(db));
        }
        dims[rank - 1 - k] = da == 1 ? db : da;
    }
    return Shape(dims);
}

bool broadcastsTo(const Shape& small, const Shape& big) {
    if (small.rank() > big.rank()) return false;
    for (size_t k = 0; k < small.rank(); ++k) {
        const int64_t ds = small.dims()[small.rank() - 1 - k], db = big.dims()[big.rank() - 1 - k];
        if (ds != db && ds != 1) return false;
    }
    return true;
}

} // namespace tessera
