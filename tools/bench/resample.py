#!/usr/bin/python3
"""Upsampling by 2 of a [8, 64, 56, 56] map (a decoder's or a super-resolution head's),
Tessera's Upsample2D against PyTorch's F.interpolate on the CPU, in each mode (nearest,
linear as bilinear, cubic as bicubic), forward alone (PyTorch without autograd) and
forward and backward; then the same map warped by a flow (GridSample against
F.grid_sample at a [8, 56, 56, 2] grid, bilinear and bicubic, zeros padding; backward to
the map and the grid).

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

    # A warp: the identity grid of a 56 x 56 map plus a flow of up to 3 pixels.
    ys, xs_ = np.meshgrid(np.linspace(-1, 1, 56), np.linspace(-1, 1, 56), indexing="ij")
    base = np.stack([xs_, ys], axis=-1)[None].astype(np.float32)
    grid = (base + rng.uniform(-0.1, 0.1, size=(8, 56, 56, 2))).astype(np.float32)
    dyw = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    gs, dyws = ts.tensor(grid), ts.tensor(dyw)
    dywt = torch.tensor(dyw)
    for mode in ("bilinear", "bicubic"):
        warp = ts.GridSample(mode=mode)
        xt, gt = torch.tensor(x), torch.tensor(grid)

        def tessera_forward():
            warp([xs, gs])

        def torch_forward():
            with torch.no_grad():
                torch.nn.functional.grid_sample(xt, gt, mode=mode, align_corners=False)

        def tessera_step():
            warp([xs, gs])
            warp.backward(dyws)

        def torch_step():
            xg, gg = torch.tensor(x, requires_grad=True), torch.tensor(grid, requires_grad=True)
            y = torch.nn.functional.grid_sample(xg, gg, mode=mode, align_corners=False)
            y.backward(dywt)

        for what, sides in (("forward", (tessera_forward, torch_forward)),
                            ("forward+backward", (tessera_step, torch_step))):
            t, p = medians_ms(*sides, args.reps)
            print(f"grid {mode:8s} {what:17s} tessera {t:8.1f}  pytorch {p:8.1f}  ratio {p / t:5.2f}")


if __name__ == "__main__":
    main()
