"""Layers written in Python: Glue kinds registered with Python functions behave as any
other layer (shape checks naming them, gradients, graphs, training, model files)."""

import os
import tempfile

import numpy as np
import pytest

import tessera as ts
from numeric import check_graph_gradients


def swish_spec():
    """y = x * sigmoid(beta x), with beta a learned parameter of one value."""

    def forward(self, inputs):
        x = inputs[0].numpy()
        beta = self.getVar("beta").data.numpy()[0]
        return (x / (1.0 + np.exp(-beta * x))).astype(np.float32)

    def backward(self, grads):
        x, dy = self.inData.numpy(), grads[0].numpy()
        beta = self.getVar("beta").data.numpy()[0]
        s = 1.0 / (1.0 + np.exp(-beta * x))
        return [(dy * (s + beta * x * s * (1.0 - s))).astype(np.float32)]

    def param_grads(self, grads, scale, momentum):
        x, dy = self.inData.numpy(), grads[0].numpy()
        beta = self.getVar("beta").data.numpy()[0]
        s = 1.0 / (1.0 + np.exp(-beta * x))
        g = self.getVar("beta").grad.numpy()  # shared with the parameter's gradient
        g[0] = scale * float((dy * x * x * s * (1.0 - s)).sum()) + momentum * g[0]

    def shapes(in_shapes):
        if len(in_shapes) != 1:
            raise ValueError(f"expects one input, got {len(in_shapes)}")
        return in_shapes[0]

    return {"shapes": shapes, "forward": forward, "backward": backward, "paramGrads": param_grads,
            "params": {"beta": np.array([1.5], np.float32)}}


@pytest.fixture(autouse=True)
def swish_registered():
    ts.registerGlue("py_swish", swish_spec)
    yield


def test_forward_matches_the_formula_and_each_layer_has_its_own_parameters():
    a, b = ts.Glue("py_swish", name="a"), ts.Glue("py_swish", name="b")
    assert ts.isGlueRegistered("py_swish") and a.classname == "Glue"
    a.namedParams()["beta"].data = np.array([0.5], np.float32)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(a(x).numpy(), x / (1 + np.exp(-0.5 * x)), rtol=1e-6)
    np.testing.assert_allclose(b(x).numpy(), x / (1 + np.exp(-1.5 * x)), rtol=1e-6)


def test_gradients_match_finite_differences():
    ts.manualSeed(3)
    x = ts.Identity(name="x").node()
    h = ts.Linear(4, 5, name="fc").node(x)
    s = ts.Glue("py_swish", name="swish").node(h)
    net = ts.Graph(inputs=x, outputs=s)
    rng = np.random.default_rng(1)
    xin = rng.standard_normal((3, 4)).astype(np.float32)
    r = rng.standard_normal((3, 5)).astype(np.float32)

    gbeta = check_graph_gradients(net, xin, r, net["swish"].namedParams()["beta"])
    assert abs(gbeta[0]) > 1e-2


def test_shape_errors_name_the_layer():
    x = ts.Identity(name="x").node()
    y = ts.Identity(name="y").node()
    s = ts.Glue("py_swish", name="two_in").node(x, y)
    net = ts.Graph(inputs=[x, y], outputs=s)
    with pytest.raises(ts.ShapeError, match="two_in.*expects one input, got 2"):
        net.dataShapeFrom([(2, 3), (2, 3)])


def test_a_python_exception_in_forward_comes_back_as_itself():
    def bad_forward(self, inputs):
        raise KeyError("no such thing")

    ts.registerGlue("py_broken", {"shapes": lambda s: s[0], "forward": bad_forward})
    with pytest.raises(KeyError, match="no such thing"):
        ts.Glue("py_broken")(np.zeros((2, 2), np.float32))


def test_a_layer_without_backward_says_so():
    ts.registerGlue("py_forward_only", {"shapes": lambda s: s[0], "forward": lambda self, i: i[0]})
    layer = ts.Glue("py_forward_only", name="fwd_only")
    layer(np.zeros((2, 2), np.float32))
    with pytest.raises(ts.ModuleError, match="fwd_only.*has no backward function"):
        layer.backward(np.ones((2, 2), np.float32))


def test_contract_breaches_and_bad_specs_are_clear_errors():
    ts.registerGlue("py_wrong_shape", {"shapes": lambda s: s[0], "forward": lambda self, i: np.zeros((1, 1))})
    with pytest.raises(ts.ModuleError, match="forward's output 0 is float32 \\[1, 1\\], expected float32 \\[2, 3\\]"):
        ts.Glue("py_wrong_shape")(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="needs 'forward'"):
        ts.registerGlue("py_no_forward", {"shapes": lambda s: s[0]})
    with pytest.raises(TypeError, match="'backward' must be a function"):
        ts.registerGlue("py_bad", {"shapes": lambda s: s[0], "forward": lambda self, i: i, "backward": 3})
    with pytest.raises(TypeError, match="unknown spec entry 'froward'"):
        ts.registerGlue("py_bad", {"shapes": lambda s: s[0], "froward": lambda self, i: i})
    assert not ts.isGlueRegistered("py_no_forward")
    with pytest.raises(ts.ModuleError, match="'py_never' is not registered"):
        ts.Glue("py_never")


def test_a_network_with_a_python_layer_trains_and_saves():
    ts.manualSeed(1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 6)).astype(np.float32)
    labels = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    net = ts.Sequential()
    net.extend([ts.Linear(6, 16), ts.Glue("py_swish", name="act"), ts.Linear(16, 2)])
    cost, opt = ts.CrossEntropy(), ts.MomentumSGD(learnRate=0.1)
    opt.setupOn(net, True)
    losses = []
    for _ in range(60):
        out = net(x)
        loss, grad = cost(out, labels)
        losses.append(float(np.asarray(loss)))
        opt.zeroGradParams()
        net.backward(grad)
        opt.update()
    assert losses[-1] < 0.5 * losses[0]
    accuracy = float((net(x).numpy().argmax(1) == labels).mean())
    assert accuracy > 0.9
    path = os.path.join(tempfile.mkdtemp(), "glue.h5")
    net.save(path)
    back = ts.loadModelFile(path)  # rebuilt from the blueprint: the kind is registered
    np.testing.assert_array_equal(back(x).numpy(), net(x).numpy())
