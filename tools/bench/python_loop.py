#!/usr/bin/python3
"""A training loop written in Python against the same loop in C++, in one process.

Both sides train the same LeNet (zoo "lenet", 28x28 single-channel images, Fashion-MNIST's
first images) with the same cost (CrossEntropy) and optimizer (MomentumSGD): per step a
forward, the cost, zeroed gradients, a backward and the update, on contiguous batches of
one array. The Python loop makes each call from Python (tessera.Module.__call__, ...; the
batches are NumPy slices, shared with the tensors without a copy); the C++ loop is the
extension's _trainSteps, which makes the same calls on the same batches in C++. The two
alternate --reps times (after a warm-up of each; each side first in every other rep), so
machine noise falls on both alike;
the medians and the ratio Python / C++ in images per second are printed.

    /usr/bin/python3 tools/bench/python_loop.py [--steps 50] [--reps 30] [--batch 128]

Needs the package built (tools/setup.sh makes `import tessera` work for Debian's python3;
or PYTHONPATH=build/python).
"""

import argparse
import os
import statistics
import time

import tessera as ts


def python_steps(net, cost, opt, x, y, batch, steps):
    n = len(x)
    for s in range(steps):
        begin = (s * batch) % (n - batch + 1)
        out = net(x[begin:begin + batch])
        error, grad = cost(out, y[begin:begin + batch])
        opt.zeroGradParams()
        net.backward(grad)
        opt.update()
    return error


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50, help="training steps per measurement")
    ap.add_argument("--reps", type=int, default=30, help="measurements of each side (alternating)")
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()

    ts.manualSeed(1)
    images, labels = ts.loadMnist(split="train", limit=args.batch * 100)
    x, y = images.numpy(), labels.numpy()
    net = ts.loadZooModel("lenet")
    cost = ts.CrossEntropy()
    opt = ts.MomentumSGD(learnRate=0.01, momRate=0.9)
    opt.setupOn(net, useGlobalState=True)
    net.trainMode()

    def python_side():
        python_steps(net, cost, opt, x, y, args.batch, args.steps)

    def cpp_side():
        ts._tessera._trainSteps(net, cost, opt, images, labels, args.batch, args.steps)

    python_side()  # warm-up: primitives made and cached, memory touched
    cpp_side()
    rates = {"python": [], "c++": []}
    sides = [("python", python_side), ("c++", cpp_side)]
    for rep in range(args.reps):
        for name, side in sides if rep % 2 == 0 else sides[::-1]:  # each goes first in every other rep
            t0 = time.perf_counter()
            side()
            rates[name].append(args.steps * args.batch / (time.perf_counter() - t0))

    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"LeNet training loop, batch {args.batch}, {args.steps} steps x {args.reps} alternating reps, "
          f"OMP_NUM_THREADS={threads}, {os.cpu_count()} CPUs")
    for name, r in rates.items():
        print(f"  {name:7s} median {statistics.median(r):9.0f} images/s   (all: {', '.join(f'{v:.0f}' for v in r)})")
    ratios = [p / c for p, c in zip(rates["python"], rates["c++"])]
    print(f"  python / c++: {statistics.median(rates['python']) / statistics.median(rates['c++']):.3f} "
          f"(per rep median {statistics.median(ratios):.3f})")


if __name__ == "__main__":
    main()
