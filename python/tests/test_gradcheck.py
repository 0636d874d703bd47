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


def test_tessera_gradcheck_passes_true_gradients_and_catches_wrong_ones():
    assert ts.gradcheck(ts.Linear(4, 3), (2, 4))
    assert ts.gradcheck(ts.Conv2D(2, 3, 3, pad=1), (1, 2, 5, 5))
    result = ts.gradcheck(ts.Mul(), [(2, 3), (2, 3)])
    assert result.ok and set(result.errors) == {"input 0", "input 1"}

    def wrong():  # y = 2x, but a backward that forgets the 2
        return {"shapes": lambda s: s[0],
                "forward": lambda self, inputs: (2 * inputs[0].numpy()).astype(np.float32),
                "backward": lambda self, grads: [grads[0].numpy().copy()]}

    ts.registerGlue("gradcheck_wrong", wrong)
    bad = ts.gradcheck(ts.Glue("gradcheck_wrong"), (3, 4))
    assert not bad and "FAILED at input 0" in repr(bad), repr(bad)
    assert abs(bad.worst[3] - 2 * bad.worst[2]) < 1e-2  # central differences give twice what backward said
