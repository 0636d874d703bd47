#pragma once
/// \file Optimizers: SGD, MomentumSGD, NesterovSGD, Adam, AdaGrad, AdaDelta, RMSProp,
/// RMSPropGraves, SMORMS3, AdamW. `setupOn(net)` binds one to a network's parameters; `update()`
/// applies one step from the accumulated gradients. The rules are at
/// `Backend::optimizerUpdate`.

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backend/Backend.h"
#include "modules/Module.h"

namespace tessera {

/// Dynamic loss scaling, for training in a type whose gradients underflow (float16): the
/// loss gradient is multiplied by the scale before backward, so small gradients stay
/// representable; the update divides the gradients by it again.
struct LossScaling {
    float initialScale = 65536.0f; ///< 2^16
    float growthFactor = 2.0f;     ///< the scale grows by this ...
    int64_t growthInterval = 2000; ///< ... after this many clean steps in a row
    float backoffFactor = 0.5f;    ///< and shrinks by this on a step whose gradients overflow
};

class Optimizer {
public:
    virtual ~Optimizer() = default;
    virtual std::string classname() const = 0;

    /// Bind to every parameter of `net` (shared parameters once). With `useGlobalState`
    /// all parameters, gradients and optimizer state move into flat buffers (the
    /// parameters' tensors become views of them), and `update` is one fused loop over
    /// everything. Throws ModuleError when called twice.
    void setupOn(Module& net, bool useGlobalState = false);
    /// One step for every bound parameter; returns whether it was applied (always, without
    /// loss scaling). With loss scaling the gradients are first divided by the scale and
    /// checked for Inf and NaN in the same pass: an overflow skips the step (parameters,
    /// state and the step count untouched) and shrinks the scale; enough clean steps grow
    /// it. Throws ModuleError before setupOn.
    bool update();
    /// Turn on dynamic loss scaling (ModuleError for a scale or factors out of range).
    /// Trainer scales the cost's gradients (scaleLossGradients) before backward; code that
    /// runs its own steps does the same.
    void enableLossScaling(const LossScaling& options = {});
    /// The current loss scale (1 without loss scaling).
    float lossScale() const { return scaling_ ? scale_ : 1.0f; }
    /// Multiplies each of the cost's gradients by lossScale(), in place (nothing without
    /// loss scaling): what a training step does between the cost and backward.
    void scaleLossGradients(const Tensors& grads) const;
    /// Steps skipped for overflowing gradients so far.
    int64_t skippedSteps() const { return skipped_; }
    /// Clean steps since the scale last changed; with lossScale(), the state a resumed
    /// run restores through setLossScaleState.
    int64_t cleanSteps() const { return clean_; }
    void setLossScaleState(float scale, int64_t cleanSteps);
    /// Zero every bound gradient.
    void zeroGradParams();

    float learnRate() const { return params_.lr; }
    /// ModuleError for a rate that is negative or not finite.
    void setLearnRate(float lr);
    /// L2 weight decay: grad + decay * param enters the rule, for the parameters whose
    /// dotted name `applies` accepts (all when empty). ModuleError for a decay that is
    /// negative or not finite.
    void setWeightDecay(float decay, std::function<bool(const std::string&)> applies = {});
    /// Gradient clipping by global norm: each update measures the L2 norm of all bound
    /// gradients together (after loss scaling has divided them by the scale) and, when it
    /// exceeds `maxNorm`, applies the rule to every gradient multiplied by maxNorm / norm,
    /// in the same fused pass (the gradient tensors are left as they are). 0 turns it off.
    /// A norm that is NaN or infinite is a NumericsError from update(), before anything
    /// changes (with loss scaling such a step is skipped first). ModuleError for a negative
    /// or non-finite maxNorm.
    void setGradientClipping(float maxNorm);
    /// The clipping threshold (0: off).
    float gradientClipping() const { return maxNorm_; }
    /// The global gradient norm that the last update measured (before clipping); NaN
    /// without clipping or before the first update.
    double lastGradientNorm() const { return lastNorm_; }
    /// Scale the learning rate of one parameter (by dotted name; ModuleError
    /// when it is not bound, or for a factor that is negative or not finite).
    void setLearnRateFactor(const std::string& name, float factor);
    /// Updates made so far.
    int64_t steps() const { return params_.step - 1; }
    /// Everything an update depends on besides the parameters and their gradients, to save
    /// and restore (training/Checkpoint.h): per bound parameter its state tensors, named
    /// "<dotted name>#<k>" (k below the rule's state count; none for SGD), the step count
    /// and the loss-scaling state.
    struct State {
        NamedTensors tensors;
        int64_t steps = 0;
        float lossScale = 1.0f;
        int64_t cleanSteps = 0, skippedSteps = 0;
    };
    State state() const;
    /// Restores a state() of an optimizer of the same class bound to the same parameters;
    /// ModuleError naming what does not match (a name, a shape, loss scaling on one side).
    void setState(const State& state);
    /// The flat parameter buffer under global state (undefined otherwise).
    const Tensor& globalParams() const { return flatParams_; }
    /// The flat gradient buffer under global state, in the same order (undefined otherwise).
    const Tensor& globalGrads() const { return flatGrads_; }

protected:
    /// Throws ModuleError, naming the optimizer, for a constant its rule reads that is out of
    /// range (PyTorch's): a learning rate, momentum or epsilon that is negative or not
    /// finite; Adam's betas outside [0, 1); a running-average decay rho outside [0, 1].
    Optimizer(UpdateParams params, int states);

private:
    struct Entry {
        std::string name;
        VariablePtr var;
        Tensor state[3];
        float lrFactor = 1.0f;
        bool decays = true;
    };

    UpdateParams params_;
    int states_;
    bool bound_ = false;
    float weightDecay_ = 0.0f;
    float maxNorm_ = 0.0f;
    double lastNorm_ = std::numeric_limits<double>::quiet_NaN();
    std::vector<Entry> entries_;
    Tensor flatParams_, flatGrads_, flatState_[3];
    std::optional<LossScaling> scaling_;
    float scale_ = 1.0f;
    int64_t clean_ = 0, skipped_ = 0;
};

class SGD : public Optimizer {
public:
    explicit SGD(float lr = 0.01f) : Optimizer({.rule = UpdateRule::sgd, .lr = lr}, 0) {}
    std::string classname() const override { return "SGD"; }
};

class MomentumSGD : public Optimizer {
public:
    explicit MomentumSGD(float lr = 0.01f, float momentum = 0.9f)
        : Optimizer({.rule = UpdateRule::momentumSGD, .lr = lr, .momentum = momentum}, 1) {}
    std::string classname() const override { return "MomentumSGD"; }
};

class NesterovSGD : public Optimizer {
public:
    explicit NesterovSGD(float lr = 0.01f, float momentum = 0.9f)
        : Optimizer({.rule = UpdateRule::nesterovSGD, .lr = lr, .momentum = momentum}, 1) {}
    std::string classname() const override { return "NesterovSGD"; }
};

class Adam : public Optimizer {
public:
    explicit Adam(float alpha = 1e-3f, float beta1 = 0.9f, float beta2 = 0.999f, float epsilon = 1e-8f)
        : Optimizer({.rule = UpdateRule::adam, .lr = alpha, .beta1 = beta1, .beta2 = beta2, .epsilon = epsilon}, 2) {}
    std::string classname() const override { return "Adam"; }
};

/// Adam with decoupled weight decay (Loshchilov and Hutter): the rule sees the gradient
/// alone, and each step also takes lr * decay * w off the weight. The decay (0.01 by
/// default, as PyTorch's AdamW) is setWeightDecay's, which can change or filter it.
class AdamW : public Optimizer {
public:
    explicit AdamW(float alpha = 1e-3f, float beta1 = 0.9f, float beta2 = 0.999f, float epsilon = 1e-8f,
                   float weightDecay = 0.01f)
        : Optimizer({.rule = UpdateRule::adamW, .lr = alpha, .beta1 = beta1, .beta2 = beta2, .epsilon = epsilon}, 2) {
        setWeightDecay(weightDecay);
    }
    std::string classname() const override { return "AdamW"; }
};

class AdaGrad : public Optimizer {
public:
    explicit AdaGrad(float lr = 0.01f, float epsilon = 1e-8f)
        : Optimizer({.rule = UpdateRule::adaGrad, .lr = lr, .epsilon = epsilon}, 1) {}
    std::string classname() const override { return "AdaGrad"; }
};

class AdaDelta : public Optimizer {
public:
    explicit AdaDelta(float rho = 0.95f, float epsilon = 1e-6f, float lr = 1.0f)
        : Optimizer({.rule = UpdateRule::adaDelta, .lr = lr, .rho = rho, .epsilon = epsilon}, 2) {}
    std::string classname() const override { return "AdaDelta"; }
};

class RMSProp : public Optimizer {
public:
    explicit RMSProp(float lr = 1e-3f, float rho = 0.9f, float epsilon = 1e-8f)
        : Optimizer({.rule = UpdateRule::rmsProp, .lr = lr, .rho = rho, .epsilon = epsilon}, 1) {}
    std::string classname() const override { return "RMSProp"; }
};

class RMSPropGraves : public Optimizer {
public:
    explicit RMSPropGraves(float lr = 1e-4f, float rho = 0.95f, float momentum = 0.9f, float epsilon = 1e-4f)
        : Optimizer({.rule = UpdateRule::rmsPropGraves, .lr = lr, .momentum = momentum, .rho = rho, .epsilon = epsilon},
                    3) {}
    std::string classname() const override { return "RMSPropGraves"; }
};

class SMORMS3 : public Optimizer {
public:
    explicit SMORMS3(float lr = 1e-3f, float epsilon = 1e-16f)
        : Optimizer({.rule = UpdateRule::smorms3, .lr = lr, .epsilon = epsilon}, 3) {}
    std::string classname() const override { return "SMORMS3"; }
};

/// An optimizer by name ("sgd", "momentum", "nesterov", "adam", "adagrad", "adadelta",
/// "rmsprop", "rmspropgraves", "smorms3", "adamw") with learning rate `lr` (negative: the rule's
/// default). Throws ModuleError listing the names.
std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, float lr = -1.0f);

} // namespace tessera
