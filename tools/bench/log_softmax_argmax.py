#!/usr/bin/python3
"""LogSoftMax and SoftMax (forward, and forward with backward) and ArgMax against PyTorch's
log_softmax, softmax and argmax on the CPU: a classifier's [256, 1000] scores over the
classes, [64, 128, 512] token scores over the last axis and a segmentation head's
[16, 21, 128, 128] class map over the channels (LogSoftMax and ArgMax), ViT-B/16's attention
scores [8, 12, 197, 197] over the last axis (SoftMax), and a language model's [256, 32000]
next-token scores (SoftMax and ArgMax).

Timed as alternating.py describes (one process, one thread count, sides alternating,
medians; the ratio PyTorch / Tessera in time, above 1: Tessera is faster). Tessera's side is a module call (and its backward) on tessera.Tensors made once; PyTorch's
the call under no_grad, or a forward and backward of <y, dy> through autograd.

    /usr/bin/python3 tools/bench/log_softmax_argmax.py [--reps 21] [--threads 2]

Needs Debian's python3-torch and the package built (tools/setup.sh).
"""

from alternating import medians_ms, setup


def main():
    args = setup(21)
    import numpy as np
    import torch
    import tessera as ts

    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, {args.threads} threads, medians of {args.reps}")
    for name, shape, axis in (("LogSoftMax", (256, 1000), 1), ("LogSoftMax", (64, 128, 512), -1),
                              ("LogSoftMax", (16, 21, 128, 128), 1), ("SoftMax", (8, 12, 197, 197), -1),
                              ("SoftMax", (256, 32000), -1)):
        x = (rng.standard_normal(shape) * 5).astype(np.float32)
        dy = rng.standard_normal(shape).astype(np.float32)
        xs, dys = ts.tensor(x), ts.tensor(dy)
        xt, dyt = torch.tensor(x, requires_grad=True), torch.tensor(dy)
        m = getattr(ts, name)(axis=axis)
        op = torch.log_softmax if name == "LogSoftMax" else torch.softmax

        def torch_forward():
            with torch.no_grad():
                op(xt, axis)

        def tessera_both():
            m(xs)
            m.backward(dys)

        def torch_both():
            op(xt, axis).backward(dyt)
            xt.grad = None

        for what, t, p in (("forward", *medians_ms(lambda: m(xs), torch_forward, args.reps)),
                           ("forward+backward", *medians_ms(tessera_both, torch_both, args.reps))):
            print(f"{name} {list(shape)} axis {axis} {what}: Tessera {t:.3f} ms, PyTorch {p:.3f} ms, "
                  f"{p / t:.2f}x")
    for shape, axis in (((16, 21, 128, 128), 1), ((256, 32000), -1)):
        x = rng.standard_normal(shape).astype(np.float32)
        xs, xt = ts.tensor(x), torch.tensor(x)
        m = ts.ArgMax(axis, False)
        t, p = medians_ms(lambda: m(xs), lambda: torch.argmax(xt, axis), args.reps)
        print(f"ArgMax {list(shape)} axis {axis}: Tessera {t:.3f} ms, PyTorch {p:.3f} ms, {p / t:.2f}x")


if __name__ == "__main__":
    main()
