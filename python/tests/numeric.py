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
