#pragma once
/// \file CrossEntropy: softmax cross-entropy over class scores with integer labels, or with
/// probabilities as targets (mixed samples: mixup, CutMix).

#include <vector>

#include "training/Cost.h"

namespace tessera {

struct CrossEntropyOptions {
    int64_t maxlabels = 0;           ///< 0: the score dim decides; else scores must have this many classes
    std::vector<float> weights = {}; ///< per-class weights of the error (empty: all 1)
    float labelSmoothing = 0.0f;     ///< in [0, 1): the target is (1 - e) onehot(y) + e / C
    /// The classes on the scores' last dim: scores [N, ..., C] against labels [N, ...], as a
    /// language model's next-token scores [N, T, V] against ids [N, T] (false: on dim 1).
    bool classesLast = false;
};

/// scores: [N, C, ...] float32 (logits), labels: [N, ...] int32 in [0, C) (with
/// `classesLast`: scores [N, ..., C], labels [N, ...]). The error is
/// the mean over samples (and positions) of weight[y] * -log softmax(scores)[y]; the
/// gradient is weight[y] * (softmax - onehot(y)) / samples. With label smoothing e the
/// target onehot(y) becomes (1 - e) onehot(y) + e / C (PyTorch's label_smoothing; a class
/// weight scales its sample's whole error). `validate` returns the misclassification rate
/// (1 - accuracy). A label outside [0, C) is a ShapeError naming it.
///
/// The target may instead be float32 probabilities of the scores' shape (each sample's
/// over dim 1, as the Loader's mixup and CutMix make them): the error is the mean of
/// -sum_c t_c log softmax(scores)_c (PyTorch's cross_entropy with probabilities), the
/// gradient (softmax - t) / samples, label smoothing turns t into (1 - e) t + e / C, and a
/// hit is a sample whose largest score is its target's largest class. Class weights need
/// integer labels.
class CrossEntropy : public Cost {
public:
    explicit CrossEntropy(const CrossEntropyOptions& options = {});
    std::string classname() const override { return "CrossEntropy"; }
    /// Accuracy of the last validate() batch.
    double lastAccuracy() const { return lastAccuracy_; }

protected:
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;
    double validationError(const Tensors& pred, const Tensors& target) override;

private:
    /// The mean error; fills `grad` when it is defined; sets lastAccuracy_ (with
    /// probabilities as targets: only when `grad` is not defined, in validation).
    double run(const Tensors& pred, const Tensors& target, const Tensor& grad);
    /// The same against probabilities.
    double runSoft(const Tensor& scores, const Tensor& probabilities, const Tensor& grad);
    /// With classesLast: the scores (and probabilities, gradient) as [positions, C] and the
    /// labels as [positions], which the dim-1 code computes the same way.
    Tensors asRows(const Tensors& t, bool labels) const;

    CrossEntropyOptions options_;
    Tensor weights_;
    Tensor smoothed_; ///< the smoothed probabilities, kept from batch to batch
    double lastAccuracy_ = 0.0;
};

} // namespace tessera
