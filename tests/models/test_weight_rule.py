"""What makes an ONNX value a trainable weight (docs/models.md): floating initializers with at
least one dimension, ConstantOfShape outputs and what is folded from them; never a ``Constant``
node, never a 0-d value."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from core.onnx.executor import Session
from core.onnx.importer import import_to_tape
from core.tape import Tape


def _model():
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Mul", ["h", "scale0d"], ["hs"]),  # a 0-d initializer: a constant
        helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(
            np.full((3,), 0.5, np.float32))),  # a Constant node, >= 1 dims: still a constant
        helper.make_node("Mul", ["hs", "half"], ["hh"]),
        helper.make_node("Transpose", ["bt"], ["b"], perm=[1, 0]),  # folded from a weight
        helper.make_node("Add", ["hh", "b"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "rule", [helper.make_tensor_value_info("x", f, [2, 4])],
        [helper.make_tensor_value_info("y", f, [2, 3])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
         numpy_helper.from_array(np.array(0.125, np.float32), "scale0d"),
         numpy_helper.from_array(np.zeros((3, 1), np.float32), "bt")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_weights_by_the_stated_rule():
    for fold in (False, True):  # the workload folds first (Constant nodes become inits there)
        sess = Session(_model(), fold=fold)
        imp = import_to_tape(sess, Tape(np.float32), {"x": np.ones((2, 4), np.float32)})
        assert set(imp.params) == {"w", "b"}, fold
        assert imp.params["b"].shape == (1, 3)
