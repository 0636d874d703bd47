#pragma once
/// \file Tensor: reference-counted storage with an offset, a shape, a dtype and a device.

#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/DType.h"
#include "backend/Shape.h"

namespace tessera {

/// A block of memory on one device, freed by the backend that made it.
class Storage {
public:
    using Deleter = void (*)(void* ptr, size_t bytes, Device device);
    Storage(void* ptr, size_t bytes, Device device, Deleter deleter)
        : ptr_(ptr), bytes_(bytes), device_(device), deleter_(deleter) {}
    /// Memory someone else owns: `owner` is held (and released) instead of freeing.
    Storage(void* ptr, size_t bytes, Device device, std::shared_ptr<void> owner)
        : ptr_(ptr), bytes_(bytes), device_(device), deleter_(nullptr), owner_(std::move(owner)) {}
    ~Storage() {
        if (deleter_) deleter_(ptr_, bytes_, device_);
    }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    void* ptr() const { return ptr_; }
    size_t bytes() const { return bytes_; }
    Device device() const { return device_; }

private:
    void* ptr_;
    size_t bytes_;
    Device device_;
    Deleter deleter_;
    std::shared_ptr<void> owner_;
};

/// While one is alive on this thread, `Tensor::empty`, `zeros`, `ones` and `full` make
/// placeholders: tensors with a shape, dtype and byte size but no memory, so a model built
/// only to check its shapes allocates nothing for its parameters (ShapeOnlyBuild in
/// modules/Init.h holds one). Reading or writing a placeholder's data is a ShapeError;
/// tensors made from values (`fromVector`, `randn`, copies) are always real.
class ShapeOnlyTensors {
public:
    ShapeOnlyTensors();
    ~ShapeOnlyTensors();
    ShapeOnlyTensors(const ShapeOnlyTensors&) = delete;
    ShapeOnlyTensors& operator=(const ShapeOnlyTensors&) = delete;
    static bool active();
    /// Real tensors again while it is alive (for values a shape-only build must hold).
    class Pause {
    public:
        Pause();
        ~Pause();
        Pause(const Pause&) = delete;
        Pause& operator=(const Pause&) = delete;

    private:
        int saved_;
    };
};

/// A contiguous tensor, row-major unless a backend made it in a blocked layout (see
/// `Layout`). Copying a Tensor copies the handle, not the data: views
/// (reshape, slice) share storage. Host/device transfers are explicit (`to`, `toHost`).
class Tensor {
public:
    /// An undefined tensor (no storage).
    Tensor() = default;

    /// Uninitialised memory. CPU storage is 64-byte aligned. A blocked layout needs a
    /// float32 or bfloat16 tensor of rank 3 to 5 (ShapeError otherwise); its padding is
    /// zeroed.
    static Tensor empty(const Shape& shape, DType dtype = DType::float32, Device device = {},
                        Layout layout = Layout::plain);
    static Tensor zeros(const Shape& shape, DType dtype = DType::float32, Device device = {});
    static Tensor ones(const Shape& shape, Device device = {});
    static Tensor full(const Shape& shape, float value, Device device = {});
    /// Normal(mean, stddev) and uniform [lo, hi) float32 values drawn from the global
    /// generator (`manualSeed` makes them reproducible; the same numbers on every device).
    static Tensor randn(const Shape& shape, float mean = 0.0f, float stddev = 1.0f, Device device = {});
    static Tensor rand(const Shape& shape, float lo = 0.0f, float hi = 1.0f, Device device = {});
    /// Random int32 class labels in [0, classes): targets for CrossEntropy.
    static Tensor randint(const Shape& shape, int32_t classes, Device device = {});
    /// [n] float32: start, start + step, ... (n values).
    static Tensor arange(int64_t n, float start = 0.0f, float step = 1.0f, Device device = {});
    /// Copies `values` (numel must equal `shape.numel()`, else ShapeError).
    static Tensor fromVector(const Shape& shape, const std::vector<float>& values, Device device = {});
    static Tensor fromVector(const Shape& shape, const std::vector<int32_t>& values, Device device = {});
    /// A plain CPU tensor over memory the caller owns (a NumPy array's, in the Python
    /// bindings), without a copy: `owner` is held until the last handle or view goes.
    /// `data` must be 64-byte aligned like every CPU tensor's (ShapeError otherwise).
    static Tensor wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);
    /// For backends: a plain tensor over `storage` (on its device), which must hold at
    /// least the tensor's bytes (ShapeError otherwise).
    static Tensor onStorage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

    bool defined() const { return storage_ != nullptr; }
    /// False for the placeholders of a shape-only build (ShapeOnlyTensors): no memory.
    bool hasData() const;
    const Shape& shape() const { return shape_; }
    DType dtype() const { return dtype_; }
    Device device() const;
    Layout layout() const { return layout_; }
    bool isPlain() const { return layout_ == Layout::plain; }
    int64_t numel() const { return shape_.numel(); }
    /// Bytes the elements take in this layout (blocked layouts count their padding).
    size_t nbytes() const { return storageBytes(shape_, dtype_, layout_); }
    /// Bytes a tensor of this shape, dtype and layout takes.
    static size_t storageBytes(const Shape& shape, DType dtype, Layout layout);

    /// Typed pointer to host data in row-major order. Throws ShapeError on a dtype
    /// mismatch or a blocked layout (call `plain()` first) and BackendError when the
    /// tensor is not on the CPU. The handle is const; the data is not.
    template <class T> T* data() const {
        checkAccess(dtypeOf<T>());
        checkPlain("data");
        return static_cast<T*>(raw());
    }
    /// Typed pointer to host storage in whatever layout it has (for backends).
    template <class T> T* storageData() const {
        checkAccess(dtypeOf<T>());
        return static_cast<T*>(raw());
    }
    /// This tensor in plain layout: itself when already plain, else a reordered copy.
    Tensor plain() const;
    /// This tensor in `layout`: itself when already so, else a reordered copy.
    Tensor toLayout(Layout layout) const;
    /// Untyped pointer on the tensor's device.
    void* raw() const;

    /// A view with another shape of the same numel; one dim may be -1 (inferred). Plain
    /// tensors only (ShapeError otherwise).
    Tensor reshape(const Shape& shape) const;
    /// A view of rows [begin, end) along dim 0.
    Tensor slice(int64_t begin, int64_t end) const;
    /// A copy on `device`, in the same layout (a copy even when already there: `to` never
    /// aliases).
    Tensor to(Device device) const;
    /// A plain copy on the same device with elements converted to `dtype` (float to int
    /// rounds toward zero; float to bfloat16 or float16 rounds to nearest even).
    Tensor astype(DType dtype) const;
    /// This tensor in `dtype`, in its own layout: itself when already so, else a converted
    /// copy (float to bfloat16 rounds to nearest even). Only float32 and bfloat16 take the
    /// blocked and channels-last layouts: to another type a non-plain tensor converts
    /// into a plain copy.
    Tensor convertedTo(DType dtype) const;
    Tensor toHost() const { return to(Device::cpu()); }
    Tensor clone() const { return to(device()); }
    /// Copy `src` into this tensor (same numel and dtype; devices may differ). Layouts may
    /// differ when both are on the same device (the copy reorders).
    void copyFrom(const Tensor& src);
    /// The elements as a host vector in row-major order (any layout); a bfloat16 or float16
    /// tensor reads as float.
    template <class T> std::vector<T> toVector() const {
        Tensor h = toHost().plain();
        if (std::is_same_v<T, float> && is16Bit(dtype_)) {
            h = h.astype(DType::float32);
        }
        const T* p = h.data<T>();
        return std::vector<T>(p, p + numel());
    }
    /// True when both handles view the same storage block.
    bool sharesStorage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

private:
    void checkAccess(DType dtype) const;
    void checkPlain(const char* what) const;

    std::shared_ptr<Storage> storage_;
    size_t offset_ = 0; // bytes
    Shape shape_;
    DType dtype_ = DType::float32;
    Layout layout_ = Layout::plain;
};

/// A module's input or output list.
using Tensors = std::vector<Tensor>;

/// The shapes of a list of tensors.
Shapes shapesOf(const Tensors& tensors);

/// Each tensor in plain layout (`Tensor::plain`).
Tensors plainAll(const Tensors& tensors);

/// Each 16-bit tensor converted to float32 (in its layout); the others as they are.
Tensors float32All(const Tensors& tensors);

} // namespace tessera
