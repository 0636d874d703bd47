#include "io/onnx/Proto.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>

#include "backend/Errors.h"
#include "io/Pages.h"

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

namespace {
// A float32 tensor for a constant's values, real even while building shapes only (constants
// hold values). Large ones (1 MiB and more) are pages mapped for them alone and unmapped
// when freed, not kept in the CPU allocator's block cache: the import drops each constant
// once its last node has read it (into its layer's parameters), and that memory then goes
// back to the OS, so that an import holds about one copy of the weights at a time.
Tensor floatBlock(const Shape& shape) {
    ShapeOnlyTensors::Pause real;
    const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
    if (bytes < (size_t{1} << 20)) return Tensor::empty(shape);
    const std::shared_ptr<char> pages = io_detail::mapPages(bytes);
    if (!pages) return Tensor::empty(shape);
    return Tensor::wrap(pages.get(), shape, DType::float32, pages);
}
} // namespace

// Raw or typed data of a TensorProto (`what` names it in errors).
std::string typeName(int32_t type) {
    std::string name = onnx::TensorProto::DataType_IsValid(type)
                           ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(type))
                           : std::string();
    if (name.empty() || type == onnx::TensorProto::UNDEFINED) return "type " + std::to_string(type);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return name;
}

Constant constantOf(const onnx::TensorProto& t, const std::string& what, std::string_view mapped) {
    const std::string_view raw = mapped.empty() ? std::string_view(t.raw_data()) : mapped;
    Constant c;
    const Shape shape = shapeOf(t);
    c.dims.assign(t.dims().begin(), t.dims().end());
    const int32_t type = t.data_type();
    const bool half = type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16;
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32 &&
        type != onnx::TensorProto::BOOL && !half) {
        throw IoError(what + ": tensor data type " + typeName(type) +
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
        const size_t bytes = raw.size();
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
        if (!raw.empty()) { // copied once, straight into the tensor
            rawSized(sizeof(float));
            c.tensor = floatBlock(shape.rank() ? shape : Shape{1});
            if (n > 0) std::memcpy(c.tensor.data<float>(), raw.data(), static_cast<size_t>(n) * sizeof(float));
            return c;
        }
        sized(static_cast<size_t>(t.float_data_size()));
        c.tensor = floatBlock(shape.rank() ? shape : Shape{1}); // a scalar as [1]
        if (n > 0) std::copy(t.float_data().begin(), t.float_data().end(), c.tensor.data<float>());
        return c;
    }
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: { // widened to float32 (exactly); typed data keeps the bits in int32_data
        if (!raw.empty()) {
            rawSized(sizeof(uint16_t));
        } else {
            sized(static_cast<size_t>(t.int32_data_size()));
        }
        c.tensor = floatBlock(shape.rank() ? shape : Shape{1});
        float* v = n > 0 ? c.tensor.data<float>() : nullptr;
        const bool f16 = t.data_type() == onnx::TensorProto::FLOAT16;
        for (int64_t i = 0; i < n; ++i) {
            uint16_t b;
            if (!raw.empty()) {
                std::memcpy(&b, raw.data() + i * 2, 2);
            } else {
                b = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
            }
            v[i] = f16 ? toFloat(float16{b}) : toFloat(bfloat16{b});
        }
        return c;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32: {
        const bool is64 = t.data_type() == onnx::TensorProto::INT64;
        if (!raw.empty()) {
            rawSized(is64 ? 8 : 4);
            for (int64_t i = 0; i < n; ++i) {
                if (is64) {
                    int64_t x;
                    std::memcpy(&x, raw.data() + i * 8, 8);
                    c.ints.push_back(x);
                } else {
                    int32_t x;
                    std::memcpy(&x, raw.data() + i * 4, 4);
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
        if (!raw.empty()) {
            rawSized(1);
            for (char b : raw) c.ints.push_back(b != 0 ? 1 : 0);
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
        throw IoError(what + ": tensor data type " + typeName(t.data_type()) +
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

// A file's bytes, mapped read-only (or read whole, from a pipe): protobuf parses them in
// place, with no stream buffer growing in between, and ModelFile copies large weights from
// them straight into their tensors.
class MappedFile {
public:
    MappedFile(const std::string& path, const std::string& what) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw IoError(what + ": cannot open the file");
        struct Closer {
            int fd;
            ~Closer() { ::close(fd); }
        } closer{fd};
        struct stat st {};
        if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            size_ = static_cast<size_t>(st.st_size);
            requireSize(what);
            if (size_ == 0) return;
            void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p != MAP_FAILED) {
                ::madvise(p, size_, MADV_SEQUENTIAL);
                data_ = static_cast<const uint8_t*>(p);
                mapped_ = true;
                return;
            }
        }
        // A pipe, or a file that cannot be mapped: read whole.
        char chunk[1 << 16];
        while (true) {
            const ssize_t got = ::read(fd, chunk, sizeof chunk);
            if (got < 0) throw IoError(what + ": cannot read the file (" + std::strerror(errno) + ")");
            if (got == 0) break;
            buffer_.append(chunk, static_cast<size_t>(got));
            size_ = buffer_.size();
            requireSize(what);
        }
        data_ = reinterpret_cast<const uint8_t*>(buffer_.data());
    }
    ~MappedFile() {
        if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    int size() const { return static_cast<int>(size_); }

    // Gives the pages wholly inside [p, p + bytes) back to the OS when the file is mapped:
    // they leave the process's resident memory and, read again, come back from the file.
    void release(const void* p, size_t bytes) const {
        if (!mapped_ || bytes == 0) return;
        static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
        const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
        const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
        if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }

private:
    void requireSize(const std::string& what) const {
        if (size_ > static_cast<size_t>(std::numeric_limits<int>::max())) {
            throw IoError(what + ": over 2 GiB, more than a protobuf file can hold (weights in external files are "
                                 "not supported)");
        }
    }

    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    std::string buffer_;
};

namespace {

bool readVarint(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
        const uint8_t b = *p++;
        v |= static_cast<uint64_t>(b & 0x7F) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

// f(field number, the field's bytes with its tag, their count, a length-delimited field's
// payload, its size) for each field of the message in [p, p + n), in order; false when the
// bytes are not a message (or f says so).
template <class F> bool eachField(const uint8_t* p, size_t n, F&& f) {
    const uint8_t* end = p + n;
    while (p < end) {
        const uint8_t* start = p;
        uint64_t tag = 0, len = 0;
        if (!readVarint(p, end, tag) || (tag >> 3) == 0) return false;
        const uint8_t* payload = nullptr;
        switch (tag & 7) {
        case 0:
            if (!readVarint(p, end, len)) return false;
            len = 0;
            break;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            break;
        case 2:
            if (!readVarint(p, end, len) || len > static_cast<uint64_t>(end - p)) return false;
            payload = p;
            p += len;
            break;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            break;
        default: return false; // groups (never in ONNX) and invalid wire types
        }
        if (!f(static_cast<int>(tag >> 3), start, static_cast<size_t>(p - start), payload, static_cast<size_t>(len)))
            return false;
    }
    return true;
}

} // namespace

onnx::ModelProto readModel(const std::string& path) {
    const MappedFile file(path, "ONNX model " + path);
    onnx::ModelProto model;
    if (!model.ParseFromArray(file.data(), file.size())) {
        throw IoError("ONNX model " + path + ": not a valid ONNX (protobuf) file");
    }
    return model;
}

// The model's fields are walked in place: each initializer is parsed without its data
// fields (raw_data, float_data, int32_data, string_data, int64_data, double_data,
// uint64_data), and, with weights, the large floating ones whose data is raw keep it in the
// mapping (raw_), the others are parsed whole. Anything the walk does not take goes to
// readModel, whose error it then reports.
ModelFile::ModelFile(const std::string& path, bool weights)
    : file_(std::make_shared<MappedFile>(path, "ONNX model " + path)) {
    constexpr int kGraph = 7, kInitializer = 5, kRawData = 9;
    auto isData = [](int field) {
        return field == 4 || field == 5 || field == 6 || field == 7 || field == kRawData || field == 10 || field == 11;
    };
    std::string top, graph;
    std::vector<std::string> initializers;
    auto initializer = [&](const uint8_t* p, size_t n) {
        std::string& t = initializers.emplace_back();
        std::string_view raw;
        bool typed = false;
        const bool walked =
            eachField(p, n, [&](int f, const uint8_t* at, size_t bytes, const uint8_t* payload, size_t len) {
                if (!isData(f)) {
                    t.append(reinterpret_cast<const char*>(at), bytes);
                } else if (f == kRawData) {
                    raw = payload ? std::string_view(reinterpret_cast<const char*>(payload), len) : std::string_view();
                } else {
                    typed = true;
                }
                return true;
            });
        if (weights) {
            onnx::TensorProto header;
            if (!typed && !raw.empty() && header.ParseFromString(t) && largeFloating(header)) {
                raw_.push_back(raw);
            } else {
                t.assign(reinterpret_cast<const char*>(p), n);
                raw_.emplace_back();
            }
        }
        return walked;
    };
    const bool walked =
        eachField(file_->data(), static_cast<size_t>(file_->size()),
                  [&](int field, const uint8_t* at, size_t bytes, const uint8_t* payload, size_t len) {
                      if (field != kGraph || !payload) {
                          top.append(reinterpret_cast<const char*>(at), bytes);
                          return true;
                      }
                      return eachField(payload, len,
                                       [&](int g, const uint8_t* gat, size_t gbytes, const uint8_t* gp, size_t glen) {
                                           if (g == kInitializer && gp) return initializer(gp, glen);
                                           graph.append(reinterpret_cast<const char*>(gat), gbytes);
                                           return true;
                                       });
                  });
    bool parsed = walked && model.ParseFromString(top) && model.mutable_graph()->MergeFromString(graph);
    for (size_t i = 0; parsed && i < initializers.size(); ++i)
        parsed = model.mutable_graph()->add_initializer()->ParseFromString(initializers[i]);
    if (!parsed) {
        model = readModel(path);
        raw_.clear();
    }
}

ModelFile::~ModelFile() = default;

std::string_view ModelFile::rawData(int initializer) const {
    return static_cast<size_t>(initializer) < raw_.size() ? raw_[static_cast<size_t>(initializer)] : std::string_view();
}

void ModelFile::release(int initializer) const {
    const std::string_view raw = rawData(initializer);
    file_->release(raw.data(), raw.size());
}

onnx::ModelProto readModelWithoutWeights(const std::string& path) { return std::move(ModelFile(path, false).model); }

void setType(onnx::ValueInfoProto* v, const Shape& shape, DType dtype) {
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(dtype == DType::int32 ? onnx::TensorProto::INT32 : onnx::TensorProto::FLOAT);
    auto* s = t->mutable_shape();
    for (size_t d = 0; d < shape.rank(); ++d) s->add_dim()->set_dim_value(shape[static_cast<int64_t>(d)]);
}

} // namespace tessera::onnx_io
