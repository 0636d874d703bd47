"""What the side-by-side CPU scripts (resample.py, transformer_layers.py,
log_softmax_argmax.py) share: their --reps and --threads arguments, one thread count for
both sides, and the timing of two sides in alternation.

The method: both sides run in one process on the same float32 arrays with the same thread
count (torch.set_num_threads and OMP_NUM_THREADS, both from --threads); each case is warmed
up, then the two sides alternate --reps times (each side first in every other rep) and the
medians and the ratio PyTorch / Tessera in time are printed (above 1: Tessera is faster).
"""

import argparse
import os
import statistics
import time


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
