"""Every layer by PuzzleLib's name and keyword arguments, checked against the factory."""

import inspect

import numpy as np
import pytest

import tessera as ts

F = "float32"
I = "int32"  # noqa: E741

# classname -> (positional args, keyword args, [(input shape, dtype)]): one construction
# per layer the factory builds.
EXAMPLES = {
    "Linear": ((8, 4), {}, [((2, 8), F)]),
    "Conv1D": ((3, 4, 3), {"pad": 1}, [((2, 3, 10), F)]),
    "Conv2D": ((), {"inmaps": 3, "outmaps": 4, "size": 3, "pad": 1, "stride": 2}, [((2, 3, 8, 8), F)]),
    "Conv3D": ((2, 3, 3), {"pad": 1}, [((1, 2, 4, 4, 4), F)]),
    "Deconv1D": ((3, 4, 3), {}, [((2, 3, 5), F)]),
    "Deconv2D": ((3, 4, 3), {"stride": 2}, [((2, 3, 4, 4), F)]),
    "Deconv3D": ((2, 3, 3), {}, [((1, 2, 3, 3, 3), F)]),
    "MaxPool1D": ((), {"size": 2}, [((2, 3, 8), F)]),
    "MaxPool2D": ((), {"size": 3, "stride": 2, "pad": 1}, [((2, 3, 8, 8), F)]),
    "MaxPool3D": ((), {}, [((1, 2, 4, 4, 4), F)]),
    "AvgPool1D": ((), {"size": 2}, [((2, 3, 8), F)]),
    "AvgPool2D": ((2,), {"includePad": False}, [((2, 3, 8, 8), F)]),
    "AvgPool3D": ((), {}, [((1, 2, 4, 4, 4), F)]),
    "GlobalAvgPool": ((), {}, [((2, 3, 4, 4), F)]),
    "KMaxPool": ((), {"topk": 2, "axis": 2}, [((2, 3, 5), F)]),
    "GatherElements": ((), {"axis": 1}, [((2, 5, 4), F), ((2, 3, 4), I)]),
    "CumSum": ((), {"axis": 1, "reverse": True}, [((2, 5, 4), F)]),
    "ScatterElements": ((), {"axis": 1}, [((2, 5, 4), F), ((2, 3, 4), I), ((2, 3, 4), F)]),
    "TopK": ((2,), {"axis": 1}, [((2, 5, 4), F)]),
    "BatchNorm": ((4,), {}, [((3, 4), F)]),
    "BatchNorm1D": ((4,), {}, [((3, 4, 5), F)]),
    "BatchNorm2D": ((4,), {"epsilon": 1e-3}, [((3, 4, 5, 5), F)]),
    "BatchNorm3D": ((2,), {}, [((2, 2, 3, 3, 3), F)]),
    "InstanceNorm2D": ((3,), {}, [((2, 3, 4, 4), F)]),
    "LayerNorm": (((4, 5),), {"epsilon": 1e-3}, [((2, 3, 4, 5), F)]),
    "RMSNorm": ((8,), {}, [((2, 3, 8), F)]),
    "GroupNorm": ((2, 6), {"affine": False}, [((2, 6, 3, 3), F)]),
    "CrossMapLRN": ((), {"N": 3}, [((2, 4, 5, 5), F)]),
    "MapLRN": ((), {"N": 3}, [((2, 4, 5, 5), F)]),
    "LCN": ((), {"N": 3}, [((2, 3, 6, 6), F)]),
    "SubtractMean": ((), {"size": 3}, [((2, 3, 6, 6), F)]),
    "Activation": ((ts.tanh,), {}, [((2, 5), F)]),
    "Gelu": ((), {}, [((2, 5), F)]),
    "PRelu": ((3,), {}, [((2, 3, 4, 4), F)]),
    "SoftMax": ((), {}, [((2, 5), F)]),
    "LogSoftMax": ((), {"axis": -1}, [((2, 5), F)]),
    "ArgMax": ((), {"axis": 1, "keepDims": False}, [((2, 5, 3), F)]),
    "ArgMin": ((), {"axis": -1}, [((2, 5, 3), F)]),
    "Dropout": ((), {"p": 0.3}, [((2, 5), F)]),
    "Dropout2D": ((), {"p": 0.3}, [((2, 3, 4, 4), F)]),
    "NoiseInjector": ((), {"mode": "mul", "noisetype": "gaussian", "params": [1.0, 0.1]}, [((2, 5), F)]),
    "Penalty": ((), {"mode": "l2", "weight": 0.1}, [((2, 5), F)]),
    "MulAddConst": ((), {"a": 2.0, "b": 1.0}, [((2, 5), F)]),
    "Pow": ((3.0,), {"scale": 0.5}, [((2, 5), F)]),
    "Pad1D": ((), {"pad": [1, 2]}, [((2, 3, 5), F)]),
    "Pad2D": ((), {"pad": [1, 1, 2, 2], "mode": "reflect"}, [((2, 3, 5, 5), F)]),
    "Upsample2D": ((), {"scale": 2}, [((2, 3, 4, 4), F)]),
    "Upsample3D": ((), {"scale": 2, "mode": "linear"}, [((1, 2, 2, 2, 2), F)]),
    "Resize2D": (([3, 7],), {"mode": "linear", "alignCorners": True}, [((2, 3, 4, 4), F)]),
    "Resize3D": (([2, 3, 1],), {}, [((1, 2, 3, 2, 2), F)]),
    "Embedder": ((10, 6, 4), {}, [((2, 6), I)]),
    "GroupLinear": ((3, 4, 5), {}, [((2, 3, 4), F)]),
    "RNN": ((4, 6), {"mode": "gru", "getSequences": True, "bidirectional": True}, [((5, 2, 4), F)]),
    "Flatten": ((), {}, [((2, 3, 4), F)]),
    "Reshape": (((2, 12),), {}, [((2, 3, 4), F)]),
    "Identity": ((), {}, [((2, 3), F)]),
    "Transpose": (((0, 2, 1),), {}, [((2, 3, 4), F)]),
    "SwapAxes": ((1, 2), {}, [((2, 3, 4), F)]),
    "MoveAxis": ((1, 2), {}, [((2, 3, 4), F)]),
    "Tile": ((1, 3), {}, [((2, 3, 4), F)]),
    "Cast": ((), {"intype": "int32", "outtype": "float32"}, [((2, 5), I)]),
    "ReduceMean": ((), {"axes": [2]}, [((2, 3, 4), F)]),
    "ReduceSum": ((), {"axes": [0, 2]}, [((2, 3, 4), F)]),
    "GridSample": ((), {"mode": "bicubic", "padding": "reflection"}, [((2, 3, 4, 5), F), ((2, 3, 2, 2), F)]),
    "SpatialTf": ((), {"height": 3, "width": 5}, [((2, 3, 4, 4), F), ((2, 2, 3), F)]),
    "Concat": ((), {"axis": 1}, [((2, 3), F), ((2, 4), F)]),
    "DepthConcat": ((), {}, [((2, 3, 4, 4), F), ((2, 2, 4, 4), F)]),
    "Split": ((1, [2, 3]), {}, [((2, 5), F)]),
    "Slice": ((1, 1, 3), {}, [((2, 5), F)]),
    "Replicate": ((2,), {}, [((2, 5), F)]),
    "ToList": ((), {"count": 2}, [((2, 5), F), ((2, 3), F)]),
    "Add": ((), {"coefficients": [1.0, -2.0]}, [((2, 5), F), ((2, 5), F)]),
    "Mul": ((), {}, [((2, 5), F), ((2, 1), F)]),
    "Sum": ((2,), {}, [((2, 3, 4, 5), F), ((2, 3, 4), F)]),
    "MatMul": ((), {"transB": True, "alpha": 0.5}, [((2, 3, 4, 5), F), ((3, 6, 5), F)]),
    "Parameter": (((1, 8),), {"std": 0.02}, [((3, 5), F)]),
    "Scale": (((4, 1, 1),), {"init": 1e-6}, [((2, 4, 3, 3), F)]),
    "DropPath": ((), {"p": 0.2}, [((4, 3, 5), F)]),
    "ScaledDotProductAttention": ((), {"causal": True}, [((2, 3, 5, 8), F), ((2, 3, 5, 8), F), ((2, 3, 5, 4), F)]),
    "MultiheadAttention": ((8, 2), {"causal": True, "keyPaddingMask": True}, [((2, 5, 8), F), ((2, 5), F)]),
    "PositionalEncoding": ((), {"base": 100.0}, [((2, 5, 6), F)]),
    "Sub": ((), {}, [((2, 5), F), ((2, 5), F)]),
    "Div": ((), {}, [((2, 5), F), ((2, 5), F)]),
}
# Built by the factory, but not from keyword arguments alone: Glue runs C++ functions
# registered under its kind (none are, here), MaxUnpool2D takes the pool it inverts
# (tessera.MaxUnpool2D(pool), tested below), containers have classes of their own.
NOT_BY_KEYWORD = {"Glue", "MaxUnpool2D", "Sequential", "Parallel", "Graph"}


def inputs(spec, rng):
    out = []
    for shape, dtype in spec:
        if dtype == I:
            out.append(rng.integers(0, 5, size=shape).astype(np.int32))
        else:
            out.append(rng.uniform(0.5, 1.5, size=shape).astype(np.float32))
    return out


def test_every_factory_class_has_a_python_class():
    names = set(ts.factoryClassnames())
    assert names - NOT_BY_KEYWORD == set(EXAMPLES), "a layer without a Python example or class"
    for name in names - {"Sequential", "Parallel", "Graph"}:
        assert callable(getattr(ts, name)), name


@pytest.mark.parametrize("classname", sorted(EXAMPLES))
def test_layer_by_keyword(classname):
    args, kwargs, spec = EXAMPLES[classname]
    cls = getattr(ts, classname)
    ts.manualSeed(3)
    mod = cls(*args, **kwargs)
    assert isinstance(mod, ts.Module) and isinstance(mod, cls) and mod.classname == classname
    x = inputs(spec, np.random.default_rng(0))
    shapes = [s for s, _ in spec]
    # shape inference agrees with what the forward makes
    y = mod(x if len(x) > 1 else x[0])
    ys = y if isinstance(y, list) else [y]
    inferred = mod.dataShapeFrom(shapes if len(shapes) > 1 else shapes[0])
    inferred = inferred if isinstance(inferred, list) else [inferred]
    assert [t.shape for t in ys] == inferred
    assert all(np.isfinite(np.asarray(t)).all() for t in ys)

    # every argument the blueprint records is one the Python class takes
    sig = inspect.signature(cls)
    scheme = mod.blueprint().get("scheme", {})
    assert set(scheme) <= set(sig.parameters), set(scheme) - set(sig.parameters)

    # the defaults the class shows are the ones the factory uses
    bound = sig.bind(*args, **kwargs)
    empty = inspect.Parameter.empty
    required = {k: v for k, v in bound.arguments.items() if sig.parameters[k].default is empty}
    defaults = {p.name: p.default for p in sig.parameters.values() if p.default not in (empty, None)}
    assert cls(**required).blueprint() == cls(**required, **defaults).blueprint()


def test_bad_arguments():
    with pytest.raises(TypeError, match="Conv2D: no argument 'pads'; did you mean 'pad'\\?"):
        ts.Conv2D(3, 16, 3, pads=1)
    with pytest.raises(TypeError, match="Linear: missing a required argument: 'outsize'"):
        ts.Linear(3)
    with pytest.raises(TypeError, match="too many positional"):
        ts.Dropout(0.5, "x", 3)
    with pytest.raises(ts.ModuleError, match="argument 'insize' must be an integer"):
        ts.Linear("3", 4)
    with pytest.raises(ts.ModuleError, match="Dropout"):
        ts.Dropout(p=-0.5)
    with pytest.raises(ts.ModuleError, match="unknown activation"):
        ts.Activation("swish")
    with pytest.raises(TypeError, match="must be a bool, a number, a string or a list"):
        ts.Linear(3, 4, initscheme={"a": 1})
    with pytest.raises(ts.ModuleError, match="unknown argument 'nope'"):
        ts.Module("Linear", {"insize": 2, "outsize": 3, "nope": 1})


def test_max_unpool_inverts_its_pool():
    pool = ts.MaxPool2D(2)
    unpool = ts.MaxUnpool2D(pool)
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = unpool(pool(x)).numpy()
    assert y.shape == (1, 1, 4, 4)
    assert sorted(y[y != 0].tolist()) == [5.0, 7.0, 13.0, 15.0]
    with pytest.raises(ts.ModuleError, match="MaxPool2D it inverts"):
        ts.MaxUnpool2D(ts.Linear(2, 2))


def test_linear_against_numpy_and_parameters():
    fc = ts.Linear(5, 3, name="fc")
    params = fc.namedParams()
    assert list(params) == ["W", "b"] and params["W"].data.shape == (5, 3)
    params["b"].data = np.array([1, 2, 3], dtype=np.float32)  # copied in place
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    ref = x @ params["W"].data.numpy() + [1, 2, 3]
    np.testing.assert_allclose(fc(x).numpy(), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ts.ShapeError, match=r"new value has shape \[2\]"):
        params["b"].data = np.zeros(2, np.float32)
    assert fc.name == "fc" and fc.numOfParams() == 18
    assert "insize=5" in repr(fc)


def test_modes_and_calc_mode():
    d = ts.Dropout(p=0.5)
    x = np.ones((100, 100), np.float32)
    assert d.train
    assert (d(x).numpy() == 0).mean() > 0.4
    d.evalMode()
    np.testing.assert_array_equal(d(x).numpy(), x)
    net = ts.Sequential().append(ts.Linear(4, 4))
    net.calcMode("bfloat16")
    assert net[0].computeDType == "bfloat16"
    with pytest.raises(ts.ModuleError):
        net.calcMode("int32")


def test_packed_weights_follow_assignments_not_numpy_writes():
    net = ts.Sequential().append(ts.Conv2D(16, 32, 3, pad=1)).append(ts.Conv2D(32, 16, 3, pad=1))
    net.calcMode("bfloat16")  # packed or not, bfloat16 weights are a converted copy
    net.evalMode()
    x = np.random.default_rng(3).standard_normal((2, 16, 8, 8)).astype(np.float32)
    plain = net(x).numpy()
    net.packWeights()
    assert net.weightsPacked and net[1].weightsPacked
    np.testing.assert_array_equal(net(x).numpy(), plain)
    w = net[0].getVar("W")
    view = w.data.numpy()
    original = view.copy()
    view[0, 0, 0, 0] += 1.0
    np.testing.assert_array_equal(net(x).numpy(), plain)  # a write through the view is not seen
    net.packWeights()
    changed = net(x).numpy()
    assert not np.array_equal(changed, plain)
    w.data = original  # assigning is seen
    np.testing.assert_array_equal(net(x).numpy(), plain)
    net.packWeights(False)
    assert not net.weightsPacked
    np.testing.assert_array_equal(net(x).numpy(), plain)


def test_packed_weights_fold_batch_norm_into_the_convolution():
    net = (ts.Sequential().append(ts.Conv2D(3, 8, 3, pad=1)).append(ts.BatchNorm2D(8))
           .append(ts.Activation(ts.relu)))
    rng = np.random.default_rng(5)
    net.trainMode()
    for _ in range(3):  # running statistics away from their defaults
        net((rng.standard_normal((4, 3, 6, 6)) * 2 + 1).astype(np.float32))
    net.evalMode()
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    plain = net(x).numpy().copy()
    net.packWeights()
    folded = net(x).numpy().copy()
    np.testing.assert_allclose(folded, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())
    # Assigning the batch norm's scale is seen: the folded weights are made again.
    net[1].getVar("scale").data = np.linspace(0.5, 2.0, 8, dtype=np.float32)
    moved = net(x).numpy().copy()
    net.packWeights(False)
    np.testing.assert_allclose(moved, net(x).numpy(), rtol=1e-5, atol=1e-5 * np.abs(plain).max())
    assert not np.allclose(moved, plain, atol=1e-3)


def test_save_keeps_the_input_shapes_given(tmp_path):
    h5py = pytest.importorskip("h5py")
    net = ts.Linear(4, 2)
    net.save(str(tmp_path / "with.h5"), inputs=(3, 4))
    net.save(str(tmp_path / "without.h5"))
    with h5py.File(tmp_path / "with.h5", "r") as f:
        assert f["inputs"][()] == b"3x4"
    with h5py.File(tmp_path / "without.h5", "r") as f:
        assert "inputs" not in f
    net.save(str(tmp_path / "named.h5"), classes=["cat", "dog"])
    assert ts.readClassNames(str(tmp_path / "named.h5")) == ["cat", "dog"]
    assert ts.readClassNames(str(tmp_path / "without.h5")) == []
    # ONNX files keep them in their metadata, where onnx itself reads them.
    ts.exportOnnx(net, (1, 4), str(tmp_path / "named.onnx"), classes=["cat", "dog"])
    assert ts.readClassNames(str(tmp_path / "named.onnx")) == ["cat", "dog"]
    onnx = pytest.importorskip("onnx")
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "named.onnx")).metadata_props}
    assert meta == {"classes": '["cat","dog"]'}


def test_transforms_kept_with_the_model_and_applied(tmp_path):
    net = ts.Linear(4, 2)
    t = ts.Transforms("resize:6x6,center:4,normalize:0.5:0.25")
    net.save(str(tmp_path / "t.h5"), transforms=t)
    net.save(str(tmp_path / "text.h5"), transforms="center:4")
    net.save(str(tmp_path / "none.h5"))
    assert repr(ts.readTransforms(str(tmp_path / "t.h5"))) == repr(t)
    assert repr(ts.readTransforms(str(tmp_path / "text.h5"))) == "tessera.Transforms('center:4')"
    assert len(ts.readTransforms(str(tmp_path / "none.h5"))) == 0
    ts.exportOnnx(net, (1, 4), str(tmp_path / "t.onnx"), transforms=t)
    assert repr(ts.readTransforms(str(tmp_path / "t.onnx"))) == repr(t)
    with pytest.raises(ts.Error, match="nonsense"):
        net.save(str(tmp_path / "bad.h5"), transforms="nonsense")
    # apply, in evaluation mode: resize 8x8 -> 6x6, the centre 4x4, (x - 0.5) / 0.25
    image = np.random.default_rng(0).random((1, 6, 6)).astype(np.float32)
    out = ts.Transforms("center:4,normalize:0.5:0.25").apply(image)
    np.testing.assert_allclose(out, (image[:, 1:5, 1:5] - 0.5) / 0.25, rtol=1e-6)
    assert t.apply(np.zeros((1, 8, 8), np.float32)).shape == (1, 4, 4)
    # random steps act as on a test set unless train=True
    flip = ts.Transforms("flip:1")
    np.testing.assert_array_equal(flip.apply(image), image)
    np.testing.assert_array_equal(flip.apply(image, train=True), image[:, :, ::-1])
    with pytest.raises(ts.ShapeError, match=r"Transforms.apply: expects an image \[C, H, W\]"):
        t.apply(np.zeros((8, 8), np.float32))


def test_mul_add_const_takes_tensor_constants(tmp_path):
    """Per-channel scale and shift as arrays (a blueprint holds numbers only), kept as
    attributes, so a saved model holds them."""
    scale = np.array([1.0, -2.0, 0.5], np.float32).reshape(1, 3, 1, 1)
    shift = [[[0.25]], [[0.0]], [[-1.0]]]  # a nested list: [3, 1, 1], broadcast over N
    m = ts.MulAddConst(a=scale, b=shift, name="affine")
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 4)).astype(np.float32)
    ref = x * scale + np.array(shift, np.float32)
    np.testing.assert_allclose(m(x).numpy(), ref, rtol=1e-6, atol=1e-6)
    dy = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(m.backward(dy).numpy(), dy * scale, rtol=1e-6, atol=1e-6)
    assert m.name == "affine"
    mixed = ts.MulAddConst(a=scale, b=0.5)  # a number beside a tensor
    np.testing.assert_allclose(mixed(x).numpy(), x * scale + 0.5, rtol=1e-6, atol=1e-6)
    path = str(tmp_path / "affine.h5")
    m.save(path)
    np.testing.assert_allclose(ts.load(path)(x).numpy(), ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(ts.ShapeError):
        m(np.zeros((2, 4, 4, 4), np.float32))  # 3 channels of constants against 4


def test_rnn_dropout_between_layers():
    ts.manualSeed(3)
    rnn = ts.RNN(4, 6, layers=2, mode="lstm", getSequences=True, dropout=0.5)
    ts.manualSeed(3)
    plain = ts.RNN(4, 6, layers=2, mode="lstm", getSequences=True)
    x = np.random.RandomState(0).randn(5, 2, 4).astype(np.float32)
    first, second = rnn(x).numpy().copy(), rnn(x).numpy().copy()
    assert not np.allclose(first, second)  # a fresh mask at each training forward
    assert not np.allclose(first, plain(x).numpy())
    rnn.evalMode()
    plain.evalMode()
    np.testing.assert_array_equal(rnn(x).numpy(), plain(x).numpy())  # eval mode: no dropout
    with pytest.raises(ts.ModuleError):
        ts.RNN(4, 6, layers=2, dropout=1.0)


def _torch_grads(f, x, params, dy):
    """f(x, *params) in PyTorch, with the gradients of <f, dy> to x and to each parameter."""
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, requires_grad=True)
    pt = [torch.tensor(p, requires_grad=True) for p in params]
    y = f(xt, *pt)
    (y * torch.tensor(dy)).sum().backward()
    return y.detach().numpy(), xt.grad.numpy(), [p.grad.numpy() for p in pt]


@pytest.mark.parametrize("kind", ["layer", "group", "rms"])
def test_normalisations_match_pytorch(kind):
    torch = pytest.importorskip("torch")
    F_ = torch.nn.functional
    rng = np.random.default_rng(3)
    if kind == "layer":
        x = rng.standard_normal((4, 5, 6, 8)).astype(np.float32) * 3 + 1
        mod = ts.LayerNorm((6, 8), epsilon=1e-5)
        shape = (6, 8)
        f = lambda t, w, b: F_.layer_norm(t, shape, w, b, 1e-5)  # noqa: E731
    elif kind == "group":
        x = rng.standard_normal((3, 8, 5, 4)).astype(np.float32) * 2 - 1
        mod = ts.GroupNorm(4, 8)
        shape = (8,)
        f = lambda t, w, b: F_.group_norm(t, 4, w, b, 1e-5)  # noqa: E731
    else:  # PyTorch 1.13 has no RMSNorm: its definition, x / sqrt(mean(x^2) + eps) * w
        x = rng.standard_normal((4, 7, 16)).astype(np.float32)
        mod = ts.RMSNorm(16)
        shape = (16,)
        eps = float(np.finfo(np.float32).eps)
        f = lambda t, w: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * w  # noqa: E731
    params = mod.namedParams()
    values = [rng.uniform(0.5, 1.5, shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)]
    names = list(params)
    assert names == (["weight"] if kind == "rms" else ["weight", "bias"])
    for name, v in zip(names, values):
        params[name].data = v
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y_ref, dx_ref, dp_ref = _torch_grads(f, x, values[:len(names)], dy)
    np.testing.assert_allclose(mod(x).numpy(), y_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mod.backward(dy).numpy(), dx_ref, rtol=1e-3, atol=1e-4)
    for name, ref in zip(names, dp_ref):
        np.testing.assert_allclose(params[name].grad.numpy(), ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode,align", [("nearest", False), ("nearest-exact", False), ("linear", False),
                                        ("linear", True), ("cubic", False), ("cubic", True)])
@pytest.mark.parametrize("size", [(7, 3), (2, 11), (1, 5), (3, 6)])
def test_resize_and_upsample_match_pytorch_interpolate(mode, align, size):
    """Resize2D is F.interpolate(x, size=...) (nearest, nearest-exact, bilinear, bicubic) and
    Upsample2D with alignCorners is nn.Upsample(scale_factor=s, mode='bilinear' or 'bicubic',
    align_corners=True), forward and backward."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    tmode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    kw = {"align_corners": align} if mode in ("linear", "cubic") else {}
    for mod, shape, f in (
        (ts.Resize2D(list(size), mode=mode, alignCorners=align), (2, 3) + size,
         lambda t: torch.nn.functional.interpolate(t, size=size, mode=tmode, **kw)),
        (ts.Upsample2D(3, mode=mode, alignCorners=align), (2, 3, 15, 12),
         lambda t: torch.nn.functional.interpolate(t, scale_factor=3, mode=tmode, **kw)),
    ):
        dy = rng.standard_normal(shape).astype(np.float32)
        y_ref, dx_ref, _ = _torch_grads(f, x, [], dy)
        np.testing.assert_allclose(mod(x).numpy(), y_ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(mod.backward(dy).numpy(), dx_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["silu", "mish"])
def test_silu_and_mish_match_pytorch(name):
    torch = pytest.importorskip("torch")
    x = np.linspace(-8, 8, 64, dtype=np.float32).reshape(4, 16)
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    act = ts.Activation(getattr(ts, name))
    y_ref, dx_ref, _ = _torch_grads(getattr(torch.nn.functional, name), x, [], dy)
    np.testing.assert_allclose(act(x).numpy(), y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(act.backward(dy).numpy(), dx_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["exp", "log", "abs", "sin", "cos"])
def test_exp_log_abs_sin_and_cos_match_pytorch(name):
    torch = pytest.importorskip("torch")
    x = np.linspace(-6, 6, 64, dtype=np.float32).reshape(4, 16)
    if name == "log":
        x = np.abs(x) + 0.01
    dy = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    act = ts.Activation(name)
    y_ref, dx_ref, _ = _torch_grads(getattr(torch, name), x, [], dy)
    np.testing.assert_allclose(act(x).numpy(), y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(act.backward(dy).numpy(), dx_ref, rtol=1e-4, atol=1e-5)


def test_argmax_and_argmin_match_pytorch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((2, 6, 3, 4)).astype(np.float32)
    x[0, :, 1, 2] = 1.0  # a tie: the first index
    for axis in (1, -1, 0):
        for keep in (False, True):
            want = torch.argmax(torch.tensor(x), axis, keepdim=keep).numpy()
            got = ts.ArgMax(axis, keep)(x).numpy()
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(ts.ArgMin(axis, keep)(x).numpy(),
                                          torch.argmin(torch.tensor(x), axis, keepdim=keep).numpy())
            # lastIndex: the last of tied values, the first of the lines read backwards
            n = x.shape[axis]
            flipped = np.flip(x, axis).copy()
            np.testing.assert_array_equal(ts.ArgMax(axis, keep, lastIndex=True)(x).numpy(),
                                          n - 1 - torch.argmax(torch.tensor(flipped), axis, keepdim=keep).numpy())
            np.testing.assert_array_equal(ts.ArgMin(axis, keep, lastIndex=True)(x).numpy(),
                                          n - 1 - torch.argmin(torch.tensor(flipped), axis, keepdim=keep).numpy())
    assert ts.ArgMax(1, lastIndex=True)(x).numpy()[0, 0, 1, 2] == 5  # the tie's last index


def test_log_softmax_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 4, 3, 5)) * 30).astype(np.float32)  # probabilities that underflow
    dy = rng.standard_normal(x.shape).astype(np.float32)
    for axis in (1, -1, 0):
        y_ref, dx_ref, _ = _torch_grads(lambda t: torch.log_softmax(t, axis), x, [], dy)
        lsm = ts.LogSoftMax(axis=axis)
        y = lsm(x).numpy()
        assert np.isfinite(y).all()
        np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(lsm.backward(dy).numpy(), dx_ref, rtol=1e-4, atol=1e-4)


def test_attention_and_matmul_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)))
    pad = np.zeros((2, 1, 1, 7), np.float32)
    pad[1, ..., 5:] = -np.inf  # the last two keys of sample 1 are padding
    dy = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)

    def reference(qt, kt, vt):
        scores = qt @ kt.transpose(-1, -2) / np.sqrt(8) + torch.tensor(pad)
        return torch.softmax(scores, -1) @ vt

    y_ref, dx_ref, _ = _torch_grads(lambda qt: reference(qt, torch.tensor(k), torch.tensor(v)), q, [], dy)
    att = ts.ScaledDotProductAttention()
    y = att([q, k, v, pad])
    y = y[0] if isinstance(y, list) else y
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-5, atol=1e-5)
    grads = att.backward(dy)
    np.testing.assert_allclose(grads[0].numpy(), dx_ref, rtol=1e-4, atol=1e-5)
    # k's and v's gradients through PyTorch too
    _, dk_ref, _ = _torch_grads(lambda kt: reference(torch.tensor(q), kt, torch.tensor(v)), k, [], dy)
    _, dv_ref, _ = _torch_grads(lambda vt: reference(torch.tensor(q), torch.tensor(k), vt), v, [], dy)
    np.testing.assert_allclose(grads[1].numpy(), dk_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[2].numpy(), dv_ref, rtol=1e-4, atol=1e-5)
    # MatMul with broadcasting: [2, 3, 5, 8] by a shared [8, 6]
    w = rng.standard_normal((8, 6)).astype(np.float32)
    mm = ts.MatMul()
    out = mm([q, w])
    out = out[0] if isinstance(out, list) else out
    np.testing.assert_allclose(out.numpy(), q @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal,tq,tk", [(False, 21, 37), (True, 21, 37), (True, 37, 21)])
def test_unmasked_attention_fused_or_in_blocks_matches_pytorch(causal, tq, tk):
    # Without a mask the CPU runs attention fused (a chunk of query rows' scores in cache),
    # causal or not; ts.setCpuFusedAttention(False) runs it in blocks of heads. Both match
    # PyTorch (is_causal: the mask's top-left corner aligned, with more queries than keys too).
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, tq, 8), (2, 3, tk, 8), (2, 3, tk, 5)))
    dy = rng.standard_normal((2, 3, tq, 5)).astype(np.float32)
    tq_, tk_, tv_ = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    scores = tq_ @ tk_.transpose(-1, -2) / np.sqrt(8)
    if causal:
        scores = scores.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(), float("-inf"))
    y_ref = torch.softmax(scores, -1) @ tv_
    y_ref.backward(torch.tensor(dy))
    assert ts.cpuFusedAttention()  # the default
    try:
        for on in (True, False):
            ts.setCpuFusedAttention(on)
            assert ts.cpuFusedAttention() is on
            att = ts.ScaledDotProductAttention(causal=causal)
            y = att([q, k, v])
            y = y[0] if isinstance(y, list) else y
            np.testing.assert_allclose(y.numpy(), y_ref.detach().numpy(), rtol=1e-5, atol=1e-5)
            for g, t in zip(att.backward(dy), (tq_, tk_, tv_)):
                np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)
    finally:
        ts.setCpuFusedAttention(True)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_pytorch(batch_first):
    """nn.MultiheadAttention's weights, loaded name for name, give its output and gradients."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    E, H, N, L, S = 16, 4, 3, 5, 7
    ref = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
    with torch.no_grad():  # non-zero biases, so that every parameter shows
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    mha = ts.MultiheadAttention(E, H, batchFirst=batch_first, keyPaddingMask=True, attnMask=True)
    params = mha.namedParams()
    state = ref.state_dict()
    for name in params:
        params[name].data = state[name.replace("out_proj_", "out_proj.")].numpy()
    rng = np.random.default_rng(2)

    def seq(T):
        return rng.standard_normal((N, T, E) if batch_first else (T, N, E)).astype(np.float32)

    q, k, v = seq(L), seq(S), seq(S)
    pad = np.zeros((N, S), bool)
    pad[1, -3:] = True  # the last three keys of sample 1 are padding
    causal = np.triu(np.ones((L, S), bool), 1)
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    y_ref, _ = ref(qt, kt, vt, key_padding_mask=torch.tensor(pad), attn_mask=torch.tensor(causal))
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    (y_ref * torch.tensor(dy)).sum().backward()
    additive = lambda m: np.where(m, -np.inf, 0).astype(np.float32)  # noqa: E731
    y = mha([q, k, v, additive(pad), additive(causal)])
    y = y[0] if isinstance(y, list) else y
    np.testing.assert_allclose(y.numpy(), y_ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    grads = mha.backward(dy)
    for g, t in zip(grads[:3], (qt, kt, vt)):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-4)
    named = dict(ref.named_parameters())
    for name in params:
        want = named[name.replace("out_proj_", "out_proj.")].grad.numpy()
        np.testing.assert_allclose(params[name].grad.numpy(), want, rtol=1e-3, atol=1e-4)


def test_positional_encoding_is_the_sinusoid_table():
    x = np.zeros((1, 50, 16), np.float32)
    pe = ts.PositionalEncoding()(x).numpy()[0]
    t = np.arange(50)[:, None]
    rates = 1.0 / 10000 ** (np.arange(0, 16, 2) / 16)
    np.testing.assert_allclose(pe[:, 0::2], np.sin(t * rates), atol=1e-5)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(t * rates), atol=1e-5)


def test_slice_over_several_axes_against_numpy():
    x = np.random.default_rng(4).standard_normal((2, 3, 5, 6)).astype(np.float32)
    inner = ts.Slice(axis=[2, 3], start=[1, 1], end=[-1, -1])
    np.testing.assert_array_equal(inner(x).numpy(), x[:, :, 1:-1, 1:-1])
    g = np.ones((2, 3, 3, 4), np.float32)
    dx = inner.backward(g).numpy()
    ref = np.zeros_like(x)
    ref[:, :, 1:-1, 1:-1] = 1
    np.testing.assert_array_equal(dx, ref)
    assert "axis=[2, 3]" in repr(inner)
    with pytest.raises(ts.ModuleError, match="one start and one end per axis"):
        ts.Slice(axis=[1, 2], start=[0], end=[1, 1])


def test_slice_with_steps_against_numpy():
    x = np.random.default_rng(5).standard_normal((2, 5, 7, 3)).astype(np.float32)
    strided = ts.Slice(axis=[1, 2], start=[0, 1], end=[0, 6], step=[2, 3])  # x[:, 0::2, 1:6:3]
    np.testing.assert_array_equal(strided(x).numpy(), x[:, 0::2, 1:6:3])
    g = np.random.default_rng(6).standard_normal((2, 3, 2, 3)).astype(np.float32)
    ref = np.zeros_like(x)
    ref[:, 0::2, 1:6:3] = g
    np.testing.assert_array_equal(strided.backward(g).numpy(), ref)
    assert "step=[2, 3]" in repr(strided)
    with pytest.raises(ts.ModuleError, match="a step must not be 0"):
        ts.Slice(axis=1, start=0, end=0, step=0)


def test_slice_with_negative_steps_against_numpy():
    x = np.random.default_rng(7).standard_normal((2, 6, 5)).astype(np.float32)
    flat = np.arange(x.size).reshape(x.shape)
    every = slice(None)
    for m, sl in ((ts.Slice(axis=2, start=-1, end=0, step=-1), (every, every, slice(None, None, -1))),  # end 0: to 0
                  (ts.Slice(axis=1, start=5, end=-6, step=-2), (every, slice(5, 0, -2))),  # -D: stop before 0
                  (ts.Slice(axis=[1, 2], start=[-2, 100], end=[-5, 1], step=[-1, -2]),
                   (every, slice(-2, -5, -1), slice(100, 1, -2)))):
        np.testing.assert_array_equal(m(x).numpy(), x[sl])
        g = np.random.default_rng(8).standard_normal(x[sl].shape).astype(np.float32)
        want = np.zeros(x.size, np.float32)
        np.add.at(want, flat[sl].ravel(), g.ravel())  # each gradient where its output came from
        np.testing.assert_array_equal(m.backward(g).numpy(), want.reshape(x.shape))
    with pytest.raises(ts.ShapeError, match="with step -1 is empty"):
        ts.Slice(axis=1, start=0, end=3, step=-1)(x)


def test_pad_modes_are_numpys():
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 5)).astype(np.float32)
    widths = ((0, 0), (0, 0), (1, 3), (2, 0))  # (top, bottom), (left, right)
    for mode, np_mode in (("constant", "constant"), ("reflect", "reflect"), ("edge", "edge")):
        m = ts.Pad2D(pad=[1, 3, 2, 0], mode=mode)
        np.testing.assert_array_equal(m(x).numpy(), np.pad(x, widths, mode=np_mode))
    with pytest.raises(ts.ModuleError, match="constant, reflect or edge"):
        ts.Pad2D(pad=[1], mode="wrap")


def test_embedder_padding_idx_is_pytorchs():
    torch = pytest.importorskip("torch")
    emb = ts.Embedder(6, 4, 3, paddingIdx=1)
    W = emb.namedParams()["W"].data.numpy()
    np.testing.assert_array_equal(W[1], 0)
    ref = torch.nn.Embedding(6, 3, padding_idx=1)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(W))
    ids = np.array([[1, 0, 1, 5], [2, 1, 3, 3]], np.int32)
    y = emb(ids).numpy()
    yt = ref(torch.tensor(ids, dtype=torch.long))
    np.testing.assert_allclose(y, yt.detach().numpy())
    g = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    emb.zeroGradParams()
    emb.backward(g)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(emb.namedParams()["W"].grad.numpy(), ref.weight.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_every_layer_argument_has_a_meaning_in_its_docstring():
    for classname in ts._LAYERS:
        cls = getattr(ts, classname)
        for arg in cls.__signature__.parameters:
            assert f"\n    {arg}: " in cls.__doc__, f"{classname}'s docstring does not say what '{arg}' is"
            assert "(see docs/layers.md)" not in cls.__doc__.split(f"\n    {arg}: ")[1].split("\n")[0], \
                f"{classname}.{arg} has no meaning in tessera/_argdocs.py"
    assert "pad: zero padding on both sides" in ts.Conv2D.__doc__
    assert "inmode: 'full'" in ts.GroupLinear.__doc__


def test_the_package_ships_its_type_stub():
    import os
    where = os.path.dirname(ts.__file__)
    assert os.path.exists(os.path.join(where, "__init__.pyi")) and os.path.exists(os.path.join(where, "py.typed"))
    stub = open(os.path.join(where, "__init__.pyi"), encoding="utf-8").read()
    assert "class Conv2D(Module):" in stub and "pad: int | Sequence[int] = ..." in stub
