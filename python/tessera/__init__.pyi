"""Type stub of the tessera package, written by tools/python_stubs.py from the built package
(the python.stubs_current test checks that it is current)."""

from typing import Any, Sequence

class BatchInfo:
    """
    Where a handler is: what a callback receives.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    batch: Any
    batches: Any
    epoch: Any
    error: Any
    meanError: Any
    samples: Any
    seconds: Any
    updated: Any
    def __getattr__(self, name: str) -> Any: ...

class Calculator:
    def __init__(self, net: Any, *, batchsize: Any = ..., device: Any = ...) -> None: ...
    def calc(self, data: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class CheckResult:
    """
    What check() found: the input and output shapes and the parameter count.
    """
    def __init__(self, inputs: Any, outputs: Any, params: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class Communicator:
    """
    The ranks of a data-parallel job. Every rank
    makes the same collective calls in the same order.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def allGather(self, value: Any) -> Any: ...
    def allReduceSum(self, tensor: Any) -> Any: ...
    def broadcast(self, tensor: Any, root: Any = ...) -> Any: ...
    def describe(self) -> Any: ...
    device: Any
    rank: Any
    size: Any
    def __getattr__(self, name: str) -> Any: ...

class Cost:
    """
    Base of the costs: cost(pred, target) -> (error, grad).
    """
    def __call__(self, pred: Any, target: Any) -> Any: ...
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    classname: Any
    def getMeanError(self) -> Any: ...
    def resetAccumulator(self) -> Any: ...
    def validate(self, pred: Any, target: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class DataParallel:
    """
    Binds a model, whose optimizer holds its parameters in
    global state (optimizer.setupOn(net, useGlobalState=True)), to a communicator: checks that
    every rank has the same model, copies rank 0's weights to the others, and averages the
    gradients in buckets reduced while backward runs. Give it to Trainer.setDataParallel.
    """
    def __init__(self, net: Any, optimizer: Any, comm: Any, *, bucketBytes: Any = ..., overlap: Any = ..., syncBatchNorm: Any = ...) -> None: ...
    buckets: Any
    exposedSeconds: Any
    rank: Any
    ranks: Any
    reduceSeconds: Any
    def __getattr__(self, name: str) -> Any: ...

class Dataset:
    """
    Samples (an image and a class label) by index; docs/data.md.
    """
    def __getitem__(self, index: Any) -> Any: ...
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def __len__(self) -> Any: ...
    classNames: Any
    classes: Any
    def where(self, index: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class EpochReport:
    """
    One epoch of fit(): accuracies in [0, 1], NaN without that data.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    best: Any
    checkpointed: Any
    epoch: Any
    imagesPerSecond: Any
    learnRate: Any
    loss: Any
    seconds: Any
    testAccuracy: Any
    validationAccuracy: Any
    def __getattr__(self, name: str) -> Any: ...

class Error:
    def __getattr__(self, name: str) -> Any: ...

class FitResult:
    """
    What fit() did.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    average: Any
    bestEpoch: Any
    bestValidationAccuracy: Any
    epochs: Any
    position: Any
    resumed: Any
    stopped: Any
    stoppedEarly: Any
    testAccuracy: Any
    def __getattr__(self, name: str) -> Any: ...

class GradCheckResult:
    """
    What gradcheck found: `ok`, and each checked tensor's largest difference between
        the backward pass and central differences (`errors`: {"input 0": ..., "W": ...}).
    """
    def __init__(self, ok: Any, errors: Any, worst: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class Loader:
    """
    Batches of a data set, made by worker threads while steps run, in the same
    order for any number of workers. loader.epoch(e) iterates over (images, labels) batches.
    mixup=A and cutmix=A (Beta alphas; 0: off) mix each training batch with itself reversed; its
    labels are then float32 probabilities [B, classes] (classes: 0 for the data set's, or a
    model's wider score count), which CrossEntropy takes as targets. scaledDecode=True decodes
    JPEGs at M/8 of their size where the first transform (a resize, a random-resized crop)
    shrinks them anyway: several times faster on large photos; False decodes every image whole.
    balanced=True draws each epoch's samples with replacement, every class equally likely.
    """
    def __init__(self, data: Any, transforms: Any = ..., *, batchsize: Any = ..., shuffle: Any = ..., seed: Any = ..., train: Any = ..., workers: Any = ..., prefetch: Any = ..., flatten: Any = ..., pinned: Any = ..., rank: Any = ..., ranks: Any = ..., mixup: Any = ..., cutmix: Any = ..., classes: Any = ..., scaledDecode: Any = ..., balanced: Any = ...) -> None: ...
    def __len__(self) -> Any: ...
    def epoch(self, epoch: Any = ..., first: Any = ...) -> Any: ...
    def next(self) -> Any: ...
    sampleShape: Any
    samples: Any
    def start(self, epoch: Any, first: Any = ...) -> Any: ...
    waitingSeconds: Any
    def __getattr__(self, name: str) -> Any: ...

class Module:
    """
    Base of every layer and container.

    Layers are made by class name with keyword arguments, as tessera.Conv2D(inmaps=3,
    outmaps=16, size=3, pad=1) does; Module(classname, {arguments}) is the general form.
    """
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def backward(self, grad: Any, updParamGrads: Any = ..., updGrad: Any = ..., scale: Any = ..., momentum: Any = ...) -> Any: ...
    def blueprint(self) -> Any: ...
    def calcMode(self, dtype: Any) -> Any: ...
    def children(self) -> Any: ...
    classname: Any
    computeDType: Any
    def copy(self, *args: Any, **kwargs: Any) -> Any: ...
    data: Any
    def dataShapeFrom(self, shape: Any) -> Any: ...
    device: Any
    def evalMode(self) -> Any: ...
    def getVar(self, name: Any) -> Any: ...
    grad: Any
    def gradShapeFrom(self, shape: Any) -> Any: ...
    inData: Any
    def load(self, path: Any, strict: Any = ...) -> Any: ...
    name: Any
    def namedAttrs(self) -> Any: ...
    def namedParams(self) -> Any: ...
    def node(self, *args: Any, name: Any = ...) -> Any: ...
    def numOfParams(self) -> Any: ...
    def packWeights(self, on: Any = ...) -> Any: ...
    def paramSize(self) -> Any: ...
    def reset(self) -> Any: ...
    def save(self, path: Any, dtype: Any = ..., blueprint: Any = ..., inputs: Any = ..., classes: Any = ..., transforms: Any = ...) -> Any: ...
    saved: Any
    def setVar(self, name: Any, var: Any) -> Any: ...
    def to(self, device: Any) -> Any: ...
    train: Any
    def trainMode(self) -> Any: ...
    def updateParams(self, lr: Any) -> Any: ...
    weightsPacked: Any
    def zeroGradParams(self) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Node:
    """
    A module wrapped as a vertex of a graph (PuzzleLib's Node).
    """
    def __init__(self, mod: Any, parents: Any = ..., name: Any = ...) -> None: ...
    def addBackwards(self, nodes: Any) -> Any: ...
    def backward(self, grad: Any, updParamGrads: Any = ..., updGrad: Any = ..., scale: Any = ..., momentum: Any = ...) -> Any: ...
    bwds: Any
    data: Any
    def forward(self, data: Any) -> Any: ...
    fwds: Any
    grad: Any
    module: Any
    name: Any
    def __getattr__(self, name: str) -> Any: ...

class Optimizer:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    classname: Any
    def enableLossScaling(self, initialScale: Any = ..., growthFactor: Any = ..., growthInterval: Any = ..., backoffFactor: Any = ...) -> Any: ...
    gradientClipping: Any
    lastGradientNorm: Any
    learnRate: Any
    lossScale: Any
    def setGradientClipping(self, maxNorm: Any) -> Any: ...
    def setLearnRateFactor(self, name: Any, factor: Any) -> Any: ...
    def setState(self, state: Any) -> Any: ...
    def setWeightDecay(self, decay: Any, applies: Any = ...) -> Any: ...
    def setupOn(self, net: Any, useGlobalState: Any = ...) -> Any: ...
    def state(self) -> Any: ...
    steps: Any
    def update(self) -> Any: ...
    def zeroGradParams(self) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Profile:
    """
    Where a step's time goes, layer by layer (tessera.profile).
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    backward: Any
    def csv(self) -> Any: ...
    forward: Any
    kept: Any
    layerSamples: Any
    plainStep: Any
    rows: Any
    step: Any
    stepSamples: Any
    steps: Any
    def table(self, depth: Any = ..., byTime: Any = ...) -> Any: ...
    train: Any
    update: Any
    def __getattr__(self, name: str) -> Any: ...

class Schedule:
    """
    A learning rate per epoch: schedule.at(epoch).
    """
    def __call__(self, epoch: Any) -> Any: ...
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def at(self, epoch: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Summary:
    """
    The rows of summary(): a list of SummaryRow (name, module, inputs, outputs,
        connectedTo, trainable, nonTrainable, flops, activationBytes, attributes). str() is
        the table `tessera summary` prints; notebooks show an HTML table.
    """
    def __init__(self, rows: Any, connections: Any) -> None: ...
    def dot(self, title: Any = ...) -> Any: ...
    flops: Any
    trainable: Any
    def __getattr__(self, name: str) -> Any: ...

class SummaryRow:
    """
    One layer of a summary.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    activationBytes: Any
    attributes: Any
    connectedTo: Any
    flops: Any
    inputs: Any
    module: Any
    name: Any
    nonTrainable: Any
    outputs: Any
    trainable: Any
    def __getattr__(self, name: str) -> Any: ...

class Tensor:
    """
    A Tessera tensor: storage on a device, a shape, a dtype and a layout.

    Make one with tessera.tensor(array), tessera.zeros(shape), tessera.randn(shape), ...;
    numpy() gives its elements back as an array.
    """
    def __getitem__(self, key: Any) -> Any: ...
    def __init__(self, data: Any) -> None: ...
    def __len__(self) -> Any: ...
    def astype(self, dtype: Any) -> Any: ...
    def clone(self) -> Any: ...
    device: Any
    dtype: Any
    def fill(self, value: Any) -> Any: ...
    def get(self) -> Any: ...
    layout: Any
    nbytes: Any
    ndim: Any
    def numpy(self, copy: Any = ...) -> Any: ...
    def plain(self) -> Any: ...
    def ravel(self) -> Any: ...
    def reshape(self, arg0: Any) -> Any: ...
    def set(self, ary: Any) -> Any: ...
    shape: Any
    def sharesMemory(self, other: Any) -> Any: ...
    size: Any
    def to(self, device: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class TextCorpus:
    """
    Byte ids of text files (readTextCorpus): train and heldOut as int32 arrays.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    dropped: Any
    entries: Any
    files: Any
    heldOut: Any
    train: Any
    what: Any
    def __getattr__(self, name: str) -> Any: ...

class Trainer:
    """
    One training pass per train() call: for each batch, forward, cost, zeroed
    gradients, backward and the optimizer's update, with the GIL released.
    """
    def __init__(self, net: Any, cost: Any, optimizer: Any, *, batchsize: Any = ..., shuffle: Any = ..., seed: Any = ..., progress: Any = ..., device: Any = ..., accumulate: Any = ...) -> None: ...
    def clearStop(self) -> Any: ...
    epoch: Any
    epochSeconds: Any
    onBatchFinish: Any
    onEpochFinish: Any
    position: Any
    def requestStop(self) -> Any: ...
    samplesPerSecond: Any
    def setDataParallel(self, parallel: Any) -> Any: ...
    def setWeightAverage(self, average: Any) -> Any: ...
    stopRequested: Any
    def train(self, data: Any, targets: Any = ...) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Transforms:
    """
    Seeded image transforms, applied in order:
    Transforms("crop:32:4,flip,normalize:cifar10") or Transforms().randomCrop(32, 32, 4).flip().
    """
    def __init__(self, spec: Any = ...) -> None: ...
    def __len__(self) -> Any: ...
    def affine(self, degrees: Any, translate: Any = ..., scale: Any = ..., shear: Any = ...) -> Any: ...
    def apply(self, image: Any, train: Any = ..., channels: Any = ..., seed: Any = ..., epoch: Any = ..., index: Any = ...) -> Any: ...
    @staticmethod
    def augmentMagnitudes(policy: Any, op: Any, height: Any, width: Any) -> Any: ...
    @staticmethod
    def augmentOp(image: Any, op: Any, magnitude: Any = ...) -> Any: ...
    def centerCrop(self, height: Any, width: Any) -> Any: ...
    def erase(self, p: Any = ..., minScale: Any = ..., maxScale: Any = ...) -> Any: ...
    def flip(self, p: Any = ...) -> Any: ...
    def jitter(self, brightness: Any, contrast: Any = ..., saturation: Any = ..., hue: Any = ...) -> Any: ...
    def normalize(self, mean: Any, std: Any) -> Any: ...
    def randAugment(self, ops: Any = ..., magnitude: Any = ...) -> Any: ...
    def randomCrop(self, height: Any, width: Any, pad: Any = ...) -> Any: ...
    def randomResizedCrop(self, height: Any, width: Any, scale: Any = ...) -> Any: ...
    def resize(self, height: Any, width: Any = ...) -> Any: ...
    def rotate(self, degrees: Any) -> Any: ...
    def trivialAugment(self) -> Any: ...
    @staticmethod
    def warp(image: Any, degrees: Any = ..., translate: Any = ..., scale: Any = ..., shear: Any = ...) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Validator:
    def __init__(self, net: Any, cost: Any, *, batchsize: Any = ..., progress: Any = ..., device: Any = ...) -> None: ...
    errors: Any
    def validate(self, data: Any, targets: Any = ...) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Variable:
    """
    A trained parameter: its value and its accumulated gradient.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    data: Any
    grad: Any
    def __getattr__(self, name: str) -> Any: ...

class WeightAverage:
    """
    An exponential moving average of a model's weights: update() after each step; swap() to evaluate or save the averaged model, swap() again to go on training.
    """
    def __init__(self, net: Any, decay: Any = ...) -> None: ...
    currentDecay: Any
    decay: Any
    def swap(self) -> Any: ...
    swapped: Any
    def update(self) -> Any: ...
    updates: Any
    def __getattr__(self, name: str) -> Any: ...

class Abs(Cost):
    def __init__(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class AdaDelta(Optimizer):
    def __init__(self, rho: Any = ..., epsilon: Any = ..., learnRate: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class AdaGrad(Optimizer):
    def __init__(self, learnRate: Any = ..., epsilon: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class Adam(Optimizer):
    def __init__(self, alpha: Any = ..., beta1: Any = ..., beta2: Any = ..., epsilon: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class AdamW(Optimizer):
    def __init__(self, alpha: Any = ..., beta1: Any = ..., beta2: Any = ..., epsilon: Any = ..., weightDecay: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class BCE(Cost):
    def __init__(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class BackendError(Error):
    def __getattr__(self, name: str) -> Any: ...

class CTC(Cost):
    def __init__(self, blank: Any = ..., vocabsize: Any = ..., normalized: Any = ..., batchFirst: Any = ...) -> None: ...
    def decodeGreedy(self, scores: Any, lengths: Any = ...) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Container(Module):
    def __getitem__(self, key: Any) -> Any: ...
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def __iter__(self) -> Any: ...
    def __len__(self) -> Any: ...
    def childName(self, index: Any) -> Any: ...
    def getByName(self, name: Any) -> Any: ...
    releaseInBackward: Any
    def replace(self, name: Any, module: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class ContainerError(Error):
    def __getattr__(self, name: str) -> Any: ...

class CosineSchedule(Schedule):
    def __init__(self, base: Any, epochs: Any, min: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class ExponentialSchedule(Schedule):
    def __init__(self, base: Any, gamma: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class GraphError(Error):
    def __getattr__(self, name: str) -> Any: ...

class Hinge(Cost):
    def __init__(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class IoError(Error):
    def __getattr__(self, name: str) -> Any: ...

class KLDivergence(Cost):
    def __init__(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class L1Hinge(Cost):
    def __init__(self, margin: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class MSE(Cost):
    def __init__(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class ModuleError(Error):
    def __getattr__(self, name: str) -> Any: ...

class MomentumSGD(Optimizer):
    def __init__(self, learnRate: Any = ..., momRate: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class Multi(Cost):
    def __init__(self, costs: Any) -> None: ...
    costs: Any
    errors: Any
    validationErrors: Any
    def __getattr__(self, name: str) -> Any: ...

class NesterovSGD(Optimizer):
    def __init__(self, learnRate: Any = ..., momRate: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class NumericsError(Error):
    def __getattr__(self, name: str) -> Any: ...

class ProfileRow(SummaryRow):
    """
    One layer of a profile: a summary row with its times.
    """
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    backward: Any
    forward: Any
    fused: Any
    kept: Any
    def __getattr__(self, name: str) -> Any: ...

class RMSProp(Optimizer):
    def __init__(self, learnRate: Any = ..., rho: Any = ..., epsilon: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class RMSPropGraves(Optimizer):
    def __init__(self, learnRate: Any = ..., rho: Any = ..., momRate: Any = ..., epsilon: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class SGD(Optimizer):
    def __init__(self, learnRate: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class SMORMS3(Optimizer):
    def __init__(self, learnRate: Any = ..., epsilon: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class SVM(Cost):
    def __init__(self, mode: Any = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class SmoothL1(Cost):
    def __init__(self) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class StepSchedule(Schedule):
    def __init__(self, base: Any, stepSize: Any, gamma: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class CrossEntropy:
    """
    Softmax cross-entropy of scores [N, C, ...] against int32 labels [N, ...] or float32
        probabilities of the scores' shape (mixup, CutMix). `weights`: one per class;
        labelSmoothing e makes the target (1 - e) target + e / C; classesLast: scores
        [N, ..., C] against labels [N, ...] (a language model's [N, T, V] and [N, T]). After
        `validate`, `mostProb` holds the most likely class of each sample (and position).
    """
    def __init__(self, maxlabels: Any = ..., weights: Any = ..., labelSmoothing: Any = ..., classesLast: Any = ...) -> None: ...
    def validate(self, pred: Any, target: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Graph(Container):
    def __init__(self, inputs: Any, outputs: Any, name: Any = ...) -> None: ...
    def dot(self, g: Any) -> Any: ...
    def getNodeByName(self, name: Any) -> Any: ...
    inputs: Any
    def nodes(self) -> Any: ...
    outputs: Any
    def __getattr__(self, name: str) -> Any: ...

class Parallel(Container):
    def __init__(self, name: Any = ...) -> None: ...
    def append(self, mod: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class Sequential(Container):
    def __init__(self, name: Any = ...) -> None: ...
    def append(self, mod: Any) -> Any: ...
    def extend(self, mods: Any) -> Any: ...
    def insert(self, pos: Any, mod: Any) -> Any: ...
    def pop(self, pos: Any = ...) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...

class ShapeError(ModuleError):
    def __getattr__(self, name: str) -> Any: ...

class Activation(Module):
    """
    Activation(activation='relu', slope=0.01, alpha=1.0, min=0.0, max=6.0, hardSlope=0.16666666666666666, hardOffset=0.5, name=None)

    Tessera's Activation (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        activation: the function: sigmoid, tanh, relu, leakyRelu, elu, softPlus, clip, gelu, hardSigmoid, hardSwish, silu, mish, exp, log, abs, sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, erf or sign
        slope: leakyRelu's slope for negative inputs
        alpha: elu's alpha
        min: clip's lower bound
        max: clip's upper bound
        hardSlope: hardSigmoid's slope
        hardOffset: hardSigmoid's offset
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, activation: str = ..., slope: float = ..., alpha: float = ..., min: float = ..., max: float = ..., hardSlope: float = ..., hardOffset: float = ..., name: str | None = ...) -> None: ...

class Add(Module):
    """
    Add(coefficients=None, name=None)

    Tessera's Add (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        coefficients: one factor per input (None: all 1): a weighted sum
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, coefficients: Any = ..., name: str | None = ...) -> None: ...

class ArgMax(Module):
    """
    ArgMax(axis=1, keepDims=True, lastIndex=False, name=None)

    Tessera's ArgMax (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim it works along (negative: from the end)
        keepDims: whether the reduced dims stay as size 1
        lastIndex: ties go to the last index (ONNX's select_last_index), not the first
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., keepDims: bool = ..., lastIndex: bool = ..., name: str | None = ...) -> None: ...

class ArgMin(Module):
    """
    ArgMin(axis=1, keepDims=True, lastIndex=False, name=None)

    Tessera's ArgMin (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim it works along (negative: from the end)
        keepDims: whether the reduced dims stay as size 1
        lastIndex: ties go to the last index (ONNX's select_last_index), not the first
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., keepDims: bool = ..., lastIndex: bool = ..., name: str | None = ...) -> None: ...

class AvgPool1D(Module):
    """
    AvgPool1D(size=2, stride=None, pad=0, includePad=True, name=None)

    Tessera's AvgPool1D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        includePad: average pooling: padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ..., pad: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class AvgPool2D(Module):
    """
    AvgPool2D(size=2, stride=None, pad=0, includePad=True, name=None)

    Tessera's AvgPool2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        includePad: average pooling: padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ..., pad: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class AvgPool3D(Module):
    """
    AvgPool3D(size=2, stride=None, pad=0, includePad=True, name=None)

    Tessera's AvgPool3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        includePad: average pooling: padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ..., pad: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class BatchNorm(Module):
    """
    BatchNorm(maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None)

    Tessera's BatchNorm (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        maps: channels (dim 1) the layer normalises, each with its own statistics and parameters
        epsilon: added to the variance before the square root
        initFactor: running averages' factor for the first batches (the weight of the new batch)
        minFactor: the running averages' factor after many batches (momentum 1 - minFactor)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, maps: Any, epsilon: float = ..., initFactor: float = ..., minFactor: float = ..., name: str | None = ...) -> None: ...

class BatchNorm1D(Module):
    """
    BatchNorm1D(maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None)

    Tessera's BatchNorm1D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        maps: channels (dim 1) the layer normalises, each with its own statistics and parameters
        epsilon: added to the variance before the square root
        initFactor: running averages' factor for the first batches (the weight of the new batch)
        minFactor: the running averages' factor after many batches (momentum 1 - minFactor)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, maps: Any, epsilon: float = ..., initFactor: float = ..., minFactor: float = ..., name: str | None = ...) -> None: ...

class BatchNorm2D(Module):
    """
    BatchNorm2D(maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None)

    Tessera's BatchNorm2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        maps: channels (dim 1) the layer normalises, each with its own statistics and parameters
        epsilon: added to the variance before the square root
        initFactor: running averages' factor for the first batches (the weight of the new batch)
        minFactor: the running averages' factor after many batches (momentum 1 - minFactor)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, maps: Any, epsilon: float = ..., initFactor: float = ..., minFactor: float = ..., name: str | None = ...) -> None: ...

class BatchNorm3D(Module):
    """
    BatchNorm3D(maps, epsilon=1e-05, initFactor=1.0, minFactor=0.1, name=None)

    Tessera's BatchNorm3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        maps: channels (dim 1) the layer normalises, each with its own statistics and parameters
        epsilon: added to the variance before the square root
        initFactor: running averages' factor for the first batches (the weight of the new batch)
        minFactor: the running averages' factor after many batches (momentum 1 - minFactor)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, maps: Any, epsilon: float = ..., initFactor: float = ..., minFactor: float = ..., name: str | None = ...) -> None: ...

class Cast(Module):
    """
    Cast(intype='float32', outtype='float32', name=None)

    Tessera's Cast (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        intype: the input's dtype: 'float32', 'int32', 'bfloat16' or 'float16'
        outtype: the output's dtype: 'float32', 'int32', 'bfloat16' or 'float16'
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, intype: str = ..., outtype: str = ..., name: str | None = ...) -> None: ...

class Concat(Module):
    """
    Concat(axis=1, name=None)

    Tessera's Concat (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim joined along
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., name: str | None = ...) -> None: ...

class Conv1D(Module):
    """
    Conv1D(inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, initscheme='xavier', groups=1)

    Tessera's Conv1D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        inmaps: input channels
        outmaps: output channels
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        dilation: spacing of the kernel's taps; 1: dense (one number for every spatial dim, or one per dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        groups: groups of channels convolved separately (inmaps and outmaps divide by it)
    """
    def __init__(self, inmaps: Any, outmaps: Any, size: int | Sequence[int], stride: int | Sequence[int] = ..., pad: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., wscale: float = ..., useBias: bool = ..., name: str | None = ..., initscheme: str = ..., groups: int = ...) -> None: ...

class Conv2D(Module):
    """
    Conv2D(inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, initscheme='xavier', groups=1)

    Tessera's Conv2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        inmaps: input channels
        outmaps: output channels
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        dilation: spacing of the kernel's taps; 1: dense (one number for every spatial dim, or one per dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        groups: groups of channels convolved separately (inmaps and outmaps divide by it)
    """
    def __init__(self, inmaps: Any, outmaps: Any, size: int | Sequence[int], stride: int | Sequence[int] = ..., pad: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., wscale: float = ..., useBias: bool = ..., name: str | None = ..., initscheme: str = ..., groups: int = ...) -> None: ...

class Conv3D(Module):
    """
    Conv3D(inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, initscheme='xavier', groups=1)

    Tessera's Conv3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        inmaps: input channels
        outmaps: output channels
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        dilation: spacing of the kernel's taps; 1: dense (one number for every spatial dim, or one per dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        groups: groups of channels convolved separately (inmaps and outmaps divide by it)
    """
    def __init__(self, inmaps: Any, outmaps: Any, size: int | Sequence[int], stride: int | Sequence[int] = ..., pad: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., wscale: float = ..., useBias: bool = ..., name: str | None = ..., initscheme: str = ..., groups: int = ...) -> None: ...

class CrossMapLRN(Module):
    """
    CrossMapLRN(N=5, alpha=0.0001, beta=0.75, K=2.0, name=None)

    Tessera's CrossMapLRN (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        N: the window: neighbouring channels (CrossMapLRN) or N x N pixels
        alpha: the scale of the sum of squares in the denominator
        beta: the denominator's exponent
        K: added in the denominator before the exponent
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, N: int = ..., alpha: float = ..., beta: float = ..., K: float = ..., name: str | None = ...) -> None: ...

class CumSum(Module):
    """
    CumSum(axis=0, exclusive=False, reverse=False, name=None)

    Tessera's CumSum (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim the running sums run along
        exclusive: each sum leaves out its own position
        reverse: the sums run from the end of the axis
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., exclusive: bool = ..., reverse: bool = ..., name: str | None = ...) -> None: ...

class Deconv1D(Module):
    """
    Deconv1D(inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, initscheme='xavier', groups=1, postpad=0)

    Tessera's Deconv1D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        inmaps: input channels
        outmaps: output channels
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        dilation: spacing of the kernel's taps; 1: dense (one number for every spatial dim, or one per dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        groups: groups of channels convolved separately (inmaps and outmaps divide by it)
        postpad: outputs added at the end of each spatial dim, below the stride (PyTorch's output_padding) (one number for every spatial dim, or one per dim)
    """
    def __init__(self, inmaps: Any, outmaps: Any, size: int | Sequence[int], stride: int | Sequence[int] = ..., pad: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., wscale: float = ..., useBias: bool = ..., name: str | None = ..., initscheme: str = ..., groups: int = ..., postpad: int | Sequence[int] = ...) -> None: ...

class Deconv2D(Module):
    """
    Deconv2D(inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, initscheme='xavier', groups=1, postpad=0)

    Tessera's Deconv2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        inmaps: input channels
        outmaps: output channels
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        dilation: spacing of the kernel's taps; 1: dense (one number for every spatial dim, or one per dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        groups: groups of channels convolved separately (inmaps and outmaps divide by it)
        postpad: outputs added at the end of each spatial dim, below the stride (PyTorch's output_padding) (one number for every spatial dim, or one per dim)
    """
    def __init__(self, inmaps: Any, outmaps: Any, size: int | Sequence[int], stride: int | Sequence[int] = ..., pad: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., wscale: float = ..., useBias: bool = ..., name: str | None = ..., initscheme: str = ..., groups: int = ..., postpad: int | Sequence[int] = ...) -> None: ...

class Deconv3D(Module):
    """
    Deconv3D(inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, initscheme='xavier', groups=1, postpad=0)

    Tessera's Deconv3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        inmaps: input channels
        outmaps: output channels
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        dilation: spacing of the kernel's taps; 1: dense (one number for every spatial dim, or one per dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        groups: groups of channels convolved separately (inmaps and outmaps divide by it)
        postpad: outputs added at the end of each spatial dim, below the stride (PyTorch's output_padding) (one number for every spatial dim, or one per dim)
    """
    def __init__(self, inmaps: Any, outmaps: Any, size: int | Sequence[int], stride: int | Sequence[int] = ..., pad: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., wscale: float = ..., useBias: bool = ..., name: str | None = ..., initscheme: str = ..., groups: int = ..., postpad: int | Sequence[int] = ...) -> None: ...

class DepthConcat(Module):
    """
    DepthConcat(name=None)

    Tessera's DepthConcat (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class Div(Module):
    """
    Div(name=None)

    Tessera's Div (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class DropPath(Module):
    """
    DropPath(p=0.1, name=None)

    Tessera's DropPath (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        p: the probability of dropping
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, p: float = ..., name: str | None = ...) -> None: ...

class Dropout(Module):
    """
    Dropout(p=0.5, name=None)

    Tessera's Dropout (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        p: the probability of dropping
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, p: float = ..., name: str | None = ...) -> None: ...

class Dropout2D(Module):
    """
    Dropout2D(p=0.5, name=None)

    Tessera's Dropout2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        p: the probability of dropping
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, p: float = ..., name: str | None = ...) -> None: ...

class Embedder(Module):
    """
    Embedder(vocabulary, sentlength, embsize, initscheme='uniform', wscale=1.0, learnable=True, name=None, paddingIdx=None)

    Tessera's Embedder (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        vocabulary: how many token ids (0 .. vocabulary - 1)
        sentlength: tokens per sample
        embsize: features per token
        initscheme: how the table is drawn: 'uniform', 'gaussian', 'xavier', 'xavier_normal', 'he' or 'none' (zeros)
        wscale: factor on the drawn weights
        learnable: whether the table is trained
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        paddingIdx: an id whose row starts at zero and never learns (PyTorch's padding_idx); None: none
    """
    def __init__(self, vocabulary: Any, sentlength: Any, embsize: Any, initscheme: str = ..., wscale: float = ..., learnable: bool = ..., name: str | None = ..., paddingIdx: Any = ...) -> None: ...

class Flatten(Module):
    """
    Flatten(name=None)

    Tessera's Flatten (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class GatherElements(Module):
    """
    GatherElements(axis=0, name=None)

    Tessera's GatherElements (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim the positions index
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., name: str | None = ...) -> None: ...

class Gelu(Module):
    """
    Gelu(name=None)

    Tessera's Gelu (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class GlobalAvgPool(Module):
    """
    GlobalAvgPool(name=None)

    Tessera's GlobalAvgPool (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class Glue(Module):
    """
    Glue(kind, name=None)

    Tessera's Glue (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        kind: the registered Glue kind (registerGlue) whose functions the layer runs
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, kind: Any, name: str | None = ...) -> None: ...

class GridSample(Module):
    """
    GridSample(mode='bilinear', padding='zeros', alignCorners=False, name=None)

    Tessera's GridSample (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        mode: 'bilinear' (the 2 x 2 pixels around), 'nearest' (halves to even) or 'bicubic' (the 4 x 4 around, Keys' a = -0.75)
        padding: what a position outside the image reads: 'zeros', 'border' (the nearest edge pixel) or 'reflection' (the image mirrored)
        alignCorners: -1 and 1 are the corner pixels' centres (PyTorch's align_corners=True); False: the image's outer edges
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, mode: str = ..., padding: str = ..., alignCorners: bool = ..., name: str | None = ...) -> None: ...

class GroupLinear(Module):
    """
    GroupLinear(groups, insize, outsize, batchDim=0, useBias=True, initscheme='xavier', wscale=1.0, name=None, inmode='full', wmode='full')

    Tessera's GroupLinear (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        groups: groups (dim 1, or dim 0 with batchDim 1), each with its own weight
        insize: input features (the last dim)
        outsize: output features (the last dim)
        batchDim: 0: data [N, groups, insize]; 1: [groups, N, insize]
        useBias: whether the layer adds a learned bias
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        wscale: factor on the drawn weights
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        inmode: 'full': a data group per weight group; 'one': one data group [N, 1, insize] for all
        wmode: 'full': a weight per group; 'one': one weight [1, insize, outsize] shared by all
    """
    def __init__(self, groups: Any, insize: Any, outsize: Any, batchDim: int = ..., useBias: bool = ..., initscheme: str = ..., wscale: float = ..., name: str | None = ..., inmode: str = ..., wmode: str = ...) -> None: ...

class GroupNorm(Module):
    """
    GroupNorm(groups, maps, epsilon=1e-05, affine=True, name=None)

    Tessera's GroupNorm (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        groups: groups the maps are split into, each normalised together
        maps: channels (dim 1), split into the groups; each has its own scale and shift
        epsilon: added to the variance before the square root
        affine: whether the layer learns a scale (and shift) after normalising
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, groups: Any, maps: Any, epsilon: float = ..., affine: bool = ..., name: str | None = ...) -> None: ...

class Identity(Module):
    """
    Identity(name=None)

    Tessera's Identity (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class InstanceNorm2D(Module):
    """
    InstanceNorm2D(maps, epsilon=1e-05, name=None)

    Tessera's InstanceNorm2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        maps: channels (dim 1) the layer normalises, each with its own statistics and parameters
        epsilon: added to the variance before the square root
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, maps: Any, epsilon: float = ..., name: str | None = ...) -> None: ...

class KMaxPool(Module):
    """
    KMaxPool(topk, axis, name=None)

    Tessera's KMaxPool (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        topk: how many of the largest values it keeps
        axis: the dim it keeps the largest values of
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, topk: Any, axis: int | Sequence[int], name: str | None = ...) -> None: ...

class LCN(Module):
    """
    LCN(N=5, alpha=0.0001, beta=0.75, K=2.0, includePad=True, name=None)

    Tessera's LCN (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        N: the N x N window
        alpha: the scale of the sum of squared deviations
        beta: the denominator's exponent
        K: added in the denominator before the exponent
        includePad: whether padded positions count in the window's mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, N: int = ..., alpha: float = ..., beta: float = ..., K: float = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class LayerNorm(Module):
    """
    LayerNorm(shape, epsilon=1e-05, affine=True, useBias=True, name=None)

    Tessera's LayerNorm (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        shape: the trailing dims normalised together (PyTorch's normalized_shape)
        epsilon: added to the variance before the square root
        affine: whether the layer learns a scale (and shift) after normalising
        useBias: whether the affine part has a shift
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, shape: int | Sequence[int], epsilon: float = ..., affine: bool = ..., useBias: bool = ..., name: str | None = ...) -> None: ...

class Linear(Module):
    """
    Linear(insize, outsize, wscale=1.0, useBias=True, initscheme='xavier', transposed=False, name=None)

    Tessera's Linear (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        insize: input features (the last dim)
        outsize: output features (the last dim)
        wscale: factor on the drawn weights
        useBias: whether the layer adds a learned bias
        initscheme: how the weights are drawn: 'xavier' (= 'xavier_uniform'), 'xavier_normal', 'he', 'gaussian', 'uniform' or 'none' (zeros)
        transposed: W stored [outsize, insize], PyTorch's layout and an Embedder's table's (a head tied to it with setVar); False: [insize, outsize]
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, insize: Any, outsize: Any, wscale: float = ..., useBias: bool = ..., initscheme: str = ..., transposed: bool = ..., name: str | None = ...) -> None: ...

class LogSoftMax(Module):
    """
    LogSoftMax(axis=1, name=None)

    Tessera's LogSoftMax (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim normalised over
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., name: str | None = ...) -> None: ...

class MapLRN(Module):
    """
    MapLRN(N=5, alpha=0.0001, beta=0.75, K=2.0, name=None)

    Tessera's MapLRN (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        N: the window: neighbouring channels (CrossMapLRN) or N x N pixels
        alpha: the scale of the sum of squares in the denominator
        beta: the denominator's exponent
        K: added in the denominator before the exponent
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, N: int = ..., alpha: float = ..., beta: float = ..., K: float = ..., name: str | None = ...) -> None: ...

class MatMul(Module):
    """
    MatMul(transB=False, alpha=1.0, name=None)

    Tessera's MatMul (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        transB: whether the second input is transposed (its last two dims)
        alpha: the factor on the product
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, transB: bool = ..., alpha: float = ..., name: str | None = ...) -> None: ...

class MaxPool1D(Module):
    """
    MaxPool1D(size=2, stride=None, pad=0, includePad=True, name=None)

    Tessera's MaxPool1D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        includePad: average pooling: padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ..., pad: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class MaxPool2D(Module):
    """
    MaxPool2D(size=2, stride=None, pad=0, includePad=True, name=None)

    Tessera's MaxPool2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        includePad: average pooling: padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ..., pad: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class MaxPool3D(Module):
    """
    MaxPool3D(size=2, stride=None, pad=0, includePad=True, name=None)

    Tessera's MaxPool3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: kernel or window size (one number for every spatial dim, or one per dim)
        stride: step between windows (one number for every spatial dim, or one per dim)
        pad: zero padding on both sides of each spatial dim (one number for every spatial dim, or one per dim)
        includePad: average pooling: padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ..., pad: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class MoveAxis(Module):
    """
    MoveAxis(src, dst, name=None)

    Tessera's MoveAxis (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        src: the dim that moves
        dst: where it goes
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, src: Any, dst: Any, name: str | None = ...) -> None: ...

class Mul(Module):
    """
    Mul(name=None)

    Tessera's Mul (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class MulAddConst(Module):
    """
    MulAddConst(a=1.0, b=0.0, name=None, aShape=None, bShape=None)

    Tessera's MulAddConst (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        a: the factor: a number, or a tensor that broadcasts to the input
        b: the term added: a number, or a tensor that broadcasts to the input
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
        aShape: the shape of a tensor factor (model files; None for a number)
        bShape: the shape of a tensor term (model files; None for a number)
    """
    def __init__(self, a: float = ..., b: float = ..., name: str | None = ..., aShape: Any = ..., bShape: Any = ...) -> None: ...

class MultiheadAttention(Module):
    """
    MultiheadAttention(embedDim, numHeads, dropout=0.0, bias=True, batchFirst=True, causal=False, keyPaddingMask=False, attnMask=False, name=None)

    Tessera's MultiheadAttention (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        embedDim: features per token (the model width)
        numHeads: attention heads (embedDim divides by it)
        dropout: the probability of dropping (attention weights, or between recurrent layers)
        bias: whether the projections have biases
        batchFirst: [N, T, ...] instead of [T, N, ...]
        causal: each position attends to itself and the ones before only
        keyPaddingMask: a key-padding mask [N, S] is one more input
        attnMask: an attention mask [L, S] or [N * numHeads, L, S] is one more input
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, embedDim: Any, numHeads: Any, dropout: float = ..., bias: bool = ..., batchFirst: bool = ..., causal: bool = ..., keyPaddingMask: bool = ..., attnMask: bool = ..., name: str | None = ...) -> None: ...

class NoiseInjector(Module):
    """
    NoiseInjector(mode='add', noisetype='uniform', params=(0.0, 1.0), name=None)

    Tessera's NoiseInjector (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        mode: 'add' or 'mul': the noise added to or multiplying the input
        noisetype: 'uniform' or 'gaussian'
        params: the noise's two parameters: (low, high) or (mean, std)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, mode: str = ..., noisetype: str = ..., params: Any = ..., name: str | None = ...) -> None: ...

class PRelu(Module):
    """
    PRelu(maps, sharedMaps=False, init=0.25, name=None)

    Tessera's PRelu (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        maps: channels, each with its own slope
        sharedMaps: one slope for all channels instead of one per channel
        init: the initial value of the learned factors
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, maps: Any, sharedMaps: bool = ..., init: float = ..., name: str | None = ...) -> None: ...

class Pad1D(Module):
    """
    Pad1D(pad, mode='constant', fillValue=0.0, name=None)

    Tessera's Pad1D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        pad: (left, right) added
        mode: 'constant', 'reflect' or 'edge' (the border value repeated: PyTorch's 'replicate')
        fillValue: the value of the added elements (constant mode)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, pad: int | Sequence[int], mode: str = ..., fillValue: float = ..., name: str | None = ...) -> None: ...

class Pad2D(Module):
    """
    Pad2D(pad, mode='constant', fillValue=0.0, name=None)

    Tessera's Pad2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        pad: (top, bottom, left, right) added
        mode: 'constant', 'reflect' or 'edge' (the border value repeated: PyTorch's 'replicate')
        fillValue: the value of the added elements (constant mode)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, pad: int | Sequence[int], mode: str = ..., fillValue: float = ..., name: str | None = ...) -> None: ...

class Parameter(Module):
    """
    Parameter(shape, std=0.0, name=None)

    Tessera's Parameter (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        shape: the learned tensor's shape (repeated over the batch)
        std: the standard deviation of the initial values (0: zeros)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, shape: int | Sequence[int], std: float = ..., name: str | None = ...) -> None: ...

class Penalty(Module):
    """
    Penalty(mode='l1', weight=0.01, name=None)

    Tessera's Penalty (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        mode: 'l1' or 'l2'
        weight: the penalty's factor
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, mode: str = ..., weight: float = ..., name: str | None = ...) -> None: ...

class PositionalEncoding(Module):
    """
    PositionalEncoding(base=10000.0, name=None)

    Tessera's PositionalEncoding (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        base: the sinusoids' base (10000 in Vaswani et al.)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, base: float = ..., name: str | None = ...) -> None: ...

class Pow(Module):
    """
    Pow(exponent, scale=1.0, name=None)

    Tessera's Pow (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        exponent: the power each element is raised to (0.5: square root, -1: reciprocal)
        scale: the factor of the result: scale * x^exponent
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, exponent: Any, scale: float = ..., name: str | None = ...) -> None: ...

class RMSNorm(Module):
    """
    RMSNorm(shape, epsilon=1.1920928955078125e-07, affine=True, name=None)

    Tessera's RMSNorm (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        shape: the trailing dims normalised together
        epsilon: added to the mean square before the square root
        affine: whether the layer learns a scale (and shift) after normalising
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, shape: int | Sequence[int], epsilon: float = ..., affine: bool = ..., name: str | None = ...) -> None: ...

class RNN(Module):
    """
    RNN(insize, hsize, layers=1, mode='lstm', linearBeforeReset=True, bidirectional=False, getSequences=False, batchFirst=False, initialStates=False, finalStates=False, lengths=False, dropout=0.0, name=None)

    Tessera's RNN (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        insize: input features (the last dim)
        hsize: hidden state features
        layers: stacked recurrent layers
        mode: 'relu', 'tanh', 'lstm' or 'gru'
        linearBeforeReset: GRU: the reset gate scales W_hn h + b_hn (PyTorch's); False: it scales h first (CPU only)
        bidirectional: a backward pass too, its features concatenated
        getSequences: output every step (else the last)
        batchFirst: [N, T, ...] instead of [T, N, ...]
        initialStates: initial states are extra inputs
        finalStates: final states are extra outputs
        lengths: a lengths input [N] for padded batches
        dropout: the probability of dropping (attention weights, or between recurrent layers)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, insize: Any, hsize: Any, layers: int = ..., mode: str = ..., linearBeforeReset: bool = ..., bidirectional: bool = ..., getSequences: bool = ..., batchFirst: bool = ..., initialStates: bool = ..., finalStates: bool = ..., lengths: bool = ..., dropout: float = ..., name: str | None = ...) -> None: ...

class ReduceMean(Module):
    """
    ReduceMean(axes=None, keepDims=True, name=None)

    Tessera's ReduceMean (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axes: the dims averaged over (None: all)
        keepDims: whether the reduced dims stay as size 1
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axes: int | Sequence[int] | None = ..., keepDims: bool = ..., name: str | None = ...) -> None: ...

class ReduceSum(Module):
    """
    ReduceSum(axes=None, keepDims=True, name=None)

    Tessera's ReduceSum (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axes: the dims summed over (None: all)
        keepDims: whether the reduced dims stay as size 1
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axes: int | Sequence[int] | None = ..., keepDims: bool = ..., name: str | None = ...) -> None: ...

class Replicate(Module):
    """
    Replicate(times, name=None)

    Tessera's Replicate (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        times: how many outputs, each the input
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, times: Any, name: str | None = ...) -> None: ...

class Reshape(Module):
    """
    Reshape(shape, name=None)

    Tessera's Reshape (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        shape: the new shape (0 keeps that dim, -1 is inferred)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, shape: int | Sequence[int], name: str | None = ...) -> None: ...

class Resize2D(Module):
    """
    Resize2D(size, mode='nearest', alignCorners=False, name=None)

    Tessera's Resize2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: (height, width) of the output
        mode: 'nearest' (input floor(o * in / out)), 'nearest-exact' (floor((o + 0.5) * in / out)), 'linear' or 'cubic' (PyTorch's 'bicubic')
        alignCorners: linear and cubic only: the corner pixels' centres of input and output align (PyTorch's align_corners=True); False: half-pixel centres
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int], mode: str = ..., alignCorners: bool = ..., name: str | None = ...) -> None: ...

class Resize3D(Module):
    """
    Resize3D(size, mode='nearest', alignCorners=False, name=None)

    Tessera's Resize3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: (depth, height, width) of the output
        mode: 'nearest' (input floor(o * in / out)), 'nearest-exact' (floor((o + 0.5) * in / out)), 'linear' or 'cubic' (PyTorch's 'bicubic')
        alignCorners: linear and cubic only: the corner pixels' centres of input and output align (PyTorch's align_corners=True); False: half-pixel centres
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int], mode: str = ..., alignCorners: bool = ..., name: str | None = ...) -> None: ...

class Scale(Module):
    """
    Scale(shape, init=1.0, name=None)

    Tessera's Scale (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        shape: the factors' shape (broadcast to the input)
        init: the initial value of the learned factors
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, shape: int | Sequence[int], init: float = ..., name: str | None = ...) -> None: ...

class ScaledDotProductAttention(Module):
    """
    ScaledDotProductAttention(causal=False, scale=0.0, dropout=0.0, name=None)

    Tessera's ScaledDotProductAttention (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        causal: each position attends to itself and the ones before only
        scale: the factor on the scores (0: 1 / sqrt(d))
        dropout: the probability of dropping (attention weights, or between recurrent layers)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, causal: bool = ..., scale: float = ..., dropout: float = ..., name: str | None = ...) -> None: ...

class ScatterElements(Module):
    """
    ScatterElements(axis=0, add=False, name=None)

    Tessera's ScatterElements (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim the positions index
        add: the updates add to the values at their positions (False: they replace them)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., add: bool = ..., name: str | None = ...) -> None: ...

class Slice(Module):
    """
    Slice(axis, start, end, step=None, name=None)

    Tessera's Slice (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim sliced, or a list of dims
        start: first index kept along each axis (negative: from the end); a list for several axes
        end: index past the last kept (0: to the end; negative: from the end); a list for several axes
        step: take every step-th element of each range (not 0; a negative step walks from start down to end, end 0 then meaning through index 0 and -D stopping before it); a list for several axes; None: 1
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int], start: int | Sequence[int], end: int | Sequence[int], step: Any = ..., name: str | None = ...) -> None: ...

class SoftMax(Module):
    """
    SoftMax(axis=1, name=None)

    Tessera's SoftMax (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim normalised over
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int] = ..., name: str | None = ...) -> None: ...

class SpatialTf(Module):
    """
    SpatialTf(height=0, width=0, name=None)

    Tessera's SpatialTf (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        height: the output's height (0: the input's)
        width: the output's width (0: the input's)
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, height: int = ..., width: int = ..., name: str | None = ...) -> None: ...

class Split(Module):
    """
    Split(axis, sections, name=None)

    Tessera's Split (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim split
        sections: the sizes along the axis, one per output
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int], sections: Any, name: str | None = ...) -> None: ...

class Sub(Module):
    """
    Sub(name=None)

    Tessera's Sub (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, name: str | None = ...) -> None: ...

class SubtractMean(Module):
    """
    SubtractMean(size=5, includePad=True, name=None)

    Tessera's SubtractMean (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        size: the size x size window whose mean is subtracted
        includePad: whether padded positions count in the mean
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, size: int | Sequence[int] = ..., includePad: bool = ..., name: str | None = ...) -> None: ...

class Sum(Module):
    """
    Sum(axis, useWeights=True, name=None)

    Tessera's Sum (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim summed over (1 or more)
        useWeights: whether a second input holds the weights of the sum
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int], useWeights: bool = ..., name: str | None = ...) -> None: ...

class SwapAxes(Module):
    """
    SwapAxes(axis1, axis2, name=None)

    Tessera's SwapAxes (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis1: one of the two dims swapped
        axis2: the other dim swapped
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis1: Any, axis2: Any, name: str | None = ...) -> None: ...

class Tile(Module):
    """
    Tile(axis, times, name=None)

    Tessera's Tile (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axis: the dim it works along (negative: from the end)
        times: how many copies end to end
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axis: int | Sequence[int], times: Any, name: str | None = ...) -> None: ...

class ToList(Module):
    """
    ToList(count=1, name=None)

    Tessera's ToList (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        count: how many inputs (and outputs) it passes through
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, count: int = ..., name: str | None = ...) -> None: ...

class TopK(Module):
    """
    TopK(k, axis=-1, largest=True, sorted=True, name=None)

    Tessera's TopK (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        k: how many values each line keeps
        axis: the dim the values are chosen along
        largest: the largest values (False: the smallest)
        sorted: from the largest (smallest) on; False: in the order they appear
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, k: Any, axis: int | Sequence[int] = ..., largest: bool = ..., sorted: bool = ..., name: str | None = ...) -> None: ...

class Transpose(Module):
    """
    Transpose(axes, name=None)

    Tessera's Transpose (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        axes: the permutation of the dims
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, axes: int | Sequence[int], name: str | None = ...) -> None: ...

class Upsample2D(Module):
    """
    Upsample2D(scale=2, mode='nearest', alignCorners=False, name=None)

    Tessera's Upsample2D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        scale: the integer upsampling factor
        mode: 'nearest', 'nearest-exact', 'linear' or 'cubic' (Keys' a = -0.75: PyTorch's 'bicubic')
        alignCorners: linear and cubic only: the corner pixels' centres of input and output align (PyTorch's align_corners=True); False: half-pixel centres
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, scale: int = ..., mode: str = ..., alignCorners: bool = ..., name: str | None = ...) -> None: ...

class Upsample3D(Module):
    """
    Upsample3D(scale=2, mode='nearest', alignCorners=False, name=None)

    Tessera's Upsample3D (docs/layers.md); arguments left out take the defaults shown (None: the class decides).

    Arguments:
        scale: the integer upsampling factor
        mode: 'nearest', 'nearest-exact', 'linear' or 'cubic' (Keys' a = -0.75: PyTorch's 'bicubic')
        alignCorners: linear and cubic only: the corner pixels' centres of input and output align (PyTorch's align_corners=True); False: half-pixel centres
        name: the layer's name (in graphs, errors, summaries and parameter paths); None: unnamed
    """
    def __init__(self, scale: int = ..., mode: str = ..., alignCorners: bool = ..., name: str | None = ...) -> None: ...

def profile(model: Any, inputs: Any, train: Any = ..., warmup: Any = ..., steps: Any = ..., optimizer: Any = ...) -> Any: ...

def fit(trainer: Any, train: Any, *, epochs: Any = ..., schedule: Any = ..., warmup: Any = ..., ema: Any = ..., validation: Any = ..., test: Any = ..., earlyStop: Any = ..., saveBest: Any = ..., checkpoint: Any = ..., checkpointEpochs: Any = ..., checkpointSteps: Any = ..., resume: Any = ..., metrics: Any = ..., inputs: Any = ..., classes: Any = ..., verbose: Any = ..., onEpoch: Any = ..., onBatch: Any = ...) -> Any: ...

def parseSchedule(text: Any, base: Any, epochs: Any) -> Any: ...

def empty(shape: Any, dtype: Any = ...) -> Any: ...

def full(shape: Any, value: Any) -> Any: ...

def manualSeed(seed: Any) -> Any: ...

def cpuFusedAttention() -> Any: ...

def setCpuFusedAttention(on: Any) -> Any: ...

def cuda16BitActivations() -> Any: ...

def cudaChannelsLast() -> Any: ...

def cudaDeviceCount() -> Any: ...

def cudaFusedAttention() -> Any: ...

def setCuda16BitActivations(on: Any) -> Any: ...

def setCudaAllowTF32(allow: Any) -> Any: ...

def setCudaChannelsLast(on: Any) -> Any: ...

def setCudaDeterministic(on: Any) -> Any: ...

def setCudaFusedAttention(on: Any) -> Any: ...

def rand(shape: Any, lo: Any = ..., hi: Any = ...) -> Any: ...

def randint(shape: Any, classes: Any) -> Any: ...

def randn(shape: Any, mean: Any = ..., stddev: Any = ...) -> Any: ...

def tensor(data: Any, copy: Any = ...) -> Any: ...

def zeros(shape: Any, dtype: Any = ...) -> Any: ...

def buildModule(*args: Any, **kwargs: Any) -> Any: ...

def exportOnnx(model: Any, input: Any, path: Any, opset: Any = ..., classes: Any = ..., transforms: Any = ...) -> Any: ...

def factoryClassnames() -> Any: ...

def factorySignature(classname: Any) -> Any: ...

def isGlueRegistered(kind: Any) -> Any: ...

def registerGlue(kind: Any, make: Any) -> Any: ...

fashionMnistDir: Any

def importOnnx(*args: Any, **kwargs: Any) -> Any: ...

def loadMnist(dir: Any = ..., split: Any = ..., limit: Any = ...) -> Any: ...

def loadModelFile(*args: Any, **kwargs: Any) -> Any: ...

def loadZooModel(*args: Any, **kwargs: Any) -> Any: ...

def setCheckNumerics(on: Any) -> Any: ...

def setFusion(on: Any) -> Any: ...

def fusionEnabled() -> Any: ...

def zooModels() -> Any: ...

def readClassNames(path: Any) -> Any: ...

def readTransforms(path: Any) -> Any: ...

def cifar10(dir: Any, split: Any = ...) -> Any: ...

def cifar100(dir: Any, split: Any = ..., fine: Any = ...) -> Any: ...

def firstSamples(data: Any, count: Any) -> Any: ...

def firstOfEachClass(data: Any, count: Any) -> Any: ...

def holdOut(data: Any, count: Any, seed: Any = ...) -> Any: ...

def idxDataset(dir: Any, split: Any = ..., limit: Any = ...) -> Any: ...

def imageArchive(path: Any, split: Any, channels: Any = ...) -> Any: ...

def imageFolder(dir: Any, channels: Any = ...) -> Any: ...

def imageList(csv: Any, channels: Any = ..., pathColumn: Any = ..., labelColumn: Any = ..., classes: Any = ...) -> Any: ...

def npyDataset(images: Any, labels: Any) -> Any: ...

def tensorDataset(images: Any, labels: Any, classes: Any = ..., name: Any = ...) -> Any: ...

def readTextCorpus(path: Any, vocabulary: Any = ..., heldOutEvery: Any = ...) -> Any: ...

def nextIdWindows(ids: Any, length: Any) -> Any: ...

def sampleText(net: Any, prompt: Any, context: Any, count: Any = ..., temperature: Any = ..., seed: Any = ...) -> Any: ...

def loadCheckpoint(path: Any, net: Any, optimizer: Any, trainer: Any = ..., average: Any = ...) -> Any: ...

def saveCheckpoint(path: Any, net: Any, optimizer: Any, trainer: Any = ..., average: Any = ..., notes: Any = ...) -> Any: ...

def launchedByMpi() -> Any: ...

def mpiBuilt() -> Any: ...

def mpiWorld() -> Any: ...

def ncclBuilt() -> Any: ...

def ncclWorld(device: Any, bootstrap: Any = ...) -> Any: ...

sigmoid: Any

tanh: Any

relu: Any

leakyRelu: Any

elu: Any

softPlus: Any

clip: Any

gelu: Any

hardSigmoid: Any

hardSwish: Any

silu: Any

mish: Any

def MaxUnpool2D(maxpool: Any, name: Any = ...) -> Any: ...

def check(net: Any, input: Any) -> Any: ...

def summary(net: Any, input: Any, depth: Any = ...) -> Any: ...

def load(path: Any) -> Any: ...

def gradcheck(module: Any, shape: Any, eps: Any = ..., rtol: Any = ..., atol: Any = ..., seed: Any = ..., maxElements: Any = ...) -> Any: ...
