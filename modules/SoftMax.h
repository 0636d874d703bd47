#pragma once
/// \file SoftMax and LogSoftMax over one axis (the channel dim unless told).

#include "modules/Module.h"

namespace tessera {

/// x -> y: same shape, y = exp(x) / sum exp(x) along `axis` (1, the channels of [N, C, ...],
/// unless told; negative from the end: -1 is the last axis, attention's scores).
class SoftMax : public Module {
public:
    explicit SoftMax(std::string name = {}) : Module(std::move(name)) {}
    explicit SoftMax(int axis, std::string name = {}) : Module(std::move(name)), axis_(axis) {}
    int axis() const { return axis_; }

    std::string classname() const override { return "SoftMax"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input with the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    /// log: LogSoftMax's y = x - log sum exp(x) along the axis.
    SoftMax(int axis, bool log, std::string name) : Module(std::move(name)), axis_(axis), log_(log) {}
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    // [outer, C, inner] around the axis of a tensor of shape s ([outer, C] for the last axis):
    // the backend's softmax runs over dim 1.
    Shape around(const Shape& s) const;
    int axis_ = 1;
    bool log_ = false;
};

/// x -> y: same shape, y = x - log sum exp(x) along `axis` (PyTorch's LogSoftmax), computed
/// without forming the probabilities, so y stays finite where they underflow; the input of
/// a negative log-likelihood, or of sampling from logits.
class LogSoftMax : public SoftMax {
public:
    explicit LogSoftMax(std::string name = {}) : SoftMax(1, true, std::move(name)) {}
    explicit LogSoftMax(int axis, std::string name = {}) : SoftMax(axis, true, std::move(name)) {}
    std::string classname() const override { return "LogSoftMax"; }
};

} // namespace tessera
