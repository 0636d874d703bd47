#pragma once
/// \file ConvND: the convolution and deconvolution layers over 1 to 3 spatial dims
/// (Conv1D/2D/3D and Deconv1D/2D/3D in Conv.h and Deconv.h are its named forms).

#include "backend/Backend.h"
#include "modules/FusedRelu.h"
#include "modules/Init.h"
#include "modules/Module.h"
#include "modules/PerDim.h"

namespace tessera {

/// Convolution options. Per-dim values take one number (used for every spatial dim) or
/// one per dim: `{.stride = 2, .pad = 1}`, `{.pad = {1, 0}}`.
struct ConvOptions {
    PerDim stride = 1;
    PerDim pad = 0;      ///< zero padding on both sides of each dim
    PerDim dilation = 1; ///< 1: dense kernel
    int64_t groups = 1;  ///< inmaps and outmaps must both divide by it
    /// Deconvolutions only: outputs added at the end of each dim, 0 <= postpad < stride
    /// (PyTorch's output_padding; a stride-s deconvolution's output size is otherwise
    /// ambiguous by up to s - 1).
    PerDim postpad = 0;
    bool useBias = true;
    InitScheme initscheme = InitScheme::xavier;
    float wscale = 1.0f;
    std::string name = {};
};

/// Convolution: x: [N, inmaps, *in] -> y: [N, outmaps, *out] with
/// out = (in + 2 pad - dilation (size - 1) - 1) / stride + 1 (floor). Parameters
/// `W`: [outmaps, inmaps / groups, *size] and, with useBias, `b`: [outmaps] (zeros).
///
/// Deconvolution (transposed = true) is its adjoint: x: [N, inmaps, *in] ->
/// y: [N, outmaps, (in - 1) stride - 2 pad + dilation (size - 1) + 1 + postpad] with
/// `W`: [inmaps, outmaps / groups, *size], PuzzleLib's order. The postpad outputs are
/// those the padding would otherwise crop at the end (zeros plus bias past the full
/// deconvolution).
///
/// Outputs and input gradients may come back in a blocked layout (see `Layout`), so that
/// consecutive convolutions never reorder; modules that need plain data get it.
class ConvND : public Module {
public:
    ConvND(size_t spatialDims, bool transposed, int64_t inmaps, int64_t outmaps, std::vector<int64_t> size,
           const ConvOptions& options);

    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    int64_t inmaps() const { return inmaps_; }
    int64_t outmaps() const { return outmaps_; }
    /// Each spatial dim's postpad (all zero for a convolution).
    std::vector<int64_t> postpad() const;
    const ConvParams& params() const { return params_; }
    /// params() with the compute dtype calcMode set and, in train mode, the layer's state
    /// (what the backend keeps from forward for backward).
    ConvParams computeParams() const {
        ConvParams p = params_;
        p.compute = computeDType();
        if (isTrain()) p.state = state_;
        p.packed = packSlot();
        return p;
    }

    Shapes dataShapeFrom(const Shapes& inShapes) const override;
    /// The input shape of the last dataShapeFrom/forward with the gradient's batch size
    /// (a strided convolution maps several input sizes to one output size); before any,
    /// the smallest input that gives this output.
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override;
    /// One input [N, inmaps, *spatial] whose spatial dims are large enough for the kernel.
    void checkDataShape(const Shapes& inShapes) const override;
    /// One gradient [N, outmaps, *spatial].
    void checkGradShape(const Shapes& outGradShapes) const override;
    bool handlesLayouts() const override { return true; }
    /// On the CPU: its input converted to what the primitive reads, bfloat16 or float32.
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    Blueprint blueprint() const override;
    /// Times the backend's convolution algorithms for this input shape (on CUDA) and keeps
    /// the fastest that needs at most `memlimit` bytes of workspace.
    void optimizeForShape(const Shapes& inShapes, size_t memlimit) override;

    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;
    /// Leaving train mode drops what the backend kept for backward; so does reset().
    /// Entering it drops the folded weights (setFoldedNorm), as packed ones are dropped.
    void setTrain(bool train) override;
    void reset() override;
    /// packWeights(false) also drops the folded weights.
    void packWeights(bool on = true) override;

    /// Fusion (containers/Fusion.h, ConvFoldedNorm): a container whose eval-mode plan has a
    /// batch norm alone consume this layer's output sets it here around its forward
    /// (nullptr: none). The forward then convolves with the normalisation folded into the
    /// weights and bias, W' = a W and b' = a b + c per output channel (a, c from
    /// ConvFoldedNorm::evalAffine), and applies the batch norm's fused ReLU. The folded
    /// weights are kept with the parameters, made again after a parameter change
    /// (parameterGeneration) or new running statistics, as packed weights are.
    void setFoldedNorm(ConvFoldedNorm* norm) { foldedNorm_ = norm; }
    ConvFoldedNorm* foldedNorm() const { return foldedNorm_; }
    /// Whether a forward can fold `norm`: a convolution (not a deconvolution) with float32
    /// weights and packed weights (Module::packWeights), and a norm over its output maps.
    bool canFold(const ConvFoldedNorm& norm) const;
    /// Whether the last forward folded a batch norm in.
    bool folded() const { return folded_; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    void accGradParams(const Tensors& grad, float scale, float momentum) override;

private:
    std::string expectedInput() const;
    /// The folded weights and bias for foldedNorm_, made again where stale.
    void refreshFold();
    void dropFold();

    size_t spatialDims_;
    int64_t inmaps_, outmaps_;
    std::vector<int64_t> size_;
    ConvParams params_;
    ConvOptions options_;
    std::shared_ptr<LayerState> state_ = std::make_shared<LayerState>();
    // Folding an eval-mode batch norm (setFoldedNorm): the norm, whether the last forward
    // folded it, and the folded weights and bias with what they were made from.
    ConvFoldedNorm* foldedNorm_ = nullptr;
    bool folded_ = false;
    struct Fold {
        Tensor w, b;
        const ConvFoldedNorm* norm = nullptr;
        const void* from = nullptr; // W's storage
        uint64_t generation = 0;
        int64_t statistics = -1;
    } fold_;
    std::shared_ptr<LayerState> foldPacks_ = std::make_shared<LayerState>(); // the folded weights packed
};

} // namespace tessera
