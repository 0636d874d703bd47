#!/usr/bin/env bash
# tessera predict on PNG files: the classes' names and input size come with the model file
# tessera train saved, and the probabilities are the softmax of the scores tessera run
# computes for the same pixels.
#   predict.sh TESSERA WORKDIR
set -euo pipefail
tessera=$1 work=$2
mkdir -p "$work"
cd "$work"
rm -f p.csv
fail() { echo "FAIL: $*"; exit 1; }
"$tessera" train --epochs 1 --limit 2000 --seed 2 --quiet --save model.h5 > /dev/null
# Five Fashion-MNIST test images as 28x28 grayscale PNGs, one of them also at 56x56, and
# the same pixels as an .npy batch for tessera run.
/usr/bin/python3 - <<'PY'
import gzip
import numpy as np
from PIL import Image
with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:5]
for i, px in enumerate(images):
    Image.fromarray(px).save(f"img{i}.png")
Image.fromarray(images[0]).resize((56, 56), Image.NEAREST).save("big.png")
Image.fromarray(np.zeros((20, 30), np.uint8)).save("odd.png")
np.save("x.npy", (images.astype(np.float32) / 255)[:, None])
PY
out=$("$tessera" predict model.h5 img0.png img1.png img2.png img3.png img4.png big.png --top 2 --csv p.csv --quiet)
echo "$out"
[[ $(grep -c "^img[0-4].png: .* [0-9.]*%, .* [0-9.]*%$" <<< "$out") -eq 5 ]] || fail "expected 5 lines of 2 classes"
grep -q "^big.png: " <<< "$out" || fail "the 56x56 image was not resized to the model's 28x28"
"$tessera" run model.h5 --input x.npy -o scores.npy --quiet
/usr/bin/python3 - "$out" <<'PY'
import csv, sys
import numpy as np
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
rows = list(csv.reader(open("p.csv")))
assert rows[0] == ["image"] + names, rows[0]
got = np.array([[float(v) for v in r[1:]] for r in rows[1:6]])
s = np.load("scores.npy").astype(np.float64)
want = np.exp(s - s.max(1, keepdims=True))
want /= want.sum(1, keepdims=True)
assert np.abs(got - want).max() < 1e-5, np.abs(got - want).max()
lines = sys.argv[1].splitlines()
for i in range(5):
    assert lines[i].startswith("img%d.png: %s " % (i, names[int(want[i].argmax())])), lines[i]
print("predict matches the softmax of tessera run's scores, by name")
PY
# The names travel through ONNX (its metadata) and back to HDF5 with tessera convert.
"$tessera" convert model.h5 model.onnx | grep -q "10 class names" || fail "convert to ONNX kept no names"
"$tessera" convert model.onnx back.h5 | grep -q "10 class names" || fail "convert from ONNX kept no names"
for m in model.onnx back.h5; do
    again=$("$tessera" predict $m img0.png img1.png img2.png img3.png img4.png big.png --top 2 --quiet)
    [[ "$again" == "$out" ]] || fail "predict with $m differs: $again"
done
# Images that do not share a size without a resize, and a file that is no image.
set +e
msg=$("$tessera" predict model.h5 img0.png odd.png --augment flip 2>&1); code=$?
set -e
[[ $code -eq 2 ]] && grep -q "give every image one size with --augment resize:HxW" <<< "$msg" || fail "sizes: $code $msg"
echo "not an image" > bad.png
set +e
msg=$("$tessera" predict model.h5 bad.png 2>&1); code=$?
set -e
[[ $code -eq 1 ]] && grep -q "bad.png: not a JPEG or PNG file" <<< "$msg" || fail "bad file: $code $msg"
echo "predict: all checks passed"
