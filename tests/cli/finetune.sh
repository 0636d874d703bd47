#!/usr/bin/env bash
# tessera train --model SAVED.h5 starts from the saved weights, and --metrics / --plot
# write a CSV row per epoch and a PNG.
#   finetune.sh TESSERA SAVED.h5 WORKDIR
set -euo pipefail
tessera=$1 saved=$2 work=$3
mkdir -p "$work"
csv=$work/finetune.csv png=$work/finetune.png
rm -f "$csv" "$png"
# A learning rate of 1e-9 leaves the weights as saved: the accuracy is the saved model's,
# far above the 10% of fresh weights.
out=$("$tessera" train --model "$saved" --epochs 2 --limit 500 --lr 1e-9 --optimizer sgd --quiet \
      --metrics "$csv" --plot "$png")
echo "$out"
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 40) }' || { echo "FAIL: accuracy $acc% is not a trained model's"; exit 1; }
[[ $(head -1 "$csv") == "epoch,train_loss,test_accuracy_percent,seconds,images_per_second" ]] ||
  { echo "FAIL: bad CSV header"; exit 1; }
[[ $(wc -l < "$csv") -eq 3 ]] || { echo "FAIL: expected 2 rows in $csv"; cat "$csv"; exit 1; }
[[ $(head -c 4 "$png" | od -An -c | tr -d ' ') == '211PNG' ]] || { echo "FAIL: $png is not a PNG"; exit 1; }
echo "ok: fine-tuned from $saved at $acc%, wrote $csv and $png"
