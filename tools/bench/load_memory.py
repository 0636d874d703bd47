#!/usr/bin/python3
"""Wall time and peak memory of loading model files with their weights (`loadModelFile`:
an HDF5 model file read by the reader process, or an ONNX file imported), each load in a
fresh Python process, as a user's script does. Prints the process's peak resident memory
and its helper process's (libtessera's tessera-child: for an HDF5 file the reader, which
reads the file and sends its datasets over; for ONNX, shape inference). The two overlap
while the datasets are sent, so each peak counts on its own.

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/load_memory.py [--reps 3] MODEL... [-- LIBDIR...]

Each LIBDIR (a directory holding another build's libtessera.so.0 and tessera-child) is a
side: its library is loaded in place of the build's own (LD_LIBRARY_PATH), so two builds
alternate, each first in every other repetition. Without LIBDIRs, the build's own library.
"""

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import os, resource, sys, time
import tessera as ts
t0 = time.perf_counter()
ts.loadModelFile(sys.argv[1])
wall = time.perf_counter() - t0
reader = 0.0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        continue
    if fields.get("PPid", "").strip() == str(os.getpid()) and "tessera" in fields.get("Name", ""):
        reader = int(fields["VmHWM"].split()[0]) / 1024.0
print(wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, reader)
"""


def run(libdir, model):
    env = dict(os.environ)
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    out = subprocess.run([sys.executable, "-c", CHILD, model], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"loading {model} with {libdir or 'the build'} failed:\n{out.stderr}")
    return [float(v) for v in out.stdout.split()[-3:]]


def main():
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args(argv[:split])
    sides = argv[split + 1:] or [""]
    print(f"reps {args.reps}; medians; wall time of the load in s, peak resident memory in MiB")
    for model in args.models:
        size = os.path.getsize(model) / 2**20
        got = {s: [] for s in sides}
        for s in sides:
            run(s, model)  # warm-up: the file in the page cache
        for rep in range(args.reps):
            for s in (sides if rep % 2 == 0 else list(reversed(sides))):
                got[s].append(run(s, model))
        for s in sides:
            wall, peak, reader = (statistics.median(v[k] for v in got[s]) for k in range(3))
            print(f"{os.path.basename(model)} ({size:.1f} MiB)  {s or 'build'}  {wall:6.2f} s  {peak:6.0f} MiB"
                  + (f"  helper process {reader:6.0f} MiB" if reader else ""))


if __name__ == "__main__":
    main()
