#!/usr/bin/python3
"""Activation layers against PyTorch's on the CPU, forward and forward with backward, over a
transformer MLP's hidden activation [8, 197, 3072] (ViT-B/16's, batch 8): each kind of
`Activation` against the torch function of the same formula (log on |x| + 0.1, sin and
cos on 8 x, tan on x / 4, asin, acos and atanh on tanh x, acosh on |x| + 1.1), and `Pow`
against torch.pow (pow3, pow4, pow-2 on x; pow1.5, pow0.25, pow2.5 on |x| + 0.1).

Timed as alternating.py describes (one process, one thread count, sides alternating,
medians; the ratio PyTorch / Tessera in time, above 1: Tessera is faster). Tessera's side
is a module call (and its backward) on tessera.Tensors made once; PyTorch's the call under
no_grad, or a forward and backward of <y, dy> through autograd.

    /usr/bin/python3 tools/bench/activations.py [--reps 15] [--threads 2] [--kinds relu,silu]

Needs Debian's python3-torch and the package built (tools/setup.sh).
"""

from alternating import medians_ms, setup


def main():
    args = setup(15, lambda ap: ap.add_argument("--kinds", default=""))
    import numpy as np
    import torch
    import tessera as ts

    F = torch.nn.functional
    rng = np.random.default_rng(0)
    shape = (8, 197, 3072)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    # (kind, Activation's keyword arguments, PyTorch's function, data)
    cases = [
        ("relu", {}, F.relu, x),
        ("leakyRelu", {"slope": 0.01}, lambda t: F.leaky_relu(t, 0.01), x),
        ("elu", {"alpha": 1.0}, F.elu, x),
        ("sigmoid", {}, torch.sigmoid, x),
        ("tanh", {}, torch.tanh, x),
        ("gelu", {}, F.gelu, x),
        ("silu", {}, F.silu, x),
        ("mish", {}, F.mish, x),
        ("softPlus", {}, F.softplus, x),
        ("hardSigmoid", {"hardSlope": 1 / 6, "hardOffset": 0.5}, F.hardsigmoid, x),
        ("hardSwish", {}, F.hardswish, x),
        ("clip", {"min": -1.0, "max": 1.0}, lambda t: torch.clamp(t, -1.0, 1.0), x),
        ("exp", {}, torch.exp, x),
        ("log", {}, torch.log, np.abs(x) + 0.1),
        ("abs", {}, torch.abs, x),
        ("sin", {}, torch.sin, 8.0 * x),  # arguments over several turns
        ("cos", {}, torch.cos, 8.0 * x),
        ("tan", {}, torch.tan, x / 4),  # between the poles
        ("asin", {}, torch.asin, np.tanh(x)),  # inside (-1, 1)
        ("acos", {}, torch.acos, np.tanh(x)),
        ("atan", {}, torch.atan, x),
        ("sinh", {}, torch.sinh, x),
        ("cosh", {}, torch.cosh, x),
        ("asinh", {}, torch.asinh, x),
        ("acosh", {}, torch.acosh, np.abs(x) + 1.1),
        ("atanh", {}, torch.atanh, np.tanh(x)),
        ("erf", {}, torch.erf, x),
        ("sign", {}, torch.sign, x),
    ]
    # Pow layers against torch.pow: whole exponents (vector arithmetic: x^3 as GELU's tanh form
    # writes it), fractional ones (libmvec's powf) on |x| + 0.1
    xp = np.abs(x) + 0.1
    powers = [(p, xp if p != int(p) else x) for p in (3.0, 4.0, -2.0, 1.5, 0.25, 2.5)]
    cases += [(f"pow{p:g}", {"exponent": p}, lambda t, p=p: torch.pow(t, p), data) for p, data in powers]
    chosen = [k for k in args.kinds.split(",") if k]
    print(f"torch {torch.__version__}, {args.threads} threads, medians of {args.reps}, {list(shape)}")
    for kind, params, op, data in cases:
        if chosen and kind not in chosen:
            continue
        m = ts.Pow(**params) if kind.startswith("pow") else ts.Activation(kind, **params)
        xs, dys = ts.tensor(data), ts.tensor(dy)
        xt, dyt = torch.tensor(data, requires_grad=True), torch.tensor(dy)

        def torch_forward():
            with torch.no_grad():
                op(xt)

        def tessera_both():
            m(xs)
            m.backward(dys)

        def torch_both():
            op(xt).backward(dyt)
            xt.grad = None

        t1, p1 = medians_ms(lambda: m(xs), torch_forward, args.reps)
        t2, p2 = medians_ms(tessera_both, torch_both, args.reps)
        print(f"{kind}: forward Tessera {t1:.2f} ms, PyTorch {p1:.2f} ms, {p1 / t1:.2f}x; "
              f"forward+backward {t2:.2f} ms, {p2:.2f} ms, {p2 / t2:.2f}x")


if __name__ == "__main__":
    main()
