"""A numerical gradient check written in Python: finite differences of a scalar loss
against the gradients the graph's backward computes."""

import numpy as np

import tessera as ts
from numeric import check_graph_gradients


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

    gW1 = check_graph_gradients(net, xin, r, net["fc1"].namedParams()["W"])
    assert np.abs(gW1).max() > 1e-2  # a real gradient, not zeros matching zeros
