"""Tiny ONNX files (under 200 bytes) that ask the training path for more than it may hold
(tests/core/onnx/test_train_budgets.py, tests/app/test_onnx_open_empty_huge.py)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def save_tiny_model(nodes, inputs, inits, path) -> str:
    y = helper.make_tensor_value_info("y", F, None)
    y.type.tensor_type.shape.SetInParent()
    g = helper.make_graph(nodes, "hostile", inputs, [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = m.SerializeToString()
    assert len(data) < 200  # a tiny file
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def empty_but_huge(path, op) -> str:
    """A node whose output dims are (0, 2**61): empty, but no array can have them."""
    s = numpy_helper.from_array(np.array([0, 2 ** 61], np.int64), "s")
    if op == "Reshape":
        x = helper.make_tensor_value_info("x", F, [0, 2])
        nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="big"),
                 helper.make_node("Mul", ["r", "r"], ["y"])]
    else:
        x = helper.make_tensor_value_info("x", F, [1, 2])
        nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="big"),
                 helper.make_node("Add", ["x", "c"], ["y"])]
    return save_tiny_model(nodes, [x], [s], path)
