#!/usr/bin/env python3
"""Mutation test of Tessera's HDF5 model reader, through the `tessera` program.

Writes a small model file (a Linear and a BatchNorm1D) with a fixed-length blueprint
string (what Tessera writes) or a variable-length one (what earlier versions and h5py
write), changes 1 to 4 random bytes (half the time within the first 4 KiB, where the
metadata is) N times, and runs `tessera convert` on each (it reads the blueprint, builds
the model, loads the weights and writes a copy). Every run must end with exit code 0 or
a clear error (1); a crash (a negative exit code: the signal) or a hang (10 s) is a
finding, kept as crash_<code>_<i>.h5 in WORKDIR. Not a coverage-guided fuzzer: a cheap
first line that found the global-heap crash of variable-length strings.

usage: mutate_hdf5.py TESSERA WORKDIR [N] [fixed|vlen] [SEED]
"""
import collections
import os
import random
import subprocess
import sys

import h5py


def main():
    tessera, work = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    kind = sys.argv[4] if len(sys.argv) > 4 else "fixed"
    rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    os.makedirs(work, exist_ok=True)
    blueprint = os.path.join(work, "small.json")
    with open(blueprint, "w") as f:
        f.write('{"classname": "Sequential", "scheme": {"name": "small"}, "modules": ['
                '{"classname": "Linear", "scheme": {"insize": 4, "outsize": 3, "name": "fc"}}, '
                '{"classname": "BatchNorm1D", "scheme": {"maps": 3, "name": "bn"}}]}')
    good = os.path.join(work, "good.h5")
    subprocess.run([tessera, "convert", blueprint, good, "--input", "2x4"], check=True, stdout=subprocess.DEVNULL)
    if kind == "vlen":  # the same content with the blueprint as a variable-length string
        with h5py.File(good, "r") as src:
            groups = {g: {k: src[g][k][()] for k in src[g]} for g in ("params", "links", "attrs")}
            text = src["blueprint"][()].decode()
        with h5py.File(good, "w") as f:
            for g, items in groups.items():
                f.create_group(g)
                for k, v in items.items():
                    f[g][k] = v
            f["blueprint"] = text
    data = open(good, "rb").read()
    mutated, out = os.path.join(work, "mutated.h5"), os.path.join(work, "out.h5")
    counts = collections.Counter()
    for i in range(n):
        b = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4])):
            pos = rng.randrange(len(b)) if rng.random() < 0.5 else rng.randrange(min(len(b), 4096))
            b[pos] = rng.randrange(256)
        with open(mutated, "wb") as f:
            f.write(b)
        try:
            code = subprocess.run([tessera, "convert", mutated, out, "--input", "2x4"], capture_output=True,
                                  timeout=10).returncode
        except subprocess.TimeoutExpired:
            code = "hang"
        counts[code] += 1
        if code not in (0, 1):
            with open(os.path.join(work, f"crash_{code}_{i}.h5"), "wb") as f:
                f.write(b)
    print(f"{n} mutations of a {len(data)}-byte file ({kind} blueprint string): exit codes {dict(counts)}")
    sys.exit(0 if set(counts) <= {0, 1} else 1)


if __name__ == "__main__":
    main()
