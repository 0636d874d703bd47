#pragma once
/// \file TopK: the k largest (or smallest) values along an axis and their positions.

#include "modules/Module.h"

namespace tessera {

struct TopKOptions {
    bool largest = true; ///< the largest values (false: the smallest)
    bool sorted = true;  ///< from the largest (smallest) on; false: in the order they appear
    std::string name = {};
};

/// x: float [..., A, ...] -> [values, indices], both [..., k, ...] along `axis` (negative
/// from the end): the k largest (with `largest` false, smallest) values of each line and
/// their positions (int32), sorted from the largest (smallest) on, equal values in the order
/// they appear; without `sorted`, in the order they appear. torch.topk(x, k, axis, largest,
/// sorted) and ONNX's TopK (the top-k experts of a mixture, a beam's best continuations).
/// Sorting the k takes k x k comparisons per line (as the comparisons of float data take
/// them: an infinite value ranks as the largest finite one of its sign, and a line holding
/// NaN gives unspecified values and positions). dx routes dy (the values' gradient) back to
/// the chosen positions, zeros elsewhere; the positions have no gradient.
class TopK : public Module {
public:
    TopK(int64_t k, int axis = -1, const TopKOptions& options = {});
    std::string classname() const override { return "TopK"; }
    int64_t k() const { return k_; }
    int axis() const { return axis_; }
    const TopKOptions& options() const { return options_; }
    size_t outputCount() const override { return 2; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// The last input shape.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input whose axis holds at least k values.
    void checkDataShape(const Shapes& inShapes) const override;
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>&, Device) const override {
        return {DType::float32, DType::int32};
    }
    Blueprint blueprint() const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&indices_}; }

private:
    int64_t k_;
    int axis_;
    TopKOptions options_;
    Tensor indices_;
};

} // namespace tessera
