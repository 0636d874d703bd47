#include "modules/ConvND.h"

#include <stdexcept>

#include "modules/SpatialUtil.h"

namespace tessera {

ConvND::ConvND(size_t spatialDims, bool transposed, int64_t inmaps, int64_t outmaps, std::vector<int64_t> size,
               const ConvOptions& options)
    : Module(options.name), spatialDims_(spatialDims), inmaps_(inmaps), outmaps_(outmaps), options_(options) {
    const std::string cls = (transposed ? "Deconv" : "Conv") + std::to_string(spatialDims) + "D";
    if (inmaps <= 0 || outmaps <= 0) {
        throw ModuleError(cls + ": inmaps and outmaps must be positive, got " + std::to_string(inmaps) + " and " +
                          std::to_string(outmaps));
    }
    if (options.groups < 1 || inmaps % options.groups != 0 || outmaps % options.groups != 0) {
        throw ModuleError(cls + ": groups (" + std::to_string(options.groups) + ") must divide inmaps (" +
                          std::to_string(inmaps) + ") and outmaps (" + std::to_string(outmaps) + ")");
    }
    size_ = spatial::expand(size, spatialDims, cls.c_str(), "size", 1);
    params_.stride = spatial::expand(options.stride, spatialDims, cls.c_str(), "stride", 1);
    params_.padLo = spatial::expand(options.pad, spatialDims, cls.c_str(), "pad", 0);
    params_.padHi = params_.padLo;
    params_.dilation = spatial::expand(options.dilation, spatialDims, cls.c_str(), "dilation", 1);
    const std::vector<int64_t> postpad = spatial::expand(options.postpad, spatialDims, cls.c_str(), "postpad", 0);
    for (size_t d = 0; d < spatialDims; ++d) {
        if (postpad[d] == 0) continue;
        if (!transposed) throw ModuleError(cls + ": postpad is for deconvolutions; a convolution has none");
        if (postpad[d] >= params_.stride[d]) {
            throw ModuleError(cls + ": postpad " + std::to_string(postpad[d]) + " of spatial dim " + std::to_string(d) +
                              " must be less than its stride " + std::to_string(params_.stride[d]));
        }
        params_.padHi[d] -= postpad[d]; // the output grows at the end: the high side crops less
    }
    params_.groups = options.groups;
    params_.transposed = transposed;

    const int64_t g = options.groups;
    std::vector<int64_t> w =
        transposed ? std::vector<int64_t>{inmaps, outmaps / g} : std::vector<int64_t>{outmaps, inmaps / g};
    int64_t window = 1;
    for (int64_t k : size_) {
        w.push_back(k);
        window *= k;
    }
    setVar("W", Variable::of(newWeights(Shape(w), options.initscheme, inmaps / g * window, outmaps / g * window,
                                        options.wscale)));
    if (options.useBias) setVar("b", Variable::of(Tensor::zeros({outmaps})));
}

std::vector<int64_t> ConvND::postpad() const {
    std::vector<int64_t> q(spatialDims_);
    for (size_t d = 0; d < spatialDims_; ++d) q[d] = params_.padLo[d] - params_.padHi[d];
    return q;
}

std::string ConvND::expectedInput() const {
    std::string s = "[N, " + std::to_string(inmaps_);
    for (size_t d = 0; d < spatialDims_; ++d) s += ", " + std::string(1, "DHW"[3 - spatialDims_ + d]);
    return s + "]";
}

void ConvND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() != spatialDims_ + 2 || s[1] != inmaps_) {
        throw shapeError("expects input " + expectedInput() + ", got " + s.str());
    }
    if (params_.transposed) {
        const Shape y = dataShapeFrom(inShapes)[0];
        for (size_t d = 0; d < spatialDims_; ++d) {
            if (y[2 + d] < 1) {
                throw shapeError("input " + s.str() + " gives an empty output " + y.str() + ": padding " +
                                 std::to_string(params_.padLo[d]) + " crops more than spatial dim " +
                                 std::to_string(d) + " produces");
            }
        }
        return;
    }
    for (size_t d = 0; d < spatialDims_; ++d) {
        const int64_t span = params_.dilation[d] * (size_[d] - 1) + 1;
        if (s[2 + d] + params_.padLo[d] + params_.padHi[d] < span) {
            throw shapeError("input " + s.str() + " is smaller than the kernel: spatial dim " + std::to_string(d) +
                             " is " + std::to_string(s[2 + d]) + " + padding " +
                             std::to_string(params_.padLo[d] + params_.padHi[d]) + ", the kernel spans " +
                             std::to_string(span));
        }
    }
}

void ConvND::checkGradShape(const Shapes& outGradShapes) const {
    requireCount(outGradShapes, 1, "gradient");
    const Shape& s = outGradShapes[0];
    if (s.rank() != spatialDims_ + 2 || s[1] != outmaps_) {
        throw shapeError("expects gradient [N, " + std::to_string(outmaps_) + ", ...] of rank " +
                         std::to_string(spatialDims_ + 2) + ", got " + s.str());
    }
}

Shapes ConvND::dataShapeFrom(const Shapes& inShapes) const {
    const Shape& s = inShapes[0];
    std::vector<int64_t> y{s[0], outmaps_};
    for (size_t d = 0; d < spatialDims_; ++d) {
        const int64_t span = params_.dilation[d] * (size_[d] - 1) + 1, pads = params_.padLo[d] + params_.padHi[d];
        y.push_back(params_.transposed ? (s[2 + d] - 1) * params_.stride[d] - pads + span
                                       : (s[2 + d] + pads - span) / params_.stride[d] + 1);
    }
    return {Shape(y)};
}

Shapes ConvND::gradShapeFrom(const Shapes& outGradShapes) const {
    const Shape& g = outGradShapes[0];
    // The last forward's input settles what strides leave open (7 and 8 both give 4 at
    // stride 2); without one, the smallest input that fits.
    if (!inDataList().empty() && inDataList()[0].shape().rank() == g.rank()) {
        Shape in = inDataList()[0].shape();
        in[0] = g[0];
        if (dataShapeFrom(Shapes{in})[0] == g) return {in};
    }
    std::vector<int64_t> in{g[0], inmaps_};
    for (size_t d = 0; d < spatialDims_; ++d) {
        const int64_t span = params_.dilation[d] * (size_[d] - 1) + 1, pads = params_.padLo[d] + params_.padHi[d];
        in.push_back(params_.transposed ? (g[2 + d] + pads - span) / params_.stride[d] + 1
                                        : (g[2 + d] - 1) * params_.stride[d] - pads + span);
    }
    return {Shape(in)};
}

bool ConvND::takes16Bit(const Tensors& data) const { return backendCarries(data); }

std::vector<DType> ConvND::outputDTypes(const Shapes&, const std::vector<DType>&, Device device) const {
    return {backendFor(device).convOutputDType(computeParams())};
}

// x: [N, inmaps, *in] -> y: [N, outmaps, *out]; with a batch norm folded in, its output
Tensors ConvND::updateData(const Tensors& data) {
    const Tensor& x = data[0];
    const Shape y = dataShapeFrom(Shapes{x.shape()})[0];
    folded_ = foldedNorm_ != nullptr; // set only where canFold (fusion::foldsOf)
    if (folded_) {
        refreshFold();
        ConvParams p = computeParams();
        p.packed = foldPacks_;
        p.relu = foldedNorm_->foldsRelu();
        return {backendOf(x).convForward(p, x, fold_.w, fold_.b, y)};
    }
    const Tensor b = options_.useBias ? getVar("b")->data : Tensor();
    return {backendOf(x).convForward(computeParams(), x, getVar("W")->data, b, y)};
}

// dy: [N, outmaps, *out] -> dx: [N, inmaps, *in]
Tensors ConvND::updateGrad(const Tensors& grad) {
    const Tensor& w = folded_ ? fold_.w : getVar("W")->data;
    return {backendOf(grad[0]).convBackwardData(computeParams(), grad[0], w, inData().shape())};
}

// dW = scale * dL/dW + momentum * dW, db likewise
void ConvND::accGradParams(const Tensors& grad, float scale, float momentum) {
    const Tensor db = options_.useBias ? getVar("b")->grad : Tensor();
    backendOf(grad[0]).convBackwardWeights(computeParams(), inData(), grad[0], scale, momentum, getVar("W")->grad, db);
}

bool ConvND::canFold(const ConvFoldedNorm& norm) const {
    return !params_.transposed && weightsPacked() && getVar("W")->data.dtype() == DType::float32 &&
           (!options_.useBias || getVar("b")->data.dtype() == DType::float32) && norm.foldableOver(outmaps_);
}

// W' = a W and b' = a b + c per output channel, made again when W, the parameters or the
// norm's statistics changed since (or the module moved).
void ConvND::refreshFold() {
    const Tensor& w = getVar("W")->data;
    const uint64_t generation = parameterGeneration();
    const int64_t statistics = foldedNorm_->statisticsVersion();
    if (fold_.w.defined() && fold_.norm == foldedNorm_ && fold_.from == w.raw() && fold_.generation == generation &&
        fold_.statistics == statistics && fold_.w.device() == w.device()) {
        return;
    }
    std::vector<float> a, c;
    foldedNorm_->evalAffine(a, c);
    if (options_.useBias) {
        const std::vector<float> b = getVar("b")->data.toVector<float>();
        for (size_t k = 0; k < c.size(); ++k) c[k] += a[k] * b[k];
    }
    const Device d = w.device();
    if (!fold_.w.defined() || fold_.w.device() != d) fold_.w = Tensor::empty(w.shape(), DType::float32, d);
    fold_.b = Tensor::fromVector({outmaps_}, c, d);
    const Shape rows({1, outmaps_, w.numel() / outmaps_});
    backendFor(d).mulChannels(w.reshape(rows), Tensor::fromVector({1, outmaps_}, a, d), fold_.w.reshape(rows));
    fold_.norm = foldedNorm_;
    fold_.from = w.raw();
    fold_.generation = generation;
    fold_.statistics = statistics;
    foldPacks_->data.reset(); // packed from the old folded weights
}

Blueprint ConvND::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("inmaps", inmaps_);
    bp.scheme.emplace_back("outmaps", outmaps_);
    bp.scheme.emplace_back("size", size_);
    bp.scheme.emplace_back("stride", params_.stride);
    bp.scheme.emplace_back("pad", params_.padLo);
    bp.scheme.emplace_back("dilation", params_.dilation);
    bp.scheme.emplace_back("groups", params_.groups);
    bp.scheme.emplace_back("useBias", options_.useBias);
    bp.scheme.emplace_back("initscheme", tessera::str(options_.initscheme));
    bp.scheme.emplace_back("wscale", static_cast<double>(options_.wscale));
    if (params_.transposed) bp.scheme.emplace_back("postpad", postpad());
    return bp;
}

void ConvND::optimizeForShape(const Shapes& inShapes, size_t memlimit) {
    requireCount(inShapes, 1, "input");
    const Tensor& w = getVar("W")->data;
    backendFor(w.device())
        .optimizeConv(computeParams(), inShapes[0], w.shape(), dataShapeFrom(Shapes{inShapes[0]})[0], memlimit);
}

MemoryUse ConvND::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                            Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    const Shape y = dataShapeFrom(inShapes)[0];
    Backend& be = backendFor(device);
    ConvParams p = computeParams();
    p.state = train ? state_ : nullptr; // what a forward in that mode keeps, whatever mode the module is in now
    const Shape& w = getVar("W")->data.shape();
    use.outLayouts[0] = be.convOutputLayout(p, inShapes[0], w, y, options_.useBias);
    use.keptUntilBackwardBytes = be.convKeptBytes(p, inShapes[0], w, y, options_.useBias);
    use.forwardScratchBytes = be.convScratchBytes(p, inShapes[0], w, y, options_.useBias, false);
    if (train) use.backwardScratchBytes = be.convScratchBytes(p, inShapes[0], w, y, options_.useBias, true);
    return use;
}

void ConvND::setTrain(bool train) {
    Module::setTrain(train);
    if (!train) state_->data.reset();
    if (train) dropFold();
}

void ConvND::packWeights(bool on) {
    Module::packWeights(on);
    if (!on) dropFold();
}

void ConvND::dropFold() {
    fold_ = Fold{};
    foldPacks_->data.reset();
}

void ConvND::reset() {
    Module::reset();
    state_->data.reset();
}

} // namespace tessera
