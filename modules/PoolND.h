#pragma once
/// \file PoolND: max and average pooling over 1 to 3 spatial dims (MaxPool1D/2D/3D and
/// AvgPool1D/2D/3D in Pool.h are its named forms), and global average pooling.

#include "backend/Backend.h"
#include "modules/Module.h"
#include "modules/PerDim.h"

namespace tessera {

struct PoolOptions {
    PerDim stride = {};     ///< one number or one per dim (`.stride = 2`); empty: equal to the size
    PerDim pad = 0;         ///< on both sides; must be below the size
    bool includePad = true; ///< average pooling: padded positions count in the mean
    std::string name = {};
};

/// x: [N, C, *in] -> y: [N, C, *out], out = (in + 2 pad - size) / stride + 1 (floor).
/// Max pooling ignores padding. Outputs keep the input's layout.
class PoolND : public Module {
public:
    PoolND(size_t spatialDims, PoolKind kind, std::vector<int64_t> size, const PoolOptions& options);

    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    const PoolParams& params() const { return params_; }

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// The last input shape with the gradient's batch (several sizes pool to one).
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input [N, C, *spatial] with every padded spatial dim at least the window.
    void checkDataShape(const Shapes& inShapes) const override;
    void checkGradShape(const Shapes& outGradShapes) const override;
    bool handlesLayouts() const override { return true; }
    /// On the CPU: pools bfloat16 activations as they are (oneDNN's bfloat16 pooling).
    bool takes16Bit(const Tensors& data) const override { return backendCarries(data); }
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return inDTypes;
    }
    Blueprint blueprint() const override;

    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    std::vector<Tensor*> keptTensors() override { return {&workspace_}; }

private:
    size_t spatialDims_;
    PoolParams params_;
    bool includePad_;
    Tensor workspace_;
};

/// x: [N, C, *spatial] (1 to 3 spatial dims) -> y: [N, C, 1, ...]: the mean of each
/// channel over all positions.
class GlobalAvgPool : public Module {
public:
    explicit GlobalAvgPool(std::string name = {}) : Module(std::move(name)) {}
    std::string classname() const override { return "GlobalAvgPool"; }
    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    void checkDataShape(const Shapes& inShapes) const override;
    bool handlesLayouts() const override { return true; }
    bool takes16Bit(const Tensors& data) const override { return backendCarries(data); }
    std::vector<DType> outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const override {
        return inDTypes;
    }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;

private:
    PoolParams paramsFor(const Shape& in) const;
};

} // namespace tessera
