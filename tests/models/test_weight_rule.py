"""What makes an ONNX value a trainable weight (docs/models.md): floating initializers with at
least one dimension, ConstantOfShape outputs of a constant shape and what a view folds from
them; never a ``Constant`` node, a 0-d value, what is computed from a Shape, or a broadcast of
a weight (the weight itself trains, broadcast on the tape). The zoo's models:
test_parameters.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import ops
from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.importer import import_to_tape
from tapescope.core.tape import Tape


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


def _shapes_model():
    """x @ w scaled by 1/sqrt(x.shape[-1]) (a (1,) value computed from a Shape), plus a class
    token broadcast to x's batch (Expand of a weight to a shape read from x)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Slice", ["sh", "m1", "end"], ["d"]),  # [4]
        helper.make_node("Cast", ["d"], ["df"], to=f),
        helper.make_node("Sqrt", ["df"], ["scale"]),  # (1,) from a Shape: a constant
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Div", ["h", "scale"], ["hs"]),
        helper.make_node("Slice", ["sh", "zero", "one"], ["b"]),  # the batch
        helper.make_node("Concat", ["b", "tail"], ["to"], axis=0),
        helper.make_node("Expand", ["cls", "to"], ["c"]),  # a broadcast of a weight
        helper.make_node("Add", ["hs", "c"], ["y"]),
    ]
    ints = {"m1": [-1], "end": [2 ** 62], "zero": [0], "one": [1], "tail": [3]}
    g = helper.make_graph(
        nodes, "shapes", [helper.make_tensor_value_info("x", f, [2, 4])],
        [helper.make_tensor_value_info("y", f, [2, 3])],
        [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w"),
         numpy_helper.from_array(np.array([[0.5, -1.0, 2.0]], np.float32), "cls")]
        + [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_value_from_shapes_is_a_constant_and_a_broadcast_trains_its_weight():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = Session(_shapes_model()).run({"x": x})["y"]
    for fold in (False, True):
        sess = Session(_shapes_model(), fold=fold)
        tape = Tape(np.float32)
        imp = import_to_tape(sess, tape, {"x": x})
        # the scale is no weight; the class token is one weight of its own shape, broadcast
        # on the tape (its gradient sums the batch), not a (2, 3) copy of it
        assert {k: v.shape for k, v in imp.params.items()} == {"w": (4, 3), "cls": (1, 3)}
        y = imp.outputs["y"]
        np.testing.assert_array_equal(np.asarray(y.value), want)
        tape.backward(ops.sum(y))
        np.testing.assert_array_equal(np.asarray(tape.grad(imp.params["cls"].id)), [[2, 2, 2]])


def test_a_folded_transpose_of_a_weight_is_tied_to_it_and_an_equal_symmetric_one_is_not():
    from tapescope.core.onnx.importer import tied_copies

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((5, 3))
    eye = np.eye(3)
    values = {"emb.weight": emb, "onnx::MatMul_7": emb.T.copy(), "a.weight": eye,
              "b.weight": eye.copy(), "zeros": np.zeros((3, 5)), "zeros_t": np.zeros((5, 3))}
    # the exporter's copy is the transpose of the parameter (not the other way round); two
    # identity inits and two all-zero weights are equal, not tied
    assert tied_copies(set(values), values) == {"onnx::MatMul_7": "emb.weight"}
