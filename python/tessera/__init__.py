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

from . import _argdocs, _tessera
from ._tessera import (
    BackendError, BatchInfo, Calculator, Container, ContainerError, Cost, Error, Graph,
    GraphError, IoError, Module, ModuleError, Node, NumericsError, Optimizer, Parallel,
    Sequential, ShapeError, SummaryRow, Tensor, Trainer, Validator, Variable,
    # the whole training recipe
    EpochReport, FitResult, fit,
    # profiles
    Profile, ProfileRow, profile,
    # costs
    Abs, BCE, CTC, Hinge, KLDivergence, L1Hinge, MSE, Multi, SmoothL1, SVM,  # CrossEntropy: below
    # optimizers
    AdaDelta, AdaGrad, Adam, AdamW, MomentumSGD, NesterovSGD, RMSProp, RMSPropGraves, SGD, SMORMS3,
    # schedules
    CosineSchedule, ExponentialSchedule, Schedule, StepSchedule, parseSchedule,
    # tensors
    empty, full, manualSeed, rand, randint, randn, tensor, zeros,
    # CPU and GPU settings
    cpuFusedAttention, setCpuFusedAttention,
    cuda16BitActivations, cudaChannelsLast, cudaDeviceCount, cudaFusedAttention, setCuda16BitActivations,
    setCudaAllowTF32, setCudaChannelsLast, setCudaDeterministic, setCudaFusedAttention,
    # files, zoo, data
    buildModule, exportOnnx, factoryClassnames, factorySignature, fashionMnistDir, importOnnx, loadMnist, readClassNames,
    readTransforms,
    fusionEnabled, isGlueRegistered, loadModelFile, loadZooModel, registerGlue, setCheckNumerics, setFusion,
    zooModels,
    # data sets, transforms, loader; checkpoints
    Dataset, Loader, Transforms, cifar10, cifar100, firstSamples, firstOfEachClass, holdOut, idxDataset,
    imageArchive, imageFolder,
    imageList, npyDataset, tensorDataset, loadCheckpoint, saveCheckpoint, WeightAverage,
    # text for language models
    TextCorpus, readTextCorpus, nextIdWindows, sampleText,
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
    "cpuFusedAttention",
    "setCpuFusedAttention",
    "cuda16BitActivations",
    "cudaChannelsLast",
    "cudaDeviceCount",
    "cudaFusedAttention",
    "setCuda16BitActivations",
    "setCudaAllowTF32",
    "setCudaChannelsLast",
    "setCudaDeterministic",
    "setCudaFusedAttention",
    "rand",
    "randint",
    "randn",
    "tensor",
    "zeros",
    "buildModule",
    "exportOnnx",
    "factoryClassnames",
    "factorySignature",
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
    "readTransforms",
    "Dataset",
    "Loader",
    "Transforms",
    "cifar10",
    "cifar100",
    "firstSamples",
    "firstOfEachClass",
    "holdOut",
    "idxDataset",
    "imageArchive",
    "imageFolder",
    "imageList",
    "npyDataset",
    "tensorDataset",
    "TextCorpus",
    "readTextCorpus",
    "nextIdWindows",
    "sampleText",
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
    "silu", "mish", "MaxUnpool2D", "CheckResult", "check", "Summary", "summary", "load",
]  # and every layer class, added below

__version__ = "0.1.0"

for _cls in list(globals().values()):  # tessera.ShapeError, not tessera._tessera.ShapeError
    if isinstance(_cls, type) and _cls.__module__ == "tessera._tessera":
        _cls.__module__ = __name__
del _cls

# Activation names, as PuzzleLib spells them: Activation(relu).
sigmoid, tanh, relu, leakyRelu, elu, softPlus, clip, gelu, hardSigmoid, hardSwish, silu, mish = (
    "sigmoid", "tanh", "relu", "leakyRelu", "elu", "softPlus", "clip", "gelu", "hardSigmoid",
    "hardSwish", "silu", "mish")

# Every layer the factory builds, with its arguments in PuzzleLib's order and their
# defaults, as the factory's own table writes them (factorySignature): the classes below are
# made from it, so Python and C++ cannot disagree. The containers have classes of their own.
_LAYERS = {name: factorySignature(name) for name in factoryClassnames()
           if name not in ("Sequential", "Parallel", "Graph", "MaxUnpool2D")}


def _signature(params):
    namespace = {}
    exec(f"def f({params}): pass", namespace)  # the table above, nothing from outside
    return _inspect.signature(namespace["f"])


# PyTorch's (and Keras's) names for Tessera's arguments, for "did you mean" in errors.
_OTHER_NAMES = {
    "padding": "pad", "kernel_size": "size", "in_channels": "inmaps", "out_channels": "outmaps",
    "in_features": "insize", "out_features": "outsize", "bias": "useBias", "num_features": "maps",
    "eps": "epsilon", "dim": "axis", "input_size": "insize", "hidden_size": "hsize", "num_layers": "layers",
    "batch_first": "batchFirst", "bidirectional": "bidirectional", "embed_dim": "embedDim",
    "num_heads": "numHeads", "num_embeddings": "vocabulary", "embedding_dim": "embsize",
    "scale_factor": "scale", "negative_slope": "slope", "normalized_shape": "shape", "num_groups": "groups",
    "num_channels": "maps", "count_include_pad": "includePad", "filters": "outmaps", "units": "outsize",
    "rate": "p", "pool_size": "size", "strides": "stride", "use_bias": "useBias", "epsilon": "epsilon",
}


def _unknownArgument(classname, name, signature):
    """'no argument X; did you mean Y?' for an argument the class does not take."""
    import difflib
    params = list(signature.parameters)
    guess = _OTHER_NAMES.get(name)
    if guess not in params:
        close = difflib.get_close_matches(name, params, n=1, cutoff=0.6)
        guess = close[0] if close else None
    hint = f"; did you mean '{guess}'?" if guess else ""
    return f"no argument '{name}'{hint} (it takes {', '.join(params)})"


class _Layer(Module):
    """A layer built by Tessera's factory from its class name and arguments."""

    _classname = ""
    __signature__ = None

    def __init__(self, *args, **kwargs):
        unknown = [k for k in kwargs if k not in self.__signature__.parameters]
        if unknown:
            raise TypeError(f"{self._classname}: " + "; ".join(_unknownArgument(self._classname, k, self.__signature__)
                                                               for k in unknown))
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


def _layer_doc(classname, sig):
    """The layer class's docstring: its signature and what each argument means."""
    lines = [f"{classname}({', '.join(str(p) for p in sig.parameters.values())})", "",
             f"Tessera's {classname} (docs/layers.md); arguments left out take the defaults shown "
             "(None: the class decides).", "", "Arguments:"]
    for arg in sig.parameters:
        lines.append(f"    {arg}: {_argdocs.meaning(classname, arg) or '(see docs/layers.md)'}")
    return "\n".join(lines)


def _make_layer(classname, params):
    sig = _signature(params)
    doc = _layer_doc(classname, sig)
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


_container_getitem, _container_getbyname = Container.__getitem__, Container.getByName


def _getitem(self, key):
    """A child by index, name or dotted path ('block1.fc1'); a slice of a Sequential or
    Parallel is a new container of the same modules (shared, parameters and all)."""
    if isinstance(key, slice):
        if not isinstance(self, (Sequential, Parallel)):
            raise ContainerError(f"{self!r}: only a Sequential or a Parallel is sliced; a Graph's parts are its "
                                 f"nodes (graph.nodes())")
        part = type(self)()
        for i in range(*key.indices(len(self))):
            part.append(_container_getitem(self, i))
        return part
    return _typed(_container_getitem(self, key))


def _getbyname(self, name):
    """The module called `name`: a child, a dotted path, or else the first module of that
    name in the containers below, depth first (PuzzleLib's getByName)."""
    try:
        return _typed(_container_getbyname(self, name))
    except ContainerError as e:
        for child in self:
            if isinstance(child, Container):
                try:
                    return child.getByName(name)
                except ContainerError:
                    pass
        raise e from None


Container.__getitem__, Container.getByName = _getitem, _getbyname
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


# ---- layers written in Python ----

def _python_layer_init(init):
    """`init` (a Python layer's __init__) that, once the outermost __init__ has run, hands
    the layer and its arguments to the C++ side: from then on Tessera calls its methods,
    and its blueprint names its class and those arguments."""
    sig = _inspect.signature(init)

    def __init__(self, *args, **kwargs):
        depth = self.__dict__.get("_tessera_init_depth", 0)
        self.__dict__["_tessera_init_depth"] = depth + 1
        try:
            init(self, *args, **kwargs)
        finally:
            self.__dict__["_tessera_init_depth"] = depth
        if depth == 0:
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = {}
            for pname, value in list(bound.arguments.items())[1:]:
                kind = sig.parameters[pname].kind
                if kind is _inspect.Parameter.VAR_KEYWORD:
                    arguments.update(value)
                elif kind is not _inspect.Parameter.VAR_POSITIONAL:
                    arguments[pname] = value
            _tessera._PythonModule._attach(self, self, arguments)
            self.__dict__["_tessera_attached"] = True

    __init__.__wrapped__ = init
    __init__.__doc__ = init.__doc__
    __init__.__signature__ = sig
    return __init__


def _init_subclass(cls, **kwargs):
    """class M(tessera.Module) outside the package is a layer written in Python: its base
    becomes tessera._PythonModule (a Module whose updateData, updateGrad, accGradParams,
    dataShapeFrom, gradShapeFrom and checkDataShape are the class's methods)."""
    if cls.__module__ == __name__ or cls.__module__.startswith(__name__ + "."):
        return  # the package's own classes (the layer classes, containers)
    if not issubclass(cls, _tessera._PythonModule):
        cls.__bases__ = tuple(_tessera._PythonModule if b is Module else b for b in cls.__bases__)
    if "__init__" in cls.__dict__:
        cls.__init__ = _python_layer_init(cls.__dict__["__init__"])
    elif not any("__init__" in vars(b) and issubclass(b, _tessera._PythonModule) and b is not _tessera._PythonModule
                 for b in cls.__mro__[1:]):
        def __init__(self, name=None):
            _tessera._PythonModule.__init__(self, name or "")

        cls.__init__ = _python_layer_init(__init__)


Module.__init_subclass__ = classmethod(_init_subclass)
_tessera._PythonModule.__repr__ = lambda self: (Module.__repr__(self) if self.__dict__.get("_tessera_attached")
                                                else f"<{type(self).__name__}, not constructed>")


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


# ---- PuzzleLib's GPUArray methods on tensors ----------------------------------------------

_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1, "int8": 1}


def _tensor_get(self):
    """The elements as a new NumPy array (PuzzleLib's GPUArray.get())."""
    return self.numpy(copy=True)


def _tensor_set(self, ary):
    """Copies `ary` (same shape) into this tensor, in place (PuzzleLib's GPUArray.set)."""
    import numpy as np
    a = np.asarray(ary.get() if isinstance(ary, Tensor) else ary)
    if tuple(a.shape) != tuple(self.shape):
        raise ShapeError(f"Tensor.set: the array has shape {tuple(a.shape)}, the tensor {tuple(self.shape)}")
    self[...] = a
    return self


def _tensor_fill(self, value):
    """Sets every element to `value`, in place; returns the tensor (PuzzleLib's fill)."""
    self[...] = value
    return self


Tensor.get = _tensor_get
Tensor.set = _tensor_set
Tensor.fill = _tensor_fill
Tensor.nbytes = property(lambda self: self.size * _ITEMSIZE[self.dtype], doc="The elements' size in bytes.")
Tensor.ravel = lambda self: self.reshape((self.size,))


class CrossEntropy(_tessera.CrossEntropy):
    """Softmax cross-entropy of scores [N, C, ...] against int32 labels [N, ...] or float32
    probabilities of the scores' shape (mixup, CutMix). `weights`: one per class;
    labelSmoothing e makes the target (1 - e) target + e / C; classesLast: scores
    [N, ..., C] against labels [N, ...] (a language model's [N, T, V] and [N, T]). After
    `validate`, `mostProb` holds the most likely class of each sample (and position)."""

    def __init__(self, maxlabels=0, weights=(), labelSmoothing=0.0, classesLast=False):
        super().__init__(maxlabels=maxlabels, weights=list(weights), labelSmoothing=labelSmoothing,
                         classesLast=classesLast)
        self.classesLast = classesLast
        self.mostProb = None

    def validate(self, pred, target):
        """The error rate of the batch (1 - accuracy); leaves `mostProb`, the most likely
        class of each sample (and position), as PuzzleLib's CrossEntropy does."""
        error = super().validate(pred, target)
        import numpy as np
        scores = np.asarray(pred)
        self.mostProb = tensor(np.argmax(scores, axis=-1 if self.classesLast else 1).astype(np.int32), copy=True)
        return error


CrossEntropy.__module__ = __name__


# ---- containers print as their layers (as PyTorch prints a model) --------------------------

def _container_lines(c, indent):
    pad = "  " * (indent + 1)
    lines = []
    if isinstance(c, Graph):
        for n in c.nodes():
            parents = ", ".join(p.name + ("" if slots == [0] else f"{slots}") for p, slots in n.bwds)
            body = _layer_text(n.module, indent + 1)
            lines.append(f"{pad}({n.name}): {body}" + (f"  <- {parents}" if parents else "  <- input"))
    else:
        for i in range(len(c)):
            lines.append(f"{pad}({c.childName(i)}): {_layer_text(c[i], indent + 1)}")
    return lines


def _layer_text(m, indent=0):
    if isinstance(m, Container):
        name = f"{m.name!r}" if m.name else ""
        lines = _container_lines(m, indent)
        if not lines:
            return f"tessera.{m.classname}({name})"
        return f"tessera.{m.classname}({name}) (\n" + "\n".join(lines) + "\n" + "  " * indent + ")"
    return repr(m)


Container.__repr__ = lambda self: _layer_text(self)


# ---- numerical gradient checks ----------------------------------------------------------------

class GradCheckResult:
    """What gradcheck found: `ok`, and each checked tensor's largest difference between
    the backward pass and central differences (`errors`: {"input 0": ..., "W": ...})."""

    def __init__(self, ok, errors, worst):
        self.ok, self.errors, self.worst = ok, errors, worst

    def __bool__(self):
        return self.ok

    def __repr__(self):
        parts = ", ".join(f"{k} {v:.2e}" for k, v in self.errors.items())
        if self.ok:
            return f"gradcheck ok: largest differences {parts}"
        what, index, analytic, numeric = self.worst
        return (f"gradcheck FAILED at {what}{list(index)}: backward gives {analytic:.6g}, central differences "
                f"{numeric:.6g} (largest differences {parts})")


def gradcheck(module, shape, eps=1e-2, rtol=2e-2, atol=2e-3, seed=0, maxElements=64):
    """Checks `module`'s input and parameter gradients against central differences of
    loss = sum(module(x) * r) for random float inputs x of `shape` (one shape or a list)
    and random r, at up to `maxElements` elements of each tensor. Returns a
    GradCheckResult (true when every difference is within atol + rtol * |numeric|).
    The module must compute the same thing on every call (a dropout layer: eval mode)."""
    import numpy as np
    shapes = _shape_list(shape)
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1.0, 1.0, s).astype(np.float32) for s in shapes]

    def run():
        out = module(xs if len(xs) > 1 else xs[0])
        return out if isinstance(out, list) else [out]

    rs = [rng.standard_normal(tuple(o.shape)) for o in run()]

    def loss():
        return sum(float((np.asarray(o, dtype=np.float64) * r).sum()) for o, r in zip(run(), rs))

    module.zeroGradParams()
    run()
    grads = [r.astype(np.float32) for r in rs]
    din = module.backward(grads if len(grads) > 1 else grads[0])
    din = din if isinstance(din, list) else [din]
    params = module.namedParams()
    analytic = {f"input {i}": np.asarray(d, dtype=np.float64) for i, d in enumerate(din)}
    analytic.update({n: np.asarray(v.grad, dtype=np.float64) for n, v in params.items()})

    def numeric(get, put, index):
        keep = get(index)
        put(index, keep + eps)
        up = loss()
        put(index, keep - eps)
        down = loss()
        put(index, keep)
        return (up - down) / (2 * eps)

    errors, worst, ok, worst_excess = {}, None, True, -1.0
    targets = [(f"input {i}", x.shape, (lambda x: (lambda i: float(x[i]), lambda i, v: x.__setitem__(i, v)))(x))
               for i, x in enumerate(xs)]
    for n, v in params.items():
        t = v.data
        targets.append((n, tuple(t.shape), (lambda t: (lambda i: float(t[i]), lambda i, val: t.__setitem__(i, val)))(t)))
    for name, tshape, (get, put) in targets:
        total = int(np.prod(tshape))
        picks = rng.choice(total, size=min(total, maxElements), replace=False)
        largest = 0.0
        for flat in picks:
            index = np.unravel_index(int(flat), tshape)
            num = numeric(get, put, index)
            ana = float(analytic[name][index])
            diff = abs(ana - num)
            largest = max(largest, diff)
            excess = diff - (atol + rtol * abs(num))
            if excess > 0:
                ok = False
            if excess > worst_excess:
                worst_excess, worst = excess, (name, tuple(int(i) for i in index), ana, num)
        errors[name] = largest
    return GradCheckResult(ok, errors, worst)


__all__ += ["gradcheck", "GradCheckResult"]


# ---- NumPy arithmetic and a repr with values --------------------------------------------------

def _host(x):
    import numpy as np
    return x.numpy(copy=True) if isinstance(x, Tensor) else np.asarray(x)


def _like(t, array):
    """A new tensor of `array`'s values on `t`'s device (bfloat16 tensors give float32)."""
    out = tensor(array, copy=True)
    return out if t.device == "cpu" else out.to(t.device)


def _binary(op, reflected=False):
    def method(self, other):
        a, b = _host(self), _host(other)
        return _like(self, op(b, a) if reflected else op(a, b))
    return method


def _tensor_ops():
    import operator
    for name, op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                     ("truediv", operator.truediv), ("matmul", operator.matmul), ("pow", operator.pow)):
        setattr(Tensor, f"__{name}__", _binary(op))
        setattr(Tensor, f"__r{name}__", _binary(op, reflected=True))
    for name, op in (("lt", operator.lt), ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)):
        setattr(Tensor, f"__{name}__", (lambda op: lambda self, other: op(_host(self), _host(other)))(op))
    Tensor.__neg__ = lambda self: _like(self, -_host(self))
    Tensor.__abs__ = lambda self: _like(self, abs(_host(self)))


_tensor_ops()
_tensor_repr = Tensor.__repr__


def _tensor_repr_values(self):
    """tessera.Tensor([[0., 1.], ...], dtype=float32, device=cpu): the values as NumPy
    prints them (summarised when large)."""
    import numpy as np
    try:
        values = np.array2string(_host(self), separator=", ", threshold=100, edgeitems=3, prefix="tessera.Tensor(")
    except Exception:  # an undefined tensor, say: the plain form
        return _tensor_repr(self)
    extra = "" if self.device == "cpu" else f", device={self.device}"
    return f"tessera.Tensor({values}, shape={tuple(self.shape)}, dtype={self.dtype}{extra})"


Tensor.__repr__ = _tensor_repr_values


# ---- notebooks draw graphs -------------------------------------------------------------------

def _graph_dot(g):
    """A Graphviz drawing of a graph's structure (no shapes needed): a box per node with
    its class, an edge per parent, the inputs and outputs marked."""
    def q(s):  # a quoted DOT string (its "\\n" are line breaks)
        return '"' + str(s).replace('"', '\\"') + '"'
    inputs = {n.name for n in g.inputs}
    outputs = {n.name for n in g.outputs}
    lines = [f"digraph {q(g.name or 'graph')} {{", "  rankdir=TB;",
             '  node [shape=box, style=rounded, fontname="Helvetica"];']
    for n in g.nodes():
        m = n.module
        label = f"{n.name}\\n{m.classname}"
        if m.classname == "Activation":
            label += f" ({m.blueprint()['scheme'].get('activation', '')})"
        style = ""
        if n.name in inputs:
            style = ', shape=ellipse, style=filled, fillcolor="#dbe8f5"'
        elif n.name in outputs:
            style = ', style="rounded,filled", fillcolor="#e3f1dc"'
        lines.append(f"  {q(n.name)} [label={q(label)}{style}];")
        for p, slots in n.bwds:
            lines.append(f"  {q(p.name)} -> {q(n.name)}" + ("" if slots == [0] else f" [label={q(slots)}]") + ";")
    return "\n".join(lines) + "\n}\n"


def _graph_svg(g):
    """The drawing as SVG, through Graphviz's dot (None without it: a notebook then shows
    the text form)."""
    import shutil
    import subprocess
    if not shutil.which("dot"):
        return None
    r = subprocess.run(["dot", "-Tsvg"], input=_graph_dot(g), capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


Graph.dot = _graph_dot
Graph._repr_svg_ = _graph_svg
