#!/usr/bin/python3
"""Wall time and peak memory of `tessera check` on model files (ONNX, HDF5, blueprints):
reading a model, building it and checking its shapes, as a user's first command on a
downloaded model does. With several `tessera` binaries (two builds, before and after a
change) they alternate on each file, each first in every other repetition, after one
warm-up run each (the file then sits in the page cache); the medians are printed, with
the ratio of each binary's time to the first one's.

    /usr/bin/python3 tools/bench/check_time.py [--reps 5] MODEL... -- TESSERA [TESSERA...]

Peak memory is the child's maximum resident set (getrusage): it counts the pages of a
mapped model file that were read as well as the memory allocated.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def run(binary, model):
    t0 = time.perf_counter()
    proc = subprocess.Popen([binary, "check", model], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"{binary} check {model} failed:\n{out.decode(errors='replace')}")
    return wall, usage.ru_maxrss / 1024.0  # MiB


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args(argv[:split])
    binaries = argv[split + 1:]
    if not binaries:
        sys.exit(__doc__)
    print(f"reps {args.reps}; medians; wall time in s, peak resident memory in MiB")
    for model in args.models:
        size = os.path.getsize(model) / 2**20
        times = {b: [] for b in binaries}
        rss = {b: [] for b in binaries}
        for b in binaries:
            run(b, model)
        for rep in range(args.reps):
            order = binaries if rep % 2 == 0 else list(reversed(binaries))
            for b in order:
                wall, peak = run(b, model)
                times[b].append(wall)
                rss[b].append(peak)
        first = statistics.median(times[binaries[0]])
        for b in binaries:
            t = statistics.median(times[b])
            print(f"{os.path.basename(model)} ({size:.1f} MiB)  {b}  {t:6.2f} s  "
                  f"{statistics.median(rss[b]):6.0f} MiB  {t / first:5.2f}x")


if __name__ == "__main__":
    main()
