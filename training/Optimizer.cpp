#include "training/Optimizer.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <unordered_set>

namespace tessera {

namespace {
// The class of each rule, for messages from the base class's constructor.
const char* classOf(UpdateRule rule) {
    switch (rule) {
    case UpdateRule::sgd: return "SGD";
    case UpdateRule::momentumSGD: return "MomentumSGD";
    case UpdateRule::nesterovSGD: return "NesterovSGD";
    case UpdateRule::adam: return "Adam";
    case UpdateRule::adaGrad: return "AdaGrad";
    case UpdateRule::adaDelta: return "AdaDelta";
    case UpdateRule::rmsProp: return "RMSProp";
    case UpdateRule::rmsPropGraves: return "RMSPropGraves";
    case UpdateRule::smorms3: return "SMORMS3";
    case UpdateRule::adamW: return "AdamW";
    }
    return "Optimizer";
}

std::string str(float v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", static_cast<double>(v));
    return text;
}

// ModuleError "<optimizer>: <what> must be <range>, got <v>" unless lo <= v (< hi, or <= hi
// when `closed`); NaN fails every comparison.
void requireIn(const std::string& optimizer, const char* what, float v, float lo, float hi, bool closed) {
    if (v >= lo && (closed ? v <= hi : v < hi)) return;
    std::string range;
    if (std::isinf(hi)) {
        range = "finite and at least " + str(lo);
    } else {
        range = "in [" + str(lo) + ", " + str(hi) + (closed ? "]" : ")");
    }
    throw ModuleError(optimizer + ": " + what + " must be " + range + ", got " + str(v));
}
constexpr float kInf = std::numeric_limits<float>::infinity();
} // namespace

Optimizer::Optimizer(UpdateParams params, int states) : params_(params), states_(states) {
    const UpdateRule r = params.rule;
    const std::string name = classOf(r);
    requireIn(name, "the learning rate", params.lr, 0.0f, kInf, false);
    if (r == UpdateRule::momentumSGD || r == UpdateRule::nesterovSGD || r == UpdateRule::rmsPropGraves) {
        requireIn(name, "momentum", params.momentum, 0.0f, kInf, false);
    }
    if (r == UpdateRule::adam || r == UpdateRule::adamW) {
        requireIn(name, "beta1", params.beta1, 0.0f, 1.0f, false);
        requireIn(name, "beta2", params.beta2, 0.0f, 1.0f, false);
    }
    if (r == UpdateRule::adaDelta || r == UpdateRule::rmsProp || r == UpdateRule::rmsPropGraves) {
        requireIn(name, "rho", params.rho, 0.0f, 1.0f, true);
    }
    if (r != UpdateRule::sgd && r != UpdateRule::momentumSGD && r != UpdateRule::nesterovSGD) {
        requireIn(name, "epsilon", params.epsilon, 0.0f, kInf, false);
    }
}

void Optimizer::setLearnRate(float lr) {
    requireIn(classname(), "the learning rate", lr, 0.0f, kInf, false);
    params_.lr = lr;
}

void Optimizer::setupOn(Module& net, bool useGlobalState) {
    if (bound_) throw ModuleError(classname() + ": setupOn was already called");
    std::unordered_set<const Variable*> seen;
    int64_t total = 0;
    for (auto& [name, var] : net.namedParams()) {
        if (!seen.insert(var.get()).second) continue;
        entries_.push_back({name, var, {}, 1.0f, true});
        total += var->data.numel();
    }
    bound_ = true;
    // The initial state of every rule is zeros, but SMORMS3's memory, which starts at one
    // (the algorithm's own start, and PuzzleLib's: r = 1/2 at the first step).
    auto initial = [&](int s) { return params_.rule == UpdateRule::smorms3 && s == 0 ? 1.0f : 0.0f; };
    if (!useGlobalState || entries_.empty()) {
        for (Entry& e : entries_) {
            for (int s = 0; s < states_; ++s) {
                e.state[s] = Tensor::full(e.var->data.shape(), initial(s), e.var->data.device());
            }
        }
        return;
    }
    const Device device = entries_[0].var->data.device();
    flatParams_ = Tensor::empty({total}, DType::float32, device);
    flatGrads_ = Tensor::empty({total}, DType::float32, device);
    for (int s = 0; s < states_; ++s) flatState_[s] = Tensor::full({total}, initial(s), device);
    int64_t offset = 0;
    for (Entry& e : entries_) {
        const Shape shape = e.var->data.shape();
        const int64_t n = shape.numel();
        Tensor p = flatParams_.slice(offset, offset + n).reshape(shape);
        Tensor g = flatGrads_.slice(offset, offset + n).reshape(shape);
        p.copyFrom(e.var->data);
        g.copyFrom(e.var->grad);
        e.var->data = p;
        e.var->grad = g;
        for (int s = 0; s < states_; ++s) e.state[s] = flatState_[s].slice(offset, offset + n).reshape(shape);
        offset += n;
    }
}

void Optimizer::setWeightDecay(float decay, std::function<bool(const std::string&)> applies) {
    requireIn(classname(), "weight decay", decay, 0.0f, kInf, false);
    if (applies && !bound_) throw ModuleError(classname() + ": call setupOn before a filtered weight decay");
    weightDecay_ = decay;
    for (Entry& e : entries_) e.decays = !applies || applies(e.name);
}

void Optimizer::setGradientClipping(float maxNorm) {
    if (!(maxNorm >= 0.0f) || !std::isfinite(maxNorm)) {
        throw ModuleError(classname() + ": gradient clipping needs a finite maximum norm >= 0 (0: off), got " +
                          std::to_string(maxNorm));
    }
    maxNorm_ = maxNorm;
    lastNorm_ = std::numeric_limits<double>::quiet_NaN();
}

void Optimizer::setLearnRateFactor(const std::string& name, float factor) {
    requireIn(classname(), ("the learning rate factor of '" + name + "'").c_str(), factor, 0.0f, kInf, false);
    for (Entry& e : entries_) {
        if (e.name == name) {
            e.lrFactor = factor;
            return;
        }
    }
    throw ModuleError(classname() + ": no bound parameter named '" + name + "'");
}

void Optimizer::enableLossScaling(const LossScaling& options) {
    if (!(options.initialScale > 0.0f) || !(options.growthFactor >= 1.0f) || !(options.backoffFactor > 0.0f) ||
        !(options.backoffFactor < 1.0f) || options.growthInterval < 1) {
        throw ModuleError(classname() + ": loss scaling needs a positive scale, a growth factor >= 1, a backoff " +
                          "factor in (0, 1) and a growth interval >= 1");
    }
    scaling_ = options;
    scale_ = options.initialScale;
    clean_ = 0;
}

void Optimizer::setLossScaleState(float scale, int64_t cleanSteps) {
    if (!scaling_) throw ModuleError(classname() + ": setLossScaleState without loss scaling");
    if (!(scale > 0.0f) || cleanSteps < 0) throw ModuleError(classname() + ": a loss scale state out of range");
    scale_ = scale;
    clean_ = cleanSteps;
}

void Optimizer::scaleLossGradients(const Tensors& grads) const {
    const float scale = lossScale();
    if (scale == 1.0f) return;
    for (const Tensor& g : grads) backendOf(g).axpby(scale, g, 0.0f, g);
}

bool Optimizer::update() {
    if (!bound_) throw ModuleError(classname() + ": update before setupOn");
    if (scaling_) { // unscale and look for Inf/NaN in one pass over the gradients
        bool finite = true;
        const float inverse = 1.0f / scale_;
        if (flatGrads_.defined()) {
            finite = backendOf(flatGrads_).scaleCheckFinite(flatGrads_, inverse);
        } else {
            for (const Entry& e : entries_)
                finite = backendOf(e.var->grad).scaleCheckFinite(e.var->grad, inverse) && finite;
        }
        if (!finite) {
            scale_ *= scaling_->backoffFactor;
            clean_ = 0;
            ++skipped_;
            return false;
        }
        if (++clean_ >= scaling_->growthInterval) {
            scale_ *= scaling_->growthFactor;
            clean_ = 0;
        }
    }
    noteParameterChange(); // the weights are about to change: packed copies are stale
    UpdateParams p = params_;
    if (maxNorm_ > 0.0f) { // the global norm, over the gradients as the rule will see them
        double squares = 0.0;
        if (flatGrads_.defined()) {
            squares = backendOf(flatGrads_).sumSquares(flatGrads_);
        } else {
            for (const Entry& e : entries_) squares += backendOf(e.var->grad).sumSquares(e.var->grad);
        }
        lastNorm_ = std::sqrt(squares);
        if (!std::isfinite(lastNorm_)) {
            throw NumericsError(classname() + ": the gradients' global norm is " + std::to_string(lastNorm_) +
                                ", so a gradient holds NaN or infinity; the step was not applied (the numerics "
                                "check, --check-numerics or Module::setCheckNumerics, names the layer)");
        }
        if (lastNorm_ > maxNorm_) p.gradScale = static_cast<float>(maxNorm_ / lastNorm_);
    }
    bool uniform = true;
    for (const Entry& e : entries_) uniform = uniform && e.lrFactor == 1.0f && (e.decays || weightDecay_ == 0.0f);
    if (flatParams_.defined() && uniform) {
        p.weightDecay = weightDecay_;
        backendOf(flatParams_).optimizerUpdate(p, flatParams_, flatGrads_, flatState_[0], flatState_[1], flatState_[2]);
    } else {
        for (const Entry& e : entries_) {
            p.lr = params_.lr * e.lrFactor;
            p.weightDecay = e.decays ? weightDecay_ : 0.0f;
            backendOf(e.var->data).optimizerUpdate(p, e.var->data, e.var->grad, e.state[0], e.state[1], e.state[2]);
        }
    }
    ++params_.step;
    return true;
}

Optimizer::State Optimizer::state() const {
    if (!bound_) throw ModuleError(classname() + ": state before setupOn");
    State st;
    for (const Entry& e : entries_) {
        for (int k = 0; k < states_; ++k) st.tensors.emplace_back(e.name + "#" + std::to_string(k), e.state[k]);
    }
    st.steps = steps();
    st.lossScale = scale_;
    st.cleanSteps = clean_;
    st.skippedSteps = skipped_;
    return st;
}

void Optimizer::setState(const State& st) {
    if (!bound_) throw ModuleError(classname() + ": setState before setupOn");
    if (st.tensors.size() != entries_.size() * static_cast<size_t>(states_)) {
        throw ModuleError(classname() + ": the state holds " + std::to_string(st.tensors.size()) +
                          " tensors, this optimizer " + std::to_string(entries_.size() * states_) + " (" +
                          std::to_string(entries_.size()) + " parameters x " + std::to_string(states_) + ")");
    }
    size_t i = 0;
    for (const Entry& e : entries_) { // checked whole before anything is copied
        for (int k = 0; k < states_; ++k, ++i) {
            const auto& [name, t] = st.tensors[i];
            const std::string want = e.name + "#" + std::to_string(k);
            if (name != want) throw ModuleError(classname() + ": state tensor " + name + " where " + want + " belongs");
            if (t.shape() != e.state[k].shape()) {
                throw ModuleError(classname() + ": state tensor " + name + " has shape " + t.shape().str() +
                                  ", the parameter " + e.state[k].shape().str());
            }
        }
    }
    if (!(st.lossScale > 0.0f) || st.steps < 0 || st.cleanSteps < 0 || st.skippedSteps < 0) {
        throw ModuleError(classname() + ": counters out of range in the state");
    }
    if (!scaling_ && st.lossScale != 1.0f)
        throw ModuleError(classname() + ": the state has loss scaling, this optimizer not");
    i = 0;
    for (Entry& e : entries_) {
        for (int k = 0; k < states_; ++k, ++i) e.state[k].copyFrom(st.tensors[i].second.to(e.state[k].device()));
    }
    params_.step = st.steps + 1;
    scale_ = st.lossScale;
    clean_ = st.cleanSteps;
    skipped_ = st.skippedSteps;
}

void Optimizer::zeroGradParams() {
    if (flatGrads_.defined()) {
        backendOf(flatGrads_).fill(flatGrads_, 0.0f);
        return;
    }
    for (const Entry& e : entries_) backendOf(e.var->grad).fill(e.var->grad, 0.0f);
}

std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, float lr) {
    std::unique_ptr<Optimizer> opt;
    if (name == "sgd")
        opt = std::make_unique<SGD>();
    else if (name == "momentum")
        opt = std::make_unique<MomentumSGD>();
    else if (name == "nesterov")
        opt = std::make_unique<NesterovSGD>();
    else if (name == "adam")
        opt = std::make_unique<Adam>();
    else if (name == "adagrad")
        opt = std::make_unique<AdaGrad>();
    else if (name == "adadelta")
        opt = std::make_unique<AdaDelta>();
    else if (name == "rmsprop")
        opt = std::make_unique<RMSProp>();
    else if (name == "rmspropgraves")
        opt = std::make_unique<RMSPropGraves>();
    else if (name == "smorms3")
        opt = std::make_unique<SMORMS3>();
    else if (name == "adamw")
        opt = std::make_unique<AdamW>();
    else {
        throw ModuleError("unknown optimizer '" + name +
                          "'; expected one of: sgd, momentum, nesterov, adam, adagrad, adadelta, rmsprop, "
                          "rmspropgraves, smorms3, adamw");
    }
    if (!(lr < 0)) opt->setLearnRate(lr); // NaN too: refused there
    return opt;
}

} // namespace tessera
