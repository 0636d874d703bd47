"""Tessera from Python: graph-style networks, training and shape checks, NumPy in and out.

    import tessera as ts
    x = ts.Identity().node()                       # the graph's input
    h = ts.Linear(784, 10).node(x)
    net = ts.Graph(inputs=x, outputs=h)
    net.dataShapeFrom((64, 784))                   # (64, 10), or a ShapeError naming the layer

Layers take PuzzleLib's names and keyword arguments; the work runs in Tessera's C++
library with the GIL released. docs/python.md is the guide.
"""

import inspect as _inspect

from . import _tessera
from ._tessera import (
    BackendError, BatchInfo, Calculator, Container, ContainerError, Cost, Error, Graph,
    GraphError, IoError, Module, ModuleError, Node, NumericsError, Optimizer, Parallel,
    Sequential, ShapeError, SummaryRow, Tensor, Trainer, Validator, Variable,
    # the whole training recipe
    EpochReport, FitResult, fit,
    # profiles
    Profile, ProfileRow, profile,
    # costs
    Abs, BCE, CTC, CrossEntropy, Hinge, KLDivergence, L1Hinge, MSE, Multi, SmoothL1, SVM,
    # optimizers
    AdaDelta, AdaGrad, Adam, AdamW, MomentumSGD, NesterovSGD, RMSProp, RMSPropGraves, SGD, SMORMS3,
    # schedules
    CosineSchedule, ExponentialSchedule, Schedule, StepSchedule, parseSchedule,
    # tensors
    empty, full, manualSeed, rand, randint, randn, tensor, zeros,
    # GPU settings
    cudaDeviceCount, setCudaAllowTF32, setCudaDeterministic,
    # files, zoo, data
    buildModule, exportOnnx, factoryClassnames, fashionMnistDir, importOnnx, loadMnist, readClassNames,
    fusionEnabled, isGlueRegistered, loadModelFile, loadZooModel, registerGlue, setCheckNumerics, setFusion,
    zooModels,
    # data sets, transforms, loader; checkpoints
    Dataset, Loader, Transforms, cifar10, cifar100, firstSamples, holdOut, idxDataset, imageArchive, imageFolder,
    imageList, npyDataset, tensorDataset, loadCheckpoint, saveCheckpoint, WeightAverage,
    # data-parallel training
    Communicator, DataParallel, launchedByMpi, mpiBuilt, mpiWorld, ncclBuilt, ncclWorld,
)

__all__ = [
    "BackendError",
    "BatchInfo",
    "Calculator",
    "Container",
    "ContainerError",
    "Cost",
    "Error",
    "Graph",
    "GraphError",
    "IoError",
    "Module",
    "ModuleError",
    "Node",
    "NumericsError",
    "Optimizer",
    "Parallel",
    "Sequential",
    "ShapeError",
    "SummaryRow",
    "Profile",
    "ProfileRow",
    "profile",
    "Tensor",
    "Trainer",
    "Validator",
    "EpochReport",
    "FitResult",
    "fit",
    "Variable",
    "Abs",
    "BCE",
    "CTC",
    "CrossEntropy",
    "Hinge",
    "KLDivergence",
    "L1Hinge",
    "MSE",
    "Multi",
    "SmoothL1",
    "SVM",
    "AdaDelta",
    "AdaGrad",
    "Adam",
    "AdamW",
    "MomentumSGD",
    "NesterovSGD",
    "RMSProp",
    "RMSPropGraves",
    "SGD",
    "SMORMS3",
    "CosineSchedule",
    "ExponentialSchedule",
    "Schedule",
    "StepSchedule",
    "parseSchedule",
    "empty",
    "full",
    "manualSeed",
    "cudaDeviceCount",
    "setCudaAllowTF32",
    "setCudaDeterministic",
    "rand",
    "randint",
    "randn",
    "tensor",
    "zeros",
    "buildModule",
    "exportOnnx",
    "factoryClassnames",
    "isGlueRegistered",
    "registerGlue",
    "fashionMnistDir",
    "importOnnx",
    "loadMnist",
    "loadModelFile",
    "loadZooModel",
    "setCheckNumerics",
    "setFusion",
    "fusionEnabled",
    "zooModels",
    "readClassNames",
    "Dataset",
    "Loader",
    "Transforms",
    "cifar10",
    "cifar100",
    "firstSamples",
    "holdOut",
    "idxDataset",
    "imageArchive",
    "imageFolder",
    "imageList",
    "npyDataset",
    "tensorDataset",
    "loadCheckpoint",
    "saveCheckpoint",
    "WeightAverage",
    "Communicator",
    "DataParallel",
    "launchedByMpi",
    "mpiBuilt",
    "mpiWorld",
    "ncclBuilt",
    "ncclWorld",
    "sigmoid", "tanh", "relu", "leakyRelu", "elu", "softPlus", "clip", "gelu", "hardSigmoid", "hardSwish",
    "MaxUnpool2D", "CheckResult", "check", "Summary", "summary", "load",
]  # and every layer class, added below

__version__ = "0.1.0"

for _cls in list(globals().values()):  # tessera.ShapeError, not tessera._tessera.ShapeError
    if isinstance(_cls, type) and _cls.__module__ == "tessera._tessera":
        _cls.__module__ = __name__
del _cls

# Activation names, as PuzzleLib spells them: Activation(relu).
sigmoid, tanh, relu, leakyRelu, elu, softPlus, clip, gelu, hardSigmoid, hardSwish = (
    "sigmoid", "tanh", "relu", "leakyRelu", "elu", "softPlus", "clip", "gelu", "hardSigmoid",
    "hardSwish")

_CONV = "inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None, " \
        "initscheme=None, groups=1"
_POOL = "size=2, stride=None, pad=0, includePad=True, name=None"
_BN = "maps, epsilon=1e-5, initFactor=1.0, minFactor=0.1, name=None"
_LRN = "N=5, alpha=1e-4, beta=0.75, K=2.0, name=None"

# Every layer the factory builds: its arguments in PuzzleLib's order, with the defaults
# the C++ class uses (None: the class decides). python/tests checks these against the
# factory: every name is one it takes, and every default is the one it uses.
_LAYERS = {
    "Linear": "insize, outsize, wscale=1.0, useBias=True, initscheme=None, name=None",
    "Conv1D": _CONV, "Conv2D": _CONV, "Conv3D": _CONV,
    "Deconv1D": _CONV, "Deconv2D": _CONV, "Deconv3D": _CONV,
    "MaxPool1D": _POOL, "MaxPool2D": _POOL, "MaxPool3D": _POOL,
    "AvgPool1D": _POOL, "AvgPool2D": _POOL, "AvgPool3D": _POOL,
    "GlobalAvgPool": "name=None",
    "KMaxPool": "topk, axis, name=None",
    "BatchNorm": _BN, "BatchNorm1D": _BN, "BatchNorm2D": _BN, "BatchNorm3D": _BN,
    "InstanceNorm2D": "maps, epsilon=1e-5, name=None",
    "CrossMapLRN": _LRN, "MapLRN": _LRN,
    "LCN": "N=5, alpha=1e-4, beta=0.75, K=2.0, includePad=True, name=None",
    "SubtractMean": "size=5, includePad=True, name=None",
    "Activation": "activation='relu', slope=0.01, alpha=1.0, min=0.0, max=6.0, "
                  "hardSlope=0.16666666666666666, hardOffset=0.5, name=None",
    "Gelu": "name=None",
    "PRelu": "maps, sharedMaps=False, init=0.25, name=None",
    "SoftMax": "name=None",
    "Dropout": "p=0.5, name=None",
    "Dropout2D": "p=0.5, name=None",
    "NoiseInjector": "mode='add', noisetype='uniform', params=(0.0, 1.0), name=None",
    "Penalty": "mode='l1', weight=0.01, name=None",
    "MulAddConst": "a=1.0, b=0.0, name=None",
    "Pad1D": "pad, mode='constant', fillValue=0.0, name=None",
    "Pad2D": "pad, mode='constant', fillValue=0.0, name=None",
    "Upsample2D": "scale=2, mode='nearest', name=None",
    "Upsample3D": "scale=2, mode='nearest', name=None",
    "Embedder": "vocabulary, sentlength, embsize, initscheme=None, wscale=1.0, learnable=True, name=None",
    "GroupLinear": "groups, insize, outsize, batchDim=0, useBias=True, initscheme=None, wscale=1.0, "
                   "name=None",
    "RNN": "insize, hsize, layers=1, mode='lstm', bidirectional=False, getSequences=False, "
           "batchFirst=False, initialStates=False, finalStates=False, lengths=False, dropout=0.0, name=None",
    "Flatten": "name=None",
    "Reshape": "shape, name=None",
    "Identity": "name=None",
    "Transpose": "axes, name=None",
    "SwapAxes": "axis1, axis2, name=None",
    "MoveAxis": "src, dst, name=None",
    "Tile": "axis, times, name=None",
    "Cast": "intype='float32', outtype='float32', name=None",
    "ReduceMean": "axes=None, keepDims=True, name=None",
    "SpatialTf": "height=0, width=0, name=None",
    "Glue": "kind, name=None",
    "Concat": "axis=1, name=None",
    "DepthConcat": "name=None",
    "Split": "axis, sections, name=None",
    "Slice": "axis, start, end, name=None",
    "Replicate": "times, name=None",
    "ToList": "count=1, name=None",
    "Add": "coefficients=None, name=None",
    "Mul": "name=None",
    "Sub": "name=None",
    "Div": "name=None",
}


def _signature(params):
    namespace = {}
    exec(f"def f({params}): pass", namespace)  # the table above, nothing from outside
    return _inspect.signature(namespace["f"])


class _Layer(Module):
    """A layer built by Tessera's factory from its class name and arguments."""

    _classname = ""
    __signature__ = None

    def __init__(self, *args, **kwargs):
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self._classname}: {e}") from None
        Module.__init__(self, self._classname, dict(bound.arguments))
        self._built = True

    def __repr__(self):
        if not getattr(self, "_built", False):  # its construction failed: nothing to ask the C++ side
            return f"<tessera.{self._classname}, not constructed>"
        scheme = self.blueprint().get("scheme", {})
        return f"tessera.{self._classname}(" + ", ".join(f"{k}={v!r}" for k, v in scheme.items()) + ")"


def _make_layer(classname, params):
    sig = _signature(params)
    doc = (f"{classname}({params})\n\nTessera's {classname} (docs/layers.md); arguments left out take the "
           f"defaults shown (None: the class's own).")
    return type(classname, (_Layer,), {"_classname": classname, "__signature__": sig, "__doc__": doc,
                                       "__module__": __name__})


for _name, _params in _LAYERS.items():
    globals()[_name] = _make_layer(_name, _params)
    __all__.append(_name)
del _name, _params


_LAYER_CLASSES = {name: globals()[name] for name in _LAYERS}


def _typed(module):
    """`module` as its layer class (tessera.Conv2D, ...) when the C++ side made it and
    hands it back as a plain Module: the same module, not a copy."""
    if type(module) is not Module:  # a container class, or already a layer class
        return module
    cls = _LAYER_CLASSES.get(module.classname)
    if cls is None:
        return module
    typed = cls.__new__(cls)
    Module.__init__(typed, module)
    typed._built = True
    return typed


def _returning_typed(method):
    def typed(*args, **kwargs):
        return _typed(method(*args, **kwargs))
    typed.__name__, typed.__doc__ = method.__name__, method.__doc__
    return typed


for _cls, _name in ((Container, "__getitem__"), (Container, "getByName")):
    setattr(_cls, _name, _returning_typed(getattr(_cls, _name)))
_container_iter, _module_children, _node_module = Container.__iter__, Module.children, Node.module
Container.__iter__ = lambda self: (_typed(m) for m in _container_iter(self))
Module.children = lambda self: [_typed(m) for m in _module_children(self)]
Module.children.__doc__ = "The direct children of a container, each as its layer class."
Node.module = property(lambda self: _typed(_node_module.fget(self)), doc="The module this node wraps.")
Module.copy = _returning_typed(Module.copy)
Module.__deepcopy__ = lambda self, memo: self.copy()
buildModule = _returning_typed(buildModule)
loadModelFile = _returning_typed(loadModelFile)
importOnnx = _returning_typed(importOnnx)
loadZooModel = _returning_typed(loadZooModel)
del _cls, _name


def MaxUnpool2D(maxpool, name=None):
    """The inverse of the MaxPool2D module `maxpool` (it reads that pool's argmax indices)."""
    return _tessera._maxUnpool2D(maxpool, name or "")


# ---- shape checking ------------------------------------------------------------------------

def _shape_list(input):
    """One shape (a tuple of ints) or a list of shapes, as a list of tuples."""
    if isinstance(input, str):
        return [tuple(int(d) for d in input.split("x"))]
    if len(input) > 0 and all(isinstance(d, int) for d in input):
        return [tuple(input)]
    return [tuple(s) for s in input]


class CheckResult:
    """What check() found: the input and output shapes and the parameter count."""

    def __init__(self, inputs, outputs, params):
        self.inputs, self.outputs, self.params = inputs, outputs, params

    def __repr__(self):
        return f"ok: {self.inputs} -> {self.outputs}, {self.params:,} parameters"


def check(net, input):
    """Checks the data shapes through the whole model for `input` (one shape, a list of
    shapes, or '1x3x224x224'), then the gradient shapes back to the inputs. Allocates
    nothing. Returns a CheckResult; a ShapeError names the failing layer and its path."""
    shapes = _shape_list(input)
    outputs = [tuple(s) for s in net.dataShapeFrom(shapes)]
    back = [tuple(s) for s in net.gradShapeFrom(outputs)]
    if back != shapes:
        raise ShapeError(f"{net!r}: the gradient shapes {back} do not match the inputs {shapes}")
    return CheckResult(shapes, outputs, net.numOfParams())


class Summary(list):
    """The rows of summary(): a list of SummaryRow (name, module, inputs, outputs,
    connectedTo, trainable, nonTrainable, flops, activationBytes, attributes). str() is
    the table `tessera summary` prints; notebooks show an HTML table."""

    def __init__(self, rows, connections):
        super().__init__(rows)
        self._connections = connections

    @property
    def trainable(self):
        return sum(r.trainable for r in self)

    @property
    def flops(self):
        return sum(r.flops for r in self)

    def __str__(self):
        return _tessera._summaryTable(list(self), self._connections)

    def dot(self, title="model"):
        """A Graphviz drawing of the rows (what `tessera draw` renders)."""
        return _tessera._toDot(list(self), title)

    def _repr_html_(self):
        import html
        head = ["name", "module", "output", "attributes", "trainable", "FLOPs"]
        if self._connections:
            head.insert(4, "connected to")
        rows = []
        for r in self:
            cells = [r.name, r.module, ", ".join(str(s) for s in r.outputs), r.attributes,
                     f"{r.trainable:,}", f"{r.flops:,.0f}"]
            if self._connections:
                cells.insert(4, ", ".join(r.connectedTo))
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) +
                f"</table><p>{self.trainable:,} trainable parameters, {self.flops:,.0f} FLOPs</p>")


def summary(net, input, depth=0):
    """One row per layer for `input` (computed from shapes: nothing runs). depth > 0
    merges the rows whose names share their first `depth` parts."""
    rows = _tessera._summarize(net, _shape_list(input))
    if depth > 0:
        rows = _tessera._groupRows(rows, depth)
    return Summary(rows, isinstance(net, Graph))


def _epoch(self, epoch=0, first=0):
    """The batches (images, labels) of epoch `epoch` from batch `first`, in order."""
    self.start(epoch, first)
    while True:
        batch = self.next()
        if batch is None:
            return
        yield batch


Loader.epoch = _epoch


def load(path):
    """The model in an HDF5 file saved with its blueprint (Module.save), or an ONNX file."""
    return loadModelFile(path)
