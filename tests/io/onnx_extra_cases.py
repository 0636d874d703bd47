#!/usr/bin/env python3
"""ONNX test cases, in the layout of ONNX's own test data (model.onnx, test_data_set_0/
input_*.pb, output_*.pb), for imported op forms that ONNX's data has no passing case of:
Resize and Upsample with nearest integer scales, Tile along one dim. The expected outputs
are computed here with NumPy from the ONNX operator definitions.

usage: onnx_extra_cases.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


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
    # Tile along one dim: copies laid end to end (np.tile).
    for reps in ([1, 1, 3, 1], [2, 1, 1, 1], [1, 1, 1, 1]):
        y = np.tile(x, reps)
        r = helper.make_tensor("reps", TensorProto.INT64, [4], reps)
        node = helper.make_node("Tile", ["x", "reps"], ["y"])
        g = helper.make_graph([node], "tile", [value("x", x.shape)], [value("y", y.shape)], [r])
        save(root, "tile_" + "_".join(map(str, reps)), g, [x], [y], 13)


if __name__ == "__main__":
    main()
