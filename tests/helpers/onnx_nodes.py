"""Tiny model builders shared by the ONNX tests."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def one_node(op_type: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 17,
             inits: dict[str, np.ndarray] | None = None, out_shapes=None, **attrs):
    """A one-node model whose graph inputs are ``inputs`` (shapes and dtypes taken from them)."""
    inits = inits or {}
    names = list(inputs) + list(inits)
    outs = [f"y{i}" for i in range(n_out)]
    first = next(iter(inputs.values()))
    node = helper.make_node(op_type, names, outs, name=f"the_{op_type.lower()}", **attrs)
    g = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, F, (out_shapes or {}).get(o, first.shape))
         for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
