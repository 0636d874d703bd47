"""PuzzleLib's API over Tessera, for scripts written for PuzzleLib:

    from tessera.puzzlelib import Modules, Containers, Cost, Optimizers, Handlers, Backend
    from tessera.puzzlelib.Backend import gpuarray
    from tessera.puzzlelib.Modules import Conv2D, MaxPool2D, Activation, relu, Flatten, Linear

PuzzleLib's class names, argument names and defaults, parameter layouts ((1, C, 1, 1)
biases), cost normalisations (means over every element) and gradient sign (-dL/dx, with
`updateParams` adding) — each computed by Tessera's own layers, costs and optimizers.
docs/puzzlelib.md is the table of every difference and which side this namespace takes."""

from . import Backend, Containers, Cost, Handlers, Modules, Optimizers  # noqa: F401
from ._core import ModuleError, Variable  # noqa: F401

__all__ = ["Backend", "Containers", "Cost", "Handlers", "Modules", "Optimizers", "ModuleError", "Variable"]
