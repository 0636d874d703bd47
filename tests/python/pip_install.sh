#!/usr/bin/env bash
# `pip install .` from the checkout into a fresh target directory, built from this build
# directory: the package imports from there alone, trains a step, writes and reads an HDF5
# model (the reader starts tessera-child, installed beside libtessera), and pip knows it.
# Usage: pip_install.sh SOURCE_DIR BUILD_DIR OUT_DIR
set -euo pipefail
src=$1 build=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
TESSERA_BUILD_DIR=$build /usr/bin/python3 -m pip install -q --no-build-isolation --no-deps --target "$out/site" \
  "$src" 2>&1 | grep -v "Running pip as the 'root' user" || true
test -f "$out/site/tessera/__init__.py" || { echo "pip install wrote no package under $out/site"; exit 1; }
cd "$out"
PYTHONPATH=$out/site /usr/bin/python3 - "$out" <<'PY'
import os
import sys

import numpy as np

import tessera as ts

out = sys.argv[1]
where = os.path.dirname(ts.__file__)
assert where == os.path.join(out, "site", "tessera"), f"imported from {where}"
net = ts.Sequential().append(ts.Linear(4, 8)).append(ts.Activation("relu")).append(ts.Linear(8, 2))
opt = ts.SGD(learnRate=0.1)
opt.setupOn(net)
x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
labels = (x[:, 0] > 0).astype(np.int32)
cost = ts.CrossEntropy()
first = None
for _ in range(30):
    error, grad = cost(net(x), labels)
    first = error if first is None else first
    net.zeroGradParams()
    net.backward(grad)
    opt.update()
assert error < first, (first, error)
path = os.path.join(out, "model.h5")
net.save(path)
back = ts.load(path)
back.evalMode()
net.evalMode()
np.testing.assert_allclose(back(x).numpy(), net(x).numpy())
print(f"trained {first:.3f} -> {error:.3f}, saved and loaded from {where}")
PY
meta=$(PYTHONPATH=$out/site /usr/bin/python3 -m pip show tessera 2>/dev/null)
grep -q "^Name: tessera" <<<"$meta" || { echo "pip show does not know tessera"; exit 1; }
grep -q "^Location: $out/site" <<<"$meta" || { echo "pip show: $meta"; exit 1; }
echo "pip install: the package works from its install"
