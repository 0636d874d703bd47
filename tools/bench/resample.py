#!/usr/bin/python3
"""Upsampling by 2 of a [8, 64, 56, 56] map (a decoder's or a super-resolution head's),
Tessera's Upsample2D against PyTorch's F.interpolate on the CPU, in each mode (nearest,
linear as bilinear, cubic as bicubic), forward alone (PyTorch without autograd) and
forward and backward.

Timed as alternating.py describes (one process, one thread count, sides alternating,
medians; the ratio PyTorch / Tessera in time, above 1: Tessera is faster). Tessera's side is a module call (and its backward) on tessera.Tensors made once; PyTorch's
the call under no_grad, or a forward and backward of <y, dy> through autograd.

    /usr/bin/python3 tools/bench/resample.py [--reps 11] [--threads 2]

Needs Debian's python3-torch and the package built (tools/setup.sh).
"""

from alternating import medians_ms, openblas_core, setup


def main():
    args = setup(11)
    import numpy as np
    import torch
    import tessera as ts

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    dy = rng.standard_normal((8, 64, 112, 112)).astype(np.float32)
    xs, dys = ts.tensor(x), ts.tensor(dy)
    dyt = torch.tensor(dy)
    print(f"threads {args.threads}, reps {args.reps}; medians in ms; ratio = PyTorch / Tessera time; "
          f"OpenBLAS core {openblas_core()}")
    for mode, tmode in (("nearest", "nearest"), ("linear", "bilinear"), ("cubic", "bicubic")):
        up = ts.Upsample2D(2, mode=mode)

        xt = torch.tensor(x)

        def tessera_forward():
            up(xs)

        def torch_forward():
            with torch.no_grad():
                torch.nn.functional.interpolate(xt, scale_factor=2, mode=tmode)

        def tessera_step():
            up(xs)
            up.backward(dys)

        def torch_step():
            xg = torch.tensor(x, requires_grad=True)
            y = torch.nn.functional.interpolate(xg, scale_factor=2, mode=tmode)
            y.backward(dyt)

        for what, sides in (("forward", (tessera_forward, torch_forward)),
                            ("forward+backward", (tessera_step, torch_step))):
            t, p = medians_ms(*sides, args.reps)
            print(f"{mode:8s} {what:17s} tessera {t:8.1f}  pytorch {p:8.1f}  ratio {p / t:5.2f}")


if __name__ == "__main__":
    main()
