#pragma once
/// \file BatchNormND: batch normalisation over [N, C, ...]; BatchNorm1D/2D/3D, below, are
/// its named forms.

#include "modules/FusedRelu.h"
#include "modules/Module.h"

namespace tessera {

class Backend;

struct BatchNormOptions {
    float epsilon = 1e-5f;
    float initFactor = 1.0f; ///< running averages: factor = max(initFactor / (1 + batches), minFactor)
    float minFactor = 0.1f;
    std::string name = {};
};

/// Synchronised batch norm across processes (data-parallel training,
/// distributed/DataParallel.h, which provides one): while one is set, every train-mode
/// forward normalises with the statistics of the whole global batch and every backward
/// differentiates through them, so N processes of batch B compute what one process of
/// batch N*B would. Every process must then run the same batch-norm forwards and backwards
/// in the same order (the calls are collective). Modules know only this interface.
class BatchNormSync {
public:
    virtual ~BatchNormSync() = default;
    /// Every process's `mine` (the same length everywhere), concatenated in rank order.
    virtual std::vector<float> allGather(const std::vector<float>& mine) = 0;
    /// This process's share of the global batch: the weight its gradients are averaged
    /// with (its samples over the global batch's).
    virtual double gradientWeight() const = 0;
};

/// x: [N, maps, *spatial] -> y: same shape, y = scale * (x - mean) / sqrt(var + eps) + bias
/// per channel. Parameters `scale` (ones) and `bias` (zeros): [maps]; attributes `mean`
/// and `var`: [maps], the running statistics.
/// Train mode normalises with the batch statistics and folds them into the running ones
/// (var unbiased, factor as in BatchNormOptions: a cumulative mean for the first batches,
/// then an exponential one); eval mode normalises with the running statistics.
/// Backward differentiates the last forward: after an eval-mode one, the input gradient
/// treats the running statistics as constants, and parameter gradients are refused
/// (ModuleError) since the module was not trained on that forward.
class BatchNormND : public Module, public FusedRelu, public SumFusedNorm, public ConvFoldedNorm {
public:
    /// `ranks`: the input ranks the named form accepts.
    BatchNormND(std::vector<size_t> ranks, int64_t maps, const BatchNormOptions& options);

    using Module::dataShapeFrom, Module::gradShapeFrom; // keep the single-shape overloads visible
    int64_t maps() const { return maps_; }

    Shapes dataShapeFrom(const Shapes& inShapes) const override { return inShapes; }
    Shapes gradShapeFrom(const Shapes& outGradShapes) const override { return outGradShapes; }
    void checkDataShape(const Shapes& inShapes) const override;
    bool handlesLayouts() const override { return true; }
    /// On the CPU without a BatchNormSync: bfloat16 activations and gradients, float32
    /// statistics, scale and shift.
    bool takes16Bit(const Tensors& data) const override;
    std::vector<DType> outputDTypes(const Shapes& inShapes, const std::vector<DType>& inDTypes,
                                    Device device) const override;
    Blueprint blueprint() const override;

    MemoryUse memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                        Device device) const override;

    std::vector<std::pair<std::string, int64_t*>> trainingCounters() override { return {{"batches", &batches_}}; }

    /// Process-wide: synchronise every batch norm's train-mode statistics through `sync`
    /// (not owned; it must outlive its use); nullptr (the default): each process's own.
    static void setSync(BatchNormSync* sync);
    static BatchNormSync* sync();

    /// Fusion (containers/Fusion.h): a container whose plan puts a ReLU right after this
    /// module, and nothing else on its output, sets this around its forward. A forward then
    /// applies the ReLU inside the normalisation where the backend can (not when
    /// synchronised), and its output is the ReLU's.
    void setFuseRelu(bool on) override { fuseRelu_ = on; }
    bool fuseRelu() const override { return fuseRelu_; }
    /// Whether a forward on `device` would apply the ReLU now (for plans: the setting is on,
    /// and the convolution before it takes the normalisation, or the backend fuses and
    /// statistics are not synchronised).
    bool fusesReluOn(Device device) const override;
    /// A train-mode forward that fuses keeps the mask.
    bool masksReluGradientOn(Device device) const override { return !foldIntoConv_ && fusesReluOn(device); }
    /// Whether the last forward applied a ReLU to its output.
    bool appliedRelu() const override { return appliedRelu_; }
    /// Whether the last forward kept the ReLU's mask: its backward then takes the ReLU's
    /// output gradient and applies the mask itself.
    bool keptReluMask() const override { return reluMask_.defined(); }
    /// The batch's mean and (biased) variance per channel that the last train-mode forward
    /// normalised with (undefined before one, and after an eval-mode one).
    /// Fusion with the sum after it (containers/Fusion.h, SumFusedNorm): a container whose
    /// plan has an Add alone consume this module's output sets this around its forward. A
    /// forward then passes its input through (not when synchronised), and the Add runs
    /// the normalisation with its sum (and its ReLU) through normaliseAdd.
    void setFuseIntoSum(bool on, bool sumRelu) override {
        fuseIntoSum_ = on;
        sumRelu_ = on && sumRelu;
    }
    bool fuseIntoSum() const override { return fuseIntoSum_; }
    bool defersToSum() const override { return fuseIntoSum_ && !sync() && !foldIntoConv_; }
    bool deferredToSum() const override { return deferred_; }
    Tensor normaliseAdd(const Tensor& x, const Tensor* z, bool relu) override;
    /// After a deferred forward, this module's backward passes on the input gradient the
    /// sum computed here, and adds the parameter gradients computed with it.
    Tensor sumBackward(const Tensor& dy, const Tensor* reluOutput, Tensor* dz) override;
    /// Folding into the convolution before it in eval mode (containers/Fusion.h,
    /// ConvFoldedNorm): a forward with the setting on passes its input through (the
    /// convolution normalised it, and applied the ReLU this module fuses), and its backward
    /// passes the gradient through. The setting wins over setFuseIntoSum.
    void setFoldIntoConv(bool on) override { foldIntoConv_ = on; }
    bool foldsIntoConv() const override { return foldIntoConv_; }
    /// Per channel over `maps` (BatchNorm1D/2D/3D of `maps`; not BatchNorm).
    bool foldableOver(int64_t maps) const override { return maps == maps_ && perChannel(); }
    bool foldsRelu() const override { return fuseRelu_; }
    void evalAffine(std::vector<float>& a, std::vector<float>& c) const override;
    int64_t statisticsVersion() const override { return batches_; }
    /// Whether the last forward passed its input through for the convolution before it.
    bool foldedIntoConv() const { return folded_; }
    const Tensor& batchMean() const { return batchMean_; }
    const Tensor& batchVar() const { return batchVar_; }
    float epsilon() const { return options_.epsilon; }

protected:
    Tensors updateData(const Tensors& data) override;
    Tensors updateGrad(const Tensors& grad) override;
    /// One primitive gives the input and parameter gradients: backward runs it once.
    Tensors backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) override;
    std::vector<Tensor*> keptTensors() override {
        return {&batchMean_, &batchVar_, &reluMask_, &sumReserve_, &sumDscale_, &sumDbias_};
    }
    /// The shape the normalisation sees, [N, maps, ...] (the input's; BatchNorm views
    /// [N, d1, ...] as [N, d1 * ...]).
    virtual Shape normShape(const Shape& s) const { return s; }
    /// Whether the channels are dim 1 of the input (false where normShape flattens them).
    virtual bool perChannel() const { return true; }
    Tensor normView(const Tensor& t) const {
        const Shape s = normShape(t.shape());
        return s == t.shape() ? t : t.reshape(s);
    }

private:
    /// dx, dscale and dbias of the last forward, which ran in train mode (else ModuleError).
    Tensor fusedBackward(const Tensor& dy, Tensor& dscale, Tensor& dbias) const;
    /// dx of the last forward, which ran in eval mode.
    Tensor evalGrad(const Tensor& dy) const;
    void addParamGrads(const Tensor& dscale, const Tensor& dbias, float scale, float momentum);

    std::vector<size_t> ranks_;
    int64_t maps_;
    BatchNormOptions options_;
    int64_t batches_ = 0;
    Tensor batchMean_, batchVar_; // of the last forward; undefined after an eval-mode one
    double globalCount_ = 0;      // values per channel over all processes, when synchronised
    bool fuseRelu_ = false, appliedRelu_ = false;
    bool fuseIntoSum_ = false, sumRelu_ = false, deferred_ = false;
    bool foldIntoConv_ = false, folded_ = false;
    Tensor reluMask_; // of the last forward, when it fused a ReLU in train mode
    // Deferred to the sum: what its training forward reserved for backward
    // (Backend::batchNormAddForward), and the parameter gradients of its sumBackward.
    Tensor sumReserve_, sumDscale_, sumDbias_;
    bool sumDifferentiated_ = false; // sumBackward ran after the last forward
    /// The forward proper on x (not its view): the statistics and the normalisation, with
    /// z added and `relu` applied when z is given (normaliseAdd).
    Tensor forward(const Tensor& x, const Tensor* z, bool relu);
    /// The forward's normalisation: with z added (and the ReLU when `relu`) when z is
    /// given; else with the ReLU fused when fuseRelu_ asks and `be` can.
    Tensor normalise(Backend& be, const Tensor& x, const Tensor& mean, const Tensor& var, bool training,
                     const Tensor* z = nullptr, bool relu = false);
    /// A synchronised train-mode forward: the global batch's mean and variance (stored as
    /// batchMean_, batchVar_), then the normalisation with them.
    Tensor syncedForward(const Tensor& x, BatchNormSync& sync);
    /// dx of a synchronised forward from the local one (`dx`, dscale, dbias over this
    /// process's batch): the global sums' terms replace the local ones.
    void syncGrad(const Tensor& x, Tensor& dx, const Tensor& dscale, const Tensor& dbias, BatchNormSync& sync) const;
};

/// x: [N, maps] or [N, maps, L].
class BatchNorm1D : public BatchNormND {
public:
    explicit BatchNorm1D(int64_t maps, const BatchNormOptions& options = {}) : BatchNormND({2, 3}, maps, options) {}
    std::string classname() const override { return "BatchNorm1D"; }
};

/// PuzzleLib's BatchNorm: each of `size` activations normalised over the batch. x: [N, d1,
/// ...] of any rank >= 2 with d1 * ... = size, seen as [N, size] (so [N, size] is
/// BatchNorm1D's case). Plain tensors.
class BatchNorm : public BatchNormND {
public:
    explicit BatchNorm(int64_t size, const BatchNormOptions& options = {}) : BatchNormND({2}, size, options) {}
    std::string classname() const override { return "BatchNorm"; }
    /// One input [N, d1, ...] with d1 * ... = size (and N >= 2 in train mode).
    void checkDataShape(const Shapes& inShapes) const override;
    bool handlesLayouts() const override { return false; }

protected:
    Shape normShape(const Shape& s) const override { return Shape({s[0], maps()}); }
    bool perChannel() const override { return false; }
};

/// x: [N, maps, H, W].
class BatchNorm2D : public BatchNormND {
public:
    explicit BatchNorm2D(int64_t maps, const BatchNormOptions& options = {}) : BatchNormND({4}, maps, options) {}
    std::string classname() const override { return "BatchNorm2D"; }
};

/// x: [N, maps, D, H, W].
class BatchNorm3D : public BatchNormND {
public:
    explicit BatchNorm3D(int64_t maps, const BatchNormOptions& options = {}) : BatchNormND({5}, maps, options) {}
    std::string classname() const override { return "BatchNorm3D"; }
};

} // namespace tessera
