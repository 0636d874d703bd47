#!/usr/bin/env bash
# tessera eval on a model tessera train saved: the accuracy is the one train reported for
# the same images, the confusion matrix adds up to it, bfloat16 lands close, and the
# training split can be evaluated too; an ONNX export with its image size left free keeps the
# images' size.
#   eval.sh TESSERA WORKDIR
set -euo pipefail
tessera=$1 work=$2
mkdir -p "$work"
cd "$work"
rm -f eval_lenet.h5 confusion.csv
out=$("$tessera" train --model lenet --epochs 1 --limit 2000 --seed 3 --quiet --save eval_lenet.h5)
echo "$out"
trained=$(sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' <<< "$out")
out=$("$tessera" eval eval_lenet.h5 --limit 2000 --per-class --confusion confusion.csv --quiet)
echo "$out"
got=$(sed -n 's/^accuracy \([0-9.]*\)% (\([0-9]*\) of 2000).*/\1 \2/p' <<< "$out")
read -r accuracy correct <<< "$got"
[[ -n $accuracy ]] || { echo "FAIL: no accuracy line"; exit 1; }
# The same weights on the same 2000 test images: train's figure, to the image.
awk -v a="$accuracy" -v t="$trained" 'BEGIN { exit !(a - t < 0.03 && t - a < 0.03) }' ||
  { echo "FAIL: eval says $accuracy%, train said $trained%"; exit 1; }
awk -v a="$accuracy" 'BEGIN { exit !(a > 40) }' || { echo "FAIL: accuracy $accuracy% is not a trained model's"; exit 1; }
# The confusion matrix: 10 rows of 10 counts that add up to 2000, its diagonal to the hits,
# and each row to the per-class table's image count.
/usr/bin/python3 - "$correct" <<'PY'
import csv, sys
rows = list(csv.reader(open("confusion.csv")))
# Classes by number and name, as the model file names them ("0 T-shirt/top").
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
assert rows[0] == ["true\\predicted"] + [f"{k} {n}" for k, n in enumerate(names)], rows[0]
assert [r[0] for r in rows[1:]] == [f"{k} {n}" for k, n in enumerate(names)], [r[0] for r in rows[1:]]
m = [[int(v) for v in r[1:]] for r in rows[1:]]
assert len(m) == 10 and all(len(r) == 10 for r in m)
assert sum(map(sum, m)) == 2000, sum(map(sum, m))
assert sum(m[k][k] for k in range(10)) == int(sys.argv[1])
print("confusion matrix adds up:", [sum(r) for r in m])
PY
# The rows: a class (its number and name, 16 characters), then images and hits.
table=$(awk '/^class +images/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { split(substr($0, 18), f, " "); s += f[1]; c += f[2]; n++ } END { print n, s, c }' <<< "$out")
[[ $table == "10 2000 $correct" ]] || { echo "FAIL: per-class table rows/images/correct: $table"; exit 1; }
out=$("$tessera" eval eval_lenet.h5 --limit 2000 --precision bf16 --workers 0 --quiet)
echo "$out"
bf16=$(sed -n 's/^accuracy \([0-9.]*\)%.*/\1/p' <<< "$out")
awk -v a="$accuracy" -v b="$bf16" 'BEGIN { exit !(a - b < 1 && b - a < 1) }' ||
  { echo "FAIL: bf16 accuracy $bf16% is far from fp32's $accuracy%"; exit 1; }
out=$("$tessera" eval eval_lenet.h5 --split train --limit 300 --quiet)
echo "$out"
grep -q "300 train images of \[1, 28, 28\]" <<< "$out" || { echo "FAIL: not the training split"; exit 1; }
# A reference: the scores tessera run computes for the same images, scored in NumPy (.npy
# data of 250 random images; batches of 64 leave a last one of 58).
mkdir -p npy
/usr/bin/python3 -c '
import numpy as np
r = np.random.RandomState(5)
for split in ["train", "test"]:
    np.save("npy/%s_images.npy" % split, r.rand(250, 1, 28, 28).astype(np.float32))
    np.save("npy/%s_labels.npy" % split, np.arange(250) % 10)'
out=$("$tessera" eval eval_lenet.h5 --data npy:npy --batch 64 --quiet)
echo "$out"
"$tessera" run eval_lenet.h5 --input npy/test_images.npy -o npy/scores.npy --quiet
/usr/bin/python3 - "$out" <<'PY'
import re, sys
import numpy as np
s = np.load("npy/scores.npy").astype(np.float64)
y = np.load("npy/test_labels.npy")
hits = int((s.argmax(1) == y).sum())
top5 = int(((s > s[np.arange(len(y)), y][:, None]).sum(1) < 5).sum())
z = s - s.max(1, keepdims=True)
ce = float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y]))
m = re.search(r"accuracy ([0-9.]+)% \((\d+) of 250\), top-5 ([0-9.]+)%, mean cross-entropy ([0-9.]+)", sys.argv[1])
assert m, sys.argv[1]
assert int(m.group(2)) == hits, (m.group(2), hits)
assert abs(float(m.group(3)) - 100 * top5 / 250) < 0.006, (m.group(3), top5)
assert abs(float(m.group(4)) - ce) < 2e-4, (m.group(4), ce)
print("eval matches NumPy on tessera run's scores: %d hits, %d in the top 5, cross-entropy %.4f" % (hits, top5, ce))
PY
# The model as ONNX with its image size left free (dynamic axes 2 and 3): eval keeps the
# images' own size (nothing to resize to) and gets the same hits; check asks for --input.
"$tessera" convert eval_lenet.h5 eval_lenet.onnx
/usr/bin/python3 -c '
import onnx
m = onnx.load("eval_lenet.onnx")
dims = m.graph.input[0].type.tensor_type.shape.dim
dims[2].dim_param, dims[3].dim_param = "height", "width"
onnx.save(m, "eval_lenet_free.onnx")'
out=$("$tessera" eval eval_lenet_free.onnx --limit 2000)
echo "$out"
grep -q "2000 test images of \[1, 28, 28\], 10 classes; no transforms" <<< "$out" ||
  { echo "FAIL: the free-size model's images were transformed"; exit 1; }
grep -q "^accuracy $accuracy% ($correct of 2000)" <<< "$out" ||
  { echo "FAIL: the free-size ONNX model does not score as the HDF5 file ($accuracy%, $correct hits)"; exit 1; }
if out=$("$tessera" check eval_lenet_free.onnx 2>&1); then echo "FAIL: check took free sizes as 1"; exit 1; fi
echo "$out"
grep -q "leaves sizes of its inputs free besides the batch (\[?, 1, ?, ?\]): give each input's whole shape with --input" \
  <<< "$out" || { echo "FAIL: check without --input of a free-size model"; exit 1; }
echo "eval: all checks passed"
