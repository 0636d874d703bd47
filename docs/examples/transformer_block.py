#!/usr/bin/python3
"""A transformer encoder block, graph-style, from Tessera's layers: pre-norm multi-head
self-attention (LayerNorm, one Linear to q, k and v, heads split by Reshape and Transpose,
ScaledDotProductAttention, heads joined, the output Linear) and a GELU feed-forward, each
with its residual Add. Checked against PyTorch's nn.TransformerEncoderLayer with the same
weights, then trained to tell sequences apart."""

import numpy as np

import tessera as ts

D, HEADS, FF, T = 32, 4, 64, 10  # model width, heads, feed-forward width, tokens
DH = D // HEADS

def encoder_block():
    """[N, T, D] -> [N, T, D]: the block as a Graph."""
    x = ts.Identity(name="tokens").node()
    h = ts.LayerNorm(D, name="norm1").node(x)
    qkv = ts.Linear(D, 3 * D, name="in_proj").node(h)  # [N, T, 3D]
    parts = ts.Split(2, [D, D, D], name="qkv").node(qkv)
    heads = []
    for i, name in enumerate("qkv"):  # [N, T, D] -> [N, HEADS, T, DH]
        r = ts.Reshape((0, 0, HEADS, DH), name=name + "_heads").node((parts, i))
        heads.append(ts.Transpose((0, 2, 1, 3), name=name + "_t").node(r))
    a = ts.ScaledDotProductAttention(name="attention").node(*heads)
    a = ts.Transpose((0, 2, 1, 3), name="join_t").node(a)
    a = ts.Reshape((0, 0, D), name="join").node(a)
    a = ts.Linear(D, D, name="out_proj").node(a)
    x1 = ts.Add(name="residual1").node(x, a)
    f = ts.LayerNorm(D, name="norm2").node(x1)
    f = ts.Linear(D, FF, name="linear1").node(f)
    f = ts.Gelu(name="gelu").node(f)
    f = ts.Linear(FF, D, name="linear2").node(f)
    y = ts.Add(name="residual2").node(x1, f)
    return ts.Graph(inputs=x, outputs=y, name="encoder_block")


ts.manualSeed(1)
block = encoder_block()
print(ts.check(block, input=(8, T, D)))

# The same block in PyTorch, given Tessera's weights (PyTorch keeps Linear weights
# transposed: [out, in]).
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True).eval()
    for k, v in block.namedParams().items():  # norms and biases that matter, not ones and zeros
        if k.startswith("norm") or k.endswith(".b"):
            v.data = np.random.default_rng(len(k)).uniform(0.5, 1.5, v.data.shape).astype(np.float32)
    p = {k: v.data.numpy() for k, v in block.namedParams().items()}
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(torch.tensor(p["in_proj.W"].T))
        ref.self_attn.in_proj_bias.copy_(torch.tensor(p["in_proj.b"]))
        ref.self_attn.out_proj.weight.copy_(torch.tensor(p["out_proj.W"].T))
        ref.self_attn.out_proj.bias.copy_(torch.tensor(p["out_proj.b"]))
        for mine, theirs in (("linear1", ref.linear1), ("linear2", ref.linear2)):
            theirs.weight.copy_(torch.tensor(p[mine + ".W"].T))
            theirs.bias.copy_(torch.tensor(p[mine + ".b"]))
        for mine, theirs in (("norm1", ref.norm1), ("norm2", ref.norm2)):
            theirs.weight.copy_(torch.tensor(p[mine + ".weight"]))
            theirs.bias.copy_(torch.tensor(p[mine + ".bias"]))
        tokens = np.random.default_rng(2).standard_normal((3, T, D)).astype(np.float32)
        want = ref(torch.tensor(tokens)).numpy()
    got = block(tokens).numpy()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"largest difference from PyTorch's nn.TransformerEncoderLayer: {err:.1e} of the largest output")
    assert err < 1e-5, err

# Train a fresh block with a classifier head on the mean over its tokens: which of two
# centres the sequence's tokens scatter around.
ts.manualSeed(2)
head_in = ts.Identity(name="x").node()
z = encoder_block().node(head_in)
z = ts.ReduceMean(axes=[1], keepDims=False, name="pool").node(z)
z = ts.Linear(D, 2, name="classifier").node(z)
net = ts.Graph(inputs=head_in, outputs=z, name="classifier_net")
rng = np.random.default_rng(3)
centres = rng.standard_normal((2, D)).astype(np.float32)
labels = rng.integers(0, 2, 512).astype(np.int32)
data = (centres[labels][:, None, :] * 0.5 + rng.standard_normal((512, T, D)).astype(np.float32)).astype(np.float32)
cost, opt = ts.CrossEntropy(), ts.Adam(alpha=1e-3)
opt.setupOn(net, useGlobalState=True)
first = last = None
for step in range(60):
    i = (step * 32) % 512
    err, grad = cost(net(data[i:i + 32]), labels[i:i + 32])
    opt.zeroGradParams()
    net.backward(grad)
    opt.update()
    first = err if first is None else first
    last = err
net.evalMode()
accuracy = float((net(data).numpy().argmax(1) == labels).mean())
print(f"training loss {first:.3f} -> {last:.3f}; accuracy on the 512 sequences {accuracy:.1%}")
assert last < first and accuracy > 0.9, (first, last, accuracy)
