#!/usr/bin/python3
"""Tessera against PyTorch (CPU) on the same workloads, alternating the two in one run.

Workloads: a training step (forward, cross entropy, backward, momentum SGD update) and
inference of the MLP 784-1024-1024-10 and LeNet (28x28 single-channel images, batch 128)
and ResNet-18 with the CIFAR stem (32x32 colour images, batch 64). Each repetition runs one Tessera measurement (tessera_bench, one repetition, JSON)
and then the PyTorch one, so machine noise falls on both alike. Prints the medians and
the ratio Tessera / PyTorch in images per second.

Needs Debian's python3-torch (TESSERA_WITH_PYTORCH=1 bash tools/setup.sh installs it).
Usage: tools/bench/pytorch_side_by_side.py [--bench build/tools/bench/tessera_bench]
       [--reps 5] [--threads 2] [--models mlp,lenet,resnet18]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

BATCHES = {"mlp": 128, "lenet": 128, "resnet18": 64}


def lenet():
    return nn.Sequential(nn.Conv2d(1, 16, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(16, 32, 4), nn.MaxPool2d(2),
                         nn.ReLU(), nn.Flatten(), nn.Linear(800, 1024), nn.ReLU(), nn.Linear(1024, 10))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet18():
    """ResNet-18 with the CIFAR stem, as models/ResNet.cpp builds it."""
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for stage in range(4):
        width = 64 << stage
        for b in range(2):
            layers.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


def torch_rate(model, mode, min_time):
    """Images per second of one PyTorch measurement (after warm-up), like one benchmark repetition."""
    torch.manual_seed(1)
    net = {"lenet": lenet, "mlp": mlp, "resnet18": resnet18}[model]()
    batch = BATCHES[model]
    x = torch.rand(batch, 3, 32, 32) if model == "resnet18" else torch.rand(batch, 1, 28, 28)
    y = torch.arange(batch) % 10
    if mode == "train":
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()

        def step():
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
    else:
        net.eval()

        def step():
            with torch.no_grad():
                net(x)
    for _ in range(3):
        step()
    iters, start = 0, time.perf_counter()
    while True:
        step()
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return iters * batch / elapsed


def tessera_rate(bench, model, mode, min_time):
    name = f"Train/{model}/batch{BATCHES[model]}/{mode}"
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, f"--benchmark_filter=^{name}(/|$)", "--benchmark_repetitions=1",
                        f"--benchmark_min_time={min_time}", f"--benchmark_out={out.name}",
                        "--benchmark_out_format=json"], check=True, capture_output=True)
        data = json.load(open(out.name))
    rows = [b for b in data["benchmarks"] if b["name"].startswith(name)]
    if not rows:
        sys.exit(f"tessera_bench printed no result for {name}")
    return rows[0]["images/s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/tools/bench/tessera_bench")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--models", default="mlp,lenet,resnet18")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads; Tessera {args.bench}, "
          f"OMP_NUM_THREADS={args.threads}; {args.reps} alternating repetitions, medians")
    ap_models = args.models.split(",")
    workloads = [(m, mode) for m in ap_models for mode in ("train", "inference")]
    results = {w: ([], []) for w in workloads}
    for rep in range(args.reps):
        for w in workloads:
            results[w][0].append(tessera_rate(args.bench, *w, args.min_time))
            results[w][1].append(torch_rate(*w, args.min_time))
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    print(f"{'workload':<24} {'Tessera img/s':>14} {'PyTorch img/s':>14} {'ratio':>7}   "
          f"{'ratio per repetition':<30}")
    for (model, mode), (ours, theirs) in results.items():
        a, b = statistics.median(ours), statistics.median(theirs)
        each = " ".join(f"{x / y:.2f}" for x, y in zip(ours, theirs))
        print(f"{model + ' ' + mode:<24} {a:>14.0f} {b:>14.0f} {a / b:>6.2f}x   {each}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
