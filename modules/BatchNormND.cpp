#include "modules/BatchNormND.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>

#include "backend/Backend.h"

namespace tessera {

namespace {
std::atomic<BatchNormSync*> syncInUse{nullptr};
const char* const noBatchStatistics =
    "parameter gradients need a train-mode forward (batch statistics); the last forward ran in eval mode: run it "
    "in train mode, or call backward with updParamGrads=false";
} // namespace

void BatchNormND::setSync(BatchNormSync* sync) { syncInUse.store(sync); }
BatchNormSync* BatchNormND::sync() { return syncInUse.load(); }

BatchNormND::BatchNormND(std::vector<size_t> ranks, int64_t maps, const BatchNormOptions& options)
    : Module(options.name), ranks_(std::move(ranks)), maps_(maps), options_(options) {
    if (maps <= 0) throw ModuleError("BatchNorm: maps must be positive, got " + std::to_string(maps));
    if (!(options.epsilon > 0.0f)) throw ModuleError("BatchNorm: epsilon must be positive");
    setVar("scale", Variable::of(Tensor::full({maps}, 1.0f)));
    setVar("bias", Variable::of(Tensor::zeros({maps})));
    setAttr("mean", Tensor::zeros({maps}));
    setAttr("var", Tensor::full({maps}, 1.0f));
}

void BatchNormND::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (std::find(ranks_.begin(), ranks_.end(), s.rank()) == ranks_.end() || s[1] != maps_) {
        std::string want;
        for (size_t r : ranks_) {
            want += (want.empty() ? "" : " or ") + std::string("[N, ") + std::to_string(maps_);
            for (size_t d = 2; d < r; ++d) want += ", " + std::string(1, "DHW"[3 - (r - 2) + (d - 2)]);
            want += "]";
        }
        throw shapeError("expects input " + want + ", got " + s.str());
    }
    if (isTrain() && s.numel() / s[1] < 2) {
        throw shapeError("train mode needs at least 2 values per channel for batch statistics, got " + s.str());
    }
}

void BatchNorm::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 1, "input");
    const Shape& s = inShapes[0];
    if (s.rank() < 2 || s.numel() != s[0] * maps()) {
        throw shapeError("expects input [N, ...] of " + std::to_string(maps()) + " activations per sample, got " +
                         s.str());
    }
    if (isTrain() && s[0] < 2) {
        throw shapeError("needs at least 2 samples in train mode (batch statistics), got " + s.str());
    }
}

// x: [N, maps, ...] -> y; or x itself, when the sum after it normalises (normaliseAdd) or
// the convolution before it did (setFoldIntoConv)
Tensors BatchNormND::updateData(const Tensors& data) {
    reluMask_ = sumReserve_ = sumDscale_ = sumDbias_ = Tensor();
    appliedRelu_ = sumDifferentiated_ = false;
    folded_ = foldIntoConv_;
    deferred_ = defersToSum();
    if (folded_) {
        batchMean_ = batchVar_ = Tensor(); // an eval-mode forward
        appliedRelu_ = fuseRelu_;
        return {data[0]};
    }
    if (deferred_) return {data[0]};
    return {forward(data[0], nullptr, false)};
}

void BatchNormND::evalAffine(std::vector<float>& a, std::vector<float>& c) const {
    const std::vector<float> scale = getVar("scale")->data.toVector<float>(),
                             bias = getVar("bias")->data.toVector<float>(), mean = getAttr("mean").toVector<float>(),
                             var = getAttr("var").toVector<float>();
    a.resize(scale.size());
    c.resize(scale.size());
    for (size_t k = 0; k < scale.size(); ++k) {
        a[k] = static_cast<float>(scale[k] / std::sqrt(double(var[k]) + options_.epsilon));
        c[k] = static_cast<float>(bias[k] - double(mean[k]) * a[k]);
    }
}

Tensor BatchNormND::normaliseAdd(const Tensor& x, const Tensor* z, bool relu) {
    if (!deferred_) {
        throw moduleError("normaliseAdd needs a forward that left its normalisation to the sum after it (the "
                          "setting setFuseIntoSum, which a graph makes), and the last forward did not");
    }
    if (z && z->shape() != x.shape()) {
        throw shapeError("normaliseAdd: the addend " + z->shape().str() + " differs from the input " + x.shape().str());
    }
    return forward(x, z, relu);
}

// The sum's gradient dy -> this module's input gradient, and the parameter gradients its
// own backward adds then: Backend::batchNormAddBackward after a train-mode forward (one
// call where the backend can); the ReLU's mask and evalGrad after an eval-mode one.
Tensor BatchNormND::sumBackward(const Tensor& dy, const Tensor* reluOutput, Tensor* dz) {
    if (!deferred_) {
        throw moduleError("sumBackward needs a forward that left its normalisation to the sum after it, and the "
                          "last forward did not");
    }
    const Shape& shape = dy.shape();
    auto back = [&](const Tensor& t) { return t.shape() == shape ? t : t.reshape(shape); };
    const Tensor g = normView(dy);
    Backend& be = backendOf(g);
    Tensor dzView, dx;
    if (batchMean_.defined()) {
        if (!sumDscale_.defined()) { // a run state without them (the forward allocates them)
            sumDscale_ = Tensor::empty({maps_}, DType::float32, g.device());
            sumDbias_ = Tensor::empty({maps_}, DType::float32, g.device());
        }
        const Tensor y = reluOutput ? normView(*reluOutput) : Tensor();
        dx = be.batchNormAddBackward(normView(inData()), y, g, getVar("scale")->data, getVar("bias")->data, batchMean_,
                                     batchVar_, options_.epsilon, reluOutput != nullptr, sumReserve_, dzView,
                                     sumDscale_, sumDbias_);
    } else {
        dzView = reluOutput ? be.reluGradient(normView(*reluOutput), g) : g;
        dx = evalGrad(back(dzView));
    }
    sumDifferentiated_ = true;
    if (dz) *dz = back(dzView);
    return back(dx);
}

Tensor BatchNormND::forward(const Tensor& input, const Tensor* addend, bool relu) {
    const Tensor x = normView(input);
    const Shape& shape = input.shape();
    auto back = [&](const Tensor& y) { return y.shape() == shape ? y : y.reshape(shape); };
    Tensor zView;
    if (addend) zView = normView(*addend);
    const Tensor* z = addend ? &zView : nullptr;
    Backend& be = backendOf(x);
    if (!isTrain()) {
        // Backward now differentiates this eval-mode function, not an earlier train-mode one.
        batchMean_ = batchVar_ = Tensor();
        return back(normalise(be, x, getAttr("mean"), getAttr("var"), false, z, relu));
    }

    Tensor y;
    float count = static_cast<float>(x.numel() / maps_);
    if (BatchNormSync* sync = BatchNormND::sync()) {
        y = syncedForward(x, *sync);
        if (z && relu) be.axpbyzRelu(1.0f, *z, 1.0f, y, y);
        if (z && !relu) be.axpby(1.0f, *z, 1.0f, y);
        count = static_cast<float>(globalCount_);
    } else {
        batchMean_ = Tensor::empty({maps_}, DType::float32, x.device());
        batchVar_ = Tensor::empty({maps_}, DType::float32, x.device());
        if (deferred_) { // the sum's backward writes the parameter gradients here, kept with the statistics
            sumDscale_ = Tensor::empty({maps_}, DType::float32, x.device());
            sumDbias_ = Tensor::empty({maps_}, DType::float32, x.device());
        }
        y = normalise(be, x, batchMean_, batchVar_, true, z, relu);
        globalCount_ = 0;
    }
    const float factor = std::max(options_.initFactor / static_cast<float>(1 + batches_), options_.minFactor);
    be.axpby(factor, batchMean_, 1.0f - factor, getAttr("mean"));
    be.axpby(factor * count / (count - 1.0f), batchVar_, 1.0f - factor, getAttr("var"));
    ++batches_;
    return back(y);
}

bool BatchNormND::takes16Bit(const Tensors& data) const { return !sync() && backendCarries(data); }

std::vector<DType> BatchNormND::outputDTypes(const Shapes&, const std::vector<DType>& inDTypes, Device) const {
    return inDTypes;
}

Tensor BatchNormND::normalise(Backend& be, const Tensor& x, const Tensor& mean, const Tensor& var, bool training,
                              const Tensor* z, bool relu) {
    const Tensor& scale = getVar("scale")->data;
    const Tensor& bias = getVar("bias")->data;
    if (z) return be.batchNormAddForward(x, *z, scale, bias, mean, var, options_.epsilon, training, relu, sumReserve_);
    if (!fuseRelu_ || !be.fusesBatchNormRelu())
        return be.batchNormForward(x, scale, bias, mean, var, options_.epsilon, training);
    Tensor y = be.batchNormReluForward(x, scale, bias, mean, var, options_.epsilon, training, reluMask_);
    appliedRelu_ = true;
    return y;
}

// Each process's mean, variance and count of values per channel, gathered, combine into
// the global batch's (Chan et al.'s pairwise formula: no E[x^2] - mean^2 cancellation).
Tensor BatchNormND::syncedForward(const Tensor& x, BatchNormSync& sync) {
    Backend& be = backendOf(x);
    const Tensor& scale = getVar("scale")->data;
    const Tensor& bias = getVar("bias")->data;
    Tensor mean = Tensor::empty({maps_}, DType::float32, x.device());
    Tensor var = Tensor::empty({maps_}, DType::float32, x.device());
    be.batchNormForward(x, scale, bias, mean, var, options_.epsilon, true); // this process's statistics
    const size_t C = static_cast<size_t>(maps_);
    std::vector<float> mine = mean.toVector<float>();
    const std::vector<float> v = var.toVector<float>();
    mine.insert(mine.end(), v.begin(), v.end());
    mine.push_back(static_cast<float>(x.numel() / maps_));
    const std::vector<float> all = sync.allGather(mine);
    const size_t stride = 2 * C + 1, ranks = all.size() / stride;
    double total = 0;
    for (size_t r = 0; r < ranks; ++r) total += all[r * stride + 2 * C];
    std::vector<float> gmean(C), gvar(C);
    for (size_t c = 0; c < C; ++c) {
        double m = 0;
        for (size_t r = 0; r < ranks; ++r) m += double(all[r * stride + 2 * C]) * all[r * stride + c];
        m /= total;
        double m2 = 0;
        for (size_t r = 0; r < ranks; ++r) {
            const double n = all[r * stride + 2 * C], d = double(all[r * stride + c]) - m;
            m2 += n * (double(all[r * stride + C + c]) + d * d);
        }
        gmean[c] = static_cast<float>(m);
        gvar[c] = static_cast<float>(m2 / total);
    }
    globalCount_ = total;
    batchMean_ = Tensor::fromVector({maps_}, gmean, x.device());
    batchVar_ = Tensor::fromVector({maps_}, gvar, x.device());
    return be.batchNormForward(x, scale, bias, batchMean_, batchVar_, options_.epsilon, false);
}

// The local backward computed dx = s * r * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n)
// over this process's n values per channel (r = 1 / sqrt(var + eps), xhat = (x - mean) * r
// with the global statistics). The global one has the global sums over N instead; each
// process's dy carries 1 / w times the global batch's gradient (w = its share), so the
// global sums are sum over processes of w * the local ones, taken 1 / w times here. The
// difference is per channel a + b * xhat = (a - b * mean * r) + (b * r) * x: an affine map
// of x, which a normalisation with mean 0 and variance 1 - eps computes.
void BatchNormND::syncGrad(const Tensor& x, Tensor& dx, const Tensor& dscale, const Tensor& dbias,
                           BatchNormSync& sync) const {
    const size_t C = static_cast<size_t>(maps_);
    const double w = sync.gradientWeight();
    const std::vector<float> ds = dscale.toVector<float>(), db = dbias.toVector<float>();
    std::vector<float> mine(2 * C);
    for (size_t c = 0; c < C; ++c) {
        mine[c] = static_cast<float>(w * db[c]);
        mine[C + c] = static_cast<float>(w * ds[c]);
    }
    const std::vector<float> all = sync.allGather(mine);
    const size_t ranks = all.size() / (2 * C);
    const double n = static_cast<double>(x.numel() / maps_), N = globalCount_;
    const std::vector<float> s = getVar("scale")->data.toVector<float>(), mean = batchMean_.toVector<float>(),
                             var = batchVar_.toVector<float>();
    std::vector<float> alpha(C), beta(C);
    for (size_t c = 0; c < C; ++c) {
        double sumDy = 0, sumDyXhat = 0;
        for (size_t r = 0; r < ranks; ++r) {
            sumDy += all[r * 2 * C + c];
            sumDyXhat += all[r * 2 * C + C + c];
        }
        const double rstd = 1.0 / std::sqrt(double(var[c]) + options_.epsilon);
        const double a = s[c] * rstd * (db[c] / n - sumDy / (w * N));
        const double b = s[c] * rstd * (ds[c] / n - sumDyXhat / (w * N));
        alpha[c] = static_cast<float>(a - b * mean[c] * rstd);
        beta[c] = static_cast<float>(b * rstd);
    }
    Backend& be = backendOf(x);
    const Device d = x.device();
    const Tensor zeros = Tensor::zeros({maps_}, DType::float32, d);
    const Tensor unit = Tensor::full({maps_}, 1.0f - options_.epsilon, d);
    const Tensor affine =
        be.batchNormForward(x, Tensor::fromVector({maps_}, beta, d), Tensor::fromVector({maps_}, alpha, d), zeros, unit,
                            options_.epsilon, false);
    be.axpby(1.0f, affine, 1.0f, dx);
}

Tensor BatchNormND::fusedBackward(const Tensor& dy, Tensor& dscale, Tensor& dbias) const {
    if (!batchMean_.defined()) {
        throw moduleError(noBatchStatistics);
    }
    dscale = Tensor::empty({maps_}, DType::float32, dy.device());
    dbias = Tensor::empty({maps_}, DType::float32, dy.device());
    const Tensor x = normView(inData());
    Backend& be = backendOf(dy);
    Tensor dx = reluMask_.defined()
                    ? be.batchNormReluBackward(x, normView(dy), getVar("scale")->data, getVar("bias")->data, batchMean_,
                                               batchVar_, options_.epsilon, reluMask_, dscale, dbias)
                    : be.batchNormBackward(x, normView(dy), getVar("scale")->data, batchMean_, batchVar_,
                                           options_.epsilon, dscale, dbias);
    if (globalCount_ > 0) { // the forward was synchronised: so is its gradient
        BatchNormSync* sync = BatchNormND::sync();
        if (!sync)
            throw moduleError("the forward synchronised its statistics across processes, but no sync is set now");
        syncGrad(x, dx, dscale, dbias, *sync);
    }
    return dx.shape() == dy.shape() ? dx : dx.reshape(dy.shape());
}

// After an eval-mode forward y = scale * (x - mean) / sqrt(var + eps) + bias with the
// running statistics as constants: dx = scale * dy / sqrt(var + eps), which is the same
// normalisation applied to dy with a zero mean and a zero bias.
Tensor BatchNormND::evalGrad(const Tensor& dy) const {
    const Tensor zeros = Tensor::zeros({maps_}, DType::float32, dy.device());
    const Tensor dx = backendOf(dy).batchNormForward(normView(dy), getVar("scale")->data, zeros, zeros, getAttr("var"),
                                                     options_.epsilon, false);
    return dx.shape() == dy.shape() ? dx : dx.reshape(dy.shape());
}

void BatchNormND::addParamGrads(const Tensor& dscale, const Tensor& dbias, float scale, float momentum) {
    Backend& be = backendOf(dscale);
    be.axpby(scale, dscale, momentum, getVar("scale")->grad);
    be.axpby(scale, dbias, momentum, getVar("bias")->grad);
}

// dy -> dx, dscale, dbias in one primitive; updateGrad alone comes here too.
Tensors BatchNormND::backwardFrom(const Tensors& grad, bool updParamGrads, bool updGrad, float scale, float momentum) {
    if (folded_) return updGrad ? Tensors{grad[0]} : Tensors{}; // the convolution differentiates the normalisation
    const bool params = updParamGrads && isTrain();
    if (deferred_) { // the sum after it differentiated the normalisation (sumBackward)
        if (!sumDifferentiated_) {
            throw moduleError("its forward left the normalisation to the sum after it, so its backward needs that "
                              "sum's backward first (run backward through the graph that fused them)");
        }
        if (params && !sumDscale_.defined()) {
            throw moduleError(noBatchStatistics);
        }
        if (params) addParamGrads(sumDscale_, sumDbias_, scale, momentum);
        sumReserve_ = Tensor(); // used: released before the next forward
        return updGrad ? Tensors{grad[0]} : Tensors{};
    }
    if (!batchMean_.defined() && !params) return updGrad ? Tensors{evalGrad(grad[0])} : Tensors{};
    Tensor dscale, dbias;
    Tensor dx = fusedBackward(grad[0], dscale, dbias);
    if (params) addParamGrads(dscale, dbias, scale, momentum);
    if (!updGrad) return {};
    return {dx};
}

Tensors BatchNormND::updateGrad(const Tensors& grad) { return backwardFrom(grad, false, true, 1.0f, 0.0f); }

Blueprint BatchNormND::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("maps", maps_);
    bp.scheme.emplace_back("epsilon", static_cast<double>(options_.epsilon));
    bp.scheme.emplace_back("initFactor", static_cast<double>(options_.initFactor));
    bp.scheme.emplace_back("minFactor", static_cast<double>(options_.minFactor));
    return bp;
}

MemoryUse BatchNormND::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                                 Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    if (foldIntoConv_ && !train) { // its input, normalised by the convolution, passed through
        use.outputViews = {0};
        use.gradViews = {0};
        return use;
    }
    if (defersToSum()) {
        use.outputViews = {0}; // its input, passed through to the sum
        use.gradViews = {0};   // and the input gradient the sum computed
        if (train && sumRelu_) // the fused form's reserve, where the backend keeps one
            use.reservedUntilBackwardBytes =
                backendFor(device).batchNormAddReserveBytes(normShape(inShapes[0]), inLayouts[0], computeDType());
    }
    if (train) use.keptBytes = 2 * maps_ * static_cast<int64_t>(sizeof(float)); // the batch mean and variance
    if (train && defersToSum()) use.keptBytes *= 2;                             // and the sum's parameter gradients
    if (train && fusesReluOn(device)) {                                         // and the fused ReLU's mask
        use.keptBytes += backendFor(device).batchNormReluMaskBytes(normShape(inShapes[0]), inLayouts[0]);
    }
    return use;
}

bool BatchNormND::fusesReluOn(Device device) const {
    return fuseRelu_ && (foldIntoConv_ || (!sync() && backendFor(device).fusesBatchNormRelu()));
}

} // namespace tessera
