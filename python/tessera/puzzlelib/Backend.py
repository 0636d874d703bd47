"""PuzzleLib's `Backend`: `gpuarray` (arrays on the device) over Tessera's tensors.

A PuzzleLib GPUArray here is a `tessera.Tensor`: `gpuarray.to_gpu(array)` copies a NumPy
array to the namespace's device (CUDA when Tessera sees a GPU, else the CPU), and the
tensor has PuzzleLib's methods `get()`, `set(array)`, `fill(value)` and `nbytes`.
"""

import numpy as _np

import tessera as _ts

_device = "cuda" if _ts.cudaDeviceCount() > 0 else "cpu"


def setDevice(device):
    """'cpu' or 'cuda': where to_gpu puts arrays and the namespace's modules live. Set it
    before building modules."""
    global _device
    _device = str(device)


def getDevice():
    return _device


def _onDevice(t):
    return t if _device == "cpu" else t.to(_device)


class gpuarray:  # noqa: N801 (PuzzleLib's spelling: `from PuzzleLib.Backend import gpuarray`)
    """PuzzleLib's `gpuarray` module: to_gpu, empty, zeros, GPUArray."""

    GPUArray = _ts.Tensor

    @staticmethod
    def to_gpu(ary, dtype=None):  # noqa: N802 (PuzzleLib's name)
        a = _np.ascontiguousarray(ary if dtype is None else _np.asarray(ary, dtype=dtype))
        if a.dtype == _np.float64:
            raise TypeError("gpuarray.to_gpu: float64 arrays are not taken; convert with .astype(np.float32)")
        return _onDevice(_ts.tensor(a, copy=True))

    @staticmethod
    def empty(shape, dtype=_np.float32, allocator=None):
        return gpuarray.zeros(shape, dtype)

    @staticmethod
    def zeros(shape, dtype=_np.float32, allocator=None):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return gpuarray.to_gpu(_np.zeros(shape, dtype=dtype))


to_gpu = gpuarray.to_gpu
