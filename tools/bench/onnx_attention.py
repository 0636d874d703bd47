#!/usr/bin/python3
"""Imported transformers with their attention read back as one ScaledDotProductAttention
(importOnnx's default) against the same model's attention as separate layers
(importOnnx(path, attention=False): MatMul, MulAddConst, SoftMax, MatMul), on the CPU.

The model: an nn.TransformerEncoder text encoder (2 layers, 256 features, 4 heads, a
feed-forward of 1024) over a batch of 8 sequences of T tokens, exported by PyTorch at opset
13 (a free batch), at T = 64, 256 and 512. For each T: a training step (forward, then
backward of a random output gradient, input and parameter gradients) and an inference
forward, the two imports alternating in one process (alternating.py's method, medians;
the ratio separate / fused in time, above 1: the fused layer is faster); and the memory
training adds to the process (its peak resident set, VmHWM, after 3 steps less its resident
set after the import, in a process of its own per import).

    /usr/bin/python3 tools/bench/onnx_attention.py [--reps 11] [--threads 2]

Needs Debian's python3-torch and the package built (tools/setup.sh).
"""
import os
import subprocess
import sys
import tempfile

from alternating import medians_ms, setup

B, C, HEADS, LAYERS = 8, 256, 4, 2


def export(torch, T, path):
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(C, HEADS, 4 * C, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)

        def forward(self, x):
            return self.encoder(x)

    torch.manual_seed(0)
    torch.onnx.export(Encoder().eval(), (torch.randn(B, T, C),), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def memory(path, T, attention):
    """The resident memory (MiB) 3 training steps add to a process that imported `path`."""
    code = f"""
import numpy as np, tessera as ts
def status(key):  # MiB; VmHWM: the peak resident set of this program (not of its parent before the exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024
m = ts.importOnnx({path!r}, attention={attention})
m.trainMode()
x = ts.Tensor(np.random.default_rng(0).standard_normal(({B}, {T}, {C})).astype(np.float32))
before = status("VmRSS:")
for _ in range(3):
    y = m(x)
    m.backward(ts.Tensor(np.ones(y.shape, np.float32)))
print(status("VmHWM:") - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main():
    args = setup(11)
    import numpy as np
    import torch
    import tessera as ts
    rng = np.random.default_rng(0)
    work = tempfile.mkdtemp()
    print(f"imported nn.TransformerEncoder ({LAYERS} layers, {C} features, {HEADS} heads), batch {B}, "
          f"{args.threads} threads, medians of {args.reps}")
    print(f"{'T':>5} {'case':<10} {'fused ms':>10} {'separate ms':>12} {'separate/fused':>15} "
          f"{'fused MiB':>10} {'separate MiB':>13}")
    for T in (64, 256, 512):
        path = os.path.join(work, f"encoder_T{T}.onnx")
        export(torch, T, path)
        fused, separate = ts.importOnnx(path), ts.importOnnx(path, attention=False)
        x = ts.Tensor(rng.standard_normal((B, T, C)).astype(np.float32))
        dy = ts.Tensor(rng.standard_normal((B, T, C)).astype(np.float32))

        def step(m):
            def run():
                m(x)
                m.backward(dy)
            return run

        for m in (fused, separate):
            m.trainMode()
        a, b = medians_ms(step(fused), step(separate), args.reps)
        mem = (memory(path, T, True), memory(path, T, False))
        print(f"{T:>5} {'train':<10} {a:>10.2f} {b:>12.2f} {b / a:>15.2f} {mem[0]:>10.1f} {mem[1]:>13.1f}")
        for m in (fused, separate):
            m.evalMode()
        a, b = medians_ms(lambda: fused(x), lambda: separate(x), args.reps)
        print(f"{T:>5} {'inference':<10} {a:>10.2f} {b:>12.2f} {b / a:>15.2f}")
        os.remove(path)
    os.rmdir(work)


if __name__ == "__main__":
    main()
