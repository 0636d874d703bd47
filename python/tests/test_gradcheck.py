"""A numerical gradient check written in Python: finite differences of a scalar loss
against the gradients the graph's backward computes."""

import numpy as np

import tessera as ts
from numeric import numeric_gradient


def test_graph_gradients_match_finite_differences():
    ts.manualSeed(7)
    x = ts.Identity(name="x").node()
    h = ts.Linear(5, 6, name="fc1").node(x)
    t = ts.Activation(ts.tanh, name="tanh").node(h)
    c = ts.Concat(axis=1, name="cat").node(t, x)
    y = ts.Linear(11, 3, name="fc2").node(c)
    net = ts.Graph(inputs=x, outputs=y)
    rng = np.random.default_rng(0)
    xin = rng.standard_normal((4, 5)).astype(np.float32)
    r = rng.standard_normal((4, 3)).astype(np.float32)  # loss = sum(y * r): dloss/dy = r

    def loss():
        return float((net(xin).numpy().astype(np.float64) * r).sum())

    net(xin)
    net.zeroGradParams()
    gx = net.backward(r).numpy().copy()
    W1 = net["fc1"].namedParams()["W"]
    gW1 = W1.grad.numpy().copy()

    np.testing.assert_allclose(gx, numeric_gradient(loss, xin), rtol=2e-2, atol=2e-3)
    # W1.data.numpy() shares the parameter's memory: writes to it change the model
    np.testing.assert_allclose(gW1, numeric_gradient(loss, W1.data.numpy()), rtol=2e-2, atol=2e-3)
    assert np.abs(gW1).max() > 1e-2  # a real gradient, not zeros matching zeros
