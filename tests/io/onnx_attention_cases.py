"""The forms exporters write attention in (ONNX has no Attention op before opset 23), as test
cases for onnx_extra_cases.py: q k^T scaled, masked, softmax, times v. A case named
attention_fused_* must import as one ScaledDotProductAttention layer (causal where the name
says so), one named attention_separate_* as separate layers (a form that looks like attention
but is not one it takes); both must give the outputs computed here with NumPy from the ONNX
operator definitions.
"""
import numpy as np
from onnx import TensorProto, helper

LOWEST = float(np.finfo(np.float32).min)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention_forms(root, save, value):
    rng = np.random.RandomState(5)
    N, H, T, S, d, dv = 2, 2, 5, 6, 4, 3
    q = rng.randn(N, H, T, d).astype(np.float32)
    k = rng.randn(N, H, S, d).astype(np.float32)
    v = rng.randn(N, H, S, dv).astype(np.float32)
    kT = k.transpose(0, 1, 3, 2)
    heads = [value("q", ["N", H, T, d]), value("k", ["N", H, S, d]), value("v", ["N", H, S, dv])]
    out = [value("y", ["N", H, T, dv])]
    transpose = helper.make_node("Transpose", ["k"], ["kT"], perm=[0, 1, 3, 2])
    weights_v = helper.make_node("MatMul", ["w", "v"], ["y"])

    # Scores times a scalar, softmax over the last axis, a free batch dim.
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]),
             helper.make_node("Mul", ["qk", "half"], ["s"]), helper.make_node("Softmax", ["s"], ["w"], axis=-1),
             weights_v]
    g = helper.make_graph(nodes, "attention", heads, out, [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    save(root, "attention_fused_scaled_scores", g, [q, k, v], [softmax(q @ kT * 0.5) @ v], 13)

    # nn.MultiheadAttention as PyTorch 1.13 writes it: time-major [T, N H, d] inputs, q divided
    # by sqrt(d), k's two transposes merged into one (perm 1 2 0), an attention mask of data
    # added, softmax on axis 2 (the last); k also scaled before its transpose.
    xq, xk, xv = q.reshape(N * H, T, d).transpose(1, 0, 2), k.reshape(N * H, S, d).transpose(1, 0, 2), \
        v.reshape(N * H, S, dv).transpose(1, 0, 2)
    mask = rng.randn(T, S).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["xq"], ["q3"], perm=[1, 0, 2]),
             helper.make_node("Div", ["q3", "root_d"], ["qs"]),
             helper.make_node("Mul", ["xk", "two"], ["xk2"]),
             helper.make_node("Transpose", ["xk2"], ["kT"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["xv"], ["v3"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["qs", "kT"], ["qk"]), helper.make_node("Add", ["qk", "mask"], ["s"]),
             helper.make_node("Softmax", ["s"], ["w"], axis=2), helper.make_node("MatMul", ["w", "v3"], ["y"])]
    g = helper.make_graph(nodes, "mha", [value("xq", [T, N * H, d]), value("xk", [S, N * H, d]),
                                         value("xv", [S, N * H, dv]), value("mask", [T, S])],
                          [value("y", [N * H, T, dv])],
                          [helper.make_tensor("root_d", TensorProto.FLOAT, [], [2.0]),
                           helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    q3, k3, v3 = q.reshape(N * H, T, d), k.reshape(N * H, S, d), v.reshape(N * H, S, dv)
    want = softmax(q3 / 2.0 @ (2 * k3).transpose(0, 2, 1) + mask) @ v3
    save(root, "attention_fused_multihead_time_major", g, [xq, xk, xv, mask], [want], 13)

    # F.scaled_dot_product_attention as PyTorch 2 writes it (opset 14): the scale computed
    # from q's shape, its square root on q and on k^T, a padding mask [N, 1, 1, S] added.
    pad = np.zeros((N, 1, 1, S), np.float32)
    pad[1, ..., 4:] = -np.inf
    nodes = [helper.make_node("Shape", ["q"], ["shape"]),
             helper.make_node("Slice", ["shape", "minus_one", "big"], ["last"]),
             helper.make_node("Cast", ["last"], ["d_float"], to=TensorProto.FLOAT),
             helper.make_node("Sqrt", ["d_float"], ["root"]), helper.make_node("Div", ["one", "root"], ["scale"]),
             helper.make_node("Sqrt", ["scale"], ["root_scale"]),
             helper.make_node("Mul", ["q", "root_scale"], ["qs"]), transpose,
             helper.make_node("Mul", ["kT", "root_scale"], ["kTs"]),
             helper.make_node("MatMul", ["qs", "kTs"], ["qk"]), helper.make_node("Add", ["qk", "pad"], ["s"]),
             helper.make_node("Softmax", ["s"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "sdpa", heads + [value("pad", ["N", 1, 1, S])], out,
                          [helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
                           helper.make_tensor("big", TensorProto.INT64, [1], [1 << 62]),
                           helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    save(root, "attention_fused_scale_from_the_shape", g, [q, k, v, pad],
         [softmax(q @ kT / np.sqrt(d) + pad) @ v], 14)

    # nanoGPT's masked_fill of a causal buffer (Equal to 0 folded), -inf where it holds, and
    # a Dropout (inference: nothing dropped) between the softmax and the product.
    kc, vc = k[:, :, :T], v[:, :, :T]
    causal = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    nodes = [helper.make_node("Transpose", ["k"], ["kT"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kT"], ["qk"]), helper.make_node("Div", ["qk", "root_d"], ["s"]),
             helper.make_node("Equal", ["tril", "zero"], ["future"]),
             helper.make_node("Where", ["future", "minus_inf", "s"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("Dropout", ["p", "ratio"], ["w"]), weights_v]
    g = helper.make_graph(nodes, "gpt", [value("q", ["N", H, T, d]), value("k", ["N", H, T, d]),
                                         value("v", ["N", H, T, dv])], out,
                          [helper.make_tensor("root_d", TensorProto.FLOAT, [], [2.0]),
                           helper.make_tensor("tril", TensorProto.FLOAT, [1, 1, T, T],
                                              np.tril(np.ones((T, T))).flatten()),
                           helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
                           helper.make_tensor("minus_inf", TensorProto.FLOAT, [], [-np.inf]),
                           helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.1])])
    save(root, "attention_fused_causal_masked_fill_and_dropout", g, [q, kc, vc],
         [softmax(q @ kc.transpose(0, 1, 3, 2) / 2 + causal) @ vc], 13)

    # A causal table of float's lowest value added, and a padding mask of data added after it.
    lowest = np.triu(np.full((T, T), LOWEST, np.float32), 1)
    padT = np.zeros((N, 1, 1, T), np.float32)
    padT[0, ..., 3:] = -1e9
    nodes = [helper.make_node("Transpose", ["k"], ["kT"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kT"], ["s"]), helper.make_node("Add", ["s", "table"], ["c"]),
             helper.make_node("Add", ["pad", "c"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "causal_and_padding", [value("q", ["N", H, T, d]), value("k", ["N", H, T, d]),
                                                        value("v", ["N", H, T, dv]), value("pad", ["N", 1, 1, T])],
                          out, [helper.make_tensor("table", TensorProto.FLOAT, [T, T], lowest.flatten())])
    want = softmax((q @ kc.transpose(0, 1, 3, 2) + lowest).astype(np.float32) + padT) @ vc
    save(root, "attention_fused_causal_table_and_padding", g, [q, kc, vc, padT], [want], 13)

    # masked_fill(pad[:, None, None, :], -inf) of a bool padding mask of data: sample 1 all
    # padding (its rows NaN, as ONNX's Where and Softmax give); and torch.where(keep, scores,
    # lowest) with the fill taken where the condition does not hold.
    padded = np.zeros((N, 1, 1, S), bool)
    padded[1] = True
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Where", ["padded", "minus_inf", "s"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "masked_fill", heads + [helper.make_tensor_value_info(
        "padded", TensorProto.BOOL, ["N", 1, 1, S])], out,
        [helper.make_tensor("minus_inf", TensorProto.FLOAT, [], [-np.inf])])
    with np.errstate(invalid="ignore"):
        want = softmax(np.where(padded, -np.inf, q @ kT)) @ v
    save(root, "attention_fused_masked_fill_of_data", g, [q, k, v, padded], [want], 13)
    keep = np.ones((N, 1, 1, S), bool)
    keep[0, ..., 5:] = False
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Where", ["keep", "s", "lowest"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "where_lowest", heads + [helper.make_tensor_value_info(
        "keep", TensorProto.BOOL, ["N", 1, 1, S])], out,
        [helper.make_tensor("lowest", TensorProto.FLOAT, [], [LOWEST])])
    save(root, "attention_fused_where_lowest_of_data", g, [q, k, v, keep],
         [softmax(np.where(keep, q @ kT, np.float32(LOWEST))) @ v], 13)

    # A learned bias added to the scores (a weight [1, H, T, S]: Swin's relative position
    # biases as the export folds them): one layer reading it as a Parameter.
    per_head_bias = rng.randn(1, H, T, S).astype(np.float32)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]),
             helper.make_node("Mul", ["qk", "half"], ["s"]),
             helper.make_node("Add", ["s", "bias"], ["m"]),
             helper.make_node("Softmax", ["m"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "bias_per_head", heads, out,
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
                           helper.make_tensor("bias", TensorProto.FLOAT, [1, H, T, S], per_head_bias.flatten())])
    save(root, "attention_fused_learned_bias_per_head", g, [q, k, v], [softmax(q @ kT * 0.5 + per_head_bias) @ v], 13)

    # Einsum's forms (einops-style code: einsum("b h i d, b h j d -> b h i j", q, k) * scale,
    # softmax, einsum("b h i j, b h j d -> b h i d", attn, v)), and the scores' Einsum of k^T
    # ("...ik,...kj->...ij"): one layer each.
    nodes = [helper.make_node("Einsum", ["q", "k"], ["qk"], equation="b h i d, b h j d -> b h i j"),
             helper.make_node("Mul", ["qk", "half"], ["s"]), helper.make_node("Softmax", ["s"], ["w"], axis=-1),
             helper.make_node("Einsum", ["w", "v"], ["y"], equation="bhij,bhjd->bhid")]
    g = helper.make_graph(nodes, "einsum", heads, out, [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    save(root, "attention_fused_einsum", g, [q, k, v], [softmax(q @ kT * 0.5) @ v], 13)
    nodes = [transpose, helper.make_node("Einsum", ["q", "kT"], ["qk"], equation="...ik,...kj->...ij"),
             helper.make_node("Mul", ["qk", "half"], ["s"]), helper.make_node("Softmax", ["s"], ["w"], axis=-1),
             weights_v]
    g = helper.make_graph(nodes, "einsum_kt", heads, out, [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    save(root, "attention_fused_einsum_of_k_transposed", g, [q, k, v], [softmax(q @ kT * 0.5) @ v], 13)

    # torch.baddbmm(empty, q, k^T, beta=0, alpha=scale), as diffusers' attention computes its
    # scores: the product scaled plus zeros times 0; the zeros a ConstantOfShape of a shape
    # computed from q's and k's (a free batch), or a Constant of zeros where the export knew
    # every size. An Add of zeros is no mask (separately: an Identity). A weight of the file
    # holding zeros is a learned bias that starts at zero: a Parameter still.
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]), helper.make_node("Mul", ["qk", "half"], ["s"]),
             helper.make_node("Shape", ["q"], ["q_shape"]), helper.make_node("Shape", ["k"], ["k_shape"]),
             helper.make_node("Slice", ["q_shape", "zero_i", "three_i"], ["lead"]),
             helper.make_node("Slice", ["k_shape", "two_i", "three_i"], ["keys"]),
             helper.make_node("Concat", ["lead", "keys"], ["scores_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["scores_shape"], ["empty"],
                              value=helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.0])),
             helper.make_node("Mul", ["empty", "beta"], ["zeros"]), helper.make_node("Add", ["s", "zeros"], ["m"]),
             helper.make_node("Softmax", ["m"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "baddbmm", heads, out,
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
                           helper.make_tensor("beta", TensorProto.FLOAT, [], [0.0])] +
                          [helper.make_tensor(n, TensorProto.INT64, [1], [v])
                           for n, v in (("zero_i", 0), ("two_i", 2), ("three_i", 3))])
    save(root, "attention_fused_baddbmm_zeros_of_computed_shape", g, [q, k, v], [softmax(q @ kT * 0.5) @ v], 13)
    fixed = [value("q", [N, H, T, d]), value("k", [N, H, S, d]), value("v", [N, H, S, dv])]
    zeros = helper.make_tensor("zeros_value", TensorProto.FLOAT, [N, H, T, S], np.zeros(N * H * T * S))
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]), helper.make_node("Mul", ["qk", "half"], ["s"]),
             helper.make_node("Constant", [], ["zeros"], value=zeros), helper.make_node("Add", ["s", "zeros"], ["m"]),
             helper.make_node("Softmax", ["m"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "baddbmm_known", fixed, [value("y", [N, H, T, dv])],
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    save(root, "attention_fused_baddbmm_zeros_constant", g, [q, k, v], [softmax(q @ kT * 0.5) @ v], 13)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]), helper.make_node("Mul", ["qk", "half"], ["s"]),
             helper.make_node("Add", ["s", "bias"], ["m"]), helper.make_node("Softmax", ["m"], ["w"], axis=-1),
             weights_v]
    g = helper.make_graph(nodes, "zero_bias", heads, out,
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
                           helper.make_tensor("bias", TensorProto.FLOAT, [1, H, T, S], np.zeros(H * T * S))])
    save(root, "attention_fused_learned_bias_from_zero", g, [q, k, v], [softmax(q @ kT * 0.5) @ v], 13)

    # Attention over positions as DDPM's and latent diffusion's AttnBlock writes it: q, k and v
    # [N, C, P] from a 1x1 convolution, the scores bmm(q^T, k) (k^T as it comes, no Transpose),
    # scaled, softmax over the last axis, the output bmm(v, w^T), [N, C, P]: one layer over k's
    # and v's transposes, its output transposed back. A scores MatMul of a k^T input alone, and a
    # permutation of the weights that is not the swap of their last two axes (separate).
    C, P = 4, 7
    qp, kp, vp = (rng.randn(N, C, P).astype(np.float32) for _ in range(3))
    nodes = [helper.make_node("Transpose", ["q"], ["qT"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["qT", "k"], ["qk"]), helper.make_node("Mul", ["qk", "half"], ["s"]),
             helper.make_node("Softmax", ["s"], ["w"], axis=2),
             helper.make_node("Transpose", ["w"], ["wT"], perm=[0, 2, 1]), helper.make_node("MatMul", ["v", "wT"], ["y"])]
    g = helper.make_graph(nodes, "over_positions", [value(x, ["N", C, P]) for x in "qkv"], [value("y", ["N", C, P])],
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    weights = softmax(qp.transpose(0, 2, 1) @ kp * 0.5)
    save(root, "attention_fused_over_positions", g, [qp, kp, vp], [vp @ weights.transpose(0, 2, 1)], 13)
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Mul", ["qk", "half"], ["s"]),
             helper.make_node("Softmax", ["s"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "k_transposed_in", [heads[0], value("kt", ["N", H, d, S]), heads[2]], out,
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    save(root, "attention_fused_k_transposed_in", g, [q, np.ascontiguousarray(kT), v], [softmax(q @ kT * 0.5) @ v], 13)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["s"]), helper.make_node("Softmax", ["s"], ["w"]),
             helper.make_node("Transpose", ["w"], ["wT"], perm=[1, 0, 3, 2]),
             helper.make_node("MatMul", ["vh", "wT"], ["y"])]
    vh = rng.randn(H, N, dv, S).astype(np.float32)
    g = helper.make_graph(nodes, "weights_permuted",
                          [value("q", [N, H, T, d]), value("k", [N, H, S, d]), value("vh", [H, N, dv, S])],
                          [value("y", [H, N, dv, T])])
    want = vh @ softmax(q @ kT).transpose(1, 0, 3, 2)
    save(root, "attention_separate_weights_permuted", g, [q, k, vh], [want], 13)

    # Swin's shifted windows: the biased scores of B nW windows viewed as [B, nW, H, T, S], a
    # window mask [1, nW, 1, T, S] of 0 and -100 added (computed in the model: a Constant),
    # viewed back: one layer over q, k and v viewed per window. Without a learned bias, or with
    # a mask that is a weight of the file (an Add of it learns it), separate layers.
    B, W = 2, 3
    qw = rng.randn(B * W, H, T, d).astype(np.float32)
    kw = rng.randn(B * W, H, S, d).astype(np.float32)
    vw = rng.randn(B * W, H, S, dv).astype(np.float32)
    window_mask = np.where(rng.rand(1, W, 1, T, S) < 0.3, -100.0, 0.0).astype(np.float32)
    windowed = [value("q", ["NW", H, T, d]), value("k", ["NW", H, S, d]), value("v", ["NW", H, S, dv])]

    def shifted(bias):
        s = qw @ kw.transpose(0, 1, 3, 2) * 0.5 + (0 if bias is None else bias)
        return softmax((s.reshape(B, W, H, T, S) + window_mask).reshape(B * W, H, T, S)) @ vw

    for name, bias, weight in (("attention_fused_learned_bias_shifted_windows", per_head_bias, False),
                               ("attention_separate_shifted_windows_without_bias", None, False),
                               ("attention_separate_shifted_windows_mask_a_weight", per_head_bias, True)):
        scores = "qk_half" if bias is None else "biased"
        nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]),
                 helper.make_node("Mul", ["qk", "half"], ["qk_half"]),
                 helper.make_node("Reshape", [scores, "per_window"], ["sw"]),
                 helper.make_node("Add", ["sw", "window_mask"], ["mw"]),
                 helper.make_node("Reshape", ["mw", "back"], ["m"]),
                 helper.make_node("Softmax", ["m"], ["w"], axis=-1), weights_v]
        inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
                 helper.make_tensor("per_window", TensorProto.INT64, [5], [-1, W, H, T, S]),
                 helper.make_tensor("back", TensorProto.INT64, [4], [-1, H, T, S])]
        if bias is not None:
            nodes.insert(3, helper.make_node("Add", ["qk_half", "bias"], ["biased"]))
            inits.append(helper.make_tensor("bias", TensorProto.FLOAT, [1, H, T, S], bias.flatten()))
        mask = helper.make_tensor("window_mask", TensorProto.FLOAT, [1, W, 1, T, S], window_mask.flatten())
        if weight:
            inits.append(mask)
        else:
            nodes.insert(0, helper.make_node("Constant", [], ["window_mask"], value=mask))
        g = helper.make_graph(nodes, "shifted_windows", windowed, [value("y", ["NW", H, T, dv])], inits)
        save(root, name, g, [qw, kw, vw], [shifted(bias)], 13)

    # Forms it does not take: a constant mask that is not the causal one and not a learned
    # bias (a table of lower rank, which an Add of it keeps constant; a band of -inf), a
    # scale per head, and a fill of data that is not that low (it replaces the scores of
    # sample 1, all filled: the softmax of equal values, not of the scores less 1e4).
    table = rng.randn(T, S).astype(np.float32)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["s"]), helper.make_node("Add", ["s", "table"], ["m"]),
             helper.make_node("Softmax", ["m"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "constant_mask", heads, out,
                          [helper.make_tensor("table", TensorProto.FLOAT, [T, S], table.flatten())])
    save(root, "attention_separate_constant_mask", g, [q, k, v], [softmax(q @ kT + table) @ v], 13)
    band = np.where(np.abs(np.arange(T)[:, None] - np.arange(S)[None, :]) <= 1, 0.0, -np.inf).astype(np.float32)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["s"]), helper.make_node("Add", ["s", "band"], ["m"]),
             helper.make_node("Softmax", ["m"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "band_mask", heads, out,
                          [helper.make_tensor("band", TensorProto.FLOAT, [T, S], band.flatten())])
    save(root, "attention_separate_band_mask", g, [q, k, v], [softmax(q @ kT + band) @ v], 13)
    per_head = np.array([0.5, 2.0], np.float32).reshape(1, H, 1, 1)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["qk"]),
             helper.make_node("Mul", ["qk", "per_head"], ["s"]), helper.make_node("Softmax", ["s"], ["w"], axis=-1),
             weights_v]
    g = helper.make_graph(nodes, "per_head_scale", heads, out,
                          [helper.make_tensor("per_head", TensorProto.FLOAT, [1, H, 1, 1], per_head.flatten())])
    save(root, "attention_separate_scale_per_head", g, [q, k, v], [softmax(q @ kT * per_head) @ v], 13)
    nodes = [transpose, helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Where", ["padded", "fill", "s"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["w"], axis=-1), weights_v]
    g = helper.make_graph(nodes, "fill_of_data", heads + [helper.make_tensor_value_info(
        "padded", TensorProto.BOOL, ["N", 1, 1, S])], out, [helper.make_tensor("fill", TensorProto.FLOAT, [], [-1e4])])
    save(root, "attention_separate_fill_that_replaces", g, [q, k, v, padded],
         [softmax(np.where(padded, np.float32(-1e4), q @ kT)) @ v], 13)
