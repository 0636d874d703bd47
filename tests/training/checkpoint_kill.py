#!/usr/bin/env python3
"""Kill-and-resume test of `tessera train --checkpoint/--resume`.

A reference run trains uninterrupted (with a learning-rate schedule, a warm-up, weight decay,
gradient clipping, a weight average and gradients accumulated over 2 batches). Then the same run, writing a checkpoint every 2
steps, is killed with SIGKILL at random moments (during start-up, in a step, in the middle
of writing a checkpoint) and with SIGINT once, each time resumed from its checkpoint,
until it finishes. Every checkpoint on disk must be readable at every kill, and the final
weights must equal the reference run's bit for bit.

usage: checkpoint_kill.py TESSERA WORKDIR [SEED]
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import h5py


def weights(path):
    with h5py.File(path, "r") as f:
        return {f"{g}/{k}": f[g][k][()].tobytes() for g in ("params", "attrs") if g in f for k in f[g]}


def check_checkpoint(path):
    """Raises unless `path` is a whole checkpoint: its record parses and every dataset reads."""
    with h5py.File(path, "r") as f:
        record = json.loads(f["extra_record"][()])
        assert record["format"] == "tessera checkpoint 1", record
        for g in ("params", "attrs", "extra"):
            for k in f[g]:
                f[g][k][()]
    return record


def main():
    tessera, work = sys.argv[1], sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = [tessera, "train", "--model", "lenet", "--data", "fashion-mnist", "--epochs", "2", "--limit", "3000",
              "--batch", "100", "--seed", "5", "--quiet",
              # The rate depends on the position (a cosine over the epochs, a warm-up over
              # the first 25 of 60 steps), so a resumed run must find it again.
              "--schedule", "cosine", "--warmup", "25", "--weight-decay", "1e-4", "--clip-norm", "5",
              "--ema", "0.9", "--accumulate", "2"]
    ref = os.path.join(work, "reference.h5")
    t0 = time.monotonic()
    subprocess.run(common + ["--save", ref], check=True, stdout=subprocess.DEVNULL)
    duration = time.monotonic() - t0
    ckpt, out = os.path.join(work, "checkpoint.h5"), os.path.join(work, "resumed.h5")
    cmd = common + ["--checkpoint", ckpt, "--every", "2", "--save", out]
    kills, finished, interrupts = 0, False, 0
    for attempt in range(12):
        resume = ["--resume", ckpt] if os.path.exists(ckpt) else []
        p = subprocess.Popen(cmd + resume, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if attempt < 10:
            time.sleep(rng.uniform(0.05, 0.9) * duration)
            sig = signal.SIGINT if attempt == 3 else signal.SIGKILL
            p.send_signal(sig)
        text, _ = p.communicate()
        if p.returncode == 0:
            finished = True
            break
        if p.returncode == 128 + signal.SIGINT:
            interrupts += 1
            assert "resume with the same command and --resume" in text, text
        elif p.returncode == -signal.SIGINT:  # before training began: nothing to save yet
            interrupts += 1
        elif p.returncode != -signal.SIGKILL:
            sys.exit(f"run {attempt} failed with exit code {p.returncode}:\n{text}")
        else:
            kills += 1
        if os.path.exists(ckpt):
            record = check_checkpoint(ckpt)
            print(f"attempt {attempt}: {'SIGINT' if sig == signal.SIGINT else 'SIGKILL'}; checkpoint at epoch "
                  f"{record['trainer']['epoch'] + 1}, batch {record['trainer']['batch']}, "
                  f"step {record['optimizer']['steps']}")
        else:
            print(f"attempt {attempt}: killed before the first checkpoint")
    if not finished:
        sys.exit("the resumed run never finished")
    a, b = weights(ref), weights(out)
    if a.keys() != b.keys():
        sys.exit(f"different datasets: {sorted(a)} and {sorted(b)}")
    differ = [k for k in a if a[k] != b[k]]
    if differ:
        sys.exit(f"{len(differ)} of {len(a)} datasets differ from the uninterrupted run: {differ}")
    print(f"{kills} SIGKILLs and {interrupts} SIGINT, every checkpoint readable; the final {len(a)} weight and "
          f"statistics tensors equal the uninterrupted run's bit for bit")


if __name__ == "__main__":
    main()
