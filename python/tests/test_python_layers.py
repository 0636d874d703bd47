"""Layers written in Python: class M(tessera.Module) with updateData, updateGrad,
accGradParams and dataShapeFrom, PuzzleLib's way."""

import numpy as np
import pytest

import tessera as ts


class Swish(ts.Module):
    """y = x * sigmoid(beta x), beta learned per feature."""

    def __init__(self, features, name=None):
        super().__init__(name or "")
        self.features = features
        self.setVar("beta", np.ones(features, np.float32))

    def dataShapeFrom(self, shape):
        if len(shape) != 2 or shape[1] != self.features:
            raise ValueError(f"expects [N, {self.features}], got {shape}")
        return shape

    def _parts(self):
        x, b = self.inData.numpy(), self.getVar("beta").data.numpy()
        return x, b, 1 / (1 + np.exp(-b * x))

    def updateData(self, x):
        x, b = x.numpy(), self.getVar("beta").data.numpy()
        return x / (1 + np.exp(-b * x))

    def updateGrad(self, grad):
        x, b, s = self._parts()
        return grad.numpy() * (s + b * x * s * (1 - s))

    def accGradParams(self, grad, scale, momentum):
        x, b, s = self._parts()
        g = self.getVar("beta").grad.numpy()
        g[:] = scale * (grad.numpy() * x * x * s * (1 - s)).sum(axis=0) + momentum * g


class SplitHalves(ts.Module):
    """Two outputs: the first and second half of the features; no parameters."""

    outputs = 2

    def dataShapeFrom(self, shape):
        n, f = shape
        return [(n, f // 2), (n, f - f // 2)]

    def updateData(self, x):
        x = x.numpy()
        return [x[:, :x.shape[1] // 2].copy(), x[:, x.shape[1] // 2:].copy()]

    def updateGrad(self, grads):
        return np.concatenate([g.numpy() for g in grads], axis=1)


def test_forward_backward_and_gradcheck():
    m = Swish(4, name="sw")
    assert isinstance(m, ts.Module) and m.classname == "Swish" and m.name == "sw"
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(m(x).numpy(), x / (1 + np.exp(-x)), rtol=1e-6)
    assert ts.gradcheck(m, (3, 4))
    assert ts.gradcheck(SplitHalves(), (2, 6))
    assert m.numOfParams() == 4 and list(m.namedParams()) == ["beta"]


def test_shape_checked_in_graphs_with_the_layers_name():
    net = ts.Sequential().append(ts.Linear(3, 4)).append(Swish(4)).append(ts.Linear(4, 2))
    assert net.dataShapeFrom((7, 3)) == (7, 2)
    bad = ts.Sequential().append(ts.Linear(3, 5)).append(Swish(4, name="bad"))
    with pytest.raises(ts.ShapeError, match=r"Swish 'bad': expects \[N, 4\], got \(7, 5\)"):
        bad.dataShapeFrom((7, 3))
    x = ts.Identity(name="x").node()
    halves = SplitHalves(name="halves").node(x)
    g = ts.Graph(inputs=x, outputs=ts.Add().node((halves, 0), (halves, 1)))
    assert g.dataShapeFrom((5, 8)) == (5, 4)
    y = np.arange(16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(g(y).numpy(), y[:, :4] + y[:, 4:])


def test_trains_in_a_graph_and_saves_with_its_arguments(tmp_path):
    ts.manualSeed(3)
    x = ts.Identity(name="x").node()
    h = Swish(8, name="act").node(ts.Linear(2, 8).node(x))
    g = ts.Graph(inputs=x, outputs=ts.Linear(8, 2).node(h))
    opt = ts.Adam(alpha=0.05)
    opt.setupOn(g, True)
    xs = np.random.default_rng(1).standard_normal((64, 2)).astype(np.float32)
    ys = ((xs[:, 0] * xs[:, 1]) > 0).astype(np.int32)
    cost = ts.CrossEntropy()
    first = None
    for _ in range(200):
        error, grad = cost(g(xs), ys)
        first = error if first is None else first
        opt.zeroGradParams()
        g.backward(grad)
        opt.update()
    assert error < 0.5 * first
    beta = g.getByName("act").getVar("beta").data.numpy().copy()
    assert not np.allclose(beta, 1.0)  # the Python layer's parameter trained
    assert g.getByName("act").blueprint() == {"classname": "python:test_python_layers.Swish",
                                               "scheme": {"name": "act", "features": 8}}
    path = str(tmp_path / "swish.h5")
    g.save(path)
    back = ts.load(path)
    g.evalMode()
    back.evalMode()
    np.testing.assert_array_equal(back(xs).numpy(), g(xs).numpy())
    act = back.getByName("act")
    assert isinstance(act, Swish) and act.features == 8
    np.testing.assert_array_equal(act.getVar("beta").data.numpy(), beta)
    twin = g.copy()
    np.testing.assert_array_equal(twin(xs).numpy(), g(xs).numpy())


def test_mistakes_are_clear_errors():
    class NoForward(ts.Module):
        def dataShapeFrom(self, shape):
            return shape

    with pytest.raises(AttributeError, match="updateData"):
        NoForward()(np.zeros((2, 3), np.float32))

    class NoGrad(ts.Module):
        def dataShapeFrom(self, shape):
            return shape

        def updateData(self, x):
            return x

    m = NoGrad(name="ng")
    m(np.zeros((2, 3), np.float32))
    with pytest.raises(ts.ModuleError, match="NoGrad 'ng'.*has no updateGrad"):
        m.backward(np.zeros((2, 3), np.float32))

    class WrongShape(NoGrad):
        def updateData(self, x):
            return np.zeros((1, 1), np.float32)

    with pytest.raises(ts.ModuleError, match="WrongShape"):
        WrongShape()(np.zeros((2, 3), np.float32))
    with pytest.raises(ts.ModuleError, match=r"WrongShape.*output 0 of shape \[1, 1\], dataShapeFrom says \[2, 3\]"):
        WrongShape()(np.zeros((2, 3), np.float32))
    assert repr(Swish.__new__(Swish)) == "<Swish, not constructed>"  # an __init__ that failed early
    with pytest.raises(ts.ModuleError, match="cannot be found"):
        ts.buildModule({"classname": "python:no_such_module.Layer", "scheme": {}})


def test_layers_are_freed_when_nothing_holds_them():
    import gc
    import weakref
    # The layer and its module hold each other: the garbage collector frees the pair once
    # neither Python nor a container holds the layer.
    m = Swish(4, name="freed")
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None
    # A container keeps it (and its Python methods) alive after Python lets go of it.
    layer = Swish(4, name="kept")
    ref = weakref.ref(layer)
    net = ts.Sequential().append(ts.Linear(3, 4)).append(layer)
    del layer
    gc.collect()
    assert ref() is not None
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    assert net(x).numpy().shape == (2, 4)
    del net
    gc.collect()
    assert ref() is None
