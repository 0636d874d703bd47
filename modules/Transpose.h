#pragma once
/// \file Transpose, SwapAxes, MoveAxis: modules that permute a tensor's dims (a copy).

#include "modules/Module.h"

namespace tessera {

/// The shared part: y = x with dims permuted by `permFor(rank)`; dx is dy permuted back.
class AxisPermutation : public Module {
public:
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    using Module::Module;
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    void checkGradShape(const Shapes& outGradShapes) const override;
    /// The permutation applied to an input of `rank` (empty when the rank does not fit).
    std::vector<int64_t> permutation(size_t rank) const { return permFor(rank); }

protected:
    /// The permutation for an input of `rank` (y.dims[i] = x.dims[perm[i]]); empty when the
    /// rank does not fit (checkDataShape then explains).
    virtual std::vector<int64_t> permFor(size_t rank) const = 0;
    /// What the module needs, for messages ("rank 4", "rank > 2").
    virtual std::string rankNeeded() const = 0;
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
};

/// x: rank r -> y with y.dims[i] = x.dims[axes[i]]; `axes` is a permutation of 0..r-1.
class Transpose : public AxisPermutation {
public:
    explicit Transpose(std::vector<int64_t> axes, std::string name = {});
    std::string classname() const override { return "Transpose"; }
    Blueprint blueprint() const override;

protected:
    std::vector<int64_t> permFor(size_t rank) const override;
    std::string rankNeeded() const override;

private:
    std::vector<int64_t> axes_;
};

/// Exchanges dims axis1 and axis2 (negative values count from the end).
class SwapAxes : public AxisPermutation {
public:
    SwapAxes(int64_t axis1, int64_t axis2, std::string name = {});
    std::string classname() const override { return "SwapAxes"; }
    Blueprint blueprint() const override;

protected:
    std::vector<int64_t> permFor(size_t rank) const override;
    std::string rankNeeded() const override;

private:
    int64_t axis1_, axis2_;
};

/// Moves dim `src` to position `dst`, keeping the order of the others (numpy's moveaxis).
class MoveAxis : public AxisPermutation {
public:
    MoveAxis(int64_t src, int64_t dst, std::string name = {});
    std::string classname() const override { return "MoveAxis"; }
    Blueprint blueprint() const override;

protected:
    std::vector<int64_t> permFor(size_t rank) const override;
    std::string rankNeeded() const override;

private:
    int64_t src_, dst_;
};

} // namespace tessera
