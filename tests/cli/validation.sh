#!/usr/bin/env bash
# tessera train --validation: held-out images scored each epoch, --save-best keeps the
# best epoch's model, --early-stop ends a run that stopped improving, and a resumed run
# picks up the selection where it was.
#   validation.sh TESSERA WORKDIR
set -euo pipefail
tessera=$1 work=$2
mkdir -p "$work"
cd "$work"
rm -f best.h5 metrics.csv ck.h5
common=(--limit 1500 --batch 100 --seed 4 --quiet)
fail() { echo "FAIL: $*"; exit 1; }
# 1. The best epoch's model is saved: its test accuracy is the one that epoch printed.
out=$("$tessera" train --epochs 3 --lr 0.003 --validation 0.2 --save-best best.h5 --metrics metrics.csv "${common[@]}")
echo "$out"
grep -q "1200 training (300 more held out for validation) and 1500 test images" <<< "$out" || fail "data line"
best=$(sed -n 's/^best validation accuracy \([0-9.]*\)% after epoch \([0-9]*\).*/\2/p' <<< "$out")
[[ -n $best ]] || fail "no best line"
line=$(grep "^epoch $best/3:" <<< "$out")
grep -q "best so far, saved to best.h5" <<< "$line" || fail "epoch $best did not save"
want=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' <<< "$line")
top=$(grep "^epoch " <<< "$out" | sed -n 's/.*validation accuracy \([0-9.]*\)%.*/\1/p' | sort -g | tail -1)
grep -q "^best validation accuracy $top% after epoch $best" <<< "$out" || fail "best is not the top validation accuracy $top"
got=$("$tessera" eval best.h5 --limit 1500 --batch 100 --quiet | sed -n 's/^accuracy \([0-9.]*\)%.*/\1/p')
[[ $got == "$want" ]] || fail "best.h5 scores $got% on the test images, epoch $best printed $want%"
[[ $(head -1 metrics.csv) == "epoch,train_loss,validation_accuracy_percent,test_accuracy_percent,seconds,images_per_second" ]] ||
  fail "metrics header: $(head -1 metrics.csv)"
[[ $(wc -l < metrics.csv) -eq 4 ]] || fail "expected 3 metrics rows"
# 2. A model that cannot improve (a learning rate of 1e-9) stops after --early-stop epochs.
out=$("$tessera" train --epochs 5 --optimizer sgd --lr 1e-9 --validation 300 --early-stop 2 "${common[@]}")
echo "$out"
grep -q "^stopping early: no better validation accuracy in 2 epochs" <<< "$out" || fail "no early stop"
[[ $(grep -c "^epoch " <<< "$out") -eq 3 ]] || fail "expected 3 epochs before stopping"
grep -q "^best validation accuracy .* after epoch 1$" <<< "$out" || fail "the best is not epoch 1"
# 3. The selection survives a resume: the same model, checkpointed after epoch 2 (its best
# still epoch 1), resumed for 5 epochs, stops after epoch 3 as an uninterrupted run does.
run=(--optimizer sgd --lr 1e-9 --validation 300 --early-stop 2 "${common[@]}")
whole=$("$tessera" train --epochs 5 "${run[@]}")
"$tessera" train --epochs 2 --checkpoint ck.h5 "${run[@]}" > /dev/null
resumed=$("$tessera" train --epochs 5 --resume ck.h5 --checkpoint ck.h5 "${run[@]}")
echo "$resumed"
for pattern in "^epoch 3/5" "^stopping early" "^best validation accuracy" "^final test accuracy"; do
  a=$(grep "$pattern" <<< "$whole" | sed 's/ ([0-9]* images\/s.*)//; s/; checkpoint saved//; s/, total time.*//')
  b=$(grep "$pattern" <<< "$resumed" | sed 's/ ([0-9]* images\/s.*)//; s/; checkpoint saved//; s/, total time.*//')
  [[ -n $a && $a == "$b" ]] || fail "resumed run differs: '$a' vs '$b'"
done
grep -q "after epoch 1$" <<< "$resumed" || fail "the resumed run lost the best epoch"
# Resuming the checkpoint of a run that stopped early trains no more.
again=$("$tessera" train --epochs 5 --resume ck.h5 "${run[@]}")
grep -q "the checkpoint stopped early at epoch 3: no training left" <<< "$again" || fail "trained past an early stop"
echo "validation: all checks passed"
