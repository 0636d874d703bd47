#include "io/onnx/Proto.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "backend/Errors.h"

namespace tessera::onnx_io {

Shape shapeOf(const onnx::TensorProto& t) {
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    return Shape(dims);
}

// Integer values as an int32 tensor of `shape` (a scalar as [1]); undefined when one is
// outside int32's range.
Tensor int32Tensor(const std::vector<int64_t>& ints, const Shape& shape) {
    std::vector<int32_t> v;
    for (int64_t x : ints) {
        if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) return Tensor();
        v.push_back(static_cast<int32_t>(x));
    }
    return Tensor::fromVector(shape.rank() ? shape : Shape{1}, v);
}

// ONNX's recurrent gate j is PyTorch's (and Tessera's) gate order[j]: LSTM i o f c <- i f g o;
// GRU z r h <- r z n; one gate for vanilla cells.
std::vector<int64_t> onnxGateOrder(RnnMode mode) {
    if (mode == RnnMode::lstm) return {0, 3, 1, 2};
    if (mode == RnnMode::gru) return {1, 0, 2};
    return {0};
}

// Raw or typed data of a TensorProto (`what` names it in errors).
Constant constantOf(const onnx::TensorProto& t, const std::string& what) {
    Constant c;
    const Shape shape = shapeOf(t);
    c.dims.assign(t.dims().begin(), t.dims().end());
    const int32_t type = t.data_type();
    const bool half = type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16;
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32 &&
        type != onnx::TensorProto::BOOL && !half) {
        throw IoError(what + ": tensor data type " + std::to_string(type) +
                      " is not supported (float32, float16, bfloat16, int32, int64 and bool are)");
    }
    int64_t n = 0;
    try {
        for (int64_t d : shape.dims()) {
            if (d < 0) throw ShapeError("a negative dim");
        }
        n = shape.numel();
    } catch (const ShapeError& e) {
        throw IoError(what + ": dims " + shape.str() + " describe no tensor (" + e.what() + ")");
    }
    auto sized = [&](size_t got) {
        if (static_cast<int64_t>(got) != n) {
            throw IoError(what + ": " + std::to_string(got) + " values for shape " + shape.str());
        }
    };
    // Raw data holds whole values only: n of them, `width` bytes each.
    auto rawSized = [&](size_t width) {
        const size_t bytes = t.raw_data().size();
        if (bytes % width != 0) {
            throw IoError(what + ": " + std::to_string(bytes) + " bytes of raw data are not whole " +
                          std::to_string(width) + "-byte values");
        }
        sized(bytes / width);
    };
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        throw IoError(what + ": data in an external file is not supported");
    }
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
        std::vector<float> v;
        if (!t.raw_data().empty()) {
            rawSized(sizeof(float));
            v.resize(static_cast<size_t>(n));
            if (n > 0) std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
        } else {
            sized(static_cast<size_t>(t.float_data_size()));
            v.assign(t.float_data().begin(), t.float_data().end());
        }
        c.tensor = Tensor::fromVector(shape.rank() ? shape : Shape{1}, v); // a scalar as [1]
        return c;
    }
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: { // widened to float32 (exactly); typed data keeps the bits in int32_data
        std::vector<uint16_t> bits;
        if (!t.raw_data().empty()) {
            rawSized(sizeof(uint16_t));
            bits.resize(static_cast<size_t>(n));
            if (n > 0) std::memcpy(bits.data(), t.raw_data().data(), bits.size() * sizeof(uint16_t));
        } else {
            sized(static_cast<size_t>(t.int32_data_size()));
            for (int32_t b : t.int32_data()) bits.push_back(static_cast<uint16_t>(b));
        }
        std::vector<float> v(bits.size());
        for (size_t i = 0; i < bits.size(); ++i) {
            v[i] = t.data_type() == onnx::TensorProto::FLOAT16 ? toFloat(float16{bits[i]}) : toFloat(bfloat16{bits[i]});
        }
        c.tensor = Tensor::fromVector(shape.rank() ? shape : Shape{1}, v);
        return c;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32: {
        const bool is64 = t.data_type() == onnx::TensorProto::INT64;
        if (!t.raw_data().empty()) {
            rawSized(is64 ? 8 : 4);
            for (int64_t i = 0; i < n; ++i) {
                if (is64) {
                    int64_t x;
                    std::memcpy(&x, t.raw_data().data() + i * 8, 8);
                    c.ints.push_back(x);
                } else {
                    int32_t x;
                    std::memcpy(&x, t.raw_data().data() + i * 4, 4);
                    c.ints.push_back(x);
                }
            }
        } else if (is64) {
            sized(static_cast<size_t>(t.int64_data_size()));
            c.ints.assign(t.int64_data().begin(), t.int64_data().end());
        } else {
            sized(static_cast<size_t>(t.int32_data_size()));
            c.ints.assign(t.int32_data().begin(), t.int32_data().end());
        }
        c.isInt = true;
        if (n > 0) c.tensor = int32Tensor(c.ints, shape);
        return c;
    }
    case onnx::TensorProto::BOOL: { // one byte each as raw data, else in int32_data
        if (!t.raw_data().empty()) {
            rawSized(1);
            for (char b : t.raw_data()) c.ints.push_back(b != 0 ? 1 : 0);
        } else {
            sized(static_cast<size_t>(t.int32_data_size()));
            for (int32_t b : t.int32_data()) c.ints.push_back(b != 0 ? 1 : 0);
        }
        c.isInt = true;
        c.isBool = true;
        if (n > 0) c.tensor = int32Tensor(c.ints, shape);
        return c;
    }
    default:
        throw IoError(what + ": tensor data type " + std::to_string(t.data_type()) +
                      " is not supported (float32, float16, bfloat16, int32, int64 and bool are)");
    }
}

// pads [b1, b2, ..., e1, e2, ...] as one symmetric pad per dim.
std::vector<int64_t> symmetricPads(const std::vector<int64_t>& pads, size_t dims) {
    if (pads.empty()) return std::vector<int64_t>(dims, 0);
    if (pads.size() != 2 * dims) throw Unsupported{"pads has " + std::to_string(pads.size()) + " values"};
    std::vector<int64_t> p(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(dims));
    for (size_t d = 0; d < dims; ++d) {
        if (pads[d] != pads[d + dims]) throw Unsupported{"asymmetric pads are not supported"};
    }
    return p;
}

std::vector<int64_t> WindowPads::symmetric() const {
    std::vector<int64_t> s;
    for (size_t d = 0; d < lo.size(); ++d) s.push_back(std::min(lo[d], hi[d]));
    return s;
}

std::vector<int64_t> WindowPads::extra() const {
    std::vector<int64_t> e;
    for (size_t d = 0; d < lo.size(); ++d) {
        const int64_t s = std::min(lo[d], hi[d]);
        e.push_back(lo[d] - s);
        e.push_back(hi[d] - s);
    }
    return e;
}

WindowPads windowPads(const Attributes& a, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                      const std::vector<int64_t>& dilation, const std::vector<int64_t>& in) {
    const size_t dims = kernel.size();
    const std::string ap = a.s("auto_pad", "NOTSET");
    WindowPads w{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
    if (ap == "VALID") return w;
    if (ap == "NOTSET") {
        const std::vector<int64_t> pads = a.ints("pads");
        if (pads.empty()) return w;
        if (pads.size() != 2 * dims) throw Unsupported{"pads has " + std::to_string(pads.size()) + " values"};
        for (size_t d = 0; d < dims; ++d) {
            w.lo[d] = pads[d];
            w.hi[d] = pads[d + dims];
            if (w.lo[d] < 0 || w.hi[d] < 0) throw Unsupported{"negative pads are not supported"};
        }
        return w;
    }
    if (ap != "SAME_UPPER" && ap != "SAME_LOWER") throw Unsupported{"auto_pad " + ap + " is not an ONNX value"};
    for (size_t d = 0; d < dims; ++d) {
        if (d >= in.size() || in[d] < 0) throw Unsupported{"auto_pad " + ap + " on a spatial dim not known at import"};
        const int64_t out = (in[d] + stride[d] - 1) / stride[d];
        const int64_t total = std::max<int64_t>(0, (out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in[d]);
        const int64_t small = total / 2;
        w.lo[d] = ap == "SAME_UPPER" ? small : total - small;
        w.hi[d] = total - w.lo[d];
    }
    return w;
}

void autoPadNotSet(const Attributes& a) {
    const std::string ap = a.s("auto_pad", "NOTSET");
    if (ap != "NOTSET" && ap != "VALID") throw Unsupported{"auto_pad " + ap + " is not supported (NOTSET, VALID are)"};
}

// A floating initializer of over 1024 elements (dims as declared; none negative).
bool largeFloating(const onnx::TensorProto& t) {
    using TP = onnx::TensorProto;
    const int type = t.data_type();
    if (type != TP::FLOAT && type != TP::DOUBLE && type != TP::FLOAT16 && type != TP::BFLOAT16) return false;
    int64_t n = 1;
    for (int64_t d : t.dims()) {
        if (d < 0) return false;
        n = d > 0 && n > 1024 / d ? 1025 : n * d; // saturates above the threshold
    }
    return n > 1024;
}

onnx::ModelProto readModel(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw IoError("ONNX model " + path + ": cannot open the file");
    onnx::ModelProto model;
    if (!model.ParseFromIstream(&file)) throw IoError("ONNX model " + path + ": not a valid ONNX (protobuf) file");
    return model;
}

void setType(onnx::ValueInfoProto* v, const Shape& shape) {
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    auto* s = t->mutable_shape();
    for (size_t d = 0; d < shape.rank(); ++d) {
        auto* dim = s->add_dim();
        if (d == 0) {
            dim->set_dim_param("batch"); // any batch size
        } else {
            dim->set_dim_value(shape[static_cast<int64_t>(d)]);
        }
    }
}

} // namespace tessera::onnx_io
