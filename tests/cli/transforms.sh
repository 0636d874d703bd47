#!/usr/bin/env bash
# The transforms training applied travel with the model: tessera train --save keeps its
# --augment, and predict, eval, convert (to ONNX and back) and Python's readTransforms apply
# them with no preprocessing option given.
#   transforms.sh TESSERA WORKDIR PYTHONPATH|none
set -euo pipefail
tessera=$1 work=$2 pythonpath=$3
mkdir -p "$work"
cd "$work"
rm -f *.csv
fail() { echo "FAIL: $*"; exit 1; }
# Normalised inputs: without the normalisation a prediction is off.
"$tessera" train --epochs 1 --limit 1000 --seed 3 --quiet --augment normalize:mnist --save model.h5 > /dev/null
/usr/bin/python3 - <<'PY'
import gzip
import numpy as np
from PIL import Image
with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:4]
for i, px in enumerate(images):
    Image.fromarray(px).save(f"img{i}.png")
PY
imgs="img0.png img1.png img2.png img3.png"
"$tessera" predict model.h5 $imgs --csv saved.csv --quiet > saved.txt
"$tessera" predict model.h5 $imgs --csv given.csv --quiet --augment normalize:mnist > given.txt
"$tessera" predict model.h5 $imgs --csv raw.csv --quiet --augment resize:28x28 > raw.txt
cmp -s saved.csv given.csv || fail "predict without --augment is not predict with the saved transforms"
cmp -s saved.csv raw.csv && fail "the saved normalisation made no difference to the probabilities"
# eval applies them too, and says so.
out=$("$tessera" eval model.h5 --limit 500 --quiet)
grep -q "transforms normalize:" <<< "$out" || fail "eval did not apply the saved transforms: $out"
given=$("$tessera" eval model.h5 --limit 500 --quiet --augment normalize:mnist)
acc() { grep -o "^accuracy .*cross-entropy [0-9.]*" <<< "$1"; } # without the speed
[[ -n "$(acc "$out")" && "$(acc "$out")" == "$(acc "$given")" ]] || fail "eval: $out / $given"
# Through ONNX's metadata and back.
"$tessera" convert model.h5 model.onnx | grep -q "transforms normalize:" || fail "convert to ONNX lost them"
"$tessera" convert model.onnx back.h5 | grep -q "transforms normalize:" || fail "convert from ONNX lost them"
for m in model.onnx back.h5; do
    "$tessera" predict $m $imgs --csv again.csv --quiet > /dev/null
    cmp -s saved.csv again.csv || fail "predict with $m differs"
done
# Python: the file's transforms on the same PNGs give predict's probabilities (where the
# package is built: PYTHONPATH "none" leaves this out).
[[ "$pythonpath" == none ]] || PYTHONPATH=$pythonpath /usr/bin/python3 - <<'PY'
import csv
import numpy as np
import tessera as ts
t = ts.readTransforms("model.h5")
assert "normalize" in repr(t), t
net = ts.load("model.h5")
net.evalMode()
x = np.stack([t.apply(f"img{i}.png", channels=1) for i in range(4)])
s = net(x).numpy().astype(np.float64)
p = np.exp(s - s.max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
rows = list(csv.reader(open("saved.csv")))[1:]
got = np.array([[float(v) for v in r[1:]] for r in rows])
assert np.abs(got - p).max() < 1e-5, np.abs(got - p).max()
print("Python's readTransforms and apply give predict's probabilities")
PY
echo "transforms: all checks passed"
