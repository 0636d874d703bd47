#pragma once
/// \file WeightAverage: an exponential moving average of a model's weights (Polyak
/// averaging, as timm's ModelEma keeps). After each optimizer step, update() moves every
/// average towards the model: avg <- d avg + (1 - d) w (d: currentDecay()), for the parameters and the
/// floating attributes (batch norm's running statistics). Evaluating or saving the
/// averaged model is swap(), the work, swap() again; the averages usually score better than
/// the last weights at the end of a run. Checkpoints keep the averages
/// (training/Checkpoint.h), so a resumed run goes on with them.

#include <algorithm>
#include <string>
#include <vector>

#include "modules/Module.h"

namespace tessera {

class WeightAverage {
public:
    /// Starts at `net`'s current values, beside them on their device. ModuleError for a
    /// decay outside [0, 1).
    WeightAverage(Module& net, float decay);
    WeightAverage(const WeightAverage&) = delete;
    WeightAverage& operator=(const WeightAverage&) = delete;

    /// One averaging step, after an optimizer step. ModuleError while swapped.
    void update();
    /// Exchanges the averages with the model's own values (twice: as before).
    void swap();
    /// Whether the model holds the averages now.
    bool swapped() const { return swapped_; }
    float decay() const { return decay_; }
    /// The decay the next update() uses: min(decay, (1 + t) / (10 + t)) after t updates, so
    /// that the first steps do not tie the average to the initial weights (TensorFlow's
    /// ExponentialMovingAverage with num_updates does the same).
    float currentDecay() const {
        const auto t = static_cast<float>(updates_);
        return std::min(decay_, (1.0f + t) / (10.0f + t));
    }
    /// update() calls so far.
    int64_t updates() const { return updates_; }
    /// The averages by the model's dotted names (parameters, then floating attributes).
    NamedTensors state() const;
    /// ModuleError unless `state` is a state() of an average over this model: the same
    /// names (a missing one is named) and shapes. Changes nothing.
    void checkState(const NamedTensors& state) const;
    /// Restores a state() of an average over the same model (checkState's errors; nothing
    /// changes then).
    void setState(const NamedTensors& state, int64_t updates);

private:
    struct Entry {
        std::string name;
        Tensor average; ///< beside the model's tensor, same shape and device
    };
    /// The model's tensors, in the entries' order: looked up at each use, since a layer
    /// may replace a parameter's tensor (a new layout) between steps.
    std::vector<Tensor> live() const;

    Module& net_;
    std::vector<Entry> entries_;
    float decay_;
    int64_t updates_ = 0;
    bool swapped_ = false;
};

/// Runs `work` on the model holding the averages (`average` nullptr: its own values), and
/// swaps them back out after, also when `work` throws: evaluation and saving of the
/// averaged model, as fit and `tessera train` do them.
template <class Work> void withAverages(WeightAverage* average, Work&& work) {
    struct SwapBack {
        WeightAverage* average;
        ~SwapBack() {
            if (average) average->swap();
        }
    };
    if (average) average->swap();
    SwapBack back{average};
    work();
}

} // namespace tessera
