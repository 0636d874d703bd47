#!/usr/bin/python3
"""Local response normalisation on the CPU: CrossMapLRN against PyTorch's
nn.LocalResponseNorm (the same sum over N neighbouring channels, alpha / N, zero padding)
on GoogLeNet's two LRN inputs at batch 8 ([8, 64, 56, 56] and [8, 192, 56, 56]) and
AlexNet's first ([8, 96, 55, 55]), forward alone (PyTorch without autograd) and forward
and backward; then MapLRN (a N x N window within each channel, which PyTorch has no layer
for: Tessera's times alone).

Timed as alternating.py describes (one process, one thread count, sides alternating,
medians; the ratio PyTorch / Tessera in time, above 1: Tessera is faster).

    /usr/bin/python3 tools/bench/lrn.py [--reps 11] [--threads 2]

Needs Debian's python3-torch and the package built (tools/setup.sh).
"""

import time

from alternating import medians_ms, openblas_core, setup


def main():
    args = setup(11)
    import numpy as np
    import torch
    import tessera as ts

    rng = np.random.default_rng(0)
    print(f"threads {args.threads}, reps {args.reps}; medians in ms; ratio = PyTorch / Tessera time; "
          f"OpenBLAS core {openblas_core()}")
    for shape in ((8, 64, 56, 56), (8, 192, 56, 56), (8, 96, 55, 55)):
        x = rng.standard_normal(shape).astype(np.float32)
        dy = rng.standard_normal(shape).astype(np.float32)
        xs, dys = ts.tensor(x), ts.tensor(dy)
        xt, dyt = torch.tensor(x), torch.tensor(dy)
        lrn = ts.CrossMapLRN(N=5, alpha=1e-4, beta=0.75, K=2.0)
        ref = torch.nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0)

        def tessera_forward():
            lrn(xs)

        def torch_forward():
            with torch.no_grad():
                ref(xt)

        def tessera_step():
            lrn(xs)
            lrn.backward(dys)

        def torch_step():
            xg = torch.tensor(x, requires_grad=True)
            ref(xg).backward(dyt)

        for what, sides in (("forward", (tessera_forward, torch_forward)),
                            ("forward+backward", (tessera_step, torch_step))):
            t, p = medians_ms(*sides, args.reps)
            print(f"CrossMapLRN {str(list(shape)):18s} {what:17s} tessera {t:8.1f}  pytorch {p:8.1f}  "
                  f"ratio {p / t:5.2f}")
    x = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    xs, dys = ts.tensor(x), ts.tensor(rng.standard_normal(x.shape).astype(np.float32))
    for n in (3, 5):
        lrn = ts.MapLRN(N=n)
        lrn(xs)
        lrn.backward(dys)
        times = {"forward": [], "forward+backward": []}
        for _ in range(args.reps):
            t0 = time.perf_counter()
            lrn(xs)
            t1 = time.perf_counter()
            lrn.backward(dys)
            t2 = time.perf_counter()
            times["forward"].append((t1 - t0) * 1e3)
            times["forward+backward"].append((t2 - t0) * 1e3)
        for what, ts_ in times.items():
            print(f"MapLRN N={n} [8, 64, 56, 56]  {what:17s} tessera {sorted(ts_)[len(ts_) // 2]:8.1f}")


if __name__ == "__main__":
    main()
