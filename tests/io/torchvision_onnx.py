#!/usr/bin/python3
"""Networks exported by PyTorch's torch.onnx.export import into Tessera, pass `tessera
check`, and `tessera run` gives PyTorch's outputs.

  torchvision_onnx.py TESSERA WORKDIR [MODEL ...]

TESSERA is the tessera binary. Each model (torchvision, random weights, eval mode) is
exported at opset 13 with a free batch dim, checked at batch 2, run on the same random
input as PyTorch, and compared: every output within 1e-4 of PyTorch's, relative to the
largest. Without arguments it takes ResNet-18, VGG-11, MobileNet V2 (depthwise), MobileNet
V3 small (hard-swish, squeeze-and-excitation gates), DenseNet-121 (concatenations),
ShuffleNet V2 (channel shuffles from computed shapes), SqueezeNet 1.1 and GoogLeNet (max
pools with ceil_mode). Exits 1 on the first mismatch.
Needs Debian's python3-torch and python3-torchvision.
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torchvision

MODELS = {
    "resnet18": torchvision.models.resnet18,
    "vgg11": torchvision.models.vgg11,
    "mobilenet_v2": torchvision.models.mobilenet_v2,
    "mobilenet_v3_small": torchvision.models.mobilenet_v3_small,
    "densenet121": torchvision.models.densenet121,
    "shufflenet_v2_x0_5": torchvision.models.shufflenet_v2_x0_5,
    "squeezenet1_1": torchvision.models.squeezenet1_1,
    "googlenet": lambda: torchvision.models.googlenet(aux_logits=False, init_weights=True),
}
RTOL = 1e-4


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.stdout.write(p.stderr)
        sys.exit(f"FAILED: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout


def main():
    tessera, work = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(MODELS)
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 224, 224)
    xpath = os.path.join(work, "x.npy")
    np.save(xpath, x.numpy())
    for name in names:
        model = MODELS[name]().eval()
        with torch.no_grad():
            want = model(x).numpy()
        path = os.path.join(work, name + ".onnx")
        torch.onnx.export(model, x, path, opset_version=13, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        del model
        run([tessera, "check", path, "--input", "2x3x224x224"])
        ypath = os.path.join(work, name + "_y.npy")
        run([tessera, "run", path, "--input", xpath, "-o", ypath])
        got = np.load(ypath)
        if got.shape != want.shape:
            sys.exit(f"FAILED: {name}: output {got.shape}, PyTorch's {want.shape}")
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        print(f"{name}: {want.shape}, largest difference {err:.2e} of the largest output")
        if not err <= RTOL:
            sys.exit(f"FAILED: {name}: outputs differ by {err:.2e} > {RTOL:g} relative")
        os.remove(path)
    print(f"all {len(names)} models match PyTorch")


if __name__ == "__main__":
    main()
