#!/usr/bin/python3
"""Tessera against PyTorch on the same workloads, alternating the two in one run.

Workloads: a training step (forward, cross entropy, backward, momentum SGD update) and
inference. Each repetition runs one Tessera measurement (tessera_bench, one repetition,
JSON) and then the PyTorch one, so machine noise falls on both alike. Prints the medians
and the ratio Tessera / PyTorch in images per second, and Tessera's median over PyTorch's
fastest repetition ("vs best"): some PyTorch steps run at one of two speeds from one
model instance to the next (the MLP step on an AMD Zen 5: about 17,000 or 31,000 images/s
in bfloat16), and the column compares with PyTorch at its best.

--device cpu (the default): the MLP 784-1024-1024-10 and LeNet (28x28 single-channel
images, batch 128), ResNet-18 with the CIFAR stem (32x32 colour images, batch 64), and
(--models lstm,gru) a 2-layer LSTM and GRU of input 256 and hidden 512 over 50 steps at
batch 64 with a linear head on the last step (their images/s are sequences/s), on
--threads threads on both sides; (--models vit-tiny) the zoo's vit-tiny on 28x28 images at
batch 128 against torchvision's VisionTransformer of the same layers. Needs Debian's
python3-torch (tools/setup.sh installs it).

--device cuda: LeNet, ResNet-18 (CIFAR stem, 32x32) and ResNet-50 (224x224), batch 128,
and (--models vit-tiny,vit-b16) vit-tiny at batch 128 and torchvision's ViT-B/16 (224x224)
at batch 64,
float32 with TF32 allowed on both sides (Tessera's default; PyTorch's
allow_tf32 flags), cuDNN algorithms chosen by timing on both sides (Tessera always;
PyTorch's cudnn.benchmark), one device synchronisation per step on both sides, and the
peak GPU memory each holds for its tensors (Tessera's allocator statistics; PyTorch's
max_memory_allocated). Needs PyTorch with CUDA and a Tessera built with CUDA.

--precision fp32,bf16 adds bfloat16 rows: Tessera's calcMode(bfloat16) workloads against
PyTorch's torch.autocast(device, dtype=torch.bfloat16) around the forward and the loss (the
recurrent workloads stay float32 and are skipped). On CUDA, fp16 adds float16 rows:
Tessera's calcMode(float16) with dynamic loss scaling against autocast to float16 with
torch.amp.GradScaler (PyTorch's AMP).

--torch-channels-last adds a second PyTorch measurement of each workload with the model and
its images in torch.channels_last (NHWC, PyTorch's faster layout for convolutions in 16
bits on a GPU), and the ratio to it.

--fold folds each eval-mode batch norm into the convolution before it on both sides in
the inference rows: Tessera's with packed weights (Module::packWeights, containers/Fusion.h),
PyTorch's through torch.fx.experimental.optimization.fuse (which also folds them; a model
it cannot trace runs unfolded, and the line says so).

Both sides use the same OpenBLAS: Debian's PyTorch loads it as libblas.so.3, and on Intel
CPUs newer than the library knows (Sapphire Rapids) OpenBLAS falls back to generic SSE3
kernels unless OPENBLAS_CORETYPE is set. Tessera sets it for itself
(backend/cpu/OpenBlas.cpp); this script sets the same value before importing PyTorch (an
OPENBLAS_CORETYPE already in the environment wins on both sides) and prints the CPU model
and both sides' OpenBLAS core names. Tessera's float32 GEMMs run on oneDNN's matmul by
default; PyTorch's run on OpenBLAS, so on the CPU this script runs Tessera with
TESSERA_FLOAT32_GEMM=openblas (--tessera-float32-gemm onednn measures Tessera's default).

Usage: tools/bench/pytorch_side_by_side.py [--bench build/tools/bench/tessera_bench]
       [--device cpu|cuda] [--reps 5] [--threads 2] [--models mlp,lenet,resnet18]
       [--precision fp32,bf16[,fp16]] [--tessera-float32-gemm openblas|onednn]
       [--torch-channels-last]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


from alternating import cpuinfo, openblas_core, set_openblas_coretype  # noqa: E402

# Before PyTorch loads OpenBLAS: it reads OPENBLAS_CORETYPE once, when loaded.
set_openblas_coretype()

import torch  # noqa: E402
from torch import nn  # noqa: E402

BATCHES = {"mlp": 128, "lenet": 128, "resnet18": 64, "lstm": 64, "gru": 64, "vit-tiny": 128}
GPU_BATCHES = {"lenet": 128, "resnet18": 128, "resnet50": 128, "vit-tiny": 128, "vit-b16": 64}
# Tessera's benchmark names for the GPU workloads (tools/bench/GpuBench.cpp).
GPU_NAMES = {"lenet": "lenet", "resnet18": "resnet18-cifar", "resnet50": "resnet50", "vit-tiny": "vit-tiny",
             "vit-b16": "vit-b16"}


def tessera_openblas_core(bench):
    """The OpenBLAS core name tessera_bench reports (its sgemm row's label)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, "--benchmark_filter=^sgemm/1024x1024x1024", "--benchmark_repetitions=1",
                        "--benchmark_min_time=0.01", f"--benchmark_out={out.name}", "--benchmark_out_format=json"],
                       capture_output=True)
        try:
            rows = json.load(open(out.name))["benchmarks"]
            return rows[0].get("label", "").replace("OpenBLAS ", "") or "unknown"
        except (ValueError, KeyError, IndexError):
            return "unknown"


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


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet(depth, cifar_stem, classes):
    """ResNet-18 or -50 as models/ResNet.cpp builds it (stride on the 3x3 convolution)."""
    counts, bottleneck = {18: ([2, 2, 2, 2], False), 50: ([3, 4, 6, 3], True)}[depth]
    if cifar_stem:
        layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    else:
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage in range(4):
        width = 64 << stage
        for b in range(counts[stage]):
            stride = 2 if stage > 0 and b == 0 else 1
            layers.append(Bottleneck(cin, width, stride) if bottleneck else BasicBlock(cin, width, stride))
            cin = 4 * width if bottleneck else width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


class Recurrent(nn.Module):
    """A 2-layer nn.LSTM / nn.GRU (input 256, hidden 512) and a Linear(512, 10) on the last step."""

    def __init__(self, cls):
        super().__init__()
        self.rnn = cls(256, 512, num_layers=2)
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[-1])


def resnet18():
    """ResNet-18 with the CIFAR stem, as models/ResNet.cpp builds it."""
    return resnet(18, True, 10)


def vit_tiny():
    """The zoo's vit-tiny (models/Transformer.cpp): torchvision's VisionTransformer with 4x4
    patches, 64 wide, 6 blocks of 4 heads, MLPs of 256, 10 classes, on 1-channel 28x28 images."""
    from torchvision.models.vision_transformer import VisionTransformer
    net = VisionTransformer(image_size=28, patch_size=4, num_layers=6, num_heads=4, hidden_dim=64, mlp_dim=256,
                            num_classes=10)
    net.conv_proj = nn.Conv2d(1, 64, 4, 4)
    return net


def vit_b16():
    """torchvision's ViT-B/16 (the zoo's vit: 86,567,656 parameters)."""
    from torchvision.models import vit_b_16
    return vit_b_16()


def torch_model(model, device):
    torch.manual_seed(1)
    if device == "cuda":
        batch = GPU_BATCHES[model]
        net = {"lenet": lenet, "resnet18": resnet18, "resnet50": lambda: resnet(50, False, 1000), "vit-tiny": vit_tiny,
               "vit-b16": vit_b16}[model]()
        side, channels, classes = {"lenet": (28, 1, 10), "resnet18": (32, 3, 10), "resnet50": (224, 3, 1000),
                                   "vit-tiny": (28, 1, 10), "vit-b16": (224, 3, 1000)}[model]
    else:
        batch = BATCHES[model]
        if model in ("lstm", "gru"):
            net = Recurrent(nn.LSTM if model == "lstm" else nn.GRU)
            x = torch.rand(50, batch, 256)
            y = torch.arange(batch) % 10
            return net, x, y, batch
        net = {"lenet": lenet, "mlp": mlp, "resnet18": resnet18, "vit-tiny": vit_tiny}[model]()
        side, channels, classes = (32, 3, 10) if model == "resnet18" else (28, 1, 10)
    x = torch.rand(batch, channels, side, side, device=device)
    y = (torch.arange(batch) % classes).to(device)
    return net.to(device), x, y, batch


def torch_rate(model, mode, min_time, device="cpu", precision="fp32", channels_last=False, fold=False):
    """Images per second (and peak MiB on a GPU) of one PyTorch measurement after warm-up,
    like one benchmark repetition; bf16 and fp16: under autocast to that type (fp16 with
    torch.amp.GradScaler in training, as PyTorch's AMP recipe has it); channels_last: the
    model and its images in torch.channels_last; fold (inference): batch norms folded into
    their convolutions by torch.fx."""
    cuda = device == "cuda"
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    net, x, y, batch = torch_model(model, device)
    if channels_last and x.dim() == 4:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if mode == "train":
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        scaler = torch.amp.GradScaler(device) if precision == "fp16" else None

        def step():
            opt.zero_grad()
            with torch.autocast(device, dtype=low or torch.bfloat16, enabled=low is not None):
                loss = loss_fn(net(x), y)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            sync()
    else:
        net.eval()
        if fold:
            try:
                from torch.fx.experimental.optimization import fuse
                net = fuse(net)
            except Exception as e:  # noqa: BLE001 - any tracing failure leaves the model as it is
                print(f"  PyTorch {model}: torch.fx could not fold its batch norms ({type(e).__name__}); "
                      "measured unfolded", file=sys.stderr, flush=True)

        def step():
            with torch.no_grad(), torch.autocast(device, dtype=low or torch.bfloat16, enabled=low is not None):
                net(x)
            sync()
    for _ in range(5 if cuda else 3):
        step()
    iters, start = 0, time.perf_counter()
    while True:
        step()
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
            return iters * batch / elapsed, peak


def tessera_rate(bench, model, mode, min_time, device="cpu", precision="fp32", packed=False):
    """Images per second (and peak MiB on a GPU) of one tessera_bench repetition."""
    pack = packed and mode == "inference"
    if device == "cuda":
        name = f"Gpu/{GPU_NAMES[model]}/batch{GPU_BATCHES[model]}/{mode}/{precision}" + ("/packed" if pack else "")
    else:
        name = (f"Train/{model}/batch{BATCHES[model]}/{mode}" + ("/packed" if pack else "")
                + ("/bf16" if precision == "bf16" else ""))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run = subprocess.run([bench, f"--benchmark_filter=^{name}(/|$)", "--benchmark_repetitions=1",
                              f"--benchmark_min_time={min_time}", f"--benchmark_out={out.name}",
                              "--benchmark_out_format=json"], capture_output=True, text=True)
        data = json.load(open(out.name)) if run.returncode == 0 else {"benchmarks": []}
    rows = [b for b in data["benchmarks"] if b["name"].startswith(name) and "error_occurred" not in b]
    if not rows:
        # One failing workload leaves the others measured: its row shows nan.
        why = (run.stderr or run.stdout).strip().splitlines()[-3:]
        errors = [b.get("error_message", "") for b in data["benchmarks"] if "error_occurred" in b]
        print(f"tessera_bench gave no result for {name} (exit {run.returncode}): {' | '.join(errors + why)}",
              file=sys.stderr, flush=True)
        return float("nan"), None
    return rows[0]["images/s"], rows[0].get("peak MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/tools/bench/tessera_bench")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--models", default=None,
                    help="default: mlp,lenet,resnet18 (cpu); lenet,resnet18,resnet50 (cuda); also lstm,gru (cpu), "
                         "vit-tiny, vit-b16 (cuda)")
    ap.add_argument("--tessera-float32-gemm", choices=("openblas", "onednn"), default="openblas",
                    help="what Tessera's float32 GEMMs run on (CPU): openblas, as PyTorch's do, or onednn")
    ap.add_argument("--precision", default="fp32", help="a list of fp32, bf16 and fp16 (cuda only): fp32,bf16")
    ap.add_argument("--torch-channels-last", action="store_true",
                    help="also measure PyTorch with the model and images in torch.channels_last")
    ap.add_argument("--fold", action="store_true",
                    help="inference rows with each batch norm folded into its convolution on both sides: Tessera's "
                         "packed weights, PyTorch's torch.fx fuse (cpu: lenet and resnet18; cuda: every model)")
    args = ap.parse_args()
    precisions = args.precision.split(",")
    if any(p not in ("fp32", "bf16", "fp16") for p in precisions) or (args.device == "cpu" and "fp16" in precisions):
        sys.exit("--precision: fp32, bf16 and fp16 (cuda only) are measured")
    cuda = args.device == "cuda"
    models = (args.models or ("lenet,resnet18,resnet50" if cuda else "mlp,lenet,resnet18")).split(",")
    if cuda:
        if not torch.cuda.is_available():
            sys.exit("--device cuda: PyTorch sees no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)} (TF32 allowed, cudnn.benchmark); "
              f"Tessera {args.bench} (TF32 allowed); {args.reps} alternating repetitions, medians")
    else:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        os.environ["TESSERA_FLOAT32_GEMM"] = args.tessera_float32_gemm
        print(f"CPU: {cpuinfo('model name')}")
        print(f"OpenBLAS cores: Tessera {tessera_openblas_core(args.bench)}, PyTorch {openblas_core()} "
              f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
              f"Tessera's float32 GEMMs on {args.tessera_float32_gemm}")
        print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads; Tessera {args.bench}, "
              f"OMP_NUM_THREADS={args.threads}; {args.reps} alternating repetitions, medians")
    if args.fold:
        print("Inference rows: batch norms folded into their convolutions on both sides (Tessera's packWeights, "
              "PyTorch's torch.fx fuse)")
    workloads = [(m, mode, p) for p in precisions for m in models for mode in ("train", "inference")
                 if not (p == "bf16" and m in ("lstm", "gru"))]
    results = {w: ([], [], [], [], [], []) for w in workloads}  # ours, theirs, peaks; channels-last rate, peak
    for rep in range(args.reps):
        for w in workloads:
            model, mode, precision = w
            rate, peak = tessera_rate(args.bench, model, mode, args.min_time, args.device, precision, args.fold)
            results[w][0].append(rate)
            results[w][2].append(peak)
            rate, peak = torch_rate(model, mode, args.min_time, args.device, precision, fold=args.fold)
            results[w][1].append(rate)
            results[w][3].append(peak)
            if args.torch_channels_last:
                cl_rate, cl_peak = torch_rate(model, mode, args.min_time, args.device, precision, channels_last=True,
                                              fold=args.fold)
                results[w][4].append(cl_rate)
                results[w][5].append(cl_peak)
            # Each measurement as it comes, so that a run cut short still says what it measured.
            line = f"  {model} {mode} {precision}: Tessera {results[w][0][-1]:.0f}, PyTorch {rate:.0f}"
            if args.torch_channels_last:
                line += f", PyTorch channels_last {cl_rate:.0f}"
            line += " images/s"
            if cuda:
                peaks = [results[w][2][-1], peak] + ([cl_peak] if args.torch_channels_last else [])
                line += "; peak MiB " + " / ".join("-" if v is None else f"{v:.0f}" for v in peaks)
            print(line, file=sys.stderr, flush=True)
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    memory = f" {'Tessera MiB':>12} {'PyTorch MiB':>12}" if cuda else ""
    cl = args.torch_channels_last
    nhwc = f" {'PyTorch NHWC':>13} {'ratio':>7}" + (f" {'NHWC MiB':>9}" if cuda else "") if cl else ""
    print(f"{'workload':<24} {'Tessera img/s':>14} {'PyTorch img/s':>14} {'ratio':>7} {'vs best':>7}{memory}{nhwc}   "
          f"{'ratio per repetition':<30}")
    for (model, mode, precision), (ours, theirs, our_peak, their_peak, cl_rate, cl_peak) in results.items():
        a, b = statistics.median(ours), statistics.median(theirs)
        each = " ".join(f"{x / y:.2f}" for x, y in zip(ours, theirs))
        mem = ""
        if cuda:
            p = [v for v in our_peak if v is not None]
            mem = f" {max(p):>12.0f}" if p else f" {'-':>12}"
            mem += f" {max(their_peak):>12.0f}"
        if cl:
            c = statistics.median(cl_rate)
            mem += f" {c:>13.0f} {a / c:>6.2f}x" + (f" {max(cl_peak):>9.0f}" if cuda else "")
        label = f"{model} {mode}" + (f" {precision}" if precision != "fp32" else "")
        print(f"{label:<24} {a:>14.0f} {b:>14.0f} {a / b:>6.2f}x {a / max(theirs):>6.2f}x{mem}   {each}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
