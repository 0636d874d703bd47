#pragma once
/// \file CumSum: running sums along an axis.

#include "modules/Module.h"

namespace tessera {

struct CumSumOptions {
    bool exclusive = false; ///< each sum leaves out its own position (ONNX's exclusive 1)
    bool reverse = false;   ///< sums run from the end of the axis (ONNX's reverse 1)
    std::string name = {};
};

/// x: any shape -> y: x's shape, the running sums along `axis` (negative from the end):
/// y[..., k, ...] = the sum of x[..., j, ...] over j <= k (exclusive: j < k; reverse: j >= k,
/// exclusive j > k). torch.cumsum(x, axis), and ONNX's CumSum (a mask's cumsum gives the
/// position ids of a padded batch, as Hugging Face's RoBERTa computes them). Computed on
/// either backend in ceil(log2(A)) passes of shifted adds (Hillis and Steele's scan) for an
/// axis of A positions: the sums are added in another order than a sequential loop's, which
/// changes them by rounding only (integers below 2^24 stay exact). dx: the running sums of dy
/// the other way (exclusive too).
class CumSum : public Module {
public:
    explicit CumSum(int axis = 0, const CumSumOptions& options = {});
    std::string classname() const override { return "CumSum"; }
    int axis() const { return axis_; }
    const CumSumOptions& options() const { return options_; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input with the axis.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    int axis_;
    CumSumOptions options_;
};

} // namespace tessera
