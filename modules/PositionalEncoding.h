#pragma once
/// \file PositionalEncoding: the fixed sinusoidal position table of Vaswani et al. (2017)
/// added to a sequence.

#include "modules/Module.h"

namespace tessera {

struct PositionalEncodingOptions {
    float base = 10000.0f; ///< the wavelengths' base
    std::string name = {};
};

/// x [..., T, D] -> y = x + PE[T, D], PE[t, 2i] = sin(t / base^(2i / D)),
/// PE[t, 2i + 1] = cos(t / base^(2i / D)) (an odd D ends with a sine column); the table
/// broadcasts over the leading dims (batch-first [N, T, D] or heads). dx = dy. No
/// parameters: the table is made for each length and kept until the length changes.
class PositionalEncoding : public Module {
public:
    explicit PositionalEncoding(const PositionalEncodingOptions& options = {});
    std::string classname() const override { return "PositionalEncoding"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    /// One input of rank 2 or more.
    void checkDataShape(const Shapes& inShapes) const override;
    Blueprint blueprint() const override;
    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    /// The table PE [T, D] on the CPU.
    static Tensor table(int64_t T, int64_t D, float base = 10000.0f);

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override { return grad; }

private:
    PositionalEncodingOptions options_;
    Tensor table_; // the last length's table, on the last input's device
};

} // namespace tessera
