#!/usr/bin/env python3
"""Where one GPU step's time goes: the kernels of one Tessera or PyTorch step, by total time.

Tessera: runs tessera_bench under Nsight Compute (ncu) with collection off, and
TESSERA_PROFILE_STEP=1 makes the benchmark open the profiler's range for exactly one step
after its warm-up (tools/bench/GpuBench.cpp). Every kernel of that step is timed
(gpu__time_duration.sum). ncu serialises kernels, so the sum is the GPU time without
overlap or launch gaps, not the step's wall time.

PyTorch: the same workload as pytorch_side_by_side.py --device cuda, one step after the
warm-up under torch.profiler, summed per kernel name the same way.

Usage (on the GPU machine):
  tools/bench/gpu_kernels.py tessera --bench bin/tessera_bench --workload resnet50 --mode train
  tools/bench/gpu_kernels.py pytorch --workload resnet50 --mode train
  (either with --precision fp16 | bf16: Tessera's 16-bit benchmark row, PyTorch under autocast)
  tools/bench/gpu_kernels.py csv FILE      (an ncu --csv log made by hand)
"""
import argparse
import collections
import csv
import io
import os
import subprocess
import sys

UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
NAMES = {"lenet": "lenet", "resnet18": "resnet18-cifar", "resnet50": "resnet50"}


def from_ncu_csv(text):
    """{kernel name: [milliseconds of each launch]} from ncu's --csv output."""
    start = text.find('"ID"')
    if start < 0:
        sys.exit("no ncu CSV rows in the output (was a kernel profiled?):\n" + text[-2000:])
    kernels = collections.defaultdict(list)
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        kernels[row["Kernel Name"]].append(value * UNITS.get(row["Metric Unit"], 1e-6))
    return kernels


def tessera(args):
    name = f"^Gpu/{NAMES[args.workload]}/batch128/{args.mode}/{args.precision}(/|$)"
    cmd = [args.ncu, "--profile-from-start", "off", "--metrics", "gpu__time_duration.sum", "--csv",
           args.bench, f"--benchmark_filter={name}", "--benchmark_repetitions=1", "--benchmark_min_time=0.01"]
    env = dict(os.environ, TESSERA_PROFILE_STEP="1")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}\n{out.stdout[-3000:]}")
    return from_ncu_csv(out.stdout)


def pytorch(args):
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pytorch_side_by_side import torch_model

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    net, x, y, _ = torch_model(args.workload, "cuda")
    low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    autocast = lambda: torch.autocast("cuda", dtype=low or torch.bfloat16, enabled=low is not None)  # noqa: E731
    if args.mode == "train":
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad()
            with autocast():
                loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
    else:
        net.eval()

        def step():
            with torch.no_grad(), autocast():
                net(x)
            torch.cuda.synchronize()
    for _ in range(5):
        step()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    kernels = collections.defaultdict(list)
    for e in prof.events():
        t = getattr(e, "device_time", None)
        if t is None:
            t = e.cuda_time
        if e.device_type == torch.autograd.DeviceType.CUDA and t > 0:
            kernels[e.name].append(t / 1000.0)
    return kernels


def report(kernels, top):
    total = sum(sum(v) for v in kernels.values())
    launches = sum(len(v) for v in kernels.values())
    print(f"{launches} kernel launches, {total:.2f} ms of kernel time in the step")
    print(f"{'ms':>8} {'share':>6} {'launches':>8}  kernel")
    rows = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))
    for name, times in rows[:top]:
        print(f"{sum(times):>8.3f} {100 * sum(times) / total:>5.1f}% {len(times):>8}  {name[:150]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("side", choices=("tessera", "pytorch", "csv"))
    ap.add_argument("file", nargs="?", help="with csv: the ncu --csv log")
    ap.add_argument("--bench", default="build/tools/bench/tessera_bench")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--workload", choices=sorted(NAMES), default="resnet50")
    ap.add_argument("--mode", choices=("train", "inference"), default="train")
    ap.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32",
                    help="the benchmark's compute type; PyTorch: autocast to it (no loss scaler)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.side == "csv":
        kernels = from_ncu_csv(open(args.file).read())
    else:
        kernels = tessera(args) if args.side == "tessera" else pytorch(args)
    print(f"{args.side}: {args.workload} {args.mode} {args.precision}, batch 128")
    report(kernels, args.top)


if __name__ == "__main__":
    main()
