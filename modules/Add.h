#pragma once
/// \file Element-wise merges: Add, Mul, Sub and Div. Two inputs of different shapes
/// broadcast by NumPy's rules (dims aligned from the right, each pair equal or one of them
/// 1; at most 8 dims), and each input's gradient is summed back to its shape. And Sum,
/// PuzzleLib's weighted sum over one axis.

#include "modules/FusedRelu.h"
#include "modules/Module.h"

namespace tessera {

/// [x_0, ..., x_k] (same shape) -> y = sum_i c_i x_i; dx_i = c_i dy. Without coefficients
/// every c_i is 1; with them there must be one per input. Two inputs without coefficients
/// may broadcast (a bias [C, 1, 1] added to [N, C, H, W]).
class Add : public Module, public FusedRelu {
public:
    explicit Add(std::vector<float> coefficients = {}, std::string name = {});

    std::string classname() const override { return "Add"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    /// Needs the input shapes of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// At least one input, all of the same shape, as many as coefficients (when given); or
    /// two that broadcast, without coefficients.
    void checkDataShape(const Shapes& inShapes) const override;
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    bool handlesLayouts() const override { return true; }
    /// For inputs of one shape (not a broadcast) whose 16-bit types the backend carries.
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    Blueprint blueprint() const override;

    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

    /// Fusion (containers/Fusion.h): with a ReLU alone after it, the sum and the ReLU are one
    /// pass (Backend::axpbyzRelu) and the ReLU passes the sum through; the ReLU's backward
    /// masks the gradient as usual (reading its input, which is its output), except where
    /// a batch norm is fused into this sum too: the sum's backward masks it then, with the
    /// normalisation's gradient (Backend::batchNormAddBackward).
    void setFuseRelu(bool on) override { fuseRelu_ = on; }
    bool fuseRelu() const override { return fuseRelu_; }
    bool fusesReluOn(Device) const override { return fuseRelu_; }
    bool masksReluGradientOn(Device) const override { return fuseRelu_ && norm_ && norm_->defersToSum(); }
    bool appliedRelu() const override { return appliedRelu_; }
    bool keptReluMask() const override { return appliedRelu_ && normUsed_; }
    /// Fusion (containers/Fusion.h): a batch norm that alone feeds input `slot` of this sum of
    /// two (no coefficients other than 1) leaves its normalisation to it; the forward then
    /// computes relu(bn(x) + z) (without the ReLU unless one is fused) in one backend call,
    /// where x and z have one shape and the result's dtype and layout are the unfused sum's,
    /// and the backward differentiates all three in one (SumFusedNorm::sumBackward).
    /// Set by a container around its forward; nullptr: none.
    void setFusedNorm(SumFusedNorm* norm, int slot) {
        norm_ = norm;
        normSlot_ = slot;
    }
    SumFusedNorm* fusedNorm() const { return norm_; }
    /// Whether this sum of two has only coefficients of 1 (a batch norm may fuse into it).
    bool plainSum() const;
    /// Whether the last forward ran the batch norm's normalisation with the sum in one call.
    bool normalisedInSum() const { return normalisedInSum_; }

protected:
    static DType sumDType(const std::vector<DType>& inDTypes);
    Tensors updateData(const Tensors& inputs) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    float coefficient(size_t i) const { return coefficients_.empty() ? 1.0f : coefficients_[i]; }

    std::vector<float> coefficients_;
    bool fuseRelu_ = false, appliedRelu_ = false;
    SumFusedNorm* norm_ = nullptr;
    int normSlot_ = 0;
    bool normalisedInSum_ = false;
    // The batch norm whose input the last forward took (the setting ends with the forward;
    // backward differentiates that norm), and its slot.
    SumFusedNorm* normUsed_ = nullptr;
    int normUsedSlot_ = 0;
    /// With a batch norm fused into this sum: its normalisation run here, with the sum
    /// when it can (then `y` is the result and true comes back), else alone into
    /// `data[normSlot_]`.
    bool normaliseFusedInput(Tensors& data, Tensor& y);
};

/// [x_0, ..., x_k] (same shape) -> y = x_0 * x_1 * ... element-wise;
/// dx_i = dy * prod_{j != i} x_j. Two inputs may broadcast: a per-channel gate g
/// [N, C, 1, ...] times x [N, C, ...] (a squeeze-and-excitation block) takes a fast path,
/// dg being the plane sums of dy * x.
class Mul : public Module {
public:
    explicit Mul(std::string name = {}) : Module(std::move(name)) {}

    std::string classname() const override { return "Mul"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// At least two inputs, all of the same shape, or two that broadcast.
    void checkDataShape(const Shapes& inShapes) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
};

/// The shape rules Sub and Div share: two inputs whose shapes broadcast; each input's
/// gradient has its own shape.
class BroadcastPair : public Module {
public:
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    using Module::Module;
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shapes of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// Two inputs whose shapes broadcast.
    void checkDataShape(const Shapes& inShapes) const override;
};

/// [a, b] -> y = a - b (broadcasting); da = dy, db = -dy, each summed to its input's shape.
class Sub : public BroadcastPair {
public:
    explicit Sub(std::string name = {}) : BroadcastPair(std::move(name)) {}
    std::string classname() const override { return "Sub"; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
};

/// [a, b] -> y = a / b (broadcasting); da = dy / b, db = -dy a / b^2, each summed to its
/// input's shape. Division by zero follows IEEE (inf, nan).
class Div : public BroadcastPair {
public:
    explicit Div(std::string name = {}) : BroadcastPair(std::move(name)) {}
    std::string classname() const override { return "Div"; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
};

/// PuzzleLib's Sum: x [d0, ..., d_axis, ...] -> y = sum over `axis` of x (x without that
/// dim). With weights (useWeights, the default) a second input v [d0, ..., d_axis] weighs
/// each slice: y[i, ..., j] = sum_k x[i, ..., k, j] v[i, ..., k] (attention over k, say);
/// dx = dy v spread over k, dv[i, ..., k] = sum_j x[i, ..., k, j] dy[i, ..., j]. `axis` is
/// 1 or more (the batch stays).
class Sum : public Module {
public:
    explicit Sum(int64_t axis, bool useWeights = true, std::string name = {});
    std::string classname() const override { return "Sum"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shapes of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// The data with a dim at `axis` and, with weights, v of the data's leading dims
    /// through `axis`.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    int64_t axis() const { return axis_; }
    bool useWeights() const { return useWeights_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int64_t axis_;
    bool useWeights_;
};

} // namespace tessera
