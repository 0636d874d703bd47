"""A fusion setting on against off, in one process on the same inputs: layer fusion
(containers/Fusion.h, --setting fusion) or the CPU's fused attention (backend/cpu/Attention.cpp,
--setting cpu-attention); the zoo models' inference (eval-mode forward) and training step
(forward and backward), each case warmed up, then the two settings alternating --reps times
(alternating.py's medians_ms); the ratio is unfused / fused time (above 1: fusion is faster).

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/fusion_on_off.py --models vit-tiny:128,mlp:256
    PYTHONPATH=build/python /usr/bin/python3 tools/bench/fusion_on_off.py --setting cpu-attention --models vit-tiny:128
    PYTHONPATH=build/python /usr/bin/python3 tools/bench/fusion_on_off.py --setting cpu-attention --models gpt-mini:64
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternating import medians_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="vit-tiny:128,mlp:256", help="zoo model:batch, comma-separated")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--setting", choices=("fusion", "cpu-attention"), default="fusion")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import tessera as ts

    rng = np.random.default_rng(1)
    switch = ts.setFusion if args.setting == "fusion" else ts.setCpuFusedAttention
    for spec in args.models.split(","):
        name, batch = spec.split(":")
        net = ts.loadZooModel(name)
        zoo = {m["name"]: m["input"] for m in ts.zooModels()}
        shape = [int(batch)] + [int(d) for d in zoo[name].split("x")[1:]]
        if name.startswith("gpt"):  # byte ids
            x = ts.Tensor(rng.integers(0, 128, shape).astype(np.int32))
        else:
            x = ts.Tensor(rng.random(shape, dtype=np.float32))
        dy = None
        for mode in ("eval", "train"):
            net.evalMode() if mode == "eval" else net.trainMode()

            def step():
                y = net(x)
                if mode == "train":
                    nonlocal dy
                    if dy is None:
                        dy = ts.Tensor(np.full(y.shape, 0.01, dtype=np.float32))
                    net.backward(dy)

            def with_fusion(on):
                def run():
                    switch(on)
                    step()

                return run

            fused, plain = medians_ms(with_fusion(True), with_fusion(False), args.reps)
            switch(True)
            print(f"{args.setting}: {name} batch {batch} {mode}: fused {fused:.2f} ms, unfused {plain:.2f} ms, "
                  f"unfused/fused {plain / fused:.3f} (medians of {args.reps} alternating)", flush=True)


if __name__ == "__main__":
    main()
