#!/usr/bin/env bash
# Nothing lost, nothing replaced that should not be: every file the `tessera` program writes
# goes to a temporary that is synced, checked and renamed over the target, so a write that
# fails (here a file-size limit, `ulimit -f 0`: writes fail with EFBIG as they would with
# ENOSPC on a full disk) leaves the old file whole, no temporary, a message with the
# system's reason, and a non-zero exit (no crash at exit). Saves write through symbolic
# links; devices are refused. A NaN in the data stops training, naming the parameter it
# reached, instead of saving a NaN model; checkpoints are not replaced by accident; no
# standard-library exception text reaches the user.
#   faults.sh TESSERA WORKDIR
set -euo pipefail
tessera=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() {
  echo "faults: $*" >&2
  exit 1
}
/usr/bin/python3 -c '
import numpy as np
r = np.random.RandomState(0)
np.save("x.npy", r.randn(4, 1, 28, 28).astype(np.float32))
for split, n in (("train", 256), ("test", 64)):
    images = r.rand(n, 1, 28, 28).astype(np.float32)
    labels = r.randint(0, 10, size=n).astype(np.int64)
    np.save(split + "_images.npy", images)
    np.save(split + "_labels.npy", labels)
import os
os.makedirs("nan", exist_ok=True)
images = np.load("train_images.npy")
images[3, 0, 5, 7] = np.nan  # one NaN pixel in one training image
np.save("nan/train_images.npy", images)
for f in ("train_labels.npy", "test_images.npy", "test_labels.npy"):
    os.link(f, "nan/" + f)'
mkdir -p data
mv train_images.npy train_labels.npy test_images.npy test_labels.npy data/

# Runs "$@" with writes limited to 0 bytes (SIGXFSZ ignored, so writes fail with EFBIG);
# sets rc and out (stdout and stderr).
limited() {
  set +e
  out=$(trap '' XFSZ; ulimit -f 0; "$@" 2>&1)
  rc=$?
  set -e
}
# OLD-FILE: unchanged bytes, no temporary beside it.
kept() {
  cmp -s "$1" "$1.before" || fail "$1 changed by a failed write"
  [[ ! -e $1.tmp ]] || fail "$1.tmp left behind"
}
expectFailure() { # WHAT TEXT
  ((rc != 0)) || fail "$1: exit code 0 after a failed write: $out"
  ((rc < 128)) || fail "$1: killed by signal $((rc - 128)): $out"
  [[ $out == *"$2"* ]] || fail "$1: the output lacks '$2': $out"
  [[ $out != *wrote* ]] || fail "$1: says it wrote: $out"
}

# tessera run -o: the old output stays.
"$tessera" run lenet --input x.npy -o y.npy --quiet
cp y.npy y.npy.before
limited "$tessera" run lenet --input x.npy -o y.npy --quiet
expectFailure "run -o" "File too large"
kept y.npy

# tessera train --save, --metrics and --checkpoint; profile --csv; eval --confusion.
"$tessera" train --model lenet --data npy:data --epochs 1 --quiet --save m.h5 --seed 1
cp m.h5 m.h5.before
limited "$tessera" train --model lenet --data npy:data --epochs 1 --quiet --save m.h5 --seed 2
expectFailure "train --save" "File too large"
kept m.h5
echo old > metrics.csv
cp metrics.csv metrics.csv.before
limited "$tessera" train --model lenet --data npy:data --epochs 1 --quiet --metrics metrics.csv
expectFailure "train --metrics" "File too large"
kept metrics.csv
cp m.h5 c.h5
cp c.h5 c.h5.before
limited "$tessera" train --model lenet --data npy:data --epochs 1 --quiet --checkpoint c.h5 --overwrite
expectFailure "train --checkpoint" "File too large"
kept c.h5
echo old > p.csv
cp p.csv p.csv.before
limited "$tessera" profile lenet --input 2x1x28x28 --steps 1 --warmup 0 --csv p.csv --quiet
expectFailure "profile --csv" "File too large"
kept p.csv
echo old > confusion.csv
cp confusion.csv confusion.csv.before
limited "$tessera" eval m.h5 --data npy:data --confusion confusion.csv
expectFailure "eval --confusion" "File too large"
kept confusion.csv
limited "$tessera" convert m.h5 m.onnx
expectFailure "convert -o" "File too large"
[[ ! -e m.onnx && ! -e m.onnx.tmp ]] || fail "convert left a file behind"

# A symbolic link is written through: the link stays, the file it names gets the model.
mkdir -p real
cp m.h5 real/model.h5
ln -s real/model.h5 link.h5
"$tessera" train --model lenet --data npy:data --epochs 1 --quiet --save link.h5 --seed 3
[[ -L link.h5 ]] || fail "the symbolic link was replaced"
cmp -s real/model.h5 m.h5 && fail "the file the link names still holds the old model"
[[ ! -e link.h5.tmp && ! -e real/model.h5.tmp ]] || fail "a temporary was left behind"

# An existing checkpoint is not replaced by a run that does not resume it; --checkpoint
# and --save must differ.
set +e
out=$("$tessera" train --model lenet --data npy:data --epochs 1 --quiet --checkpoint c.h5 2>&1)
rc=$?
set -e
((rc == 2)) && [[ $out == *"--checkpoint c.h5: the file exists"*"--resume c.h5"*"--overwrite"* ]] ||
  fail "an existing checkpoint: rc $rc, $out"
kept c.h5

# One NaN pixel in one training image: ReLU and max pooling hide it from the loss, but the
# first convolution's weights become NaN; training stops after the epoch naming them, exit
# code 1, and --save writes nothing.
set +e
out=$("$tessera" train --model lenet --data npy:nan --epochs 2 --quiet --save nan.h5 2>&1)
rc=$?
set -e
((rc == 1)) || fail "NaN data: exit code $rc: $out"
[[ $out == *"after epoch 1, parameter "*"holds NaN or infinity"* ]] || fail "NaN data: $out"
[[ ! -e nan.h5 ]] || fail "NaN data: a model was saved"

# Data errors are found before the first step, not after an epoch: a test set of another
# image size, a test label the model has no score for.
/usr/bin/python3 -c '
import numpy as np, os
r = np.random.RandomState(1)
for d in ("bigtest", "badlabel"):
    os.makedirs(d, exist_ok=True)
    for f in ("train_images.npy", "train_labels.npy"):
        os.link("data/" + f, d + "/" + f)
np.save("bigtest/test_images.npy", r.rand(8, 1, 32, 32).astype(np.float32))
np.save("bigtest/test_labels.npy", np.zeros(8, np.int64))
os.link("data/test_images.npy", "badlabel/test_images.npy")
labels = np.load("data/test_labels.npy")
labels[40] = 10
np.save("badlabel/test_labels.npy", labels)'
dataError() { # DIR TEXT1 TEXT2: a usage error holding both texts, before any epoch
  set +e
  out=$("$tessera" train --model lenet --data "npy:$1" --epochs 1 --quiet 2>&1)
  rc=$?
  set -e
  ((rc == 2)) && [[ $out == *"$2"*"$3"* ]] || fail "$1: rc $rc: $out"
  [[ $out != *"epoch 1/1"* ]] || fail "$1: the error came after training: $out"
}
dataError bigtest "the test images are [1, 32, 32] after the transforms, the training images [1, 28, 28]" ""
dataError badlabel "the test label of" "is 10, but the model gives 10 scores"

# No standard-library exception text reaches the user.
stdText='_M_range_check|vector::|basic_string|map::at|std::|stoi|stoll|stof|filesystem error|bad_alloc|out_of_range|bad_optional|bad_variant|bad_function_call'
for args in "train --model lenet --data npy:nan --epochs 1 --quiet" "run m.h5 --input m.h5 -o z.npy" \
  "eval m.h5 --data npy:/nonexistent" "check m.h5 --input 2x1x28x28x9" "convert x.npy q.h5"; do
  set +e
  # shellcheck disable=SC2086
  out=$("$tessera" $args 2>&1)
  set -e
  if grep -Eq "$stdText" <<<"$out"; then fail "tessera $args: a standard-library message: $out"; fi
done
echo "faults: all checks passed"
