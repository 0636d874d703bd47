#!/usr/bin/python3
"""h5py side of the HDF5 interoperability tests (tests/io/Hdf5Test.cpp).

  h5py_interop.py verify FILE   checks the PuzzleLib layout of a file Tessera wrote and
                                prints one line per link: name index shape sum
  h5py_interop.py write FILE    writes a model file for Linear(3, 2) named "fc" with
                                W = 0..5 (shape [3, 2]) and b = [10, 20], plus one attribute
"""
import sys

import h5py
import numpy as np


def verify(path):
    with h5py.File(path, "r") as f:
        for group in ("params", "links", "attrs"):
            if group not in f:
                sys.exit(f"{path}: no {group}/ group")
        for name in sorted(f["links"]):
            idx = int(f["links"][name][()])
            data = f["params"][str(idx)][()]
            if data.dtype != np.float32:
                sys.exit(f"{name}: dtype {data.dtype}")
            print(name, idx, "x".join(map(str, data.shape)), f"{float(data.sum()):.4f}")
        for name in sorted(f["attrs"]):
            print("attr", name, "x".join(map(str, f["attrs"][name].shape)))
        if "blueprint" in f:
            text = f["blueprint"][()]
            text = text.decode() if isinstance(text, bytes) else text
            print("blueprint", text[:40])


def write(path):
    with h5py.File(path, "w") as f:
        f.create_group("params")
        f.create_group("links")
        f.create_group("attrs")
        f["params"]["0"] = np.arange(6, dtype=np.float32).reshape(3, 2)
        f["params"]["1"] = np.array([10, 20], dtype=np.float32)
        f["links"]["fc.W"] = np.int64(0)
        f["links"]["fc.b"] = np.int64(1)


if __name__ == "__main__":
    {"verify": verify, "write": write}[sys.argv[1]](sys.argv[2])
