"""PuzzleLib's `Cost`: its normalisations, label types and gradient sign over Tessera's costs.

`error, grad = cost(pred, target)` gives PuzzleLib's error and PuzzleLib's gradient
(-dError/dpred, the descent direction that `net.backward` takes here). Tessera computes
both; the namespace rescales them where PuzzleLib averages over every element instead of
over samples, and flips the sign."""

import numpy as np

import tessera as ts

from ._core import ModuleError, negated, tensorOf


class CostError(ModuleError):
    pass


class Cost:
    _make = None

    def __init__(self, tcost=None):
        self._c = tcost if tcost is not None else self._make()
        self.error = None
        self.valError = None
        self.grad = None
        self.batchsize = 0
        self.numOfSamples = 0
        self._accum = 0.0

    # PuzzleLib's normalisation over Tessera's (1 where they agree)
    def _scale(self, pred):
        return 1.0

    def _target(self, pred, target):
        return tensorOf(target)

    def __call__(self, pred, target, queryError=True):
        pred = tensorOf(pred)
        self._check(pred, target)
        error, grad = self._c(pred, self._target(pred, target))
        scale = self._scale(pred)
        self.grad = negated(grad, scale)
        self.error = error * scale
        self.batchsize = pred.shape[0]
        self.numOfSamples += self.batchsize
        self._accum += self.error * self.batchsize
        return (self.error, self.grad) if queryError else self.grad

    def _check(self, pred, target):
        pass

    def getError(self):
        return self.error

    def getMeanError(self):
        return self._accum / self.numOfSamples if self.numOfSamples else 0.0

    def getValError(self):
        return self.valError

    def resetAccumulator(self):
        self._accum, self.numOfSamples, self.batchsize = 0.0, 0, 0
        self._c.resetAccumulator()

    def reset(self):
        self.error, self.valError, self.grad = None, None, None

    def validate(self, pred, target):
        pred = tensorOf(pred)
        self._check(pred, target)
        self.valError = self._validate(pred, target)
        return self.valError

    def _validate(self, pred, target):
        return self._c.validate(pred, self._target(pred, target)) * self._scale(pred)


def _perElement(pred):
    """PuzzleLib's pointwise costs average every element; Tessera's average per-sample sums."""
    return 1.0 / int(np.prod(pred.shape[1:]))


class MSE(Cost):
    """sum (pred - target)^2 / (2 * elements); gradient (target - pred) / elements."""

    _make = ts.MSE
    _scale = staticmethod(_perElement)


class Abs(Cost):
    """sum |pred - target| / elements."""

    _make = ts.Abs
    _scale = staticmethod(_perElement)


class SmoothL1(Cost):
    """Huber with delta 1, averaged over elements."""

    _make = ts.SmoothL1
    _scale = staticmethod(_perElement)


def _intLabels(target):
    t = target.get() if isinstance(target, ts.Tensor) else np.asarray(target)
    if t.dtype != np.int32:
        raise CostError(f"expected int32 labels, got {t.dtype}")
    return t


class BCE(Cost):
    """Binary cross-entropy on logits against int32 labels 0/1 (one per score),
    averaged over elements; validate gives the error rate (score > 0 taken as label 1)."""

    _make = ts.BCE
    _scale = staticmethod(_perElement)

    def _target(self, pred, target):
        labels = _intLabels(target)
        if labels.size != pred.size:
            raise CostError(f"BCE: {labels.size} labels for {pred.size} scores")
        if labels.size and (labels.min() < 0 or labels.max() > 1):
            raise CostError(f"BCE labels verification failed: labels must be 0 or 1, found {labels.min()}..{labels.max()}")
        return tensorOf(labels.reshape(pred.shape).astype(np.float32))

    def _validate(self, pred, target):
        labels = _intLabels(target).reshape(pred.shape)
        return float(np.mean((pred.get() > 0.0) != (labels == 1)))


class Hinge(Cost):
    """max(0, 1 - t p) with int32 labels -1/+1 of the scores' shape, averaged over elements."""

    _make = ts.Hinge
    _scale = staticmethod(_perElement)

    def _target(self, pred, target):
        labels = _intLabels(target)
        if tuple(labels.shape) != tuple(pred.shape):
            raise CostError(f"Hinge: labels of shape {labels.shape} for scores of shape {tuple(pred.shape)}")
        return tensorOf(labels.astype(np.float32))


class CrossEntropy(Cost):
    """Softmax cross-entropy against int32 class labels; validate gives the error rate and
    leaves `mostProb` (the argmax of the scores over the classes)."""

    def __init__(self, maxlabels=None, weights=None):
        w = [] if weights is None else [float(v) for v in np.asarray(
            weights.get() if isinstance(weights, ts.Tensor) else weights).ravel()]
        super().__init__(ts.CrossEntropy(maxlabels=maxlabels or 0, weights=w))
        self.maxlabels, self.weights, self.mostProb = maxlabels, weights, None

    def _validate(self, pred, target):
        error = self._c.validate(pred, tensorOf(target))
        self.mostProb = self._c.mostProb
        return error

    def reset(self):
        super().reset()
        self.mostProb = None


class KLDivergence(Cost):
    """KL(target || softmax(pred)) summed over each sample, averaged over the batch;
    normTarget=True takes the target through a softmax first (Tessera's SoftMax)."""

    def __init__(self, maxlabels=None, normTarget=False):
        super().__init__(ts.KLDivergence())
        self.maxlabels, self.normTarget = maxlabels, normTarget

    def _target(self, pred, target):
        target = tensorOf(target)
        if self.normTarget:
            flat = target.reshape((target.shape[0], int(np.prod(target.shape[1:]))))
            target = ts.SoftMax()(flat).reshape(tuple(target.shape))
        return target


class SVM(Cost):
    """PuzzleLib's one-vs-all SVM against int32 class labels: each score is hinged against
    +1 for its sample's class and -1 for the others, averaged over every score (Tessera's
    Hinge on those targets); validate gives the error rate and leaves `mostProb`. Mode
    "l1" only (PuzzleLib's "l2", the squared hinge, has no Tessera cost)."""

    _make = ts.Hinge
    _scale = staticmethod(_perElement)

    def __init__(self, mode="l1"):
        if mode != "l1":
            raise CostError(f"SVM: mode {mode!r} is not supported by tessera.puzzlelib (only 'l1')")
        super().__init__()
        self.mode, self.mostProb = mode, None

    def _target(self, pred, target):
        labels = _intLabels(target)
        classes = pred.shape[1]
        if labels.size and (labels.min() < 0 or labels.max() >= classes):
            raise CostError(f"SVM labels verification failed: labels must be in 0..{classes - 1}, "
                            f"found {labels.min()}..{labels.max()}")
        onehot = np.moveaxis(np.eye(classes, dtype=np.float32)[labels], -1, 1)
        return tensorOf(2.0 * onehot - 1.0)

    def _validate(self, pred, target):
        labels = _intLabels(target)
        most = np.argmax(pred.get(), axis=1).astype(np.int32)
        self.mostProb = tensorOf(most)
        return float(np.mean(most != labels))


class L1Hinge(Cost):
    """A pair `[x1, x2]` of `[N, D]` embeddings and int32 labels `[N]` (1 similar, 0 not):
    per element, |x1 - x2| for similar pairs and max(0, 1 - |x1 - x2|) for dissimilar ones,
    averaged over every element. That is Tessera's `L1Hinge` (a hinge on the distance of
    each pair) taken with every element as a pair of its own. `validate` gives the error
    rate: a pair is read as similar when its mean distance is at most 1."""

    _make = ts.L1Hinge

    def _pair(self, pred, target):
        if not isinstance(pred, (list, tuple)) or len(pred) != 2:
            raise CostError("L1Hinge takes a pair [x1, x2] of embeddings")
        x1, x2 = tensorOf(pred[0]), tensorOf(pred[1])
        if tuple(x1.shape) != tuple(x2.shape) or len(x1.shape) != 2:
            raise CostError(f"L1Hinge: expected two [N, D] embeddings of one shape, got {tuple(x1.shape)} and "
                            f"{tuple(x2.shape)}")
        labels = _intLabels(target).reshape(-1)
        if labels.size != x1.shape[0]:
            raise CostError(f"L1Hinge: {labels.size} labels for {x1.shape[0]} pairs")
        if labels.size and (labels.min() < 0 or labels.max() > 1):
            raise CostError(f"L1 Hinge labels verification failed: labels must be 0 or 1, found "
                            f"{labels.min()}..{labels.max()}")
        return x1, x2, labels

    def __call__(self, pred, target, queryError=True):
        x1, x2, labels = self._pair(pred, target)
        n, d = x1.shape
        elements = [x.reshape((n * d, 1)) for x in (x1, x2)]
        error, grad = self._c(elements, tensorOf(np.repeat(labels, d).astype(np.int32)))
        self.grad = [g.reshape((n, d)) for g in negated(grad)]
        self.error = error
        self.batchsize = n
        self.numOfSamples += n
        self._accum += error * n
        return (self.error, self.grad) if queryError else self.grad

    def validate(self, pred, target):
        x1, x2, labels = self._pair(pred, target)
        dist = np.abs(x1.get() - x2.get()).mean(axis=1)
        self.valError = float(np.mean((dist <= 1.0) != (labels == 1)))
        return self.valError


class CTC(Cost):
    """PuzzleLib's CTC: `cost([data, datalen], [labels, lengths])` with data [T, N, V]
    (logits, or with `normalized=True` probabilities), datalen [N] int32 steps per sample,
    labels int32 concatenated over the batch and lengths [N] int32 labels per sample. The
    error is the mean over the batch of -log p(labels). Tessera's `CTC` computes it (its
    labels padded to [N, S]; probabilities passed as their logarithms, whose log-softmax they
    are). The gradient is the derivative of that error with respect to `data`, in the descent
    sign: PuzzleLib's is taken with respect to the logits even when `data` are
    probabilities (docs/puzzlelib.md)."""

    def __init__(self, blank, vocabsize=None, normalized=False):
        if vocabsize is not None and not 0 <= blank <= vocabsize:
            raise CostError(f"CTC: blank {blank} is outside 0..{vocabsize}")
        super().__init__(ts.CTC(blank, vocabsize=vocabsize or 0))
        self.blank, self.vocabsize, self.normalized = blank, vocabsize, normalized

    def _inputs(self, pred, target):
        if not isinstance(pred, (list, tuple)) or len(pred) != 2 or not isinstance(target, (list, tuple)) \
                or len(target) != 2:
            raise CostError("CTC takes [data, datalen] and [labels, lengths]")
        data = tensorOf(pred[0]).get()
        datalen, labels, lengths = (_intLabels(v).reshape(-1) for v in (pred[1], target[0], target[1]))
        if data.ndim != 3 or datalen.size != data.shape[1] or lengths.size != data.shape[1]:
            raise CostError(f"CTC: data [T, N, V] with N datalen and N lengths, got data {data.shape}, "
                            f"{datalen.size} datalen, {lengths.size} lengths")
        if lengths.sum() != labels.size:
            raise CostError(f"CTC: lengths sum to {lengths.sum()}, got {labels.size} labels")
        padded = np.zeros((data.shape[1], max(int(lengths.max(initial=0)), 1)), np.int32)
        for n, (start, k) in enumerate(zip(np.cumsum(lengths) - lengths, lengths)):
            padded[n, :k] = labels[start:start + k]
        scores = np.log(data) if self.normalized else data
        return data, scores.astype(np.float32), padded, lengths, datalen

    def __call__(self, pred, target, queryError=True):
        data, scores, padded, lengths, datalen = self._inputs(pred, target)
        error, grad = self._c([tensorOf(scores)], [tensorOf(padded), tensorOf(lengths), tensorOf(datalen)])
        g = grad[0].get()
        if self.normalized:
            # Tessera's gradient is with respect to z = log p through a log-softmax, which adds
            # log sum_v p = 0 per step: d/dp of -log P(labels) is dE/dz / p less that term's 1.
            valid = np.arange(data.shape[0])[:, None] < datalen[None, :]
            g = g / data - valid[:, :, None]
        self.grad = negated(tensorOf(g))
        self.error = error
        n = data.shape[1]
        self.batchsize = n
        self.numOfSamples += n
        self._accum += error * n
        return (self.error, self.grad) if queryError else self.grad

    def validate(self, pred, target):
        _, scores, padded, lengths, datalen = self._inputs(pred, target)
        self.valError = self._c.validate([tensorOf(scores)], [tensorOf(padded), tensorOf(lengths), tensorOf(datalen)])
        return self.valError


class Multi(Cost):
    """One cost per output: `Multi().append(MSE()).append(CrossEntropy())`; errors,
    gradients, mean errors and validation errors are lists, one per cost."""

    def __init__(self):
        self.costs = []
        self.error = self.valError = self.grad = None
        self.batchsize = self.numOfSamples = 0

    def append(self, cost):
        self.costs.append(cost)
        return self

    def __call__(self, preds, targets, queryError=True):
        if len(preds) != len(self.costs) or len(targets) != len(self.costs):
            raise CostError(f"Multi: has {len(self.costs)} costs, got {len(preds)} predictions and "
                            f"{len(targets)} targets")
        results = [c(p, t) for c, p, t in zip(self.costs, preds, targets)]
        self.error = [e for e, _ in results]
        self.grad = [g for _, g in results]
        self.batchsize = self.costs[0].batchsize
        self.numOfSamples += self.batchsize
        return (self.error, self.grad) if queryError else self.grad

    def getMeanError(self):
        return [c.getMeanError() for c in self.costs]

    def resetAccumulator(self):
        self.numOfSamples = self.batchsize = 0
        for c in self.costs:
            c.resetAccumulator()

    def validate(self, preds, targets):
        self.valError = [c.validate(p, t) for c, p, t in zip(self.costs, preds, targets)]
        return self.valError
