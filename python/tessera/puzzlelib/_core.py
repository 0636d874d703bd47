"""What the namespace's classes share: PuzzleLib's Module and Variable over a Tessera
module, and the sign and layout conversions at their boundary."""

import numpy as np

import tessera as ts

from . import Backend


class ModuleError(Exception):
    """PuzzleLib's ModuleError (Tessera's own errors pass through unchanged)."""


def tensorOf(x):
    """A Tensor (on the namespace's device) for a Tensor, an array or a number."""
    if isinstance(x, ts.Tensor):
        return x
    return Backend.gpuarray.to_gpu(np.asarray(x, dtype=np.int32 if np.asarray(x).dtype.kind in "iu" else np.float32))


def inputs(x):
    """Data as Tessera takes it: a Tensor, or a list of them."""
    if isinstance(x, (list, tuple)):
        return [inputs(v) for v in x]
    return tensorOf(x)


def negated(x, scale=1.0):
    """-scale * x as a new tensor on x's device (a list: each); None stays None. PuzzleLib's
    gradients carry the descent sign (-dL/dx), Tessera's are dL/dx."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [negated(v, scale) for v in x]
    t = tensorOf(x)
    out = ts.tensor(np.ascontiguousarray(-scale * t.get()), copy=True)
    return out if t.device == "cpu" else out.to(t.device)


def npDtype(T):
    """'float32', 'float16', ... for a NumPy dtype or type (PuzzleLib's calcMode(np.float16))."""
    if isinstance(T, str):
        return T
    return np.dtype(T).name


class Variable:
    """PuzzleLib's Variable over one of Tessera's parameters, in PuzzleLib's layout.

    `data` shares memory with the parameter (writes through `set`/`fill` change it);
    `grad` is PuzzleLib's -dL/dW, a new tensor made at each read from Tessera's dL/dW, so
    clear gradients with `zeroGradParams`, not by writing into it."""

    def __init__(self, tvar, shape=None):
        self._v = tvar
        self._shape = tuple(shape) if shape is not None else tuple(tvar.data.shape)
        self.learnRate, self.momRate, self.wc = 1.0, 1.0, 0.0
        self.updater = None

    @property
    def data(self):
        d = self._v.data
        return d if tuple(d.shape) == self._shape else d.reshape(self._shape)

    @property
    def grad(self):
        g = self._v.grad
        if g is None:
            return None
        return negated(g if tuple(g.shape) == self._shape else g.reshape(self._shape))

    @property
    def hasUpdater(self):
        return False

    def set(self, variable):
        self.data.set(variable.data.get() if isinstance(variable, Variable) else variable)

    def __repr__(self):
        return f"tessera.puzzlelib.Variable(shape={self._shape})"


class Module:
    """PuzzleLib's Module: a layer (or container) of Tessera's seen through PuzzleLib's
    names, layouts and gradient sign.

    - `mod(data)` runs Tessera's forward and returns `mod.data`;
    - `mod.backward(grad)` takes PuzzleLib's gradient (-dL/dout) and leaves `mod.grad`
      (-dL/din) and the parameters' gradients (-dL/dW, read through `vars[...].grad`);
    - `updateParams(lr)` steps down the gradient, as PuzzleLib's W += lr * grad does;
    - `mod.W`, `mod.b`, `mod.scale`, ... are the parameters and attributes in PuzzleLib's
      shapes, sharing memory with Tessera's.
    Every computation is Tessera's: this class converts at the boundary only."""

    # name -> function(Tessera shape) -> PuzzleLib shape, for parameters and attributes
    _layouts = {}

    def __init__(self, tmod, name=None):
        object.__setattr__(self, "_m", tmod)
        object.__setattr__(self, "_blueprint", {})
        if name is not None:
            tmod.name = name
        if Backend.getDevice() != "cpu":
            tmod.to(Backend.getDevice())

    # ---- naming and blueprints ----
    @property
    def name(self):
        return self._m.name or None

    @name.setter
    def name(self, value):
        self._m.name = "" if value is None else str(value)

    def registerBlueprint(self, args, exclude=()):
        self._blueprint = {k: (None if k in exclude else v) for k, v in args.items()
                           if k not in ("self", "__class__")}

    def getBlueprint(self):
        return {"classname": type(self).__name__, "scheme": dict(self._blueprint)}

    @property
    def _owner(self):
        """The Tessera module holding this one's parameters (the module itself, or the
        layer inside a composition such as GroupLinear's tile-then-multiply)."""
        return object.__getattribute__(self, "_m")

    @property
    def module(self):
        """The Tessera module underneath (tessera.Linear, tessera.Sequential, ...)."""
        return self._m

    # ---- forward and backward ----
    def __call__(self, data):
        self._m(inputs(data))
        return self.data

    @property
    def data(self):
        return self._m.data

    @property
    def inData(self):
        return self._m.inData

    @property
    def grad(self):
        return negated(self._m.grad)

    def backward(self, grad, updParamGrads=True, updGrad=True, scale=1.0, momentum=0.0):
        self._m.backward(negated(grad), updParamGrads=updParamGrads, updGrad=updGrad, scale=scale,
                         momentum=momentum)

    def updateData(self, data):
        self._m(inputs(data))

    def dataShapeFrom(self, shape):
        return _shapes(self._m.dataShapeFrom(shape))

    def gradShapeFrom(self, shape):
        return _shapes(self._m.gradShapeFrom(shape))

    # ---- parameters ----
    def _layout(self, name, shape):
        f = self._layouts.get(name)
        return f(tuple(shape)) if f else tuple(shape)

    @property
    def vars(self):
        return {n: Variable(v, self._layout(n, v.data.shape)) for n, v in self._owner.namedParams().items()}

    @property
    def attrs(self):
        return {n: (t if tuple(t.shape) == self._layout(n, t.shape) else t.reshape(self._layout(n, t.shape)))
                for n, t in self._owner.namedAttrs().items()}

    def getVar(self, name):
        try:
            return self.vars[name]
        except KeyError:
            raise ModuleError(f"{self}: no variable '{name}' (it has {sorted(self.vars)})") from None

    def setVar(self, name, var):
        """Copies `var`'s value (a Variable, tensor or array of PuzzleLib's shape) into the parameter."""
        mine = self.getVar(name)
        value = var.data if isinstance(var, Variable) else var
        value = value.get() if isinstance(value, ts.Tensor) else np.asarray(value, dtype=np.float32)
        if tuple(value.shape) != mine._shape:
            raise ModuleError(f"{self}: variable '{name}' has shape {mine._shape}, got {tuple(value.shape)}")
        mine._v.data = value.reshape(mine._v.data.shape)

    def hasAttr(self, name):
        return name in self._owner.namedAttrs()

    def getVarTable(self):
        return {v: [n] for n, v in self.vars.items()}

    def __getattr__(self, name):
        # W, b, scale, bias, mean, var, ...: PuzzleLib's attributes
        if name.startswith("_"):
            raise AttributeError(name)
        m = self._owner
        params = m.namedParams()
        if name in params:
            return Variable(params[name], self._layout(name, params[name].data.shape)).data
        tattrs = m.namedAttrs()
        if name in tattrs:
            return self.attrs[name]
        raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")

    def numOfParams(self):
        return self._m.numOfParams()

    def paramSize(self, unit=None):
        size = self._m.paramSize()
        return size / {"kb": 1024, "mb": 1024 ** 2}[unit] if unit else size

    def zeroGradParams(self):
        self._m.zeroGradParams()

    def updateParams(self, learnRate):
        self._m.updateParams(learnRate)

    # ---- modes ----
    @property
    def train(self):
        return self._m.train

    def trainMode(self):
        self._m.trainMode()

    def evalMode(self):
        self._m.evalMode()

    def calcMode(self, T):
        self._m.calcMode(npDtype(T))

    @property
    def calctype(self):
        return np.dtype(self._m.computeDType) if self._m.computeDType != "bfloat16" else self._m.computeDType

    def reset(self):
        self._m.reset()

    def optimizeForShape(self, shape, memlimit=None):
        pass  # Tessera picks its algorithms itself

    # ---- files: PuzzleLib's HDF5 layout ----
    def save(self, hdf=None, varlinks=None, name=None, compress="gzip", assumeUniqueNames=False,
             withBlueprint=False, isRoot=True):
        """Writes the parameters and attributes as PuzzleLib does (params/<i>,
        links/<module path>.<param>, attrs/<module path>.<attr>, PuzzleLib's shapes), so
        PuzzleLib reads the file and `load` reads PuzzleLib's. `hdf`: a path, an open
        h5py File, or None for the file's bytes."""
        return _hdfSave(self, hdf, name, compress, withBlueprint)

    def load(self, hdf, initvars=None, name=None, assumeUniqueNames=False, isRoot=True):
        """Reads parameters and attributes written by PuzzleLib's save (or this one): every
        name this module needs must be in the file, with PuzzleLib's shape."""
        _hdfLoad(self, hdf, name)

    def _saveInto(self, hdf, varlinks, name, compress):
        params, links = hdf.require_group("params"), hdf.require_group("links")
        for pname, var in self.vars.items():
            idx = len(varlinks)
            varlinks.append(idx)
            params.create_dataset(str(idx), data=var.data.get(), compression=compress)
            links[f"{name}.{pname}"] = idx
        attrs = self.attrs
        if attrs:
            group = hdf.require_group("attrs")
            for aname, t in attrs.items():
                group.create_dataset(f"{name}.{aname}", data=t.get(), compression=compress)

    def _loadFrom(self, hdf, name):
        for pname, var in self.vars.items():
            key = f"{name}.{pname}"
            if "links" not in hdf or key not in hdf["links"]:
                raise ModuleError(f"Module {name} load error: the file has no parameter '{key}'")
            param = np.array(hdf["params"][str(hdf["links"][key][()])])
            if tuple(param.shape) != var._shape:
                raise ModuleError(f"Module {name} load error: '{key}' has shape {tuple(param.shape)} in the file, "
                                  f"the module {var._shape}")
            var._v.data = param.astype(np.float32).reshape(var._v.data.shape)
        for aname, t in self.attrs.items():
            key = f"{name}.{aname}"
            if "attrs" not in hdf or key not in hdf["attrs"]:
                raise ModuleError(f"Module {name} load error: the file has no attribute '{key}'")
            value = np.array(hdf["attrs"][key])
            if tuple(value.shape) != tuple(t.shape):
                raise ModuleError(f"Module {name} load error: '{key}' has shape {tuple(value.shape)} in the file, "
                                  f"the module {tuple(t.shape)}")
            t.set(value.astype(np.float32))

    # ---- graphs ----
    def node(self, *nodes):
        from .Containers import Node
        return Node(self, parents=None if len(nodes) == 0 else list(nodes))

    def __str__(self):
        return f"Module {type(self).__name__} (name: {self.name})"

    __repr__ = __str__


def _shapes(s):
    if isinstance(s, list):
        return [tuple(x) for x in s]
    return tuple(s)


def repeat(val, ntimes):
    return (val,) * ntimes if isinstance(val, int) else tuple(val)


def _openHdf(hdf, mode):
    import h5py
    if isinstance(hdf, str):
        return h5py.File(hdf, mode), True
    if isinstance(hdf, (bytes, bytearray)):
        import io
        return h5py.File(io.BytesIO(hdf), "r"), True
    return hdf, False


def _hdfSave(module, hdf, name, compress, withBlueprint):
    import io
    import json
    import h5py
    buffer = io.BytesIO() if hdf is None else None
    f, own = (h5py.File(buffer, "w"), True) if hdf is None else _openHdf(hdf, "w")
    try:
        root = name if name is not None else (module.name or "")
        module._saveInto(f, [], root, compress)
        if withBlueprint:
            f.create_dataset("blueprint", (), dtype=h5py.special_dtype(vlen=str),
                             data=json.dumps(module.getBlueprint(), indent=4, sort_keys=True, default=str))
    finally:
        if own:
            f.close()
    return buffer.getvalue() if buffer is not None else None


def _hdfLoad(module, hdf, name):
    f, own = _openHdf(hdf, "r")
    try:
        module._loadFrom(f, name if name is not None else (module.name or ""))
    finally:
        if own:
            f.close()
