"""The executor: agreement with onnxruntime, opset differences, and the reference order."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tapescope.core import mathlib
from tapescope.core.onnx import Session, run
from tapescope.core.onnx.reference import REFERENCE
from tapescope.core.ops import REGISTRY
from tapescope.core.ops import reference as tape_ref
from tests.helpers.onnx_nodes import one_node

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "resources", "models")
RNG = np.random.default_rng(7)


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString() if not isinstance(model, str) else model,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", ["tiny_mlp", "tiny_convnet"])
def test_example_models_match_onnxruntime(name):
    path = os.path.join(MODELS, f"{name}.onnx")
    x = np.load(os.path.join(MODELS, f"{name}.input.x.npy"))
    ours = list(run(path, {"x": x}).values())
    theirs = _ort(path, {"x": x})
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=False):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_softmax_opset_11_flattens_at_axis_but_13_does_not():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    y11 = run(one_node("Softmax", {"x": x}, opset=11, axis=1), {"x": x})["y0"]
    y13 = run(one_node("Softmax", {"x": x}, opset=13, axis=1), {"x": x})["y0"]
    np.testing.assert_allclose(y11.reshape(2, 12).sum(1), 1, rtol=1e-6)  # one row per batch
    np.testing.assert_allclose(y13.sum(1), 1, rtol=1e-6)  # normalised along axis 1 only
    assert not np.allclose(y11, y13)
    for opset in (11, 13):
        ref = _ort(one_node("Softmax", {"x": x}, opset=opset, axis=1), {"x": x})[0]
        got = y11 if opset == 11 else y13
        np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_reduce_axes_attribute_before_opset_18_input_after():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    a = run(one_node("ReduceMean", {"x": x}, opset=17, axes=[0, 2], keepdims=0), {"x": x})["y0"]
    b = run(one_node("ReduceMean", {"x": x}, opset=18, keepdims=0,
                     inits={"axes": np.array([0, 2], np.int64)}), {"x": x})["y0"]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, x.mean(axis=(0, 2)), rtol=1e-5)


def _bits(a):
    return np.asarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint64)


def test_matmul_is_the_serial_k_loop_bit_for_bit():
    a = RNG.standard_normal((3, 17)).astype(np.float32)
    b = RNG.standard_normal((17, 4)).astype(np.float32)
    got = run(one_node("MatMul", {"a": a, "b": b}, out_shapes={"y0": (3, 4)}),
              {"a": a, "b": b})["y0"]
    want = np.zeros((3, 4), np.float32)
    for i in range(3):
        for j in range(4):
            acc = np.float32(0.0)
            for k in range(17):
                acc = np.float32(acc + np.float32(a[i, k] * b[k, j]))
            want[i, j] = acc
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_gemm_reduce_and_softmax_agree_with_the_tape_bit_for_bit():
    x = RNG.standard_normal((5, 33)).astype(np.float64)
    w = RNG.standard_normal((33, 7)).astype(np.float64)
    c = RNG.standard_normal(7).astype(np.float64)
    gemm = run(one_node("Gemm", {"x": x, "w": w, "c": c}, out_shapes={"y0": (5, 7)}),
               {"x": x, "w": w, "c": c})["y0"]
    np.testing.assert_array_equal(_bits(gemm), _bits(tape_ref.matmul(x, w) + c))
    M = mathlib.get("refmath")
    sm = run(one_node("Softmax", {"x": x}, opset=13, axis=-1), {"x": x})["y0"]
    tape_sm = REGISTRY["softmax"].forward(M, [x], {"axis": -1})
    np.testing.assert_array_equal(_bits(sm), _bits(tape_sm))
    mean = run(one_node("ReduceMean", {"x": x}, opset=17, axes=[1], keepdims=1), {"x": x})["y0"]
    tape_mean = REGISTRY["mean"].forward(M, [x], {"axis": 1, "keepdims": True})
    np.testing.assert_array_equal(_bits(mean), _bits(tape_mean))
    for op, tape_op in (("Exp", "exp"), ("Tanh", "tanh"), ("Sigmoid", "sigmoid"), ("Relu", "relu")):
        y = run(one_node(op, {"x": x}), {"x": x})["y0"]
        np.testing.assert_array_equal(_bits(y), _bits(REGISTRY[tape_op].forward(M, [x], {})))


def test_reference_kernels_are_the_tapes_own():
    assert REFERENCE.math == "refmath" and REFERENCE.sum is tape_ref.serial_sum
    x = RNG.standard_normal(50).astype(np.float16)  # refmath takes f32/f64: f16 via f32, once
    np.testing.assert_array_equal(REFERENCE.exp(x),
                                  mathlib.get("refmath").exp(x.astype(np.float32)).astype(
                                      np.float16))


def test_reference_sum_is_serial_not_pairwise():
    # 1 + 1e-8 * n: serial float32 loses every tiny term, pairwise summation keeps some
    x = np.concatenate([[1.0], np.full(4095, 1e-8)]).astype(np.float32)
    acc = np.float32(0)
    for v in x:
        acc = np.float32(acc + v)
    assert REFERENCE.sum(x) == acc


def test_conv_matches_onnxruntime_with_groups_strides_dilations_and_padding():
    x = RNG.standard_normal((2, 4, 11, 9)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    attrs = dict(group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1])
    m = one_node("Conv", {"x": x, "w": w, "b": b}, out_shapes={"y0": ["n", "c", "h", "w"]}, **attrs)
    got = run(m, {"x": x, "w": w, "b": b})["y0"]
    ref = _ort(m, {"x": x, "w": w, "b": b})[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_if_and_loop_subgraphs_see_the_outer_scope():
    # Loop 4 times: acc = acc + x (x from the outer scope)
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([1, 2, 3], np.float32)
    out = Session(m).run({"x": x, "n": np.array(4), "acc0": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(out["acc"], 4 * x)
