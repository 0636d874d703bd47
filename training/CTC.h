#pragma once
/// \file CTC: connectionist temporal classification, the cost of unsegmented label
/// sequences (speech, handwriting) over per-step class scores. PuzzleLib's CTC.

#include <vector>

#include "training/Cost.h"

namespace tessera {

struct CTCOptions {
    int32_t blank = 0;       ///< the class that stands for "no label"
    int64_t vocabsize = 0;   ///< 0: the scores decide; else scores must have this many classes
    bool normalized = false; ///< divide each sample's loss by its label count (at least 1)
    bool batchFirst = false; ///< scores [N, T, V] instead of [T, N, V]
};

/// pred: scores [T, N, V] (logits: a log-softmax over V comes first; [N, T, V] with
/// batchFirst). target: labels [N, S] int32 (sample n's first labelLengths[n] count, the
/// rest is padding), labelLengths [N] int32, and optionally inputLengths [N] int32 (sample
/// n's scores are its first inputLengths[n] steps; default all T). Error: the mean over the
/// batch of -log p(labels | scores), summed over every alignment of the labels to the steps
/// (blanks between and around them, repeats collapsed); with `normalized` each sample's
/// divided by its label count. The gradient is zero past each input's end. `validate`
/// returns the label error rate of greedy decoding: edit distance over label count.
/// Bad targets (a label out of range or the blank, a length out of range, labels that
/// cannot align within their input: each label takes a step and each repeat one more) are
/// ShapeErrors naming the sample.
class CTC : public Cost {
public:
    explicit CTC(const CTCOptions& options = {});
    std::string classname() const override { return "CTC"; }
    /// Best path decoding of scores [T, N, V] ([N, T, V] with batchFirst): per sample, the
    /// argmax class of each of its first inputLengths[n] steps (undefined: all T), repeats
    /// merged and blanks dropped.
    std::vector<std::vector<int32_t>> decodeGreedy(const Tensor& scores, const Tensor& inputLengths = {}) const;

protected:
    void checkInputs(const Tensors& pred, const Tensors& target) const override;
    CostResult compute(const Tensors& pred, const Tensors& target) override;
    double validationError(const Tensors& pred, const Tensors& target) override;
    int64_t batchSize(const Tensors& pred) const override { return pred[0].shape()[options_.batchFirst ? 0 : 1]; }

private:
    /// With batchFirst dims 0 and 1 swapped ([N, T, V] <-> [T, N, V]); else `scores` itself.
    Tensor timeMajor(const Tensor& scores) const;

    CTCOptions options_;
};

} // namespace tessera
