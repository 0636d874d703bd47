#!/usr/bin/python3
"""Imported transformers with their attention read back as one ScaledDotProductAttention
(importOnnx's default) against the same model's attention as separate layers
(importOnnx(path, attention=False): MatMul, MulAddConst, SoftMax, MatMul), on the CPU.

The models: an nn.TransformerEncoder text encoder (2 layers, 256 features, 4 heads, a
feed-forward of 1024) over a batch of 8 sequences of T tokens, exported by PyTorch at opset
13 (a free batch), at T = 64, 256 and 512; with --model swin_t, torchvision's swin_t (its
weights drawn from N(0, 0.02)) over a batch of --batch 224x224 images (windows of 49 tokens,
3 to 24 heads of 32; half its blocks shifted, their window masks added through reshapes);
with --model attn_block, latent diffusion's AttnBlock (GroupNorm, q, k and v by 1x1
convolutions, softmax(bmm(q^T, k) / sqrt(C)), bmm(v, w^T), a 1x1 projection and the residual)
of 128 channels over a batch of --batch maps of 32x32 and 64x64 (1,024 and 4,096 positions).
For each: a training step (forward, then backward of a random output gradient, input and
parameter gradients) and an inference forward, the two imports alternating in one process
(alternating.py's method, medians; the ratio separate / fused in time, above 1: the fused
layer is faster); and the memory training adds to the process (its peak resident set,
VmHWM, after 3 steps less its resident set after the import, in a process of its own per
import). Then the fused import alternates with PyTorch's eager run of the same model (its
training step frees its gradients; inference under no_grad): PyTorch / fused in time, from
that alternation.

    /usr/bin/python3 tools/bench/onnx_attention.py [--reps 11] [--threads 2]
    /usr/bin/python3 tools/bench/onnx_attention.py --model swin_t --batch 4 --reps 5
    /usr/bin/python3 tools/bench/onnx_attention.py --model attn_block --batch 2 --reps 5

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
    model = Encoder().eval()
    torch.onnx.export(model, (torch.randn(B, T, C),), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return model


def export_swin(torch, batch, path):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.swin_t().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    torch.onnx.export(model, (torch.randn(batch, 3, 224, 224),), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return model


def export_attn_block(torch, batch, size, path):
    class AttnBlock(torch.nn.Module):
        def __init__(self, c=128):
            super().__init__()
            self.norm = torch.nn.GroupNorm(32, c, eps=1e-6)
            self.q, self.k, self.v, self.proj_out = (torch.nn.Conv2d(c, c, 1) for _ in range(4))

        def forward(self, x):
            h = self.norm(x)
            q, k, v = self.q(h), self.k(h), self.v(h)
            b, c, hh, ww = q.shape
            w = torch.bmm(q.reshape(b, c, hh * ww).permute(0, 2, 1), k.reshape(b, c, hh * ww)) * (int(c) ** (-0.5))
            w = torch.nn.functional.softmax(w, dim=2)
            h = torch.bmm(v.reshape(b, c, hh * ww), w.permute(0, 2, 1)).reshape(b, c, hh, ww)
            return x + self.proj_out(h)

    torch.manual_seed(0)
    model = AttnBlock().eval()
    torch.onnx.export(model, (torch.randn(batch, 128, size, size),), path, opset_version=13, input_names=["x"],
                      output_names=["y"])
    return model


def memory(path, shape, attention):
    """The resident memory (MiB) 3 training steps add to a process that imported `path`."""
    code = f"""
import numpy as np, tessera as ts
def status(key):  # MiB; VmHWM: the peak resident set of this program (not of its parent before the exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024
m = ts.importOnnx({path!r}, attention={attention})
m.trainMode()
x = ts.Tensor(np.random.default_rng(0).standard_normal({tuple(shape)!r}).astype(np.float32))
before = status("VmRSS:")
for _ in range(3):
    y = m(x)
    m.backward(ts.Tensor(np.ones(y.shape, np.float32)))
print(status("VmHWM:") - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main():
    def arguments(ap):
        ap.add_argument("--model", choices=("encoder", "swin_t", "attn_block"), default="encoder")
        ap.add_argument("--batch", type=int, default=4, help="swin_t's and attn_block's batch")

    args = setup(11, arguments)
    import numpy as np
    import torch
    import tessera as ts
    rng = np.random.default_rng(0)
    work = tempfile.mkdtemp()
    if args.model == "swin_t":
        print(f"imported torchvision swin_t, batch {args.batch} of 224x224, {args.threads} threads, "
              f"medians of {args.reps}")
        cases = [("224", (args.batch, 3, 224, 224), (args.batch, 1000), lambda p: export_swin(torch, args.batch, p))]
    elif args.model == "attn_block":
        print(f"imported latent diffusion's AttnBlock (128 channels), batch {args.batch}, {args.threads} threads, "
              f"medians of {args.reps}")
        cases = [(str(n), (args.batch, 128, n, n), (args.batch, 128, n, n),
                  lambda p, n=n: export_attn_block(torch, args.batch, n, p)) for n in (32, 64)]
    else:
        print(f"imported nn.TransformerEncoder ({LAYERS} layers, {C} features, {HEADS} heads), batch {B}, "
              f"{args.threads} threads, medians of {args.reps}")
        cases = [(str(T), (B, T, C), (B, T, C), lambda p, T=T: export(torch, T, p)) for T in (64, 256, 512)]
    print(f"{'T' if args.model == 'encoder' else 'size':>5} {'case':<10} {'fused ms':>10} {'separate ms':>12} "
          f"{'separate/fused':>15} {'fused MiB':>10} {'separate MiB':>13} {'PyTorch ms':>11} {'PyTorch/fused':>14}")
    for T, shape, out_shape, make in cases:
        path = os.path.join(work, f"{args.model}_{T}.onnx")
        model = make(path)
        fused, separate = ts.importOnnx(path), ts.importOnnx(path, attention=False)
        xa, dya = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(out_shape).astype(np.float32)
        x, dy = ts.Tensor(xa), ts.Tensor(dya)
        xt, dyt = torch.from_numpy(xa), torch.from_numpy(dya)

        def step(m):
            def run():
                m(x)
                m.backward(dy)
            return run

        def torch_step():  # PyTorch eager, the same model: forward, backward, gradients freed
            model(xt).backward(dyt)
            model.zero_grad(set_to_none=True)

        def torch_inference():
            with torch.no_grad():
                model(xt)

        for m in (fused, separate):
            m.trainMode()
        model.train()
        a, b = medians_ms(step(fused), step(separate), args.reps)
        a2, p = medians_ms(step(fused), torch_step, args.reps)
        mem = (memory(path, shape, True), memory(path, shape, False))
        print(f"{T:>5} {'train':<10} {a:>10.2f} {b:>12.2f} {b / a:>15.2f} {mem[0]:>10.1f} {mem[1]:>13.1f} "
              f"{p:>11.2f} {p / a2:>14.2f}")
        for m in (fused, separate):
            m.evalMode()
        model.eval()
        a, b = medians_ms(lambda: fused(x), lambda: separate(x), args.reps)
        a2, p = medians_ms(lambda: fused(x), torch_inference, args.reps)
        print(f"{T:>5} {'inference':<10} {a:>10.2f} {b:>12.2f} {b / a:>15.2f} {'':>10} {'':>13} {p:>11.2f} "
              f"{p / a2:>14.2f}")
        os.remove(path)
    os.rmdir(work)


if __name__ == "__main__":
    main()
