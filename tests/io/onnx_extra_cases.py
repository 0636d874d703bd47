#!/usr/bin/env python3
"""ONNX test cases, in the layout of ONNX's own test data (model.onnx, test_data_set_0/
input_*.pb, output_*.pb), for imported op forms that ONNX's data has no passing case of:
Resize and Upsample with nearest integer scales, Resize linear with half-pixel centres,
Resize to sizes that are not whole multiples, with the corners aligned and with half-pixel
centres rounded (nearest-exact), AveragePool with
ceil_mode 1, ConvTranspose with output_shape,
Tile along one dim; and the forms exporters
write that the importer folds or maps: shapes computed from a free batch dim (a flatten,
a channel shuffle), HardSigmoid and HardSwish, squeeze-and-excitation gates, ReduceMean
over the spatial dims, arithmetic with scalar and per-channel constants, a Gemm whose weights are typed values (float_data), Sub, Slice, Unsqueeze/Squeeze,
Flatten and Expand of data, CumSum (position ids from a mask), ReduceSum, ReduceSumSquare and ReduceL2 after the batch, Gather from a table (an Embedder), Cast, GridSample on an affine grid
(a SpatialTf); and the forms of windowed attention (Swin, MaxViT): Slice of data with steps,
Pad of a channels-last tensor, Einsum as a batched matrix product, Dropout with a constant
training_mode and its mask unused, and an attention mask computed from the input's shape
(Range, Mod, ConstantOfShape, ScatterND, Equal, Not, Where, Expand, Pow) that folds to a
constant; and weights read by several nodes, one of them inside a pattern read as one layer
(the importer drops a constant after its last reader); and the forms of a GPT written with
masked_fill (a causal mask sliced from a weight-like buffer and compared, a Where of data
and a constant, positional rows gathered from a table by known indices and added) and of a
LLaMA's causal mask (Trilu); and the masks made from lengths and ids (comparisons and logic
of integer and bool data, integer division and remainders, Where of integers); and attention
in the forms exporters write it (onnx_attention_cases.py). The expected
outputs are
computed here with NumPy from the ONNX operator definitions.

usage: onnx_extra_cases.py OUTDIR
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_attention_cases import attention_forms


def save(root, name, graph, inputs, outputs, opset):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for k, a in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())
    for k, a in enumerate(outputs):
        with open(os.path.join(d, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())


def value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def main():
    root = sys.argv[1]
    rng = np.random.RandomState(0)
    x = rng.randn(2, 3, 4, 5).astype(np.float32)
    # Nearest with an integer scale: output index o reads input index floor(o / s) (asymmetric/floor;
    # half_pixel with round_prefer_floor picks the same).
    for s in (2, 3):
        y = x.repeat(s, axis=2).repeat(s, axis=3)
        for ctm, nm in (("asymmetric", "floor"), ("half_pixel", "round_prefer_floor")):
            scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, s, s])
            node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                                    coordinate_transformation_mode=ctm, nearest_mode=nm)
            g = helper.make_graph([node], "resize", [value("x", x.shape)], [value("y", y.shape)], [scales])
            save(root, f"resize_nearest_{ctm}_{nm}_x{s}", g, [x], [y], 13)
        node = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, float(s), float(s)])
        g = helper.make_graph([node], "upsample", [value("x", x.shape)], [value("y", y.shape)])
        save(root, f"upsample7_nearest_x{s}", g, [x], [y], 7)
    # Nearest with an integer scale per spatial dim (each element repeated), the batch free.
    for sh, sw in ((2, 3), (1, 2)):
        y = x.repeat(sh, axis=2).repeat(sw, axis=3)
        scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, sh, sw])
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        g = helper.make_graph([node], "resize", [value("x", ["N", 3, 4, 5])], [value("y", ["N"] + list(y.shape[1:]))],
                              [scales])
        save(root, f"resize_nearest_x{sh}_x{sw}", g, [x], [y], 13)
    # Tile along one dim: copies laid end to end (np.tile).
    for reps in ([1, 1, 3, 1], [2, 1, 1, 1], [1, 1, 1, 1]):
        y = np.tile(x, reps)
        r = helper.make_tensor("reps", TensorProto.INT64, [4], reps)
        node = helper.make_node("Tile", ["x", "reps"], ["y"])
        g = helper.make_graph([node], "tile", [value("x", x.shape)], [value("y", y.shape)], [r])
        save(root, "tile_" + "_".join(map(str, reps)), g, [x], [y], 13)
    # Linear with an integer scale and half-pixel centres: output o samples input
    # (o + 0.5) / s - 0.5, clamped to the edges, interpolated between its two neighbours.
    def linear_axis(a, axis, s):
        n = a.shape[axis]
        src = np.clip((np.arange(n * s) + 0.5) / s - 0.5, 0, n - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        w = (src - lo).reshape([-1 if d == axis else 1 for d in range(a.ndim)])
        return np.take(a, lo, axis=axis) * (1 - w) + np.take(a, hi, axis=axis) * w

    for s in (2, 3):
        y = linear_axis(linear_axis(x, 2, s), 3, s).astype(np.float32)
        scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, s, s])
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
        g = helper.make_graph([node], "resize", [value("x", x.shape)], [value("y", y.shape)], [scales])
        save(root, f"resize_linear_half_pixel_x{s}", g, [x], [y], 13)
    # Opset 6's broadcasting: Caffe's per-channel scale and bias (Mul and Add by [C] with
    # broadcast 1 at axis 1), a Sub of a [W] constant and a Div by [H, W] data aligned at the
    # end (axis absent: NumPy's rule), and an Add of two inputs of one shape (broadcast 0).
    scale, bias = rng.randn(3).astype(np.float32), rng.randn(3).astype(np.float32)
    row, plane = rng.randn(5).astype(np.float32), (rng.rand(4, 5) + 0.5).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"], broadcast=1, axis=1),
             helper.make_node("Add", ["scaled", "bias"], ["shifted"], broadcast=1, axis=1),
             helper.make_node("Sub", ["shifted", "row"], ["centred"], broadcast=1),
             helper.make_node("Div", ["centred", "plane"], ["ratio"], broadcast=1, axis=2),
             helper.make_node("Add", ["ratio", "x"], ["y"], broadcast=0)]
    g = helper.make_graph(nodes, "legacy_broadcast", [value("x", x.shape), value("plane", plane.shape)],
                          [value("y", x.shape)],
                          [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias"),
                           numpy_helper.from_array(row, "row")])
    y = (x * scale[:, None, None] + bias[:, None, None] - row) / plane + x
    save(root, "opset6_broadcast_at_an_axis", g, [x, plane], [y.astype(np.float32)], 6)
    exporter_forms(root, x)
    window_forms(root)
    padding_forms(root)
    resize_forms(root, x)
    ceil_pool_forms(root)
    transposed_forms(root)
    shared_weight_forms(root)
    masked_fill_forms(root)
    data_condition_forms(root)
    comparison_forms(root)
    reduction_forms(root)
    max_min_forms(root)
    cumsum_forms(root)
    rounding_forms(root)
    table_forms(root)
    picked_rows_forms(root)
    gemm_of_data(root)
    argmax_of_integers(root)
    attention_forms(root, save, value)


def shared_weight_forms(root):
    """W (1 MiB, as large weights are held) is read by a Transpose that folds to a constant
    T, and by two later MatMuls; T only by a MatMul + Add (one Linear, which reads T at the
    Add, after another node). Each constant must outlive its last reader, wherever a pattern
    reads it."""
    rng = np.random.RandomState(5)
    # Small integers: every product and sum is exact in float32, in any order.
    x = rng.randint(-2, 3, (2, 3, 512)).astype(np.float32)
    w = rng.randint(-2, 3, (512, 512)).astype(np.float32)
    b = rng.randint(-2, 3, 512).astype(np.float32)
    s = (x @ w.T + b) + x @ w
    y = (s @ w).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["W"], ["T"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "T"], ["m1"]),
        helper.make_node("MatMul", ["x", "W"], ["m2"]),
        helper.make_node("Add", ["m1", "b"], ["y1"]),
        helper.make_node("Add", ["y1", "m2"], ["s"]),
        helper.make_node("MatMul", ["s", "W"], ["y"]),
    ]
    g = helper.make_graph(nodes, "shared", [value("x", ["N", 3, 512])], [value("y", ["N", 3, 512])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    save(root, "weights_read_by_a_pattern_and_later_nodes", g, [x], [y], 13)


def masked_fill_forms(root):
    """What PyTorch writes for att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf')) and
    x + self.wpe(torch.arange(T)): the buffer is an initializer like any weight."""
    rs = np.random.RandomState(5)
    free = ["N", 2, 4, 4]
    x = rs.randn(2, 2, 4, 4).astype(np.float32)
    bias = np.tril(np.ones((6, 6), np.float32)).reshape(1, 1, 6, 6)
    nodes = [helper.make_node("Slice", ["bias", "starts", "ends", "axes"], ["mask"]),
             helper.make_node("Equal", ["mask", "zero"], ["cond"]),
             helper.make_node("Where", ["cond", "minf", "x"], ["filled"]),
             helper.make_node("Softmax", ["filled"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(bias, "bias"), ints("starts", [0, 0]), ints("ends", [4, 4]), ints("axes", [2, 3]),
             scalar("zero", 0.0), scalar("minf", -np.inf)]
    g = helper.make_graph(nodes, "causal", [value("x", free)], [value("y", free)], inits)
    filled = np.where(bias[:, :, :4, :4] == 0, -np.inf, x)
    e = np.exp(filled - filled.max(axis=-1, keepdims=True))
    save(root, "where_causal_mask_softmax", g, [x], [(e / e.sum(axis=-1, keepdims=True)).astype(np.float32)], 13)
    # A second mask over the first (the last column, which the causal mask already hides in
    # all rows but the last): -inf over -inf stays -inf.
    column = np.zeros((1, 1, 1, 4), bool)
    column[..., 3] = True
    nodes = nodes[:3] + [helper.make_node("Where", ["column", "minf", "filled"], ["twice"]),
                         helper.make_node("Softmax", ["twice"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "causal_twice", [value("x", free)], [value("y", free)],
                          inits + [numpy_helper.from_array(column, "column")])
    twice = np.where(column, -np.inf, filled)
    e = np.exp(twice - twice.max(axis=-1, keepdims=True))
    save(root, "where_two_masks_softmax", g, [x], [(e / e.sum(axis=-1, keepdims=True)).astype(np.float32)], 13)
    # Where(cond, x, c): the data where the condition holds, a per-column constant elsewhere.
    cond = rs.rand(1, 4, 1) > 0.5
    c = rs.randn(4).astype(np.float32)
    x3 = rs.randn(2, 4, 4).astype(np.float32)
    node = helper.make_node("Where", ["cond", "x", "c"], ["y"])
    g = helper.make_graph([node], "where", [value("x", ["N", 4, 4])], [value("y", ["N", 4, 4])],
                          [numpy_helper.from_array(cond, "cond"), numpy_helper.from_array(c, "c")])
    save(root, "where_data_or_constant", g, [x3], [np.where(cond, x3, c).astype(np.float32)], 13)
    # Rows 0..3 of a positional table (a weight) gathered by indices known at import, added to data.
    table = rs.randn(6, 5).astype(np.float32)
    x4 = rs.randn(2, 4, 5).astype(np.float32)
    nodes = [helper.make_node("Range", ["r0", "r4", "r1"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["rows"], axis=0),
             helper.make_node("Add", ["x", "rows"], ["y"])]
    inits = [numpy_helper.from_array(table, "table"), helper.make_tensor("r0", TensorProto.INT64, [], [0]),
             helper.make_tensor("r4", TensorProto.INT64, [], [4]), helper.make_tensor("r1", TensorProto.INT64, [], [1])]
    g = helper.make_graph(nodes, "rows", [value("x", ["N", 4, 5])], [value("y", ["N", 4, 5])], inits)
    save(root, "positional_rows_gathered", g, [x4], [x4 + table[:4]], 13)
    # A LLaMA's causal mask, torch.full((T, T), -inf).triu(1), added to the scores; and a lower
    # triangle from the diagonal below (k given) of a constant that multiplies data.
    value_minf = helper.make_tensor("minf", TensorProto.FLOAT, [1], [-np.inf])
    nodes = [helper.make_node("ConstantOfShape", ["tt"], ["full"], value=value_minf),
             helper.make_node("Trilu", ["full", "one"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["y"], axis=-1)]
    inits = [ints("tt", [4, 4]), helper.make_tensor("one", TensorProto.INT64, [], [1])]
    g = helper.make_graph(nodes, "triu", [value("x", free)], [value("y", free)], inits)
    scores = x + np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    save(root, "trilu_causal_mask_added", g, [x], [(e / e.sum(axis=-1, keepdims=True)).astype(np.float32)], 14)
    w = rs.randn(4, 4).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["wc"], value=helper.make_tensor("w", TensorProto.FLOAT, [4, 4],
                                                                               w.flatten())),
             helper.make_node("Trilu", ["wc", "minus1"], ["low"], upper=0),
             helper.make_node("Mul", ["x", "low"], ["y"])]
    inits = [helper.make_tensor("minus1", TensorProto.INT64, [], [-1])]
    g = helper.make_graph(nodes, "tril", [value("x", free)], [value("y", free)], inits)
    save(root, "trilu_lower_below_diagonal", g, [x], [x * np.tril(w, -1)], 14)


def data_condition_forms(root):
    """Where of a condition that is data: a bool padding mask given as an input, as PyTorch
    writes nn.MultiheadAttention's key_padding_mask (the mask expanded over the heads, cast to
    bool again, a Where of it, -inf and zeros shaped like it, added to the scores) and
    masked_fill(mask, value) and torch.where(mask, x, y) of data; the mask made from ids in the
    model (Equal of the ids and the padding id, Not of that); lengths summed from a mask."""
    rs = np.random.RandomState(9)
    x = rs.randn(2, 2, 4, 4).astype(np.float32)
    pad = np.zeros((2, 1, 1, 4), bool)
    pad[1, ..., 2:] = True  # the second sequence's last two keys are padding
    free = ["N", 2, 4, 4]
    mask_in = helper.make_tensor_value_info("pad", TensorProto.BOOL, ["N", 1, 1, 4])

    def softmax(a):
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)

    # Expand over the heads, Cast to bool, Where(mask, -inf, ConstantOfShape(Shape(mask))), Add.
    nodes = [helper.make_node("Expand", ["pad", "heads"], ["wide"]),
             helper.make_node("Cast", ["wide"], ["cond"], to=TensorProto.BOOL),
             helper.make_node("Shape", ["cond"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
             helper.make_node("Where", ["cond", "minf", "zeros"], ["additive"]),
             helper.make_node("Add", ["x", "additive"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "key_padding", [value("x", free), mask_in], [value("y", free)],
                          [ints("heads", [1, 2, 1, 1]), scalar("minf", -np.inf)])
    save(root, "where_data_condition_key_padding", g, [x, pad], [softmax(x + np.where(pad, -np.inf, 0.0))], 13)
    # masked_fill(pad, -inf) of the scores: Where(mask, -inf, x).
    nodes = [helper.make_node("Where", ["pad", "minf", "x"], ["filled"]),
             helper.make_node("Softmax", ["filled"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "masked_fill", [value("x", free), mask_in], [value("y", free)],
                          [scalar("minf", -np.inf)])
    save(root, "where_data_condition_masked_fill", g, [x, pad], [softmax(np.where(pad, -np.inf, x))], 13)
    # Two finite constants; -inf where a mask is false (2 where true: 2 + log(mask)); a finite
    # constant over data either side; two data operands.
    nodes = [helper.make_node("Where", ["pad", "half", "minus2"], ["ab"]),
             helper.make_node("Where", ["valid", "two", "minf"], ["keep"]),
             helper.make_node("Where", ["pad", "zero", "x"], ["zeroed"]),
             helper.make_node("Where", ["pad", "x", "three"], ["kept"]),
             helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("Where", ["pad", "x", "t"], ["either"]),
             helper.make_node("Mul", ["ab", "x"], ["y0"]),
             helper.make_node("Add", ["x", "keep"], ["k"]),
             helper.make_node("Softmax", ["k"], ["y1"], axis=-1),
             helper.make_node("Add", ["zeroed", "kept"], ["y2"]),
             helper.make_node("Identity", ["either"], ["y3"])]
    inits = [scalar("half", 0.5), scalar("minus2", -2.0), scalar("two", 2.0), scalar("minf", -np.inf),
             scalar("zero", 0.0), scalar("three", 3.0)]
    valid_in = helper.make_tensor_value_info("valid", TensorProto.BOOL, ["N", 1, 1, 4])
    g = helper.make_graph(nodes, "where_forms", [value("x", free), mask_in, valid_in],
                          [value(f"y{k}", free) for k in range(4)], inits)
    outs = [np.where(pad, 0.5, -2.0) * x, softmax(x + np.where(~pad, 2.0, -np.inf)),
            np.where(pad, 0.0, x) + np.where(pad, x, 3.0), np.where(pad, x, np.tanh(x))]
    save(root, "where_data_condition_forms", g, [x, pad, ~pad], [o.astype(np.float32) for o in outs], 13)
    # Constant tensors: a causal mask [4, 4] filled with -inf where the key padding [N, 1, 1, 4]
    # is set (PyTorch's attn_mask.masked_fill(key_padding_mask, -inf), which enlarges the
    # condition); a tensor and a number; data or a per-key tensor.
    causal = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    per_key = rs.randn(4).astype(np.float32)
    nodes = [helper.make_node("Where", ["pad", "minf", "causal"], ["merged"]),
             helper.make_node("Add", ["x", "merged"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["y0"], axis=-1),
             helper.make_node("Where", ["pad", "per_key", "half"], ["scale"]),
             helper.make_node("Mul", ["x", "scale"], ["y1"]),
             helper.make_node("Where", ["pad", "x", "per_key"], ["y2"])]
    g = helper.make_graph(nodes, "tensor_constants", [value("x", free), mask_in],
                          [value(f"y{k}", free) for k in range(3)],
                          [scalar("minf", -np.inf), numpy_helper.from_array(causal, "causal"),
                           numpy_helper.from_array(per_key, "per_key"), scalar("half", 0.5)])
    outs = [softmax(x + np.where(pad, -np.inf, causal)), x * np.where(pad, per_key, 0.5), np.where(pad, x, per_key)]
    save(root, "where_data_condition_tensor_constants", g, [x, pad], [o.astype(np.float32) for o in outs], 13)
    # The mask made from the ids in the model: pad = ids == 0 (Equal), keep = ~pad (Not).
    ids = rs.randint(1, 9, (2, 1, 1, 4)).astype(np.int64)
    ids[1, ..., 2:] = 0
    nodes = [helper.make_node("Equal", ["ids", "pad_id"], ["pad"]),
             helper.make_node("Not", ["pad"], ["keep"]),
             helper.make_node("Where", ["pad", "minf", "x"], ["filled"]),
             helper.make_node("Softmax", ["filled"], ["y0"], axis=-1),
             helper.make_node("Cast", ["keep"], ["keepf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "keepf"], ["y1"])]
    ids_in = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 1, 1, 4])
    g = helper.make_graph(nodes, "mask_from_ids", [value("x", free), ids_in], [value("y0", free), value("y1", free)],
                          [helper.make_tensor("pad_id", TensorProto.INT64, [], [0]), scalar("minf", -np.inf)])
    save(root, "where_mask_from_ids", g, [x, ids], [softmax(np.where(ids == 0, -np.inf, x)),
                                                    (x * (ids != 0)).astype(np.float32)], 13)
    # Arithmetic on integer data: lengths = T - pad.sum(1) (ReduceSum of a bool mask cast to
    # int64, Sub from a constant), a sum of the ids where not padding (Mul of integer data),
    # and lengths + lengths, cast to float.
    pad2 = np.zeros((2, 4), bool)
    pad2[1, 1:] = True
    ids2 = rs.randint(0, 9, (2, 4)).astype(np.int64)
    nodes = [helper.make_node("Cast", ["pad"], ["pad64"], to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["pad64", "axis1"], ["padded"], keepdims=1),
             helper.make_node("Sub", ["four", "padded"], ["lengths"]),
             helper.make_node("Cast", ["lengths"], ["y0"], to=TensorProto.FLOAT),
             helper.make_node("Not", ["pad"], ["real"]),
             helper.make_node("Cast", ["real"], ["real64"], to=TensorProto.INT64),
             helper.make_node("Mul", ["ids", "real64"], ["kept"]),
             helper.make_node("ReduceSum", ["kept", "axis1"], ["total"], keepdims=1),
             helper.make_node("Add", ["total", "lengths"], ["both"]),
             helper.make_node("Mul", ["both", "three"], ["tripled"]),
             helper.make_node("Cast", ["tripled"], ["y1"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "integers",
                          [helper.make_tensor_value_info("pad", TensorProto.BOOL, ["N", 4]),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
                          [value("y0", ["N", 1]), value("y1", ["N", 1])],
                          [helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
                           helper.make_tensor("four", TensorProto.INT64, [], [4]),
                           helper.make_tensor("three", TensorProto.INT64, [], [3])])
    lengths = 4 - pad2.sum(1, keepdims=True)
    total = (ids2 * ~pad2).sum(1, keepdims=True)
    save(root, "integer_arithmetic_on_masks", g, [pad2, ids2],
         [lengths.astype(np.float32), ((total + lengths) * 3).astype(np.float32)], 13)


def comparison_forms(root):
    """Comparisons and logic of integer and bool data, as models make masks from lengths and
    ids: each comparison against a constant on either side (a number, a tensor [1, T] that
    enlarges data [N, 1], a Range expanded over the batch) and against data (broadcast both
    ways), Equal of two data inputs; And, Or, Xor of two masks and of a mask and a constant;
    integer division and remainders; fmod of float data."""
    rs = np.random.RandomState(11)
    T = 5
    lengths = np.array([[5], [3], [0]], np.int64)
    ids = rs.randint(0, 3, (3, T)).astype(np.int64)
    other = rs.randint(0, 3, (3, T)).astype(np.int64)
    a = rs.rand(3, T) < 0.5
    b = rs.rand(3, T) < 0.5
    pattern = np.array([[True, False, True, True, False]])
    positions = np.arange(T, dtype=np.int64)[None, :]
    ops = {"Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
           "Equal": np.equal}
    nodes, outs, want = [], [], []

    def out(node_op, inputs, value):
        k = len(outs)
        nodes.append(helper.make_node(node_op, inputs, [f"m{k}"]))
        nodes.append(helper.make_node("Cast", [f"m{k}"], [f"y{k}"], to=TensorProto.FLOAT))
        outs.append(value(f"y{k}"))
        return k

    for op, f in ops.items():
        out(op, ["positions", "lengths"], lambda n: value(n, ["N", T]))  # [1, T] against [N, 1]
        want.append(f(positions, lengths))
        out(op, ["lengths", "two"], lambda n: value(n, ["N", 1]))  # a number
        want.append(f(lengths, 2))
        out(op, ["two", "ids"], lambda n: value(n, ["N", T]))  # the constant first
        want.append(f(2, ids))
        out(op, ["ids", "lengths"], lambda n: value(n, ["N", T]))  # data against data, broadcast
        want.append(f(ids, lengths))
        out(op, ["ids", "other"], lambda n: value(n, ["N", T]))
        want.append(f(ids, other))
    # sequence_mask: Range(T) expanded to [N, T] (the shape computed from the data), Less.
    nodes += [helper.make_node("Shape", ["ids"], ["shape"]),
              helper.make_node("Expand", ["range", "shape"], ["wide"])]
    out("Less", ["wide", "lengths"], lambda n: value(n, ["N", T]))
    want.append(positions < lengths)
    for op, f in {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}.items():
        out(op, ["a", "b"], lambda n: value(n, ["N", T]))
        want.append(f(a, b))
        out(op, ["pattern", "a"], lambda n: value(n, ["N", T]))
        want.append(f(pattern, a))
    nodes.append(helper.make_node("Not", ["a"], ["not_a"]))
    out("Or", ["not_a", "true"], lambda n: value(n, ["N", T]))
    want.append(np.logical_or(~a, True))
    g = helper.make_graph(
        nodes, "comparisons",
        [helper.make_tensor_value_info("lengths", TensorProto.INT64, ["N", 1]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", T]),
         helper.make_tensor_value_info("other", TensorProto.INT64, ["N", T]),
         helper.make_tensor_value_info("a", TensorProto.BOOL, ["N", T]),
         helper.make_tensor_value_info("b", TensorProto.BOOL, ["N", T])],
        outs,
        [numpy_helper.from_array(positions, "positions"), helper.make_tensor("two", TensorProto.INT64, [], [2]),
         numpy_helper.from_array(np.arange(T, dtype=np.int64), "range"), numpy_helper.from_array(pattern, "pattern"),
         helper.make_tensor("true", TensorProto.BOOL, [], [True])])
    save(root, "comparisons_and_logic_of_masks", g, [lengths, ids, other, a, b],
         [w.astype(np.float32) for w in want], 13)
    # Comparisons of float data: against data (equal values, signed zeros, one ulp apart,
    # differences beyond float's range, the smallest normals, infinities against finite
    # values), against a number on either side, and a column [N, 1] against a row [1, T].
    tiny, big = np.finfo(np.float32).tiny, np.float32(3e38)
    up = np.nextafter(np.float32(1), np.float32(2))
    fx = np.array([[0, -0.0, 1, up, -1, big, -big, tiny, 2.5 * tiny, np.inf, 5, -np.inf],
                   rs.randn(12)], np.float32)
    fy = np.array([[-0.0, 0, up, 1, -1, -big, big, 2.5 * tiny, tiny, 5, np.inf, -2],
                   np.where(rs.rand(12) < 0.3, fx[1], rs.randn(12))], np.float32)
    column = rs.randn(2, 1).astype(np.float32)
    row = np.array([[-1, -0.5, 0, 0.5, 1]], np.float32)
    nodes, outs, want = [], [], []
    for op, f in ops.items():
        out(op, ["fx", "fy"], lambda n: value(n, ["N", 12]))
        want.append(f(fx, fy))
        out(op, ["fx", "half"], lambda n: value(n, ["N", 12]))
        want.append(f(fx, np.float32(0.5)))
        out(op, ["half", "fy"], lambda n: value(n, ["N", 12]))
        want.append(f(np.float32(0.5), fy))
        out(op, ["column", "row"], lambda n: value(n, ["N", T]))
        want.append(f(column, row))
    g = helper.make_graph(
        nodes, "float_comparisons",
        [value("fx", ["N", 12]), value("fy", ["N", 12]), value("column", ["N", 1])], outs,
        [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]), numpy_helper.from_array(row, "row")])
    save(root, "comparisons_of_float_data", g, [fx, fy, column], [w.astype(np.float32) for w in want], 13)
    # Integer division of data by a constant, truncated toward zero (ONNX's Div of integers):
    # the output lengths of a strided convolution, (lengths - 3) // 2 + 1, and values of
    # both signs, divided by constants of both signs, up to 2^20.
    x = np.concatenate([np.arange(-12, 13), [1 << 20, -(1 << 20), (1 << 20) - 1, 999999, -999999, 6, -6]])
    x = x.astype(np.int64)[None, :]
    nodes = [helper.make_node("Sub", ["x", "three"], ["shifted"]),
             helper.make_node("Div", ["shifted", "two"], ["halves"]),
             helper.make_node("Add", ["halves", "one"], ["out_lengths"]),
             helper.make_node("Cast", ["out_lengths"], ["y0"], to=TensorProto.FLOAT)]
    divisors = (2, 3, -3, 7, 10, -1, 1 << 20)
    for k, d in enumerate(divisors):
        nodes += [helper.make_node("Div", ["x", f"d{k}"], [f"q{k}"]),
                  helper.make_node("Cast", [f"q{k}"], [f"y{k + 1}"], to=TensorProto.FLOAT)]
    g = helper.make_graph(
        nodes, "integer_division", [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", x.shape[1]])],
        [value(f"y{k}", ["N", x.shape[1]]) for k in range(len(divisors) + 1)],
        [helper.make_tensor("three", TensorProto.INT64, [], [3]), helper.make_tensor("two", TensorProto.INT64, [], [2]),
         helper.make_tensor("one", TensorProto.INT64, [], [1])] +
        [helper.make_tensor(f"d{k}", TensorProto.INT64, [], [d]) for k, d in enumerate(divisors)])

    def trunc_div(a, d):
        return np.sign(a) * np.sign(d) * (np.abs(a) // abs(d))

    save(root, "integer_division_of_data", g, [x],
         [(trunc_div(x - 3, 2) + 1).astype(np.float32)] + [trunc_div(x, d).astype(np.float32) for d in divisors], 13)
    # Remainders (Mod: of the floor division, and with fmod 1 of the truncated one) by constants
    # of both signs and by data; Div of two integer inputs; Where of integer operands (two data,
    # data and a constant, two constants); and torch.div(a, b, rounding_mode="floor") as PyTorch
    # writes it: Div, then where the signs differ (Less, Xor) and the remainder is not 0 (Mod,
    # Equal, Not, And), the quotient less 1 (Sub, Where).
    a = np.array([[-12, -7, -6, -5, -1, 0, 1, 5, 6, 7, 12, 999999]], np.int64)
    b = np.array([[5, -5, 3, -3, 2, -2, 7, 1, -1, 4, -4, 1000]], np.int64)
    cond = np.array([[True, False] * 6])
    nodes = []
    want = []

    def emit(op, inputs, result, **attrs):
        k = len(want)
        nodes.extend([helper.make_node(op, inputs, [f"r{k}"], **attrs),
                      helper.make_node("Cast", [f"r{k}"], [f"y{k}"], to=TensorProto.FLOAT)])
        want.append(result.astype(np.float32))

    for k, d in enumerate((3, -3, 7)):
        emit("Mod", ["a", f"c{k}"], np.mod(a, d))
        emit("Mod", ["a", f"c{k}"], np.fmod(a, d), fmod=1)
    emit("Mod", ["a", "b"], np.mod(a, b))
    emit("Mod", ["a", "b"], np.fmod(a, b), fmod=1)
    emit("Div", ["a", "b"], trunc_div(a, b))
    emit("Where", ["cond", "a", "b"], np.where(cond, a, b))
    emit("Where", ["cond", "c0", "b"], np.where(cond, 3, b))
    emit("Where", ["cond", "c1", "c2"], np.where(cond, -3, 7) + 0 * a)
    nodes += [helper.make_node("Div", ["a", "b"], ["q"]),
              helper.make_node("Less", ["a", "zero"], ["a_negative"]),
              helper.make_node("Less", ["b", "zero"], ["b_negative"]),
              helper.make_node("Xor", ["a_negative", "b_negative"], ["signs_differ"]),
              helper.make_node("Mod", ["a", "b"], ["m"]),
              helper.make_node("Equal", ["m", "zero"], ["exact"]),
              helper.make_node("Not", ["exact"], ["inexact"]),
              helper.make_node("And", ["signs_differ", "inexact"], ["lower"]),
              helper.make_node("Sub", ["q", "one"], ["q_less"])]
    emit("Where", ["lower", "q_less", "q"], np.floor_divide(a, b))
    g = helper.make_graph(
        nodes, "integer_remainders",
        [helper.make_tensor_value_info("a", TensorProto.INT64, ["N", 12]),
         helper.make_tensor_value_info("b", TensorProto.INT64, ["N", 12]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, ["N", 12])],
        [value(f"y{k}", ["N", 12]) for k in range(len(want))],
        [helper.make_tensor(f"c{k}", TensorProto.INT64, [], [d]) for k, d in enumerate((3, -3, 7))] +
        [helper.make_tensor("zero", TensorProto.INT64, [], [0]), helper.make_tensor("one", TensorProto.INT64, [], [1])])
    save(root, "integer_remainders_and_where", g, [a, b, cond], want, 13)
    # fmod of float data (torch.fmod) by constants of both signs and by data of both signs:
    # values at and one ulp beside multiples of the divisor (the quotient rounds to the whole
    # number, or just below it), zeros, and values of both signs up to 1000.
    f32 = np.float32
    edges = [f32(7.5), np.nextafter(f32(7.5), f32(0)), np.nextafter(f32(7.5), f32(10)), f32(-7.5),
             np.nextafter(f32(-5), f32(0)), np.nextafter(f32(-5), f32(-10)), f32(0.3), f32(-0.3), f32(0), f32(2.5),
             f32(1000.25), f32(-999.9)]
    x = np.concatenate([np.array(edges, f32), (rs.randn(20) * 30).astype(f32)])[None, :]
    y = np.concatenate([np.array([2.5, -2.5, 2.5, 2.5, 2.5, -2.5, 0.1, 0.1, 3, -0.7, 0.5, 1.5], f32),
                        (rs.rand(20) * 4 + 0.25).astype(f32) * np.where(rs.rand(20) < 0.5, -1, 1).astype(f32)])
    y = y[None, :]
    divisors = (2.5, -0.7, 0.1)
    nodes = [helper.make_node("Mod", ["x", f"c{k}"], [f"y{k}"], fmod=1) for k in range(len(divisors))]
    nodes.append(helper.make_node("Mod", ["x", "d"], [f"y{len(divisors)}"], fmod=1))
    g = helper.make_graph(
        nodes, "float_remainders", [value("x", ["N", x.shape[1]]), value("d", ["N", x.shape[1]])],
        [value(f"y{k}", ["N", x.shape[1]]) for k in range(len(divisors) + 1)],
        [helper.make_tensor(f"c{k}", TensorProto.FLOAT, [], [c]) for k, c in enumerate(divisors)])
    save(root, "float_remainders", g, [x, y], [np.fmod(x, f32(c)) for c in divisors] + [np.fmod(x, y)], 13)
    # Slice assignments as PyTorch exports them at a fixed batch: ScatterND by constant
    # indices writing a box, x[:, 1] = u (data), x[..., 1:3] = sigmoid(x[..., 1:3]), and
    # x[:, 2:4, :2] = 0.5 (a constant), each over all samples.
    x = rs.randn(2, 4, 5).astype(f32)
    u = rs.randn(2, 5).astype(f32)

    def tuples(*ranges):
        grid = np.stack(np.meshgrid(*[np.arange(*r) for r in ranges], indexing="ij"), -1)
        return helper.make_tensor(f"i{len(inits)}", TensorProto.INT64, grid.shape, grid.ravel().astype(np.int64))

    inits = [helper.make_tensor("i0", TensorProto.INT64, [2, 2], [0, 1, 1, 1])]  # (0, 1), (1, 1)
    inits.append(tuples((0, 2), (0, 4), (1, 3)))
    inits.append(tuples((0, 2), (2, 4), (0, 2)))
    inits.append(helper.make_tensor("half", TensorProto.FLOAT, [2, 2, 2], np.full(8, 0.5, f32)))
    nodes = [helper.make_node("ScatterND", ["x", "i0", "u"], ["y0"]),
             helper.make_node("Slice", ["x", "s_start", "s_end", "s_axes"], ["part"]),
             helper.make_node("Sigmoid", ["part"], ["squashed"]),
             helper.make_node("ScatterND", ["x", "i1", "squashed"], ["y1"]),
             helper.make_node("ScatterND", ["x", "i2", "half"], ["y2"]),
             helper.make_node("ScatterND", ["ids", "i0", "v"], ["written"]),  # ids[:, 1] = v, integers
             helper.make_node("Cast", ["written"], ["y3"], to=TensorProto.FLOAT)]
    inits += [helper.make_tensor("s_start", TensorProto.INT64, [1], [1]),
              helper.make_tensor("s_end", TensorProto.INT64, [1], [3]),
              helper.make_tensor("s_axes", TensorProto.INT64, [1], [2])]
    want = [x.copy(), x.copy(), x.copy()]
    want[0][:, 1] = u
    want[1][..., 1:3] = 1 / (1 + np.exp(-x[..., 1:3]))
    want[2][:, 2:4, :2] = 0.5
    ids = rs.randint(0, 100, (2, 4)).astype(np.int64)
    v = np.array([-7, 1000], np.int64)
    written = ids.copy()
    written[:, 1] = v
    want.append(written.astype(f32))
    g = helper.make_graph(nodes, "slice_assignments",
                          [value("x", [2, 4, 5]), value("u", [2, 5]),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4]),
                           helper.make_tensor_value_info("v", TensorProto.INT64, [2])],
                          [value(f"y{k}", [2, 4, 5]) for k in range(3)] + [value("y3", [2, 4])], inits)
    save(root, "slice_assignments", g, [x, u, ids, v], want, 13)


def reduction_forms(root):
    """Sums, maxima, minima and log-sum-exps over dims whose size the model leaves free (the
    batch N and a length T), at opsets 11 (axes attributes) and 13 (axes an input of ReduceSum,
    attributes of the others)."""
    rng = np.random.RandomState(11)
    x = rng.randn(3, 5, 4).astype(np.float32)
    free = ["N", "T", 4]
    cases = (("ReduceSum", [0, 1], 0, x.sum(axis=(0, 1))),
             ("ReduceSumSquare", [1], 1, (x * x).sum(axis=1, keepdims=True)),
             ("ReduceL1", [-2, 0], 1, np.abs(x).sum(axis=(0, 1), keepdims=True)),
             ("ReduceL2", None, 1, np.sqrt((x * x).sum()).reshape(1, 1, 1)),
             ("ReduceLogSum", [1], 0, np.log(np.abs(x).sum(axis=1))),
             ("ReduceMax", [1], 0, x.max(axis=1)),  # max over time, its length free
             ("ReduceMin", [0], 1, x.min(axis=0, keepdims=True)),
             ("ReduceMax", None, 1, x.max().reshape(1, 1, 1)),
             ("ReduceLogSumExp", [1], 0, np.log(np.exp(x.astype(np.float64)).sum(axis=1))),
             ("ReduceLogSumExp", None, 1, np.log(np.exp(x.astype(np.float64)).sum()).reshape(1, 1, 1)))
    for opset in (11, 13):
        nodes, outs, ys, inits = [helper.make_node("Abs", ["x"], ["ax"])], [], [], []
        for k, (op, axes, keep, y) in enumerate(cases):
            src = "ax" if op == "ReduceLogSum" else "x"
            axes_input = axes is not None and opset >= 13 and op == "ReduceSum"
            if axes_input:
                inits.append(ints(f"axes{k}", axes))
                node = helper.make_node(op, [src, f"axes{k}"], [f"y{k}"], keepdims=keep)
            elif axes is not None:
                node = helper.make_node(op, [src], [f"y{k}"], axes=axes, keepdims=keep)
            else:
                node = helper.make_node(op, [src], [f"y{k}"], keepdims=keep)
            nodes.append(node)
            outs.append(value(f"y{k}", [None] * y.ndim))
            ys.append(y.astype(np.float32))
        g = helper.make_graph(nodes, "sums", [value("x", free)], outs, inits)
        save(root, f"reduce_sums_over_free_dims_opset{opset}", g, [x], ys, opset)


def cumsum_forms(root):
    """Running sums (CumSum, opset 11 on) of float data along each axis, either way, inclusive
    or not, with the batch and a length free; and a mask's running count made position ids,
    as Hugging Face's RoBERTa computes them: (cumsum(mask, 1) * mask) + padding_idx."""
    rng = np.random.RandomState(12)
    x = rng.randn(3, 6, 4).astype(np.float32)

    def running(a, axis, exclusive, reverse):
        a = np.flip(a, axis) if reverse else a
        y = np.cumsum(a, axis=axis, dtype=np.float64)
        if exclusive:
            y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)], axis=axis)
        return (np.flip(y, axis) if reverse else y).astype(np.float32)

    forms = ((1, 0, 0), (-1, 1, 0), (1, 0, 1), (0, 1, 1))
    nodes, outs, ys, inits = [], [], [], []
    for k, (axis, exclusive, reverse) in enumerate(forms):
        inits.append(helper.make_tensor(f"axis{k}", TensorProto.INT64, [], [axis]))
        nodes.append(helper.make_node("CumSum", ["x", f"axis{k}"], [f"y{k}"], exclusive=exclusive, reverse=reverse))
        outs.append(value(f"y{k}", ["N", "T", 4]))
        ys.append(running(x, axis, exclusive, reverse))
    g = helper.make_graph(nodes, "cumsum", [value("x", ["N", "T", 4])], outs, inits)
    save(root, "cumsum_each_axis_and_way", g, [x], ys, 11)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], np.int64)
    nodes = [helper.make_node("CumSum", ["mask", "one"], ["count"]),
             helper.make_node("Mul", ["count", "mask"], ["kept"]),
             helper.make_node("Add", ["kept", "pad"], ["positions"])]
    inits = [helper.make_tensor("one", TensorProto.INT32, [], [1]), helper.make_tensor("pad", TensorProto.INT64, [], [1])]
    g = helper.make_graph(nodes, "position_ids", [helper.make_tensor_value_info("mask", TensorProto.INT64, ["N", 5])],
                          [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N", 5])], inits)
    save(root, "cumsum_position_ids_from_a_mask", g, [mask], [np.cumsum(mask, 1) * mask + 1], 13)


def rounding_forms(root):
    """Floor, Ceil and Round (half to even) of data at the values that test them: halves of
    each sign and parity, values one ulp from a half and from a whole number, whole numbers
    from 2^22 to 2^24 (halves and odd numbers among them), and magnitudes far past int32."""
    x = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 0.50000006, 3.9999998, -3.0000002,
                  -3.0, 0.0, -0.0, 2 ** 22 + 0.5, -(2 ** 22) - 1.5, 2 ** 23, 2 ** 23 + 1, -(2 ** 23) - 3, 2 ** 24 + 2,
                  1e30, -1e30, 3e38, -3e38, 1e-30, -1e-30, 7.25, -7.75], np.float32).reshape(4, 7)
    nodes = [helper.make_node(op, ["x"], [op.lower()]) for op in ("Floor", "Ceil", "Round")]
    g = helper.make_graph(nodes, "rounding", [value("x", ["N", 7])],
                          [value(op, ["N", 7]) for op in ("floor", "ceil", "round")])
    save(root, "floor_ceil_round_at_halves_and_far", g, [x], [np.floor(x), np.ceil(x), np.round(x)], 13)


def picked_rows_forms(root):
    """Rows of float data picked by integer data: x[torch.arange(N), last] as PyTorch exports it
    at a fixed N (x flattened to [N T, E], each row's index plus its row times T, a Gather),
    and the index as C - last and last * C: integer data with a tensor of integers."""
    rs = np.random.RandomState(31)
    x = rs.randn(2, 6, 4).astype(np.float32)
    last = np.array([3, 5], np.int64)
    flat = x.reshape(12, 4)
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], axis=2),
             helper.make_node("Add", ["last", "offsets"], ["i1"]), helper.make_node("Gather", ["flat", "i1"], ["y1"]),
             helper.make_node("Sub", ["ends", "last"], ["i2"]), helper.make_node("Gather", ["flat", "i2"], ["y2"]),
             helper.make_node("Mul", ["last", "factors"], ["i3"]), helper.make_node("Gather", ["flat", "i3"], ["y3"])]
    inits = [ints("offsets", [0, 6]), ints("ends", [5, 11]), ints("factors", [1, 2])]
    g = helper.make_graph(nodes, "picked", [value("x", [2, 6, 4]),
                                            helper.make_tensor_value_info("last", TensorProto.INT64, [2])],
                          [value("y1", [2, 4]), value("y2", [2, 4]), value("y3", [2, 4])], inits)
    save(root, "rows_picked_by_integer_data", g, [x, last],
         [flat[last + [0, 6]], flat[np.array([5, 11]) - last], flat[last * [1, 2]]], 13)
    # Over a free batch (as PyTorch exports x[torch.arange(N), last] with dynamic axes): a Range up
    # to the batch (Shape, Gather, Cast), times T (from the shape too), plus last; the range
    # shifted by a constant minus last (row 5 - last of each block); last minus the range
    # negated and cast.
    x = rs.randn(3, 6, 4).astype(np.float32)
    last = np.array([3, 5, 0], np.int64)
    flat = x.reshape(18, 4)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Gather", ["shape", "one"], ["t"], axis=0),
             helper.make_node("Cast", ["n"], ["n64"], to=TensorProto.INT64),
             helper.make_node("Range", ["zero", "n64", "one"], ["rows"]),
             helper.make_node("Mul", ["rows", "t"], ["starts"]),
             helper.make_node("Flatten", ["x"], ["flat"], axis=2),
             helper.make_node("Add", ["last", "starts"], ["i1"]), helper.make_node("Gather", ["flat", "i1"], ["y1"]),
             helper.make_node("Add", ["starts", "five"], ["ends"]),
             helper.make_node("Sub", ["ends", "last"], ["i2"]), helper.make_node("Gather", ["flat", "i2"], ["y2"]),
             helper.make_node("Neg", ["starts"], ["back"]),
             helper.make_node("Sub", ["last", "back"], ["i3"]), helper.make_node("Gather", ["flat", "i3"], ["y3"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("five", TensorProto.INT64, [], [5])]
    g = helper.make_graph(nodes, "picked_free", [value("x", ["N", 6, 4]),
                                                 helper.make_tensor_value_info("last", TensorProto.INT64, ["N"])],
                          [value("y1", ["N", 4]), value("y2", ["N", 4]), value("y3", ["N", 4])], inits)
    starts = np.arange(3) * 6
    save(root, "rows_picked_over_free_batch", g, [x, last],
         [flat[starts + last], flat[starts + 5 - last], flat[last + starts]], 13)


def argmax_of_integers(root):
    """ArgMax of integer data: the position of each sequence's first pad id, (ids == 0).int()
    .argmax(-1) as Hugging Face's sequence classifiers find it (0 where there is none), and
    ArgMin of the ids themselves (the first of equal ones)."""
    ids = np.array([[3, 5, 0, 0, 0, 0], [7, 1, 2, 4, 6, 9], [2, 0, 2, 0, 1, 1]], np.int64)
    nodes = [helper.make_node("Equal", ["ids", "zero"], ["pad"]),
             helper.make_node("Cast", ["pad"], ["pad32"], to=TensorProto.INT32),
             helper.make_node("ArgMax", ["pad32"], ["first"], axis=-1, keepdims=0),
             helper.make_node("ArgMin", ["ids"], ["smallest"], axis=1, keepdims=1)]
    g = helper.make_graph(nodes, "argmax_int", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 6])],
                          [helper.make_tensor_value_info("first", TensorProto.INT64, ["N"]),
                           helper.make_tensor_value_info("smallest", TensorProto.INT64, ["N", 1])],
                          [helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    save(root, "argmax_of_integer_data", g, [ids],
         [np.argmax(ids == 0, axis=-1).astype(np.int64), np.argmin(ids, axis=1)[:, None].astype(np.int64)], 13)


def gemm_of_data(root):
    """Gemm whose C is data (torch.addmm of a computed input): alpha A B^T + beta C, C another
    graph input."""
    rs = np.random.RandomState(33)
    a, c = rs.randn(2, 3).astype(np.float32), rs.randn(2, 4).astype(np.float32)
    b = rs.randn(4, 3).astype(np.float32)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0, transB=1)
    g = helper.make_graph([node], "gemm_c", [value("a", ["N", 3]), value("c", ["N", 4])], [value("y", ["N", 4])],
                          [numpy_helper.from_array(b, "b")])
    save(root, "gemm_of_data_c", g, [a, c], [0.5 * a @ b.T + 2.0 * c], 13)


def table_forms(root):
    """Tables a model computes in forward from known sizes, which the import folds into
    constants: a sinusoidal position table (Range, Cast, Sin, Cos, Concat) added to data; a
    flatten of the dims after the batch by their ReduceProd (tf2onnx's form); EyeLike; IsInf
    and IsNaN cleaning a constant; every reduction of a constant along an axis; the elementary
    functions of constants; and CastLike of data and of a constant (opset 15)."""
    rs = np.random.RandomState(21)
    x = rs.randn(2, 6, 8).astype(np.float32)
    # freq = exp(arange(4) * -ln(10000) / 4), each step rounded to float as the import does
    step = np.float32(-math.log(10000.0) / 4)
    freq = np.exp((np.arange(4, dtype=np.float32) * step).astype(np.float64)).astype(np.float32)
    angles = (np.arange(6, dtype=np.float32)[:, None] * freq[None, :]).astype(np.float64)
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1).astype(np.float32)
    nodes = [helper.make_node("Range", ["zero", "four", "one"], ["k"]),
             helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["kf", "step"], ["expo"]), helper.make_node("Exp", ["expo"], ["freq"]),
             helper.make_node("Range", ["zero", "six", "one"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["posf", "ax1"], ["col"]),
             helper.make_node("Mul", ["col", "freq"], ["angles"]),
             helper.make_node("Sin", ["angles"], ["sin"]), helper.make_node("Cos", ["angles"], ["cos"]),
             helper.make_node("Concat", ["sin", "cos"], ["table"], axis=-1),
             helper.make_node("Add", ["x", "table"], ["y"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("six", TensorProto.INT64, [], [6]), helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("four", TensorProto.INT64, [], [4]), ints("ax1", [1]), scalar("step", float(step))]
    g = helper.make_graph(nodes, "sinusoidal", [value("x", ["N", 6, 8])], [value("y", ["N", 6, 8])], inits)
    save(root, "sinusoidal_positions_folded", g, [x], [x + table], 13)

    # A diffusion model's timestep embedding: Sin and Cos of data (the timesteps, a graph input,
    # times the same frequencies), concatenated.
    t = np.array([0.0, 1.0, 17.0, 999.0, 250.5], np.float32)
    args = (t[:, None] * freq[None, :]).astype(np.float64)
    emb = np.concatenate([np.sin(args), np.cos(args)], axis=-1).astype(np.float32)
    nodes = [helper.make_node("Range", ["zero", "four", "one"], ["k"]),
             helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["kf", "step"], ["expo"]), helper.make_node("Exp", ["expo"], ["freq"]),
             helper.make_node("Unsqueeze", ["t", "ax1"], ["col"]),
             helper.make_node("Mul", ["col", "freq"], ["args"]),
             helper.make_node("Sin", ["args"], ["sin"]), helper.make_node("Cos", ["args"], ["cos"]),
             helper.make_node("Concat", ["sin", "cos"], ["emb"], axis=-1)]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]), helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("four", TensorProto.INT64, [], [4]), ints("ax1", [1]), scalar("step", float(step))]
    g = helper.make_graph(nodes, "timestep", [value("t", ["N"])], [value("emb", ["N", 8])], inits)
    save(root, "timestep_embedding_sin_cos_of_data", g, [t], [emb], 13)

    # x [N, 2, 3, 4] flattened to [N, 24] by the product of its dims after the batch.
    z = rs.randn(3, 2, 3, 4).astype(np.float32)
    nodes = [helper.make_node("Shape", ["z"], ["shape"]),
             helper.make_node("Slice", ["shape", "s1", "s4"], ["rest"]),
             helper.make_node("ReduceProd", ["rest"], ["prod"], keepdims=1),
             helper.make_node("Concat", ["minus1", "prod"], ["to"], axis=0),
             helper.make_node("Reshape", ["z", "to"], ["flat"])]
    g = helper.make_graph(nodes, "flatten_by_prod", [value("z", ["N", 2, 3, 4])], [value("flat", ["N", 24])],
                          [ints("s1", [1]), ints("s4", [4]), ints("minus1", [-1])])
    save(root, "flatten_by_reduce_prod", g, [z], [z.reshape(3, 24)], 13)

    # Constants cleaned and reduced, and elementary functions of them, applied to data.
    w = rs.randn(2, 4, 4).astype(np.float32)
    dirty = np.array([1.5, np.inf, -np.inf, np.nan], np.float32)
    m = np.array([[0.5, -2.0, 3.0, 1.0], [4.0, 0.25, -1.0, -3.5]], np.float32)
    r = np.array([0.3, -0.7, 0.9, 2.5], np.float32).astype(np.float64)
    nodes = [helper.make_node("EyeLike", ["square"], ["eye"], k=1),
             helper.make_node("IsInf", ["dirty"], ["posinf"], detect_negative=0),
             helper.make_node("IsInf", ["dirty"], ["anyinf"]),
             helper.make_node("IsNaN", ["dirty"], ["nan"]),
             helper.make_node("Or", ["anyinf", "nan"], ["bad"]),
             helper.make_node("Where", ["bad", "zero_f", "dirty"], ["clean"]),
             helper.make_node("Cast", ["posinf"], ["posinf_f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["clean", "posinf_f"], ["row"])]
    reductions = ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceL1", "ReduceL2",
                  "ReduceSumSquare"]
    for op in reductions:
        inputs = ["m", "axes1"] if op == "ReduceSum" else ["m"]
        attrs = {} if op == "ReduceSum" else {"axes": [1]}
        nodes.append(helper.make_node(op, inputs, [op.lower()], keepdims=0, **attrs))
    functions = ["Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh", "Tanh", "Sigmoid", "Erf", "Round"]
    for op in functions:
        nodes.append(helper.make_node(op, ["r" if op not in ("Asin", "Acos", "Atanh") else "r_unit"], [op.lower()]))
    nodes += [helper.make_node("Acosh", ["r_big"], ["acosh"]),
              helper.make_node("Concat", [op.lower() for op in reductions], ["reduced"], axis=0),
              helper.make_node("Concat", [op.lower() for op in functions] + ["acosh"], ["funcs"], axis=0),
              helper.make_node("Mul", ["w", "eye"], ["y0"]), helper.make_node("Add", ["y0", "row"], ["y1"]),
              helper.make_node("Reshape", ["y1", "flat32"], ["y2"]),
              helper.make_node("Add", ["y2", "reduced"], ["y"]),
              helper.make_node("Add", ["v", "funcs"], ["u"])]
    r_unit = np.array([0.3, -0.7, 0.9, 0.5], np.float32).astype(np.float64)
    r_big = np.array([1.0, 1.5, 4.0, 10.0], np.float32).astype(np.float64)
    # Constant nodes (an initializer of several values would be a weight, kept as a parameter)
    for name, a in (("square", np.zeros((4, 4), np.float32)), ("dirty", dirty), ("m", m), ("r", r),
                    ("r_unit", r_unit), ("r_big", r_big)):
        nodes.insert(0, helper.make_node("Constant", [], [name],
                                         value=numpy_helper.from_array(a.astype(np.float32), name)))
    inits = [ints("axes1", [1]), scalar("zero_f", 0.0), ints("flat32", [-1, 16])]
    md = m.astype(np.float64)
    red = np.concatenate([md.sum(1), md.prod(1), md.max(1), md.min(1), md.mean(1), np.abs(md).sum(1),
                          np.sqrt((md * md).sum(1)), (md * md).sum(1)]).astype(np.float32)
    erf = np.vectorize(math.erf)
    funcs = np.concatenate([np.tan(r), np.arcsin(r_unit), np.arccos(r_unit), np.arctan(r), np.sinh(r), np.cosh(r),
                            np.arcsinh(r), np.arctanh(r_unit), np.tanh(r), 1 / (1 + np.exp(-r)), erf(r),
                            np.round(r), np.arccosh(r_big)]).astype(np.float32)
    row = np.where(np.isinf(dirty) | np.isnan(dirty), 0, dirty) + (dirty == np.inf)
    v = rs.randn(2, 52).astype(np.float32)
    want = (w * np.eye(4, k=1, dtype=np.float32) + row.astype(np.float32)).reshape(-1, 16) + red
    g = helper.make_graph(nodes, "constant_functions", [value("w", ["N", 4, 4]), value("v", ["N", 52])],
                          [value("y", ["N", 16]), value("u", ["N", 52])], inits)
    save(root, "constant_tables_reductions_and_functions", g, [w, v], [want.astype(np.float32), v + funcs], 13)

    # CastLike of integer data to a float constant's type, and of an integer constant to the
    # type of float data (a Range cast like the input, as PyTorch writes arange(n).to(x)).
    ids = np.array([[3, -1, 7], [0, 2, 5]], np.int64)
    f = rs.randn(2, 3).astype(np.float32)
    nodes = [helper.make_node("CastLike", ["ids", "half"], ["idsf"]),
             helper.make_node("CastLike", ["steps", "f"], ["stepsf"]),
             helper.make_node("Mul", ["idsf", "half"], ["a"]), helper.make_node("Add", ["a", "stepsf"], ["b"]),
             helper.make_node("Add", ["b", "f"], ["y"])]
    g = helper.make_graph(nodes, "castlike",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 3]), value("f", ["N", 3])],
                          [value("y", ["N", 3])], [scalar("half", 0.5), ints("steps", [10, 20, 30])])
    want = ids.astype(np.float32) * 0.5 + np.array([10, 20, 30], np.float32) + f
    save(root, "castlike_of_data_and_constants", g, [ids, f], [want.astype(np.float32)], 15)


def max_min_forms(root):
    """Element-wise Max and Min (torch.maximum, torch.minimum, clamp by a tensor): of data
    broadcast against data, against a number and a tensor constant, of three operands, and of
    integer lengths (int64 in the file, int32 in Tessera) against a constant; ties and
    values one ulp apart. Trilu and Hardmax of data."""
    rs = np.random.RandomState(12)
    x = rs.randn(3, 2, 4).astype(np.float32)
    x[0, 0, :2] = 0.25  # ties with the number
    x[0, 1, 0] = np.nextafter(np.float32(0.25), np.float32(1))  # one ulp above it
    y = rs.randn(1, 2, 1).astype(np.float32)
    row = np.array([0.5, -0.5, 0.0, 1.0], np.float32)
    lengths = np.array([[3, 0, 7], [1, 2, 9]], np.int64)
    nodes = [helper.make_node("Max", ["x", "y"], ["m0"]),
             helper.make_node("Min", ["x", "row"], ["m1"]),
             helper.make_node("Max", ["x", "quarter", "y"], ["m2"]),
             helper.make_node("Min", ["lengths", "five"], ["m3"])]
    inits = [scalar("quarter", 0.25), numpy_helper.from_array(row, "row"),
             helper.make_tensor("five", TensorProto.INT64, [], [5])]
    outs = [value("m0", ["N", 2, 4]), value("m1", ["N", 2, 4]), value("m2", ["N", 2, 4]),
            helper.make_tensor_value_info("m3", TensorProto.INT64, ["N", 3])]
    g = helper.make_graph(nodes, "max_min", [value("x", ["N", 2, 4]), value("y", [1, 2, 1]),
                                             helper.make_tensor_value_info("lengths", TensorProto.INT64, ["N", 3])],
                          outs, inits)
    want = [np.maximum(x, y), np.minimum(x, row), np.maximum(np.maximum(x, np.float32(0.25)), y),
            np.minimum(lengths, 5)]
    save(root, "max_min_of_data_and_constants", g, [x, y, lengths], want, 13)
    # Trilu of data (torch.triu(x, 1), torch.tril(x, -1), torch.triu(x)), the batch free.
    z = rs.randn(2, 3, 4, 5).astype(np.float32)
    nodes = [helper.make_node("Trilu", ["z", "one"], ["u"]), helper.make_node("Trilu", ["z", "minus1"], ["l"], upper=0),
             helper.make_node("Trilu", ["z"], ["d"])]
    free = ["N", 3, 4, 5]
    g = helper.make_graph(nodes, "trilu", [value("z", free)], [value(k, free) for k in ("u", "l", "d")],
                          [helper.make_tensor("one", TensorProto.INT64, [], [1]),
                           helper.make_tensor("minus1", TensorProto.INT64, [], [-1])])
    save(root, "trilu_of_data", g, [z], [np.triu(z, 1), np.tril(z, -1), np.triu(z)], 14)
    # Hardmax along dim 1 (ties: the first maximum), the batch free.
    h = np.round(rs.randn(3, 4, 5)).astype(np.float32)
    first = h.argmax(axis=1)
    hard = (np.arange(4)[None, :, None] == first[:, None, :]).astype(np.float32)
    g = helper.make_graph([helper.make_node("Hardmax", ["h"], ["y"], axis=1)], "hardmax",
                          [value("h", ["N", 4, 5])], [value("y", ["N", 4, 5])])
    save(root, "hardmax_with_ties", g, [h], [hard], 13)


def ceil_pool_forms(root):
    """AveragePool with ceil_mode 1: the last window of a dim may reach past the input (and its
    pads); each average divides by the elements its window covers of the input
    (count_include_pad 0) or of the input and its pads (1), as PyTorch's AvgPool2d(ceil_mode=True)."""
    x = np.random.RandomState(5).randn(2, 3, 6, 7).astype(np.float32)
    N, C, H, W = x.shape

    def out_size(n, k, s, p):
        o = -(-(n + 2 * p - k) // s) + 1
        return o - 1 if (o - 1) * s >= n + p else o

    for k, s, p, include in ((3, 2, 0, 0), (3, 2, 1, 1), (2, 2, 0, 1)):
        oh, ow = out_size(H, k, s, p), out_size(W, k, s, p)
        y = np.zeros((N, C, oh, ow), np.float32)
        for i in range(oh):
            for j in range(ow):
                hs, ws = i * s - p, j * s - p
                he, we = hs + k, ws + k
                h0, h1, w0, w1 = max(hs, 0), min(he, H), max(ws, 0), min(we, W)
                if include:
                    count = (min(he, H + p) - max(hs, -p)) * (min(we, W + p) - max(ws, -p))
                else:
                    count = (h1 - h0) * (w1 - w0)
                y[:, :, i, j] = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / count
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                                pads=[p] * 4, ceil_mode=1, count_include_pad=include)
        g = helper.make_graph([node], "avgpool", [value("x", x.shape)], [value("y", y.shape)])
        save(root, f"avgpool_ceil_k{k}_s{s}_p{p}_include{include}", g, [x], [y], 13)


def transposed_forms(root):
    """ConvTranspose with output_shape instead of pads: the total padding t = s (in - 1) +
    (k - 1) + 1 - out split ceil(t / 2) before and floor(t / 2) after, as ONNX defines it."""
    rng = np.random.RandomState(9)
    x = rng.randn(2, 3, 4, 5).astype(np.float32)
    w = rng.randn(3, 2, 3, 3).astype(np.float32)
    s = (2, 2)
    full = np.zeros((2, 2, (4 - 1) * s[0] + 3, (5 - 1) * s[1] + 3), np.float32)
    for i in range(4):
        for j in range(5):
            full[:, :, i * s[0]:i * s[0] + 3, j * s[1]:j * s[1] + 3] += np.einsum("nc,cokl->nokl", x[:, :, i, j], w)
    for out in ((8, 10), (7, 11), (9, 9)):
        crop = []
        for d in range(2):
            t = full.shape[2 + d] - out[d]
            crop.append((t - t // 2, t // 2))
        y = full[:, :, crop[0][0]:full.shape[2] - crop[0][1], crop[1][0]:full.shape[3] - crop[1][1]]
        assert y.shape[2:] == out
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=list(s), output_shape=list(out))
        g = helper.make_graph([node], "convtranspose", [value("x", x.shape)], [value("y", y.shape)],
                              [numpy_helper.from_array(w, "w")])
        save(root, f"convtranspose_output_shape_{out[0]}x{out[1]}", g, [x], [y], 13)


def resize_forms(root, x):
    """Resize to sizes that are not whole multiples (F.interpolate(size=...) as PyTorch exports
    it), and by scales that give whole sizes: nearest as asymmetric/floor (input floor(o * in /
    out)) or with half-pixel centres rounded, linear with half-pixel centres or with the corners
    aligned."""
    def axis_map(a, axis, out, how):
        n = a.shape[axis]
        o = np.arange(out)
        if how == "nearest":
            return np.take(a, (o * n) // out, axis=axis)
        if how == "align_corners":
            src = o * ((n - 1) / (out - 1)) if out > 1 else np.zeros(out)
        else:
            src = np.clip((o + 0.5) * n / out - 0.5, 0, n - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        w = (src - lo).reshape([-1 if d == axis else 1 for d in range(a.ndim)])
        return np.take(a, lo, axis=axis) * (1 - w) + np.take(a, hi, axis=axis) * w

    for how, (h, w) in (("nearest", (7, 3)), ("half_pixel", (3, 11)), ("align_corners", (6, 2)),
                        ("align_corners", (8, 10))):
        y = axis_map(axis_map(x, 2, h, how), 3, w, how).astype(np.float32)
        attrs = ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
                 if how == "nearest" else {"mode": "linear", "coordinate_transformation_mode": how})
        sizes = ints("sizes", [2, 3, h, w])
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
        g = helper.make_graph([node], "resize", [value("x", x.shape)], [value("y", y.shape)], [sizes])
        save(root, f"resize_sizes_{how}_{h}x{w}", g, [x], [y], 13)
    # Nearest with half-pixel centres rounded (ONNX's default coordinates): round_prefer_ceil
    # is PyTorch's nearest-exact at any ratio; round_prefer_floor where no centre is halfway.
    def centred(a, axis, out, prefer):
        n = a.shape[axis]
        src = (np.arange(out) + 0.5) * n / out - 0.5
        idx = np.floor(src + 0.5) if prefer == "round_prefer_ceil" else np.ceil(src - 0.5)
        return np.take(a, np.clip(idx, 0, n - 1).astype(int), axis=axis)

    for prefer, (h, w) in (("round_prefer_ceil", (7, 3)), ("round_prefer_ceil", (3, 8)),
                           ("round_prefer_floor", (4, 3))):
        y = centred(centred(x, 2, h, prefer), 3, w, prefer).astype(np.float32)
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                                coordinate_transformation_mode="half_pixel", nearest_mode=prefer)
        g = helper.make_graph([node], "resize", [value("x", x.shape)], [value("y", y.shape)],
                              [ints("sizes", [2, 3, h, w])])
        save(root, f"resize_nearest_half_pixel_{prefer}_{h}x{w}", g, [x], [y], 13)
    # Scales that give whole sizes: 6x4 halved down and by 1.5 up to 3x6, linear.
    x6 = np.random.RandomState(3).randn(1, 2, 6, 4).astype(np.float32)
    y = axis_map(axis_map(x6, 2, 3, "half_pixel"), 3, 6, "half_pixel").astype(np.float32)
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 0.5, 1.5])
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    g = helper.make_graph([node], "resize", [value("x", x6.shape)], [value("y", y.shape)], [scales])
    save(root, "resize_scales_linear_half_and_1.5", g, [x6], [y], 13)


def ints(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def scalar(name, v):
    return helper.make_tensor(name, TensorProto.FLOAT, [], [v])


def exporter_forms(root, x):
    free = ["N", 3, 4, 5]  # the batch dim left free, as torch.onnx.export's dynamic_axes write it
    # x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]), ints("axes0", [0]), ints("minus1", [-1])]
    g = helper.make_graph(nodes, "flatten", [value("x", free)], [value("y", ["N", 60])], inits)
    save(root, "computed_shape_flatten", g, [x], [x.reshape(2, -1)], 13)
    # Large weights in the typed fields (float_data) instead of raw_data: a Gemm whose B of
    # 60 x 40 (over the 1,024 values the importer reads straight from the file's mapping).
    rs = np.random.RandomState(2)
    b = rs.randn(60, 40).astype(np.float32)
    c = rs.randn(40).astype(np.float32)
    flat = x.reshape(2, -1)
    inits = [helper.make_tensor("B", TensorProto.FLOAT, [60, 40], b.flatten().tolist()),
             helper.make_tensor("C", TensorProto.FLOAT, [40], c.tolist())]
    assert len(inits[0].float_data) == 2400 and not inits[0].raw_data
    g = helper.make_graph([helper.make_node("Gemm", ["x", "B", "C"], ["y"])], "gemm_typed",
                          [value("x", ["N", 60])], [value("y", ["N", 40])], inits)
    save(root, "gemm_weights_in_float_data", g, [flat], [flat @ b + c], 13)
    # A channel shuffle (ShuffleNet): [N, g, C / g, H, W] from the shape, transpose, back to [N, -1, H, W].
    c = np.random.RandomState(1).randn(2, 6, 2, 3).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"])]
    for k in range(4):
        nodes += [helper.make_node("Gather", ["s", f"i{k}"], [f"d{k}"], axis=0),
                  helper.make_node("Unsqueeze", [f"d{k}", "axes0"], [f"u{k}"])]
    nodes += [helper.make_node("Div", ["u1", "groups"], ["cg"]),
              helper.make_node("Concat", ["u0", "groups", "cg", "u2", "u3"], ["shape5"], axis=0),
              helper.make_node("Reshape", ["x", "shape5"], ["r"]),
              helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
              helper.make_node("Concat", ["u0", "minus1", "u2", "u3"], ["shape4"], axis=0),
              helper.make_node("Reshape", ["t", "shape4"], ["y"])]
    inits = [helper.make_tensor(f"i{k}", TensorProto.INT64, [], [k]) for k in range(4)]
    inits += [ints("axes0", [0]), ints("groups", [2]), ints("minus1", [-1])]
    want = c.reshape(2, 2, 3, 2, 3).transpose(0, 2, 1, 3, 4).reshape(2, 6, 2, 3)
    g = helper.make_graph(nodes, "shuffle", [value("x", ["N", 6, 2, 3])], [value("y", ["N", 6, 2, 3])], inits)
    save(root, "computed_shape_channel_shuffle", g, [c], [want], 13)
    # Heads moved into the batch, x.reshape(N * heads, T, -1) of [N, heads, T, d]: the batch
    # times the heads is a size computed from the batch, so the -1 comes from the stand-ins.
    h = np.random.RandomState(3).randn(2, 2, 3, 4).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Mul", ["n", "heads"], ["nh"]), helper.make_node("Unsqueeze", ["nh", "axes0"], ["nh1"]),
             helper.make_node("Concat", ["nh1", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]), helper.make_tensor("heads", TensorProto.INT64, [], [2]),
             ints("axes0", [0]), ints("rest", [3, -1])]
    g = helper.make_graph(nodes, "heads_into_batch", [value("x", ["N", 2, 3, 4])], [value("y", ["M", 3, 4])], inits)
    save(root, "computed_shape_batch_times_heads_and_rest", g, [h], [h.reshape(4, 3, 4)], 13)
    # HardSigmoid (given alpha and beta), HardSwish (opset 14).
    node = helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.25, beta=0.4)
    g = helper.make_graph([node], "hardsigmoid", [value("x", x.shape)], [value("y", x.shape)])
    save(root, "hardsigmoid", g, [x], [np.clip(0.25 * x + 0.4, 0, 1)], 13)
    node = helper.make_node("HardSwish", ["x"], ["y"])
    g = helper.make_graph([node], "hardswish", [value("x", x.shape)], [value("y", x.shape)])
    save(root, "hardswish", g, [4 * x], [4 * x * np.clip(4 * x / 6 + 0.5, 0, 1)], 14)
    # A squeeze-and-excitation gate: x * sigmoid(mean over the plane), the gate [N, C, 1, 1] first.
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["m"]), helper.make_node("Sigmoid", ["m"], ["gate"]),
             helper.make_node("Mul", ["gate", "x"], ["y"])]
    gate = 1 / (1 + np.exp(-x.mean(axis=(2, 3), keepdims=True)))
    g = helper.make_graph(nodes, "se", [value("x", x.shape)], [value("y", x.shape)])
    save(root, "se_gate", g, [x], [(x * gate).astype(np.float32)], 13)
    # Per-channel constants: (x - mean) / std, then a [C, 1, 1] scale and a [1, C, 1, 1] shift, and c - x.
    mean, std = np.array([0.1, -0.2, 0.3], np.float32), np.array([0.5, 2.0, 4.0], np.float32)
    scale, shift = np.array([1.5, -1, 2], np.float32), np.array([0.25, 0, -1], np.float32)
    inits = [numpy_helper.from_array(mean.reshape(1, 3, 1, 1), "mean"),
             numpy_helper.from_array(std.reshape(1, 3, 1, 1), "std"),
             numpy_helper.from_array(scale.reshape(3, 1, 1), "scale"),
             numpy_helper.from_array(shift.reshape(1, 3, 1, 1), "shift")]
    nodes = [helper.make_node("Sub", ["x", "mean"], ["centred"]), helper.make_node("Div", ["centred", "std"], ["z"]),
             helper.make_node("Mul", ["scale", "z"], ["scaled"]), helper.make_node("Add", ["scaled", "shift"], ["s"]),
             helper.make_node("Sub", ["shift", "s"], ["y"])]
    z = (x - mean.reshape(1, 3, 1, 1)) / std.reshape(1, 3, 1, 1)
    s_ = scale.reshape(3, 1, 1) * z + shift.reshape(1, 3, 1, 1)
    g = helper.make_graph(nodes, "per_channel", [value("x", x.shape)], [value("y", x.shape)], inits)
    save(root, "per_channel_constants", g, [x], [(shift.reshape(1, 3, 1, 1) - s_).astype(np.float32)], 13)
    # ReduceMean over the spatial dims, with and without keepdims.
    for keep in (0, 1):
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, -1], keepdims=keep)
        y = x.mean(axis=(2, 3), keepdims=bool(keep))
        g = helper.make_graph([node], "mean", [value("x", x.shape)], [value("y", y.shape)])
        save(root, f"reduce_mean_spatial_keepdims{keep}", g, [x], [y], 13)
    # Scalar constants: ((x - 1.5) * 2 / 4 + 3), then 2 - that; and Sub of two data inputs.
    nodes = [helper.make_node("Sub", ["x", "a"], ["t1"]), helper.make_node("Mul", ["b", "t1"], ["t2"]),
             helper.make_node("Div", ["t2", "c"], ["t3"]), helper.make_node("Add", ["t3", "d"], ["t4"]),
             helper.make_node("Sub", ["b", "t4"], ["y"])]
    inits = [scalar("a", 1.5), scalar("b", 2.0), scalar("c", 4.0), scalar("d", 3.0)]
    g = helper.make_graph(nodes, "scalars", [value("x", x.shape)], [value("y", x.shape)], inits)
    save(root, "scalar_arithmetic", g, [x], [2 - ((x - 1.5) * 2 / 4 + 3)], 13)
    # Powers of data: Pow by a float and an integer constant, Sqrt, Reciprocal, a number divided by data.
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]), helper.make_node("Add", ["sq", "one"], ["p"]),
             helper.make_node("Sqrt", ["p"], ["r"]), helper.make_node("Reciprocal", ["r"], ["inv"]),
             helper.make_node("Div", ["three", "r"], ["q"]), helper.make_node("Pow", ["x", "cube"], ["c"]),
             helper.make_node("Add", ["inv", "q"], ["s"]), helper.make_node("Add", ["s", "c"], ["y"])]
    inits = [scalar("two", 2.0), scalar("one", 1.0), scalar("three", 3.0),
             helper.make_tensor("cube", TensorProto.INT64, [], [3])]
    r = np.sqrt(x * x + 1)
    g = helper.make_graph(nodes, "powers", [value("x", x.shape)], [value("y", x.shape)], inits)
    save(root, "powers_of_data", g, [x], [(1 / r + 3 / r + x ** 3).astype(np.float32)], 13)
    x2 = np.random.RandomState(2).randn(*x.shape).astype(np.float32)
    node = helper.make_node("Sub", ["x", "z"], ["y"])
    g = helper.make_graph([node], "sub", [value("x", x.shape), value("z", x.shape)], [value("y", x.shape)])
    save(root, "sub", g, [x, x2], [x - x2], 13)
    # Slice of one axis (the channels 1:3; the last two columns by negative starts), steps 1.
    for name, starts, ends, axes, y in (("channels", [1], [3], [1], x[:, 1:3]),
                                        ("negative", [-2], [2 ** 62], [-1], x[..., -2:]),
                                        ("whole_and_one", [0, 1], [2 ** 62, 4], [0, 2], x[:, :, 1:4])):
        node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])
        inits = [ints("starts", starts), ints("ends", ends), ints("axes", axes)]
        g = helper.make_graph([node], "slice", [value("x", x.shape)], [value("y", y.shape)], inits)
        save(root, f"slice_{name}", g, [x], [y], 13)
    # Gather of data by a constant list of indices: a channel swap (x[:, [2, 1, 0]]), every
    # other column backwards, a run forwards, and a list with repeats and a negative index.
    for name, axis, idx in (("channel_swap", 1, [2, 1, 0]), ("step_minus_2", 3, [4, 2, 0]),
                            ("run", 2, [1, 2, 3]), ("last_backwards", 3, [4, 3]), ("any", 2, [3, 0, 0, -1])):
        y = np.take(x, idx, axis=axis)
        node = helper.make_node("Gather", ["x", "idx"], ["y"], axis=axis)
        g = helper.make_graph([node], "gather", [value("x", free)], [value("y", ["N"] + list(y.shape[1:]))],
                              [ints("idx", idx)])
        save(root, f"gather_list_{name}", g, [x], [y], 13)
    # Expand of data (x.expand(-1, 3, 4, -1), expand_as): dims of 1 broadcast, the batch free.
    for name, xin in (("one_dim", x[:, :, :1]), ("two_dims", x[:, :1, :, :1])):
        xin = np.ascontiguousarray(xin)
        y = np.ascontiguousarray(np.broadcast_to(xin, (2, 3, 4, 5)))
        node = helper.make_node("Expand", ["x", "shape"], ["y"])
        g = helper.make_graph([node], "expand", [value("x", ["N"] + list(xin.shape[1:]))],
                              [value("y", ["N", 3, 4, 5])], [ints("shape", [1, 3, 4, 5])])
        save(root, f"expand_data_{name}", g, [xin], [y], 13)
    # Sums over dims after the batch (x.sum(dim=...), x.norm(dim=...)), the batch free:
    # ReduceSum (its axes an input from opset 13), ReduceSumSquare and ReduceL2 (attributes).
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)
    g = helper.make_graph([node], "reduce_sum", [value("x", free)], [value("y", ["N", 3, 1, 1])],
                          [ints("axes", [2, 3])])
    save(root, "reduce_sum_spatial", g, [x], [x.sum(axis=(2, 3), keepdims=True)], 13)
    node = helper.make_node("ReduceSumSquare", ["x"], ["y"], axes=[1, -1], keepdims=0)
    g = helper.make_graph([node], "reduce_sum_square", [value("x", free)], [value("y", ["N", 4])])
    save(root, "reduce_sum_square", g, [x], [(x * x).sum(axis=(1, 3))], 13)
    node = helper.make_node("ReduceL2", ["x"], ["y"], axes=[-1], keepdims=1)
    g = helper.make_graph([node], "reduce_l2", [value("x", free)], [value("y", ["N", 3, 4, 1])])
    save(root, "reduce_l2", g, [x], [np.sqrt((x * x).sum(axis=-1, keepdims=True))], 13)
    # Split without sizes (torch.chunk's form): equal parts of a dim known at import, batch free.
    node = helper.make_node("Split", ["x"], ["y0", "y1"], axis=2)
    g = helper.make_graph([node], "split", [value("x", free)], [value("y0", ["N", 3, 2, 5]), value("y1", ["N", 3, 2, 5])])
    save(root, "split_equal_parts", g, [x], [x[:, :, :2], x[:, :, 2:]], 13)
    # Unsqueeze then Squeeze of data; Flatten at axis 2; a Cast to float.
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]), helper.make_node("Relu", ["u"], ["r"]),
             helper.make_node("Squeeze", ["r", "axes"], ["y"])]
    g = helper.make_graph(nodes, "unsqueeze", [value("x", free)], [value("y", free)], [ints("axes", [1])])
    save(root, "unsqueeze_squeeze", g, [x], [np.maximum(x, 0)], 13)
    node = helper.make_node("Flatten", ["x"], ["y"], axis=2)
    g = helper.make_graph([node], "flatten2", [value("x", free)], [value("y", [None, 20])], [])
    save(root, "flatten_axis2_free_batch", g, [x], [x.reshape(6, 20)], 13)
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)
    g = helper.make_graph([node], "cast", [value("x", x.shape)], [value("y", x.shape)])
    save(root, "cast_float", g, [x], [x], 13)
    # GELU in its erf form, as torch.onnx.export writes nn.GELU, and with the 0.5 taken first.
    from math import erf
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(x).astype(np.float32)
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    inits = [scalar("sqrt2", 1.4142135381698608), scalar("one", 1.0), scalar("half", 0.5)]
    g = helper.make_graph(nodes, "gelu", [value("x", x.shape)], [value("y", x.shape)], inits)
    save(root, "gelu_erf_pattern", g, [x], [gelu], 13)
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["x", "rsqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["one", "e"], ["a"]),
             helper.make_node("Mul", ["h", "a"], ["y"])]
    inits = [scalar("rsqrt2", 0.7071067690849304), scalar("one", 1.0), scalar("half", 0.5)]
    g = helper.make_graph(nodes, "gelu", [value("x", x.shape)], [value("y", x.shape)], inits)
    save(root, "gelu_erf_pattern_half_first", g, [x], [gelu], 13)
    # Gather from a [V, E] table by int64 ids [N, L]: an embedding lookup.
    table = np.random.RandomState(3).randn(10, 4).astype(np.float32)
    ids = np.array([[0, 9, 3], [3, 3, 7]], dtype=np.int64)
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    g = helper.make_graph([node], "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 3])],
                          [value("y", ["N", 3, 4])], [numpy_helper.from_array(table, "table")])
    save(root, "gather_embedding", g, [ids], [table[ids]], 13)
    # A spatial transformer as Tessera writes it (no AffineGrid before opset 20): the grid
    # as Transpose(theta) -> MatMul(base grid) -> Reshape, then GridSample (opset 16).
    rng = np.random.RandomState(4)
    xs = rng.randn(2, 3, 7, 8).astype(np.float32)
    theta = (np.array([[1, 0, 0], [0, 1, 0]], np.float32) + 0.3 * rng.randn(2, 2, 3)).astype(np.float32)
    Ho, Wo = 5, 6
    lin = lambda n: np.linspace(-1, 1, n) if n > 1 else np.zeros(1)
    gy, gx = np.meshgrid(lin(Ho), lin(Wo), indexing="ij")
    base = np.stack([gx.ravel(), gy.ravel(), np.ones(Ho * Wo)], axis=1).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["theta"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["base", "t"], ["g"]),
             helper.make_node("Reshape", ["g", "shape"], ["grid"]),
             helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=1)]
    inits = [numpy_helper.from_array(base, "base"),
             numpy_helper.from_array(np.array([0, Ho, Wo, 2], np.int64), "shape")]
    ys = grid_sample(xs, (base @ theta.transpose(0, 2, 1)).reshape(2, Ho, Wo, 2))
    g = helper.make_graph(nodes, "stn", [value("x", xs.shape), value("theta", theta.shape)],
                          [value("y", ys.shape)], inits)
    save(root, "gridsample_affine_spatial_transformer", g, [xs, theta], [ys], 16)


def window_forms(root):
    rng = np.random.RandomState(5)
    x = rng.randn(2, 6, 7, 3).astype(np.float32)  # [N, H, W, C], channels last as Swin's
    free = ["N", 6, 7, 3]
    # Slice of data with steps: x[:, 0::2, 1::2] (patch merging) and x[:, 1:6:3]; backwards (torch.flip's
    # form), to index 0 exclusive, and from past the end.
    for name, starts, ends, axes, steps, y in (("steps_2_2", [0, 1], [2 ** 62, 2 ** 62], [1, 2], [2, 2],
                                                x[:, 0::2, 1::2]),
                                               ("step_3", [1], [6], [1], [3], x[:, 1:6:3]),
                                               ("flip", [-1], [-2 ** 63], [2], [-1], x[:, :, ::-1]),
                                               ("back_2_before_0", [5], [0], [1], [-2], x[:, 5:0:-2]),
                                               ("back_from_past_end", [100, -1], [-5, -2 ** 63], [2, 1], [-1, -2],
                                                x[:, ::-2, 100:-5:-1])):
        node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
        inits = [ints("starts", starts), ints("ends", ends), ints("axes", axes), ints("steps", steps)]
        g = helper.make_graph([node], "slice", [value("x", free)], [value("y", ["N"] + list(y.shape[1:]))], inits)
        save(root, f"slice_{name}", g, [x], [y], 13)
    # Pad of the H and W dims of [N, H, W, C] (Swin pads to whole windows).
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")
    y = np.pad(x, ((0, 0), (1, 0), (0, 2), (0, 0)))
    g = helper.make_graph([node], "pad", [value("x", free)], [value("y", ["N", 7, 9, 3])],
                          [ints("pads", [0, 1, 0, 0, 0, 0, 2, 0])])
    save(root, "pad_channels_last", g, [x], [y], 13)
    # Einsum as attention's products: q k^T (MaxViT's spelling, with spaces), weights v, and an ellipsis.
    q, k = rng.randn(2, 3, 4, 5).astype(np.float32), rng.randn(2, 3, 6, 5).astype(np.float32)
    v = rng.randn(2, 3, 6, 2).astype(np.float32)
    for name, eq, a, b in (("qk", "b h i d, b h j d -> b h i j", q, k), ("weights_v", "bhij,bhjd->bhid",
                                                                         np.einsum("bhid,bhjd->bhij", q, k), v),
                           ("ellipsis", "...id,...jd->...ij", q, k)):
        node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq)
        y = np.einsum(eq.replace(" ", ""), a, b).astype(np.float32)
        g = helper.make_graph([node], "einsum", [value("a", a.shape), value("b", b.shape)], [value("y", y.shape)])
        save(root, f"einsum_{name}", g, [a, b], [y], 12)
    # Dropout as exported with training=False written out: a constant training_mode, the mask unused.
    node = helper.make_node("Dropout", ["x", "ratio", "mode"], ["y", "mask"])
    inits = [scalar("ratio", 0.1), helper.make_tensor("mode", TensorProto.BOOL, [], [False])]
    g = helper.make_graph([node], "dropout", [value("x", free)], [value("y", free)], inits)
    save(root, "dropout_constant_training_mode", g, [x], [x], 13)
    # A mask from the input's shape, as shifted windows build theirs: zeros [H, W], row i set to
    # (H - 1 - i) mod 2 by ScatterND with reversed Range rows, -100 where not 0 (Equal, Not,
    # Where), scaled by C ** -0.5 (Pow), broadcast over [N, H, W, C] and added to x.
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [], [v])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["h"], axis=0),
             helper.make_node("Gather", ["s", "two"], ["w"], axis=0),
             helper.make_node("Gather", ["s", "three"], ["c"], axis=0),
             helper.make_node("Unsqueeze", ["h", "axes0"], ["h1"]),
             helper.make_node("Unsqueeze", ["w", "axes0"], ["w1"]),
             helper.make_node("Concat", ["h1", "w1"], ["hw"], axis=0),
             helper.make_node("ConstantOfShape", ["hw"], ["zeros"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
             helper.make_node("Range", ["zero", "h", "one"], ["r"]),
             helper.make_node("Mod", ["r", "two"], ["rm"]),
             helper.make_node("Slice", ["r", "minus1", "minusbig", "axes0", "minus1"], ["rr"]),
             helper.make_node("Unsqueeze", ["rr", "axes1"], ["rows"]),
             helper.make_node("Cast", ["rm"], ["rmf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["rmf", "axes1"], ["col"]),
             helper.make_node("Expand", ["col", "hw"], ["updates"]),
             helper.make_node("ScatterND", ["zeros", "rows", "updates"], ["m"]),
             helper.make_node("Equal", ["m", "fzero"], ["isZero"]),
             helper.make_node("Not", ["isZero"], ["set"]),
             helper.make_node("Where", ["set", "fminus100", "fzero"], ["sel"]),
             helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
             helper.make_node("Pow", ["cf", "fminushalf"], ["scale"]),
             helper.make_node("Mul", ["sel", "scale"], ["scaled"]),
             helper.make_node("Unsqueeze", ["scaled", "axes03"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["y"])]
    inits = [i64("zero", 0), i64("one", 1), i64("two", 2), i64("three", 3), ints("axes0", [0]), ints("axes1", [1]),
             ints("axes03", [0, 3]), ints("minus1", [-1]), ints("minusbig", [-2 ** 62]), scalar("fzero", 0.0),
             scalar("fminus100", -100.0), scalar("fminushalf", -0.5)]
    m = np.zeros((6, 7), np.float32)
    for i in range(6):
        m[5 - i, :] = i % 2
    mask = np.where(m != 0, -100.0, 0.0).astype(np.float32) * np.float32(3 ** -0.5)
    g = helper.make_graph(nodes, "window_mask", [value("x", free)], [value("y", free)], inits)
    save(root, "computed_window_mask", g, [x], [(x + mask[None, :, :, None]).astype(np.float32)], 13)
    # More computations on constants, each against NumPy: Mod both ways with negative operands,
    # a float Range, Tile, Gather along axis 1 by a [2, 1] index, Pad, Max and Min of three,
    # Less and And, Expand to a higher rank, Transpose, Neg, Abs, Floor, Sqrt, Reciprocal,
    # Sum; their sum
    # [6, 7] is added to x [N, 6, 7, 3] (broadcast over the channels).
    a = np.array([[-7, 7, -8, 5, 0, -1, 9]], np.int64)  # [1, 7]
    b = np.array([[3], [-3], [4], [-5], [2], [7]], np.int64)  # [6, 1]
    py_mod = (a % b).astype(np.float32)  # Python's (the divisor's sign)
    c_mod = np.fmod(a, b).astype(np.float32)  # C's (the dividend's sign)
    rng_f = np.arange(0.5, 4.0, 0.5, dtype=np.float32)  # [7]
    tiled = np.tile(np.array([[1.0], [2.0], [3.0]], np.float32), (2, 7))  # [6, 7]
    table = np.arange(42, dtype=np.float32).reshape(6, 7)
    gathered = table[:, np.array([[6], [0]])].reshape(6, 2)  # [6, 2, 1] -> summed below
    mx = np.maximum(np.maximum(py_mod, c_mod), rng_f)
    mn = np.minimum(np.minimum(py_mod, c_mod), rng_f)
    both = np.logical_and(py_mod < c_mod, rng_f > 1.0).astype(np.float32)
    ex = np.broadcast_to(rng_f, (1, 6, 7)).reshape(6, 7)
    tr = np.ascontiguousarray(np.arange(42, dtype=np.float32).reshape(7, 6).T)
    un = np.floor(-np.abs(c_mod)) + np.sqrt(np.abs(py_mod)) + 1.0 / (1.0 + np.abs(mn))
    total = (py_mod + c_mod + tiled + mx + mn + both + ex + tr + un).astype(np.float32)
    total[:, :2] += gathered
    f = lambda name, arr: numpy_helper.from_array(np.asarray(arr), name)
    # Float tensors as Constant nodes: a float initializer of more than one element is a
    # weight, whose computations stay layers.
    nodes = [helper.make_node("Constant", [], [name], value=f(name + "_value", arr))
             for name, arr in (("table", table), ("col", np.array([[1.0], [2.0], [3.0]], np.float32)),
                               ("t76", np.arange(42, dtype=np.float32).reshape(7, 6)))]
    nodes += [helper.make_node("Mod", ["a", "b"], ["pymod_i"], fmod=0),
             helper.make_node("Mod", ["a", "b"], ["cmod_i"], fmod=1),
             helper.make_node("Cast", ["pymod_i"], ["pymod"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["cmod_i"], ["cmod"], to=TensorProto.FLOAT),
             helper.make_node("Range", ["r0", "r1", "r2"], ["rng"]),
             helper.make_node("Tile", ["col", "reps"], ["tiled"]),
             helper.make_node("Gather", ["table", "idx"], ["gath3"], axis=1),
             helper.make_node("Reshape", ["gath3", "shape62"], ["gath"]),
             helper.make_node("Pad", ["gath", "padsg"], ["gathpad"]),
             helper.make_node("Max", ["pymod", "cmod", "rng"], ["mx"]),
             helper.make_node("Min", ["pymod", "cmod", "rng"], ["mn"]),
             helper.make_node("Less", ["pymod", "cmod"], ["lt"]),
             helper.make_node("Greater", ["rng", "one_f"], ["gt"]),
             helper.make_node("And", ["lt", "gt"], ["andb"]),
             helper.make_node("Cast", ["andb"], ["both"], to=TensorProto.FLOAT),
             helper.make_node("Expand", ["rng", "shape167"], ["ex3"]),
             helper.make_node("Reshape", ["ex3", "shape67"], ["ex"]),
             helper.make_node("Transpose", ["t76"], ["tr"], perm=[1, 0]),
             helper.make_node("Abs", ["cmod"], ["absc"]),
             helper.make_node("Neg", ["absc"], ["negc"]),
             helper.make_node("Floor", ["negc"], ["floorc"]),
             helper.make_node("Abs", ["pymod"], ["absp"]),
             helper.make_node("Sqrt", ["absp"], ["sqrtp"]),
             helper.make_node("Abs", ["mn"], ["absmn"]),
             helper.make_node("Add", ["absmn", "one_f"], ["den"]),
             helper.make_node("Reciprocal", ["den"], ["recip"]),
             helper.make_node("Sum", ["pymod", "cmod", "tiled", "mx", "mn", "both", "ex", "tr", "floorc", "sqrtp",
                                      "recip", "gathpad"], ["total"]),
             helper.make_node("Unsqueeze", ["total", "axes03"], ["total4"]),
             helper.make_node("Add", ["x", "total4"], ["y"])]
    inits = [f("a", a), f("b", b), f("r0", np.float32(0.5)), f("r1", np.float32(4.0)), f("r2", np.float32(0.5)),
             ints("reps", [2, 7]), f("idx", np.array([[6], [0]], np.int64)), ints("shape62", [6, 2]),
             ints("padsg", [0, 0, 0, 5]), f("one_f", np.float32(1.0)), ints("shape167", [1, 6, 7]),
             ints("shape67", [6, 7]), ints("axes03", [0, 3])]
    g = helper.make_graph(nodes, "constants", [value("x", free)], [value("y", free)], inits)
    save(root, "computed_constants_against_numpy", g, [x], [(x + total[None, :, :, None]).astype(np.float32)], 13)


def windows(xp, k, s):
    """The k x k windows of padded [N, C, H, W] at stride s: [N, C, Ho, Wo, k, k]."""
    n, c, h, w = xp.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, ho, wo, k, k), np.float32)
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = xp[:, :, i * s:i * s + k, j * s:j * s + k]
    return out


def padding_forms(root):
    """Convolutions and pools padded more on one side than the other: asymmetric pads, and
    auto_pad SAME_UPPER / SAME_LOWER with an odd total (TensorFlow's "same")."""
    rng = np.random.RandomState(7)
    x = rng.randn(2, 3, 6, 7).astype(np.float32)
    free = ["N", 3, 6, 7]
    w = rng.randn(4, 3, 2, 2).astype(np.float32)
    # (name, attributes, (top, bottom, left, right), stride)
    for name, attrs, (t, b, l, r), s in (("pads", {"pads": [0, 1, 1, 0]}, (0, 1, 1, 0), 1),
                                         ("same_upper", {"auto_pad": "SAME_UPPER"}, (0, 1, 0, 1), 1),
                                         ("same_lower_stride_2", {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
                                          (0, 0, 1, 0), 2)):
        xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
        y = np.einsum("nchwij,kcij->nkhw", windows(xp, 2, s), w).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2], **attrs)
        g = helper.make_graph([node], "conv", [value("x", free)], [value("y", ["N"] + list(y.shape[1:]))],
                              [numpy_helper.from_array(w, "w")])
        save(root, f"conv_{name}", g, [x], [y], 13)
        xm = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=-np.inf)
        y = windows(xm, 2, s).max(axis=(4, 5))
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], **attrs)
        g = helper.make_graph([node], "maxpool", [value("x", free)], [value("y", ["N"] + list(y.shape[1:]))])
        save(root, f"maxpool_{name}", g, [x], [y], 13)
        y = windows(xp, 2, s).mean(axis=(4, 5))
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], count_include_pad=1, **attrs)
        g = helper.make_graph([node], "avgpool", [value("x", free)], [value("y", ["N"] + list(y.shape[1:]))])
        save(root, f"avgpool_count_pad_{name}", g, [x], [y], 13)
        # Not counting the padding (count_include_pad 0, TensorFlow's "same"): the window's
        # sum over its real elements only.
        real = np.pad(np.ones_like(x), ((0, 0), (0, 0), (t, b), (l, r)))
        y = (windows(xp, 2, s).sum(axis=(4, 5)) / windows(real, 2, s).sum(axis=(4, 5))).astype(np.float32)
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], **attrs)
        g = helper.make_graph([node], "avgpool", [value("x", free)], [value("y", ["N"] + list(y.shape[1:]))])
        save(root, f"avgpool_{name}", g, [x], [y], 13)


def grid_sample(x, grid):
    """ONNX GridSample, bilinear, zeros padding, align_corners 1: grid (x, y) in [-1, 1]
    spans the corner pixels' centres."""
    N, C, H, W = x.shape
    _, Ho, Wo, _ = grid.shape
    y = np.zeros((N, C, Ho, Wo), np.float64)
    for n in range(N):
        for i in range(Ho):
            for j in range(Wo):
                u = (grid[n, i, j, 0] + 1) / 2 * (W - 1)
                v = (grid[n, i, j, 1] + 1) / 2 * (H - 1)
                c0, r0 = int(np.floor(u)), int(np.floor(v))
                for r, c, w in ((r0, c0, (1 - (v - r0)) * (1 - (u - c0))), (r0, c0 + 1, (1 - (v - r0)) * (u - c0)),
                                (r0 + 1, c0, (v - r0) * (1 - (u - c0))), (r0 + 1, c0 + 1, (v - r0) * (u - c0))):
                    if 0 <= r < H and 0 <= c < W:
                        y[n, :, i, j] += w * x[n, :, r, c]
    return y.astype(np.float32)


if __name__ == "__main__":
    main()
