#!/usr/bin/python3
"""The layers transformers are made of, Tessera against PyTorch on the CPU, forward and
backward (input and parameter gradients), at ViT-B/16's shapes (batch 8, 197 tokens, 768
features, 12 heads), a GroupNorm of a convolutional stage, and nn.MultiheadAttention at
ViT-B/16's (also with a key-padding mask) and the zoo vit-tiny's shapes (128 images of 50
tokens, 64 features, 4 heads).

Timed as alternating.py describes (one process, one thread count, sides alternating,
medians; the ratio PyTorch / Tessera in time, above 1: Tessera is faster). Tessera's
calls go through its Python package (a module call, then backward) on tessera.Tensors made
once from the arrays, as PyTorch's on torch tensors made once; PyTorch's through autograd
(a forward, then backward of <y, dy>). PyTorch 1.13 has no
scaled_dot_product_attention: its side of the attention case is the same formula in
autograd (which keeps every head's scores; Tessera's module keeps none).

    /usr/bin/python3 tools/bench/transformer_layers.py [--reps 15] [--threads 2]

Needs Debian's python3-torch and the package built (tools/setup.sh).
"""

from alternating import medians_ms, openblas_core, setup


def main():
    args = setup(15)
    import numpy as np
    import torch
    import tessera as ts
    rng = np.random.default_rng(0)
    F = torch.nn.functional

    def data(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    B, T, C, H = 8, 197, 768, 12
    cases = []
    # name, tessera module, torch function of (inputs..., params...), input arrays, torch params
    ln = ts.LayerNorm(C)
    cases.append(("LayerNorm [8, 197, 768]", ln, lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5), [data(B, T, C)],
                  [np.ones(C, np.float32), np.zeros(C, np.float32)]))
    rms = ts.RMSNorm(C)
    eps = float(np.finfo(np.float32).eps)
    cases.append(("RMSNorm [8, 197, 768]", rms, lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
                  [data(B, T, C)], [np.ones(C, np.float32)]))
    gn = ts.GroupNorm(32, 256)
    cases.append(("GroupNorm 32 [16, 256, 28, 28]", gn, lambda x, w, b: F.group_norm(x, 32, w, b, 1e-5),
                  [data(16, 256, 28, 28)], [np.ones(256, np.float32), np.zeros(256, np.float32)]))
    fc = ts.Linear(C, 4 * C)
    w = fc.namedParams()["W"].data.numpy().copy()
    cases.append(("Linear 768->3072 [8, 197, 768]", fc, lambda x, w_, b_: F.linear(x, w_.t(), b_), [data(B, T, C)],
                  [w, np.zeros(4 * C, np.float32)]))
    sm = ts.SoftMax(-1)
    cases.append(("SoftMax(-1) [8, 12, 197, 197]", sm, lambda x: torch.softmax(x, -1), [data(B, H, T, T)], []))
    mm = ts.MatMul(transB=True, alpha=0.125)
    cases.append(("MatMul q k^T [8, 12, 197, 64]", mm, lambda q, k: torch.matmul(q, k.transpose(-1, -2)) * 0.125,
                  [data(B, H, T, 64), data(B, H, T, 64)], []))
    sdpa = ts.ScaledDotProductAttention(causal=True)
    causal = torch.full((T, T), float("-inf")).triu(1)
    cases.append(("attention causal [8, 12, 197, 64]", sdpa,
                  lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) * 0.125 + causal, -1) @ v,
                  [data(B, H, T, 64), data(B, H, T, 64), data(B, H, T, 64)], []))
    # nn.MultiheadAttention (self-attention, batch-first) and its twin with the same weights
    E, heads = 768, 12
    ref = torch.nn.MultiheadAttention(E, heads, batch_first=True)
    mha = ts.MultiheadAttention(E, heads)
    for name, v in mha.namedParams().items():
        v.data = ref.state_dict()[name.replace("out_proj_", "out_proj.")].numpy()
    params = [p_.detach().numpy().copy() for p_ in (ref.in_proj_weight, ref.in_proj_bias, ref.out_proj.weight,
                                                     ref.out_proj.bias)]
    cases.append(("MultiheadAttention [8, 197, 768]", mha,
                  lambda x, w, b, wo, bo: F.multi_head_attention_forward(
                      x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), E, heads, w, b, None, None, False, 0.0,
                      wo, bo, need_weights=False)[0].transpose(0, 1), [data(B, T, C)], params))
    # the same with a key-padding mask (additive: -inf on the last 37 keys of every other
    # sample), whose gradient both sides compute
    mhap = ts.MultiheadAttention(E, heads, keyPaddingMask=True)
    for name, v in mhap.namedParams().items():
        v.data = ref.state_dict()[name.replace("out_proj_", "out_proj.")].numpy()
    pad = np.zeros((B, T), np.float32)
    pad[1::2, T - 37:] = -np.inf
    cases.append(("MultiheadAttention padded [8, 197, 768]", mhap,
                  lambda x, m, w, b, wo, bo: F.multi_head_attention_forward(
                      x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), E, heads, w, b, None, None, False, 0.0,
                      wo, bo, key_padding_mask=m, need_weights=False)[0].transpose(0, 1), [data(B, T, C), pad],
                  params))
    mini = ts.MultiheadAttention(64, 4)
    ref64 = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    params64 = [p_.detach().numpy().copy() for p_ in (ref64.in_proj_weight, ref64.in_proj_bias, ref64.out_proj.weight,
                                                       ref64.out_proj.bias)]
    cases.append(("MultiheadAttention [128, 50, 64]", mini,
                  lambda x, w, b, wo, bo: F.multi_head_attention_forward(
                      x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), 64, 4, w, b, None, None, False, 0.0,
                      wo, bo, need_weights=False)[0].transpose(0, 1), [data(128, 50, 64)], params64))
    silu = ts.Activation(ts.silu)
    cases.append(("silu [8, 197, 3072]", silu, F.silu, [data(B, T, 4 * C)], []))

    print(f"threads {args.threads}, {args.reps} reps, medians in ms (forward + backward); "
          f"OpenBLAS core {openblas_core()}")
    print(f"{'case':<40} {'Tessera':>9} {'PyTorch':>9} {'PyTorch/Tessera':>16}")
    for name, mod, fn, inputs, params in cases:
        # Both sides get their own tensors made once, outside the timed loop (a NumPy
        # array passed to a module would be copied in each call).
        x_ts = [ts.tensor(a) for a in inputs]
        x_ts = x_ts if len(x_ts) > 1 else x_ts[0]
        y = mod(x_ts)
        y = y[0] if isinstance(y, list) else y
        dy = rng.standard_normal(y.numpy().shape).astype(np.float32)
        dy_ts = ts.tensor(dy)

        def run_ts():
            mod(x_ts)
            mod.backward(dy_ts)

        tin = [torch.tensor(a, requires_grad=True) for a in inputs]
        tpar = [torch.tensor(p, requires_grad=True) for p in params]
        tdy = torch.tensor(dy)

        def run_torch():
            for t in tin + tpar:
                t.grad = None
            out = fn(*tin, *tpar)
            out.backward(tdy)

        a, b = medians_ms(run_ts, run_torch, args.reps)
        print(f"{name:<40} {a:9.2f} {b:9.2f} {b / a:16.2f}")


if __name__ == "__main__":
    main()
