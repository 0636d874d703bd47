"""PuzzleLib's `Modules`: its class names, argument names and defaults, parameter layouts
and gradient sign, each class built on the Tessera layer that computes it.

    from tessera.puzzlelib.Modules import Conv2D, MaxPool2D, Activation, relu, Linear

docs/puzzlelib.md lists every difference from Tessera's own classes and which side this
namespace takes."""

import numpy as np

import tessera as ts

from . import Backend
from ._core import Module, ModuleError, negated, npDtype, repeat, tensorOf
from ._core import inputs as _inputs

# Activation names (PuzzleLib's ActivationType members)
sigmoid, tanh, relu, leakyRelu, elu, softPlus, clip = (
    "sigmoid", "tanh", "relu", "leakyRelu", "elu", "softPlus", "clip")

def _initWeights(module, scheme, wscale, shape=None, factorShape=None):
    """Draws W as PuzzleLib's createTensorWithScheme does (scheme None: uniform within
    sqrt(3 / fan), fan from the 'in' factor unless the scheme is a (scheme, factor) pair)."""
    var = module.getVar("W")
    shape = var._shape if shape is None else shape
    factorType = "in"
    if isinstance(scheme, (tuple, list)):
        scheme, factorType = scheme
    fshape = shape if factorShape is None else factorShape
    if len(fshape) == 2:
        ins, outs = fshape
    else:
        rf = int(np.prod(fshape[2:]))
        outs, ins = fshape[0] * rf, fshape[1] * rf
    factor = {"in": ins, "out": outs, "avg": (ins + outs) / 2}[factorType]
    if scheme in (None, "xavier_uniform"):
        w = np.random.uniform(-np.sqrt(3.0 / factor), np.sqrt(3.0 / factor), shape)
    elif scheme in ("xavier", "xavier_normal"):
        w = np.random.normal(0.0, np.sqrt(1.0 / factor), shape)
    elif scheme == "he":
        w = np.random.normal(0.0, np.sqrt(2.0 / factor), shape)
    elif scheme == "gaussian":
        w = np.random.normal(0.0, wscale, shape)
    elif scheme == "uniform":
        w = np.random.uniform(-wscale, wscale, shape)
    elif scheme == "none":
        return
    else:
        raise ModuleError(f"initscheme {scheme!r} is not one of PuzzleLib's")
    module.setVar("W", w.astype(np.float32))


def _unsupported(cls, what):
    return ModuleError(f"{cls}: {what} is not supported by tessera.puzzlelib (docs/puzzlelib.md)")


def _channelLayout(nd):
    """(C,) as PuzzleLib's (1, C, 1, ...) with `nd` ones."""
    return lambda s: (1, s[0]) + (1,) * nd


# ---- linear layers -------------------------------------------------------------------------

class Linear(Module):
    def __init__(self, insize, outsize, wscale=1.0, useBias=True, initscheme=None, name=None, empty=False,
                 transpose=False):
        if transpose:
            raise _unsupported("Linear", "transpose=True")
        super().__init__(ts.Linear(insize, outsize, useBias=useBias), name)
        _initWeights(self, initscheme, wscale)
        self.registerBlueprint(locals())


class _ConvND(Module):
    """PuzzleLib's convolutions and deconvolutions over Tessera's (`_cls`): sizes, strides,
    pads and dilations as one number or one per dim, biases (1, C, 1, ...), and 1-D weights
    as 2-D ones of height 1."""

    _nd = 2
    _cls = "Conv2D"

    def _build(self, inmaps, outmaps, size, stride, pad, dilation, wscale, useBias, name, initscheme, groups,
               **extra):
        nd = self._nd
        make = getattr(ts, self._cls)
        Module.__init__(self, make(inmaps, outmaps, list(repeat(size, nd)), stride=list(repeat(stride, nd)),
                                   pad=list(repeat(pad, nd)), dilation=list(repeat(dilation, nd)),
                                   useBias=useBias, groups=groups, **extra), name)
        _initWeights(self, initscheme, wscale)

    def __init__(self, inmaps, outmaps, size, stride=1, pad=0, dilation=1, wscale=1.0, useBias=True, name=None,
                 initscheme=None, empty=False, groups=1):
        self._build(inmaps, outmaps, size, stride, pad, dilation, wscale, useBias, name, initscheme, groups)
        self.registerBlueprint(locals())

    @property
    def _layouts(self):
        layouts = {"b": _channelLayout(max(self._nd, 2))}
        if self._nd == 1:  # PuzzleLib's 1-D convolutions are 2-D ones of height 1
            layouts["W"] = lambda s: (s[0], s[1], 1, s[2])
        return layouts


class Conv1D(_ConvND):
    _nd, _cls = 1, "Conv1D"


class Conv2D(_ConvND):
    _nd, _cls = 2, "Conv2D"


class Conv3D(_ConvND):
    _nd, _cls = 3, "Conv3D"


class _DeconvND(_ConvND):
    def __init__(self, inmaps, outmaps, size, stride=1, pad=0, dilation=1, postpad=0, wscale=1.0, useBias=True,
                 name=None, initscheme=None, empty=False, groups=1):
        self._build(inmaps, outmaps, size, stride, pad, dilation, wscale, useBias, name, initscheme, groups,
                    postpad=list(repeat(postpad, self._nd)))
        self.registerBlueprint(locals())


class Deconv1D(_DeconvND):
    _nd, _cls = 1, "Deconv1D"


class Deconv2D(_DeconvND):
    _nd, _cls = 2, "Deconv2D"


class Deconv3D(_DeconvND):
    _nd, _cls = 3, "Deconv3D"


# ---- pooling ---------------------------------------------------------------------------------

def _argmaxMask(x, y, size, stride, pad):
    """int32 of y's shape: for each output, the flat index (within its map of x) of the
    first input in its window equal to the output, the maximum Tessera's pooling chose."""
    nd = len(size)
    spatial = x.shape[2:]
    padded = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad], constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(padded, size, axis=tuple(range(2, 2 + nd)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, o * s, s) for o, s in zip(y.shape[2:], stride))]
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in y.shape[2:])]
    first = np.argmax((win == y[(...,) + (None,) * nd]).reshape(win.shape[:2 + nd] + (-1,)), axis=-1)
    offsets = np.unravel_index(first, size)
    index = np.zeros(y.shape, np.int64)
    for d in range(nd):
        o = np.arange(y.shape[2 + d]).reshape((-1,) + (1,) * (nd - 1 - d))
        index = index * spatial[d] + o * stride[d] - pad[d] + offsets[d]
    return index.astype(np.int32)


def _pool(cls, nd, kind):
    attrs = {"__module__": __name__, "__doc__": f"PuzzleLib's {cls}: window `size`, stride 2 unless given."}
    if kind == "max":
        def __init__(self, size=2, stride=2, pad=0, useMask=False, name=None):
            Module.__init__(self, getattr(ts, cls)(size=list(repeat(size, nd)), stride=list(repeat(stride, nd)),
                                                   pad=list(repeat(pad, nd))), name)
            object.__setattr__(self, "useMask", useMask)
            self.registerBlueprint(locals())

        def mask(self):
            """With useMask: int32 of the output's shape, each output's maximum as its flat
            index within its input map (h * W + w in 2-D); None before a forward."""
            if not self.useMask or self._m.inData is None:
                return None
            bp = self._m.blueprint()["scheme"]
            return tensorOf(_argmaxMask(self._m.inData.get(), self._m.data.get(), tuple(bp["size"]),
                                        tuple(bp["stride"]), tuple(bp["pad"])))

        attrs["mask"] = property(mask)
    else:
        def __init__(self, size=2, stride=2, pad=0, includePad=True, name=None):
            Module.__init__(self, getattr(ts, cls)(size=list(repeat(size, nd)), stride=list(repeat(stride, nd)),
                                                   pad=list(repeat(pad, nd)), includePad=includePad), name)
            self.registerBlueprint(locals())
    attrs["__init__"] = __init__
    return type(cls, (Module,), attrs)


MaxPool1D, MaxPool2D, MaxPool3D = (_pool(f"MaxPool{n}D", n, "max") for n in (1, 2, 3))
AvgPool1D, AvgPool2D, AvgPool3D = (_pool(f"AvgPool{n}D", n, "avg") for n in (1, 2, 3))


# ---- normalisation --------------------------------------------------------------------------

class _BatchNormBase(Module):
    def _init(self, tmod, name, sscale, affine, inplace):
        if not affine:
            raise _unsupported(type(self).__name__, "affine=False")
        Module.__init__(self, tmod, name)
        scale = self._m.getVar("scale")
        # PuzzleLib draws the scale around one
        scale.data = np.random.normal(1.0, sscale, tuple(scale.data.shape)).astype(np.float32)


    def _saved(self, key):
        t = self._m.saved.get(key)
        return None if t is None else t.reshape(self._layout("mean", t.shape))

    @property
    def savemean(self):
        """The batch mean of the last train-mode forward, in PuzzleLib's layout (None before one)."""
        return self._saved("batchMean")

    @property
    def saveinvvar(self):
        """1 / sqrt(batch variance + epsilon) of the last train-mode forward (None before one)."""
        var = self._saved("batchVar")
        if var is None:
            return None
        return ts.tensor((1.0 / np.sqrt(var.get() + self._m.blueprint()["scheme"]["epsilon"])).astype(np.float32),
                         copy=True)


class BatchNorm(_BatchNormBase):
    """Per-activation batch norm of [N, size] (parameters (1, size, 1, 1), PuzzleLib's layout)."""

    _layouts = {n: _channelLayout(2) for n in ("scale", "bias", "mean", "var")}

    def __init__(self, size, epsilon=1e-5, initFactor=1.0, minFactor=0.1, sscale=0.01, affine=True, name=None,
                 empty=False, inplace=False):
        self._init(ts.BatchNorm(size, epsilon=epsilon, initFactor=initFactor, minFactor=minFactor), name, sscale,
                   affine, inplace)
        self.registerBlueprint(locals())


def _batchnorm(nd):
    cls = f"BatchNorm{nd}D"

    def __init__(self, numOfMaps, epsilon=1e-5, initFactor=1.0, minFactor=0.1, sscale=0.01, affine=True, name=None,
                 empty=False, inplace=False):
        self._init(getattr(ts, cls)(numOfMaps, epsilon=epsilon, initFactor=initFactor, minFactor=minFactor), name,
                   sscale, affine, inplace)
        self.registerBlueprint(locals())

    return type(cls, (_BatchNormBase,), {"__init__": __init__, "__module__": __name__,
                                         "_layouts": {n: _channelLayout(nd) for n in
                                                      ("scale", "bias", "mean", "var")}})


BatchNorm1D, BatchNorm2D, BatchNorm3D = (_batchnorm(n) for n in (1, 2, 3))


class InstanceNorm2D(Module):
    _layouts = {n: _channelLayout(2) for n in ("scale", "bias")}

    def __init__(self, numOfMaps, epsilon=1e-5, affine=True, name=None):
        if not affine:
            raise _unsupported("InstanceNorm2D", "affine=False")
        super().__init__(ts.InstanceNorm2D(numOfMaps, epsilon=epsilon), name)
        self.registerBlueprint(locals())


# ---- activations and pointwise --------------------------------------------------------------

class Activation(Module):
    def __init__(self, activation, slc=None, inplace=False, name=None, args=()):
        if slc is not None:
            raise _unsupported("Activation", "slc")
        activation = str(getattr(activation, "value", activation))
        kwargs = {}
        if args:
            if activation == "leakyRelu":
                kwargs["slope"] = args[0]
            elif activation == "elu":
                kwargs["alpha"] = args[0]
            elif activation == "clip":
                kwargs["min"], kwargs["max"] = args
        super().__init__(ts.Activation(activation, **kwargs), name)
        self.registerBlueprint(locals())


class Dropout(Module):
    def __init__(self, p=0.5, rng=None, slicing=None, inplace=False, name=None):
        if slicing is not None:
            raise _unsupported("Dropout", "slicing")
        super().__init__(ts.Dropout(p), name)
        self.registerBlueprint(locals())


    @property
    def rands(self):
        """The mask of the last train-mode forward: 1/(1-p) where kept, 0 where dropped
        (PuzzleLib keeps its raw random numbers under this name; None in eval mode)."""
        return self._m.saved.get("mask")


class Dropout2D(Module):
    def __init__(self, p=0.5, rng=None, slicing=None, inplace=False, name=None):
        if slicing is not None:
            raise _unsupported("Dropout2D", "slicing")
        super().__init__(ts.Dropout2D(p), name)
        self.registerBlueprint(locals())


class RNN(Module):
    """PuzzleLib's RNN: relu cells unless `mode` says, `direction` "uni" or "bi", data
    [T, N, insize]. A bidirectional layer without sequences returns PuzzleLib's pair
    [forward final state, backward final state] (the backward one read at t = 0)."""

    def __init__(self, insize, hsize, layers=1, mode="relu", direction="uni", dropout=0.0, getSequences=False,
                 initscheme=None, modifier="orthogonal", wscale=1.0, hintBatchSize=None, name=None):
        if direction not in ("uni", "bi"):
            raise ModuleError(f"RNN: direction must be 'uni' or 'bi', got {direction!r}")
        self._bi, self._seq, self._hsize = direction == "bi", getSequences, hsize
        # a bidirectional pair is cut from the sequences here (the final state of each direction)
        seqs = getSequences or self._bi
        super().__init__(ts.RNN(insize, hsize, layers=layers, mode=mode, bidirectional=self._bi, getSequences=seqs,
                                dropout=dropout), name)
        self.registerBlueprint(locals())

    @property
    def data(self):
        y = self._m.data
        if not self._bi or self._seq or y is None:
            return y
        h = self._hsize
        return [y[-1][:, :h], y[0][:, h:]]

    def backward(self, grad, updParamGrads=True, updGrad=True, scale=1.0, momentum=0.0):
        if self._bi and not self._seq:
            fwd, bwd = (g.get() if isinstance(g, ts.Tensor) else np.asarray(g, np.float32) for g in grad)
            T = self._m.data.shape[0]
            full = np.zeros((T, fwd.shape[0], 2 * self._hsize), np.float32)
            full[-1, :, :self._hsize], full[0, :, self._hsize:] = fwd, bwd
            grad = full
        Module.backward(self, grad, updParamGrads, updGrad, scale, momentum)

    def _refuse(self, name):
        raise ModuleError(f"RNN {name}: PuzzleLib keeps an RNN's weights as one cuDNN blob; Tessera's layout "
                          f"differs, so RNN files are not exchanged (docs/puzzlelib.md)")

    def _saveInto(self, hdf, varlinks, name, compress):
        self._refuse(name)

    def _loadFrom(self, hdf, name):
        self._refuse(name)

    def dataShapeFrom(self, shape):
        out = Module.dataShapeFrom(self, shape)
        if self._bi and not self._seq:
            return [(out[1], self._hsize), (out[1], self._hsize)]
        return out


# ---- the rest: the same names, arguments and layouts on both sides ---------------------------

def _same(cls, doc=""):
    make = getattr(ts, cls)

    def __init__(self, *args, **kwargs):
        Module.__init__(self, make(*args, **kwargs))
        self.registerBlueprint(dict(zip(make.__signature__.parameters, args), **kwargs))

    __init__.__signature__ = make.__signature__
    return type(cls, (Module,), {"__init__": __init__, "__module__": __name__,
                                 "__doc__": f"PuzzleLib's {cls}, as tessera.{cls} computes it. {doc}".strip()})


for _cls in ("Add", "Concat", "CrossMapLRN", "DepthConcat", "Flatten", "Gelu", "GroupLinear",
             "Identity", "MapLRN", "MoveAxis", "Mul", "MulAddConst", "NoiseInjector",
             "Pad1D", "Pad2D", "Penalty", "Replicate", "Reshape", "SoftMax", "Split",
             "SubtractMean", "Sum", "SwapAxes", "Tile", "Transpose", "Upsample2D", "Upsample3D"):
    globals()[_cls] = _same(_cls)
del _cls


class Cast(Module):
    """PuzzleLib's Cast between float32 and float16 (and Tessera's int32 and bfloat16);
    the types as NumPy dtypes or names. The gradient converts back to `intype`."""

    def __init__(self, intype, outtype, name=None):
        super().__init__(ts.Cast(npDtype(intype), npDtype(outtype)), name)
        self.registerBlueprint(locals())


class SpatialTf(Module):
    """PuzzleLib's SpatialTf: `[data [N, C, H, W], transform [N, 2, 3]]` sampled on the
    transform's grid; `shape` (C, H, W) of the output, None for the input's. Tessera's
    SpatialTf with that height and width (C must be the input's)."""

    def __init__(self, shape=None, name=None):
        if shape is not None and len(shape) != 3:
            raise ModuleError(f"SpatialTf: shape is (C, H, W), got {shape!r}")
        h, w = (shape[1], shape[2]) if shape is not None else (0, 0)
        super().__init__(ts.SpatialTf(height=h, width=w), name)
        self.shape = tuple(shape) if shape is not None else None
        self.registerBlueprint(locals())

    def _checkMaps(self, dshape):
        if self.shape is not None and self.shape[0] != dshape[1]:
            raise ModuleError(f"SpatialTf: shape {self.shape} keeps the input's {dshape[1]} maps (C must be "
                              f"{dshape[1]})")

    def updateData(self, data):
        self._checkMaps(tuple(data[0].shape))
        Module.updateData(self, data)

    def __call__(self, data):
        self.updateData(data)
        return self.data

    def dataShapeFrom(self, shapes):
        self._checkMaps(tuple(shapes[0]))
        return Module.dataShapeFrom(self, shapes)


class Glue(Module):
    """PuzzleLib's Glue: `fwdGlue(data, modules)` and `bwdGlue(grad, modules)` are the
    forward and backward, written with the namespace's modules and tensors (gradients in
    PuzzleLib's sign, as every module here takes and gives them); `fwdShapeGlue` and
    `bwdShapeGlue` the shape functions. It runs in Python on its own: not inside a
    container (Tessera's own `Glue` is the layer for graphs, docs/layers.md)."""

    def __init__(self, modules=None, fwdGlue=None, bwdGlue=None, fwdShapeGlue=None, bwdShapeGlue=None, name=None):
        if modules is not None and not isinstance(modules, dict):
            raise ModuleError("Glue: modules must be a dictionary {name: module}")
        super().__init__(ts.Identity(), name)
        object.__setattr__(self, "modules", modules)
        object.__setattr__(self, "_hooks", (fwdGlue, bwdGlue, fwdShapeGlue, bwdShapeGlue))
        object.__setattr__(self, "_out", None)
        object.__setattr__(self, "_in", None)
        object.__setattr__(self, "_grad", None)
        self.registerBlueprint(locals(), exclude=("modules", "fwdGlue", "bwdGlue", "fwdShapeGlue", "bwdShapeGlue"))

    @property
    def module(self):
        raise ModuleError("Glue: PuzzleLib's Glue runs in Python on its own and cannot join a Tessera container; "
                          "use tessera.Glue (registerGlue) for a layer in a graph")

    def __call__(self, data):
        self.updateData(data)
        return self.data

    def updateData(self, data):
        object.__setattr__(self, "_in", data)
        object.__setattr__(self, "_out", self._hooks[0](data, self.modules))

    def backward(self, grad, updParamGrads=True, updGrad=True, scale=1.0, momentum=0.0):
        if self._hooks[1] is None:
            raise ModuleError("Glue: no backward glue (bwdGlue) is installed")
        object.__setattr__(self, "_grad", self._hooks[1](grad, self.modules))

    @property
    def data(self):
        return self._out

    @property
    def inData(self):
        return self._in

    @property
    def grad(self):
        return self._grad

    def dataShapeFrom(self, shape):
        if self._hooks[2] is None:
            raise ModuleError("Glue: forward shape glue hook (fwdShapeGlue) is not installed")
        return self._hooks[2](shape)

    def gradShapeFrom(self, shape):
        if self._hooks[3] is None:
            raise ModuleError("Glue: backward shape glue hook (bwdShapeGlue) is not installed")
        return self._hooks[3](shape)


def _flatten(data, out):
    """Appends the tensors of a nested list to `out`; returns its structure (None for a
    tensor, a list of structures for a list)."""
    if isinstance(data, (list, tuple)):
        return [_flatten(d, out) for d in data]
    out.append(data)
    return None


def _nest(flat, structure, i=0):
    """The nested list of `structure` filled from `flat` from index i; returns it and the
    next index."""
    if structure is None:
        return flat[i], i + 1
    nested = []
    for s in structure:
        v, i = _nest(flat, s, i)
        nested.append(v)
    return nested, i


def _isShape(s):
    return isinstance(s, tuple) and all(isinstance(v, (int, np.integer)) for v in s)


def _flattenShapes(shapes, out):
    if _isShape(shapes):
        out.append(shapes)
        return None
    return [_flattenShapes(s, out) for s in shapes]


class ToList(Module):
    """PuzzleLib's ToList: a nested list of tensors in, the flat list out (depth first);
    the gradient goes back in the nested form. It is Tessera's `ToList` over the flat list,
    sized to it on each call (in a graph node, to its parents). In a `Sequential` after a
    module with k outputs, give `count=k`."""

    def __init__(self, name=None, count=None):
        super().__init__(ts.ToList(count or 1), name)
        self._structure = None
        self.registerBlueprint(locals())

    def _fit(self, count):
        if self._m.blueprint()["scheme"]["count"] != count:
            m = ts.ToList(count)
            m.name = self._m.name
            if Backend.getDevice() != "cpu":
                m.to(Backend.getDevice())
            object.__setattr__(self, "_m", m)

    def __call__(self, data):
        self.updateData(data)
        return self.data

    def updateData(self, data):
        flat = []
        self._structure = _flatten(data, flat)
        self._fit(len(flat))
        self._m(_inputs(flat))

    @property
    def grad(self):
        g = negated(self._m.grad)
        return g if self._structure is None else _nest(g, self._structure)[0]

    def dataShapeFrom(self, shapes):
        flat = []
        _flattenShapes(shapes, flat)
        return flat

    def gradShapeFrom(self, shapes):
        shapes = [tuple(s) for s in shapes]
        return shapes if self._structure is None else _nest(shapes, self._structure)[0]


class MaxUnpool2D(Module):
    def __init__(self, maxpool, name=None):
        super().__init__(ts.MaxUnpool2D(maxpool.module if isinstance(maxpool, Module) else maxpool), name)
        self.registerBlueprint(locals())


class LCN(_same("LCN")):
    @property
    def means(self):
        """The window means of the last forward (None before one)."""
        return self._m.saved.get("means")


class PRelu(Module):
    def __init__(self, maps, inplace=False, sharedMaps=False, name=None):
        super().__init__(ts.PRelu(maps, sharedMaps=sharedMaps), name)
        self.registerBlueprint(locals())


class KMaxPool(Module):
    """PuzzleLib's KMaxPool: the `topk` largest values along `axis`, in ascending order
    (Tessera's keeps them in the input's order; the namespace sorts them and routes the
    gradient back through the same permutation)."""

    def __init__(self, topk, axis, name=None):
        super().__init__(ts.KMaxPool(topk, axis), name)
        self._axis, self._perm = axis, None
        self.registerBlueprint(locals())

    def __call__(self, data):
        self._m(_inputs(data))
        self._perm = np.argsort(self._m.data.get(), axis=self._axis, kind="stable")
        return self.data

    @property
    def data(self):
        y = self._m.data
        if y is None or self._perm is None:
            return y
        return Backend.gpuarray.to_gpu(np.take_along_axis(y.get(), self._perm, axis=self._axis))

    def backward(self, grad, updParamGrads=True, updGrad=True, scale=1.0, momentum=0.0):
        g = grad.get() if isinstance(grad, ts.Tensor) else np.asarray(grad, np.float32)
        inOrder = np.empty_like(g)
        np.put_along_axis(inOrder, self._perm, g, axis=self._axis)
        Module.backward(self, inOrder, updParamGrads, updGrad, scale, momentum)


class Slice(Module):
    """PuzzleLib's Slice: `Slice()[:, :, 1:-1, 1:-1]` (or `Slice(slc=...)`) keeps a range of
    each dim it names, as Tessera's Slice over those axes (steps too: `[:, ::2]`, `[:, ::-1]`)."""

    def __init__(self, slc=None, name=None):
        super().__init__(ts.Identity(), name)
        self.slc = None
        if slc is not None:
            self._build(slc)
        self.registerBlueprint(locals())

    def __getitem__(self, slc):
        self._build(slc)
        return self

    def _build(self, slc):
        slc = slc if isinstance(slc, tuple) else (slc,)
        axes, starts, ends, steps = [], [], [], []
        for axis, part in enumerate(slc):
            if not isinstance(part, slice):
                raise ModuleError(f"Slice: dim {axis} takes a range (start:stop), got {part!r}")
            step = 1 if part.step is None else part.step
            if step == 0:
                raise ModuleError(f"Slice: dim {axis} has step 0")
            if part.start is None and part.stop is None and step == 1:
                continue
            axes.append(axis)
            if step > 0:
                starts.append(part.start or 0)
                ends.append(part.stop if part.stop is not None else 2 ** 62)
            else:  # backwards: from the last element, through index 0 (Tessera's end 0)
                if part.stop == 0:
                    raise ModuleError(f"Slice: dim {axis}: a backward range stopping before index 0 needs the "
                                      f"dim's size; write the stop as -size")
                starts.append(-1 if part.start is None else part.start)
                ends.append(0 if part.stop is None else part.stop)
            steps.append(step)
        m = ts.Slice(axes, starts, ends, step=steps) if axes else ts.Identity()
        m.name = self._m.name
        self.slc = slc
        object.__setattr__(self, "_m", m)
        if Backend.getDevice() != "cpu":
            m.to(Backend.getDevice())


class GroupLinear(Module):
    """PuzzleLib's GroupLinear: data [N, groups, insize] (batchDim 0) or [groups, N, insize]
    (batchDim 1), a weight [groups, insize, outsize] per group; inmode="one": one group of
    data [N, 1, insize] for every weight group; wmode="one": one weight [1, insize, outsize]
    for every group. Tessera's GroupLinear with the same modes; with groups=None (wmode
    "one"), Tessera's Linear over the last axis, for any number of groups."""

    def __init__(self, groups, insize, outsize, wscale=1.0, useW=True, useBias=True, initscheme=None,
                 inmode="full", wmode="full", batchDim=0, name=None, empty=False, transpW=False):
        if not useW:
            raise _unsupported("GroupLinear", "useW=False")
        if transpW:
            raise _unsupported("GroupLinear", "transpW=True")
        if inmode not in ("full", "one") or wmode not in ("full", "one"):
            raise ModuleError(f"GroupLinear: inmode and wmode are 'full' or 'one', got {inmode!r}, {wmode!r}")
        if batchDim not in (0, 1):
            raise ModuleError(f"GroupLinear: batchDim is 0 or 1, got {batchDim}")
        if groups is None and (wmode == "full" or inmode == "one"):
            raise ModuleError("GroupLinear: groups=None needs wmode='one' and inmode='full'")
        self._overGroups = groups is None
        if self._overGroups:
            inner = ts.Linear(insize, outsize, useBias=useBias)
        else:
            inner = ts.GroupLinear(groups, insize, outsize, batchDim=batchDim, useBias=useBias, inmode=inmode,
                                   wmode=wmode)
        super().__init__(inner, name)
        _initWeights(self, initscheme, wscale, factorShape=(insize, outsize))
        self.registerBlueprint(locals())

    @property
    def _layouts(self):
        if self._overGroups:  # Linear's [in, out] and [out] as PuzzleLib's [1, in, out] and [1, out]
            return {"W": lambda s: (1,) + s, "b": lambda s: (1,) + s}
        return {}


class Embedder(Module):
    """PuzzleLib's Embedder: int32 ids [N, sentlength] -> [N, sentlength, embsize]; an id of
    -1 is padding (a zero vector, no gradient); `vocabulary` is a size or a {word: id}
    dict (getVocabulary() gives it back); onVocabulary(W) may fill the initial weights."""

    def __init__(self, vocabulary, sentlength, embsize, onVocabulary=None, initscheme="uniform", wscale=1.0,
                 learnable=True, name=None):
        if isinstance(vocabulary, dict):
            size = len(vocabulary)
            self._vocab = {str(w): int(i) for w, i in vocabulary.items()}
        elif isinstance(vocabulary, int):
            size, self._vocab = vocabulary, {}
        else:
            raise ModuleError("Embedder: vocabulary must be a size or a {word: id} dict, got "
                              f"{type(vocabulary).__name__}")
        self._pad = None
        super().__init__(ts.Embedder(size, sentlength, embsize, initscheme=initscheme, wscale=wscale,
                                     learnable=learnable), name)
        if onVocabulary is not None:
            W = self.W.get()
            onVocabulary(W)
            self.setVar("W", W)
        self.registerBlueprint({"vocabulary": size, "sentlength": sentlength, "embsize": embsize,
                                "initscheme": initscheme, "wscale": wscale, "learnable": learnable, "name": name})

    def getVocabulary(self):
        return dict(self._vocab)

    def __call__(self, data):
        ids = data.get() if isinstance(data, ts.Tensor) else np.asarray(data)
        if ids.dtype != np.int32:
            raise ModuleError(f"Embedder: expects int32 ids, got {ids.dtype}")
        if ids.size and ids.min() < -1:
            raise ModuleError(f"Embedder: ids are -1 (padding) or more, found {ids.min()}")
        self._pad = ids == -1
        self._m(Backend.gpuarray.to_gpu(np.where(self._pad, 0, ids).astype(np.int32)))
        return self.data

    @property
    def data(self):
        y = self._m.data
        if y is None or self._pad is None or not self._pad.any():
            return y
        out = y.get()
        out[self._pad] = 0.0
        return Backend.gpuarray.to_gpu(out)

    def backward(self, grad, updParamGrads=True, updGrad=True, scale=1.0, momentum=0.0):
        g = grad.get() if isinstance(grad, ts.Tensor) else np.array(grad, np.float32)
        if self._pad is not None and self._pad.any():
            g = g.copy()
            g[self._pad] = 0.0  # padding trains nothing
        Module.backward(self, g, updParamGrads, updGrad, scale, momentum)
