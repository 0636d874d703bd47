#include "backend/Tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/Backend.h"
#include "backend/Errors.h"
#include "backend/Random.h"

namespace tessera {

size_t sizeOf(DType dtype) {
    switch (dtype) {
    case DType::float32:
    case DType::int32: return 4;
    case DType::bfloat16:
    case DType::float16: return 2;
    }
    return 0;
}

std::string str(DType dtype) {
    switch (dtype) {
    case DType::float32: return "float32";
    case DType::int32: return "int32";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
    }
    return "?";
}

DType dtypeFromString(const std::string& name) {
    for (DType d : {DType::float32, DType::int32, DType::bfloat16, DType::float16}) {
        if (str(d) == name) return d;
    }
    throw ShapeError("unknown dtype '" + name + "'; expected float32, int32, bfloat16 or float16");
}

float16 toFloat16(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
    if (absu >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)}; // rounds past 65504: infinity
    if (absu < 0x38800000u) {                                                // a subnormal half (or zero)
        float a;
        std::memcpy(&a, &absu, 4);
        // a * 2^24 rounded to an integer (nearest even in the FPU's default mode)
        return {static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)))};
    }
    // rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even
    const uint32_t rounded = absu - 0x38000000u + 0xfffu + ((absu >> 13) & 1u);
    return {static_cast<uint16_t>(sign | (rounded >> 13))};
}

float toFloat(float16 v) {
    const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16, exp = (v.bits >> 10) & 0x1fu,
                   man = v.bits & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); // infinity or NaN
    } else if (exp == 0) {                    // zero or subnormal: man * 2^-24
        const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
        std::memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::string str(Layout layout) {
    switch (layout) {
    case Layout::plain: return "plain";
    case Layout::blocked8: return "blocked8";
    case Layout::blocked16: return "blocked16";
    case Layout::channelsLast: return "channelsLast";
    }
    return "?";
}

size_t Tensor::storageBytes(const Shape& shape, DType dtype, Layout layout) {
    int64_t n = shape.numel(); // ShapeError when it overflows
    if (layout != Layout::plain && shape.rank() >= 2 && shape[1] > 0) {
        const int64_t b = blockOf(layout);
        if (__builtin_mul_overflow(n / shape[1], (shape[1] + b - 1) / b * b, &n)) n = -1;
    }
    int64_t bytes = 0;
    if (n < 0 || __builtin_mul_overflow(n, static_cast<int64_t>(sizeOf(dtype)), &bytes)) {
        throw ShapeError("Tensor " + shape.str() + " of " + tessera::str(dtype) + ": its byte count overflows 64 bits");
    }
    return static_cast<size_t>(bytes);
}

std::string Device::str() const { return kind == Kind::CPU ? "cpu" : "cuda:" + std::to_string(index); }

namespace {
thread_local int shapeOnlyDepth = 0;

void requireDims(const char* op, const Shape& shape) {
    for (int64_t d : shape.dims()) {
        if (d < 0) throw ShapeError(std::string(op) + ": negative dim in " + shape.str());
    }
}

// A tensor with storage of its own (what `empty` makes outside shape-only scopes).
Tensor allocated(const Shape& shape, DType dtype, Device device = {}, Layout layout = Layout::plain) {
    ShapeOnlyTensors::Pause real;
    return Tensor::empty(shape, dtype, device, layout);
}
} // namespace

ShapeOnlyTensors::ShapeOnlyTensors() { ++shapeOnlyDepth; }
ShapeOnlyTensors::~ShapeOnlyTensors() { --shapeOnlyDepth; }
ShapeOnlyTensors::Pause::Pause() : saved_(shapeOnlyDepth) { shapeOnlyDepth = 0; }
ShapeOnlyTensors::Pause::~Pause() { shapeOnlyDepth = saved_; }
bool ShapeOnlyTensors::active() { return shapeOnlyDepth > 0; }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Layout layout) {
    requireDims("Tensor::empty", shape);
    if (layout != Layout::plain && (shape.rank() < 3 || shape.rank() > 5 || !takesLayout(dtype, layout))) {
        throw ShapeError("Tensor::empty: layout " + tessera::str(layout) + " needs a float32 or bfloat16" +
                         (layout == Layout::channelsLast ? " (or float16)" : "") +
                         " [N, C, spatial...] tensor of rank 3 to 5, got " + tessera::str(dtype) + " " + shape.str());
    }
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.layout_ = layout;
    if (ShapeOnlyTensors::active()) { // a placeholder: the size is known, nothing is allocated
        t.storage_ = std::make_shared<Storage>(nullptr, t.nbytes(), device, nullptr);
        return t;
    }
    Backend& be = backendFor(device);
    t.storage_ = be.allocate(t.nbytes());
    // Padding channels must read as zeros: ops on blocked data run over whole blocks.
    if (layout != Layout::plain && shape[1] % blockOf(layout) != 0) be.fillBytes(t, 0);
    return t;
}

Tensor Tensor::onStorage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    if (!storage || storage->bytes() < t.nbytes()) {
        throw ShapeError("Tensor::onStorage: " + std::to_string(storage ? storage->bytes() : 0) +
                         " bytes of storage for a " + shape.str() + " " + tessera::str(dtype) + " tensor of " +
                         std::to_string(t.nbytes()) + " bytes");
    }
    t.storage_ = std::move(storage);
    return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
    for (int64_t d : shape.dims()) {
        if (d < 0) throw ShapeError("Tensor::wrap: negative dim in " + shape.str());
    }
    if (reinterpret_cast<uintptr_t>(data) % 64 != 0) {
        throw ShapeError("Tensor::wrap: the memory must be 64-byte aligned, its address is " +
                         std::to_string(reinterpret_cast<uintptr_t>(data) % 64) + " bytes past a multiple of 64");
    }
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.storage_ = std::make_shared<Storage>(data, t.nbytes(), Device::cpu(), std::move(owner));
    return t;
}

bool Tensor::hasData() const { return storage_ && (storage_->ptr() != nullptr || storage_->bytes() == 0); }

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
    if (!ShapeOnlyTensors::active()) {
        requireDims("Tensor::zeros", shape);
        if (auto zeroed = backendFor(device).allocateZeroed(storageBytes(shape, dtype, Layout::plain)))
            return onStorage(std::move(zeroed), shape, dtype);
    }
    Tensor t = empty(shape, dtype, device);
    if (t.hasData()) backendFor(device).fill(t, 0.0f);
    return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
    Tensor t = empty(shape, DType::float32, device);
    if (t.hasData()) backendFor(device).fill(t, value);
    return t;
}

Tensor Tensor::ones(const Shape& shape, Device device) { return full(shape, 1.0f, device); }

Tensor Tensor::randn(const Shape& shape, float mean, float stddev, Device device) {
    if (!(stddev >= 0.0f)) throw ModuleError("Tensor::randn: stddev must be >= 0, got " + std::to_string(stddev));
    Tensor t = allocated(shape, DType::float32, device);
    backendFor(device).fillNormal(t, mean, stddev, globalGenerator());
    return t;
}

Tensor Tensor::rand(const Shape& shape, float lo, float hi, Device device) {
    if (!(lo < hi)) {
        throw ModuleError("Tensor::rand: needs lo < hi, got [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
    }
    Tensor t = allocated(shape, DType::float32, device);
    backendFor(device).fillUniform(t, lo, hi, globalGenerator());
    return t;
}

Tensor Tensor::randint(const Shape& shape, int32_t classes, Device device) {
    if (classes <= 0) throw ModuleError("Tensor::randint: classes must be positive, got " + std::to_string(classes));
    Generator& g = globalGenerator();
    const uint64_t first = g.advance(static_cast<uint64_t>(shape.numel()));
    std::vector<int32_t> v(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<int32_t>(randomBits(g.seed(), first + i) % static_cast<uint64_t>(classes));
    }
    return fromVector(shape, v, device);
}

Tensor Tensor::arange(int64_t n, float start, float step, Device device) {
    if (n < 0) throw ShapeError("Tensor::arange: n must be >= 0, got " + std::to_string(n));
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<float>(i);
    return fromVector(Shape{n}, v, device);
}

namespace {
template <class T> Tensor fromHostValues(const Shape& shape, const std::vector<T>& values, Device device) {
    if (static_cast<int64_t>(values.size()) != shape.numel()) {
        throw ShapeError("Tensor::fromVector: shape " + shape.str() + " needs " + std::to_string(shape.numel()) +
                         " values, got " + std::to_string(values.size()));
    }
    Tensor host = allocated(shape, dtypeOf<T>());
    if (!values.empty()) std::memcpy(host.raw(), values.data(), host.nbytes());
    return device.isCpu() ? host : host.to(device);
}
} // namespace

Tensor Tensor::fromVector(const Shape& shape, const std::vector<float>& values, Device device) {
    return fromHostValues(shape, values, device);
}

Tensor Tensor::fromVector(const Shape& shape, const std::vector<int32_t>& values, Device device) {
    return fromHostValues(shape, values, device);
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device{}; }

void* Tensor::raw() const {
    if (!storage_) return nullptr;
    if (!storage_->ptr() && storage_->bytes() > 0) {
        throw ShapeError("Tensor " + shape_.str() +
                         " has no data: it was made in a shape-only build (ShapeOnlyBuild), which checks shapes "
                         "without allocating");
    }
    return static_cast<char*>(storage_->ptr()) + offset_;
}

void Tensor::checkAccess(DType dtype) const {
    if (!storage_) throw ShapeError("Tensor: access to an undefined tensor");
    if (dtype != dtype_) {
        throw ShapeError("Tensor: element access as " + tessera::str(dtype) + " to a tensor of " +
                         tessera::str(dtype_) + " " + shape_.str());
    }
    if (!device().isCpu()) {
        throw BackendError("Tensor: host access to a tensor on " + device().str() + "; call toHost() first");
    }
}

void Tensor::checkPlain(const char* what) const {
    if (layout_ != Layout::plain) {
        throw ShapeError(std::string("Tensor::") + what + ": tensor " + shape_.str() + " is in the " +
                         tessera::str(layout_) + " layout; call plain() first");
    }
}

Tensor Tensor::plain() const { return toLayout(Layout::plain); }

Tensor Tensor::toLayout(Layout layout) const {
    if (layout == layout_ || !storage_) return *this;
    Tensor out = allocated(shape_, dtype_, device(), layout);
    backendFor(device()).reorder(*this, out);
    return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
    checkPlain("reshape");
    std::vector<int64_t> dims = shape.dims();
    int64_t known = 1;
    int inferred = -1;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] == -1) {
            if (inferred >= 0) throw ShapeError("Tensor::reshape: more than one -1 in " + shape.str());
            inferred = static_cast<int>(i);
        } else if (dims[i] < 0) {
            throw ShapeError("Tensor::reshape: negative dim in " + shape.str());
        } else {
            known *= dims[i];
        }
    }
    if (inferred >= 0) {
        if (known == 0 || numel() % known != 0) {
            throw ShapeError("Tensor::reshape: cannot infer -1 in " + shape.str() + " from " + shape_.str());
        }
        dims[inferred] = numel() / known;
    }
    Shape target(std::move(dims));
    if (target.numel() != numel()) {
        throw ShapeError("Tensor::reshape: " + shape_.str() + " (" + std::to_string(numel()) +
                         " elements) cannot be viewed as " + target.str());
    }
    Tensor view = *this;
    view.shape_ = std::move(target);
    return view;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
    if (shape_.rank() == 0) throw ShapeError("Tensor::slice: a rank-0 tensor has no rows");
    if (begin < 0 || end < begin || end > shape_[0]) {
        throw ShapeError("Tensor::slice: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                         ") out of range for " + shape_.str());
    }
    Tensor view = *this;
    size_t rowBytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
    view.offset_ += static_cast<size_t>(begin) * rowBytes;
    view.shape_[0] = end - begin;
    return view;
}

Tensor Tensor::astype(DType dtype) const {
    if (!storage_) throw ShapeError("Tensor::astype: an undefined tensor");
    const Tensor src = plain();
    Tensor out = allocated(shape_, dtype, device());
    backendFor(device()).cast(src, out);
    return out;
}

Tensor Tensor::convertedTo(DType dtype) const {
    if (!storage_) throw ShapeError("Tensor::convertedTo: an undefined tensor");
    if (dtype == dtype_) return *this;
    if (layout_ == Layout::plain) return astype(dtype);
    if (!takesLayout(dtype, layout_)) return plain().astype(dtype);
    Tensor out = allocated(shape_, dtype, device(), layout_);
    backendFor(device()).reorder(*this, out);
    return out;
}

Tensor Tensor::to(Device device) const {
    Tensor out = allocated(shape_, dtype_, device, layout_);
    out.copyFrom(*this);
    return out;
}

void Tensor::copyFrom(const Tensor& src) {
    if (src.numel() != numel() || src.dtype_ != dtype_) {
        throw ShapeError("Tensor::copyFrom: source " + src.shape_.str() + " " + tessera::str(src.dtype_) +
                         " does not fit destination " + shape_.str() + " " + tessera::str(dtype_));
    }
    if (src.layout_ != layout_) {
        if (src.device() != device()) {
            throw BackendError("Tensor::copyFrom: " + tessera::str(src.layout_) + " to " + tessera::str(layout_) +
                               " across devices; reorder on one device first");
        }
        if (src.shape_ != shape_) {
            throw ShapeError("Tensor::copyFrom: a reordering copy needs equal shapes, got " + src.shape_.str() +
                             " and " + shape_.str());
        }
        backendFor(device()).reorder(src, *this);
        return;
    }
    if (layout_ != Layout::plain && src.shape_ != shape_) {
        throw ShapeError("Tensor::copyFrom: blocked tensors need equal shapes, got " + src.shape_.str() + " and " +
                         shape_.str());
    }
    // A transfer involving a device runs on that device's backend.
    Backend& be = device().isCpu() ? backendFor(src.device()) : backendFor(device());
    be.copy(src, *this);
}

Tensors plainAll(const Tensors& tensors) {
    Tensors out;
    out.reserve(tensors.size());
    for (const Tensor& t : tensors) out.push_back(t.plain());
    return out;
}

Tensors float32All(const Tensors& tensors) {
    Tensors out;
    out.reserve(tensors.size());
    for (const Tensor& t : tensors)
        out.push_back(t.defined() && is16Bit(t.dtype()) ? t.convertedTo(DType::float32) : t);
    return out;
}

Shapes shapesOf(const Tensors& tensors) {
    Shapes shapes;
    shapes.reserve(tensors.size());
    for (const Tensor& t : tensors) shapes.push_back(t.shape());
    return shapes;
}

} // namespace tessera
