#pragma once
/// \file Cost: the base of every loss. `cost(pred, target)` returns the mean error over the
/// batch and the gradient with respect to the predictions; `validate` returns the
/// validation error (the misclassification rate for classifiers, the cost otherwise).
/// Both accumulate, so `getMeanError` gives the sample-weighted mean since the last reset.

#include <string>

#include "backend/Errors.h"
#include "backend/Tensor.h"

namespace tessera {

/// A cost's value for one batch and its gradient (one tensor per prediction).
struct CostResult {
    double error = 0.0;
    Tensors grad;
};

class Cost {
public:
    virtual ~Cost() = default;
    virtual std::string classname() const = 0;

    /// Mean error over the batch and d error / d pred. Throws ShapeError when predictions
    /// and targets do not fit (shape, dtype, a label out of range), naming the cost.
    CostResult operator()(const Tensor& pred, const Tensor& target);
    CostResult operator()(const Tensors& pred, const Tensors& target);
    /// The validation error of a batch (accumulated like the cost).
    double validate(const Tensor& pred, const Tensor& target);
    double validate(const Tensors& pred, const Tensors& target);
    /// Sample-weighted mean of the errors since the last reset (0 when none).
    double getMeanError() const { return samples_ ? sum_ / static_cast<double>(samples_) : 0.0; }
    void resetAccumulator() {
        sum_ = 0.0;
        samples_ = 0;
    }
    /// The accumulator itself (sum of sample-weighted errors, samples), for checkpoints.
    double errorSum() const { return sum_; }
    int64_t errorSamples() const { return samples_; }
    void setAccumulator(double sum, int64_t samples) {
        sum_ = sum;
        samples_ = samples;
    }

protected:
    /// Throws ShapeError unless the predictions and targets fit.
    virtual void checkInputs(const Tensors& pred, const Tensors& target) const = 0;
    virtual CostResult compute(const Tensors& pred, const Tensors& target) = 0;
    /// Default: the cost itself.
    virtual double validationError(const Tensors& pred, const Tensors& target);
    /// The samples in a batch (what the means weigh by). Default: dim 0 of pred[0].
    virtual int64_t batchSize(const Tensors& pred) const { return pred[0].shape()[0]; }
    /// A ShapeError prefixed with the class name.
    ShapeError error(const std::string& what) const { return ShapeError(classname() + ": " + what); }
    /// Throws unless there is exactly `count` of each, all defined.
    void requireCounts(const Tensors& pred, const Tensors& target, size_t count) const;

private:
    void accumulate(double error, int64_t batch);
    double sum_ = 0.0;
    int64_t samples_ = 0;
};

} // namespace tessera
