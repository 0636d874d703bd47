#pragma once
/// \file ReduceMean and ReduceSum: the mean or the sum over some dims; ArgMax and ArgMin: the
/// position of the largest or smallest value along one.

#include "modules/Module.h"

namespace tessera {

/// x: any shape -> y: the mean of x over `axes` (dims of the input, batch included;
/// negative ones count from the end; none: every dim). With keepDims the reduced dims stay
/// as 1 ([N, C, H, W] over {2, 3} -> [N, C, 1, 1]), else they go ([N, C]; [1] when every
/// dim goes). dx = dy / count,
/// spread over the reduced dims. ONNX's ReduceMean.
class ReduceMean : public Module {
public:
    explicit ReduceMean(std::vector<int64_t> axes = {}, bool keepDims = true, std::string name = {})
        : ReduceMean(std::move(axes), keepDims, std::move(name), false) {}
    std::string classname() const override { return "ReduceMean"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// Needs the input shape of the last dataShapeFrom / forward.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input with every axis in range and none twice, at most 8 dims.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    ReduceMean(std::vector<int64_t> axes, bool keepDims, std::string name, bool sum);
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    /// x's shape with the reduced dims as 1.
    Shape keptShape(const Shape& in) const;
    /// The factor of the sum: 1 / the count of the elements each output takes (1 for ReduceSum).
    float factor(const Shape& in) const;
    std::vector<int64_t> axes_;
    bool keepDims_;
    bool sum_;
};

/// x: any shape -> y: the sum of x over `axes`, as ReduceMean's mean (the same axes, keepDims
/// and checks); dx = dy spread over the reduced dims. torch.sum(x, axes, keepdim); ONNX's
/// ReduceSum (and, with Pow or Abs before it, ReduceSumSquare, ReduceL1 and ReduceL2), over
/// any dims: the batch and dims whose size is known only at run time included.
class ReduceSum : public ReduceMean {
public:
    explicit ReduceSum(std::vector<int64_t> axes = {}, bool keepDims = true, std::string name = {})
        : ReduceMean(std::move(axes), keepDims, std::move(name), true) {}
    std::string classname() const override { return "ReduceSum"; }
};

/// ArgMax's and ArgMin's options beyond the axis.
struct ArgMaxOptions {
    bool keepDims = true;   ///< the reduced dim stays as 1
    bool lastIndex = false; ///< ties go to the last index (ONNX's select_last_index)
    std::string name = {};
};

/// x: float, any shape -> y: int32, the index along `axis` (negative from the end) of the
/// largest value of each line (ArgMin: the smallest): torch.argmax(x, axis, keepdim) and
/// ONNX's ArgMax. With keepDims that dim stays as 1, else it goes ([1] when it was the only
/// one). Ties go to the first index (with lastIndex, to the last: the line is read
/// backwards); a NaN counts as beyond every number (its index is taken, as PyTorch's).
/// Integers carry no gradient: backward gives an undefined tensor, as a Cast to int32 does.
/// A class map from scores ([N, C, H, W] -> [N, H, W]), predictions from logits.
class ArgMax : public Module {
public:
    explicit ArgMax(int axis = 1, bool keepDims = true, std::string name = {})
        : ArgMax(axis, {.keepDims = keepDims, .name = std::move(name)}, false) {}
    ArgMax(int axis, ArgMaxOptions options) : ArgMax(axis, std::move(options), false) {}
    std::string classname() const override { return "ArgMax"; }
    int axis() const { return axis_; }
    bool keepDims() const { return keepDims_; }
    bool lastIndex() const { return lastIndex_; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// The input's shape (the gradient, undefined, has it).
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input with the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>&, Device) const override {
        return {DType::int32};
    }
    Blueprint blueprint() const override;

protected:
    ArgMax(int axis, ArgMaxOptions options, bool min)
        : Module(std::move(options.name)), axis_(axis), keepDims_(options.keepDims), lastIndex_(options.lastIndex),
          min_(min) {}
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int axis_;
    bool keepDims_;
    bool lastIndex_;
    bool min_;
};

/// ArgMax of the smallest value (torch.argmin, ONNX's ArgMin); a NaN's index is taken too.
class ArgMin : public ArgMax {
public:
    explicit ArgMin(int axis = 1, bool keepDims = true, std::string name = {})
        : ArgMax(axis, {.keepDims = keepDims, .name = std::move(name)}, true) {}
    ArgMin(int axis, ArgMaxOptions options) : ArgMax(axis, std::move(options), true) {}
    std::string classname() const override { return "ArgMin"; }
};

} // namespace tessera
