"""What the side-by-side CPU scripts (resample.py, transformer_layers.py,
log_softmax_argmax.py, pytorch_side_by_side.py) share: their --reps and --threads arguments,
one thread count for both sides, the same OpenBLAS kernels on both sides, and the timing of
two sides in alternation.

OpenBLAS (Debian's PyTorch loads it as libblas.so.3) falls back to generic SSE3 kernels
("Prescott", about a fifth of the speed) on CPUs newer than it knows (Sapphire and Emerald
Rapids for Debian 12's 0.3.21) unless OPENBLAS_CORETYPE is set when it loads. Tessera sets it
for itself (backend/cpu/OpenBlas.cpp); setup() sets the same value before PyTorch loads, so
that PyTorch's GEMMs run the CPU's kernels too (one already in the environment wins on both
sides).

The method: both sides run in one process on the same float32 arrays with the same thread
count (torch.set_num_threads and OMP_NUM_THREADS, both from --threads); each case is warmed
up, then the two sides alternate --reps times (each side first in every other rep) and the
medians and the ratio PyTorch / Tessera in time are printed (above 1: Tessera is faster).
"""

import argparse
import os
import statistics
import time


def cpuinfo(key):
    """The first value of `key` in /proc/cpuinfo ("" when absent)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def openblas_coretype():
    """The OpenBLAS core Tessera picks for this CPU (backend/cpu/OpenBlas.cpp)."""
    flags = cpuinfo("flags").split()
    if cpuinfo("vendor_id") == "AuthenticAMD":
        avx512 = all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))
        return "SkylakeX" if avx512 else None
    if cpuinfo("vendor_id") != "GenuineIntel":
        return None
    return "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None


def set_openblas_coretype():
    """OPENBLAS_CORETYPE for this CPU, unless set: call before PyTorch (or NumPy) loads OpenBLAS."""
    if openblas_coretype():
        os.environ.setdefault("OPENBLAS_CORETYPE", openblas_coretype())


def openblas_core():
    """The core name of the OpenBLAS this process loaded (PyTorch's, NumPy's and Tessera's)."""
    import ctypes

    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "libopenblas" in path:
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                return lib.openblas_get_corename().decode()
            except (OSError, AttributeError):
                return "unknown (" + path + ")"
    return "no OpenBLAS loaded"


def setup(default_reps, arguments=None):
    """Parses --reps and --threads (and what `arguments(parser)` adds), then gives OpenMP
    (Tessera's pool, read when the package loads) and PyTorch that thread count. Import
    tessera after this."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=default_reps)
    ap.add_argument("--threads", type=int, default=2)
    if arguments:
        arguments(ap)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    set_openblas_coretype()
    import torch

    torch.set_num_threads(args.threads)
    return args


def medians_ms(tessera_side, torch_side, reps, warmup=2):
    """Each side run `warmup` times, then both `reps` times in alternation (each first in
    every other rep): their median times in ms, Tessera's first."""
    for side in (tessera_side, torch_side):
        for _ in range(warmup):
            side()
    times = ([], [])
    for rep in range(reps):
        for k in ((0, 1) if rep % 2 == 0 else (1, 0)):
            start = time.perf_counter()
            (tessera_side, torch_side)[k]()
            times[k].append(time.perf_counter() - start)
    return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3
