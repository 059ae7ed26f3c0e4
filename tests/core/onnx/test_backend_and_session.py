"""Backend API, constant folding, schema function bodies, fast vs reference mode."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from tapescope.core.onnx import Backend, Session, run
from tests.helpers.onnx_nodes import one_node

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "resources", "models")


def test_backend_prepare_run_and_run_node():
    m = onnx.load(os.path.join(MODELS, "tiny_mlp.onnx"))
    x = np.load(os.path.join(MODELS, "tiny_mlp.input.x.npy"))
    rep = Backend.prepare(m, "CPU")
    (y,) = rep.run([x])
    np.testing.assert_allclose(y, np.load(os.path.join(MODELS, "tiny_mlp.expected.probs.npy")),
                               rtol=1e-5)
    assert Backend.supports_device("CPU") and not Backend.supports_device("CUDA")
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(Backend.run_node(node, [a, b])[0], a + b)


def test_constant_subgraphs_fold_once_with_the_same_results():
    # y = x + ConstantOfShape(Shape-of-a-constant) * 2: everything but the last Add is constant
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Mul", ["ones", "two"], ["twos"]),
             helper.make_node("Add", ["x", "twos"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "shape"),
                           onnx.numpy_helper.from_array(np.float32(2), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    folded, plain = Session(m), Session(m, fold=False)
    assert folded.folded == 2 and len(folded.graph.steps) == 1 and len(plain.graph.steps) == 3
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(folded.run({"x": x})["y"], plain.run({"x": x})["y"])
    np.testing.assert_array_equal(folded.run({"x": x})["y"], x + 2)


def test_an_op_defined_by_its_schema_function_runs_its_body():
    # HannWindow has no kernel here: its ONNX function body (Range, Cos, ...) is run instead
    m = one_node("HannWindow", {"n": np.array(8, np.int64)}, opset=17, out_shapes={"y0": [8]})
    y = run(m, {"n": np.array(8, np.int64)})["y0"]
    k = np.arange(8)
    np.testing.assert_allclose(y, 0.5 - 0.5 * np.cos(2 * np.pi * k / 8), atol=1e-6)


def test_fast_mode_agrees_with_reference_to_rounding():
    path = os.path.join(MODELS, "tiny_convnet.onnx")
    x = np.load(os.path.join(MODELS, "tiny_convnet.input.x.npy"))
    ref = run(path, {"x": x})["y"]
    fast = run(path, {"x": x}, mode="fast")["y"]
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-6)
