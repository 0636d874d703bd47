#!/usr/bin/python3
"""From PyTorch to Tessera and back through ONNX: export a network from PyTorch, check it,
fine-tune it with `tessera train`, export it back to ONNX, and run it.

  pytorch_onnx.py TESSERA WORKDIR

TESSERA is the tessera binary. Needs Debian's python3-torch and python3-onnx, and the
Fashion-MNIST package (tools/setup.sh installs them). The test suite runs this script
(docs.pytorch_onnx_example); docs/onnx.md walks through it.
"""
import gzip
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
from torch import nn

tessera, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)


def sh(*args):
    print("$ tessera " + " ".join(args), flush=True)
    subprocess.run([tessera, *args], check=True)


# 1. A network in PyTorch. Its flatten, x.view(x.size(0), -1), exports as a computed shape
#    (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) that the import folds.
class FashionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = self.features(x)
        return self.classifier(x.view(x.size(0), -1))


torch.manual_seed(0)
net = FashionNet().eval()
onnx_file = os.path.join(work, "fashion_net.onnx")
torch.onnx.export(net, torch.randn(1, 1, 28, 28), onnx_file, opset_version=13,
                  input_names=["images"], output_names=["scores"],
                  dynamic_axes={"images": {0: "batch"}, "scores": {0: "batch"}})

# 2. Check it before running it: every node's shapes for a batch of 64 images.
sh("check", onnx_file, "--input", "64x1x28x28")

# 3. Fine-tune it on Fashion-MNIST: the ONNX weights are the starting point.
tuned = os.path.join(work, "fashion_net.h5")
sh("train", "--model", onnx_file, "--epochs", "2", "--limit", "12000", "--quiet", "--save", tuned)

# 4. Export it back to ONNX (for ONNX Runtime, TensorRT, or PyTorch's tools) and check the file.
tuned_onnx = os.path.join(work, "fashion_net_tuned.onnx")
sh("convert", tuned, tuned_onnx, "--input", "1x1x28x28")
onnx.checker.check_model(onnx.load(tuned_onnx), full_check=True)

# 5. Run both on the test images from NumPy files: the same scores, and the accuracy.
with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:2000]
with gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz") as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)[:2000]
np.save(os.path.join(work, "images.npy"), (images / 255.0).astype(np.float32))
for model, out in ((tuned, "scores_h5.npy"), (tuned_onnx, "scores_onnx.npy")):
    sh("run", model, "--input", os.path.join(work, "images.npy"), "-o", os.path.join(work, out))
from_h5 = np.load(os.path.join(work, "scores_h5.npy"))
from_onnx = np.load(os.path.join(work, "scores_onnx.npy"))
accuracy = float((from_onnx.argmax(axis=1) == labels).mean())
print(f"test accuracy of the fine-tuned network: {accuracy:.3f}")
assert np.array_equal(from_h5, from_onnx), "the HDF5 model and its ONNX export disagree"
assert accuracy > 0.75, f"fine-tuning reached only {accuracy:.3f}"
print("PyTorch -> ONNX -> Tessera -> ONNX: done")
