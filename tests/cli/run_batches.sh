#!/usr/bin/env bash
# tessera run --batch N runs the inputs N rows at a time and stacks the outputs: they must
# be those of one run on all the rows (packed weights or not; bfloat16 within its
# rounding), and inputs or models that cannot be split are usage errors.
#   run_batches.sh TESSERA WORKDIR
set -euo pipefail
tessera=$1 work=$2
mkdir -p "$work"
cd "$work"
rm -f y_*.npy
/usr/bin/python3 -c '
import numpy as np
r = np.random.RandomState(0)
np.save("x.npy", r.randn(300, 1, 28, 28).astype(np.float32))
np.save("x_short.npy", r.randn(7, 1, 28, 28).astype(np.float32))'
"$tessera" run lenet --input x.npy -o y_all.npy
"$tessera" run lenet --input x.npy -o y_batches.npy --batch 128 # 128 + 128 + 44 rows
"$tessera" run lenet --input x.npy -o y_unpacked.npy --batch 128 --no-pack-weights
"$tessera" run lenet --input x.npy -o y_bf16_all.npy --precision bf16
"$tessera" run lenet --input x.npy -o y_bf16.npy --batch 100 --precision bf16 --quiet
/usr/bin/python3 -c '
import numpy as np
a = np.load("y_all.npy")
assert a.shape == (300, 10) and a.dtype == np.float32, (a.shape, a.dtype)
for f in ["y_batches.npy", "y_unpacked.npy"]:
    b = np.load(f)
    assert b.shape == a.shape, (f, b.shape)
    err = np.abs(a - b).max()
    assert err <= 1e-5 * np.abs(a).max(), (f, err)
# bfloat16 keeps 8 bits of mantissa: about 0.4% per rounding, a few through LeNet.
h, hb = np.load("y_bf16_all.npy"), np.load("y_bf16.npy")
assert hb.shape == a.shape and hb.dtype == np.float32
assert np.abs(h - hb).max() <= 1e-5 * np.abs(h).max(), np.abs(h - hb).max()
err = np.abs(hb - a).max() / np.abs(a).max()
assert 0 < err < 0.05, err
print("batched outputs match: fp32 and bf16, relative bf16 error %.4f" % err)'
# Usage errors (exit code 2), with what was expected and what was found.
expect() { # CODE TEXT COMMAND...
  local code=$1 text=$2 out got
  shift 2
  set +e
  out=$("$@" 2>&1)
  got=$?
  set -e
  echo "$out"
  [[ $got -eq $code ]] || { echo "FAIL: exit code $got, expected $code"; exit 1; }
  grep -qF -- "$text" <<< "$out" || { echo "FAIL: the output does not contain: $text"; exit 1; }
}
expect 2 "which must be the same in all of them: x.npy has 300, x_short.npy 7" \
  "$tessera" run lenet --input x.npy x_short.npy -o y_two.npy --batch 10
echo '{"classname": "Sequential", "scheme": {"name": "flat"}, "modules": [{"classname": "Reshape", "scheme": {"name": "r", "shape": [-1]}}]}' > flat.json
expect 2 "--batch 128: output 0 is [235200] for inputs [300, 1, 28, 28], not one row per input row" \
  "$tessera" run flat.json --input x.npy -o y_flat.npy --batch 128
# Without --batch the same model runs: one output of all the elements.
expect 0 "wrote y_flat.npy [235200]" "$tessera" run flat.json --input x.npy -o y_flat.npy
echo "run_batches: all checks passed"
