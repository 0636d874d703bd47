"""Finite differences for the suite's gradient checks."""

import numpy as np


def numeric_gradient(loss, values, eps=1e-2):
    """Central differences of loss() over every element of `values` (changed in place and
    restored): values must be memory the loss reads, such as a parameter's numpy() view."""
    out = np.zeros_like(values)
    for i in np.ndindex(values.shape):
        keep = values[i]
        values[i] = keep + eps
        up = loss()
        values[i] = keep - eps
        down = loss()
        values[i] = keep
        out[i] = (up - down) / (2 * eps)
    return out


def check_graph_gradients(net, xin, r, param):
    """Checks a network's input gradient and the gradient of one parameter `param` (a
    tessera Variable) against central differences of loss = sum(net(xin) * r), whose
    gradient with respect to the output is r. Returns the parameter's gradient."""

    def loss():
        return float((net(xin).numpy().astype(np.float64) * r).sum())

    net(xin)
    net.zeroGradParams()
    gx = net.backward(r).numpy().copy()
    gp = param.grad.numpy().copy()
    np.testing.assert_allclose(gx, numeric_gradient(loss, xin), rtol=2e-2, atol=2e-3)
    # param.data.numpy() shares the parameter's memory: writes to it change the model
    np.testing.assert_allclose(gp, numeric_gradient(loss, param.data.numpy()), rtol=2e-2, atol=2e-3)
    return gp
