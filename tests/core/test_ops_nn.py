"""The nn tape ops (conv2d, maxpool2d, avgpool2d, erf, gather): grad-check and reference order.

They are registered for this module only and taken out afterwards: they have no device kernels
yet, and tests/gpu checks that every registered op has one.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tapescope.core import Tape, gradcheck, ops
from tapescope.core.ops import REGISTRY
from tapescope.core.ops import nn as nn_ops
from tapescope.core.ops.reference import matmul

NAMES = [d.name for d in nn_ops.NN_OPS]


def test_nn_ops_are_registered_with_the_rest():
    assert set(NAMES) <= set(REGISTRY)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck(name):
    r = gradcheck.check_op(name)
    assert r.inputs_checked > 0
    assert r.ok, f"{name}: max error {r.max_err:.3e}"


@pytest.mark.parametrize("name", NAMES)
def test_definition_is_complete(name):
    d = REGISTRY[name]
    assert d.doc and d.forward and d.backward and d.sample
    assert d.sample(np.random.default_rng(0), np.dtype(np.float32))


def test_conv2d_is_serial_over_c_kh_kw_bit_for_bit():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    t = Tape(np.float32)
    y = t.value(t.record("conv2d", [t.const(x), t.const(w)], {"pads": (1, 1, 1, 1)}))
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    want = np.zeros((1, 3, 4, 4), np.float32)
    for m in range(3):
        for i in range(4):
            for j in range(4):
                acc = np.float32(0)
                for c in range(2):
                    for a in range(3):
                        for b in range(3):
                            p = np.float32(w[m, c, a, b] * xp[0, c, i + a, j + b])
                            acc = np.float32(acc + p)
                want[0, m, i, j] = acc
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


def _ort_node(op, x, **attrs):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_pools_match_onnxruntime():
    x = np.random.default_rng(2).standard_normal((2, 3, 7, 6)).astype(np.float32)
    t = Tape(np.float32)
    v = t.const(x)
    geo = {"kernel": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 1), "ceil_mode": 1}
    mx = t.value(t.record("maxpool2d", [v], geo))
    av = t.value(t.record("avgpool2d", [v], {**geo, "count_include_pad": 0}))
    onnx_geo = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1)
    np.testing.assert_array_equal(mx, _ort_node("MaxPool", x, **onnx_geo))
    np.testing.assert_allclose(av, _ort_node("AveragePool", x, **onnx_geo), rtol=1e-5, atol=1e-6)


def test_erf_matches_math_erf_and_gather_accumulates_repeats():
    x = np.linspace(-3, 3, 13)
    t = Tape(np.float64)
    y = t.value(t.record("erf", [t.const(x)]))
    np.testing.assert_allclose(y, [math.erf(v) for v in x], rtol=0, atol=1e-15)
    t = Tape(np.float64)
    w = t.param(np.arange(8.0).reshape(4, 2))
    rows = t.record("gather", [w, t.const(np.array([1, 3, 1]))], {"axis": 0})
    t.backward(ops.sum(rows))
    np.testing.assert_array_equal(t.grad(w), [[0, 0], [2, 2], [0, 0], [1, 1]])


def test_conv2d_weight_gradient_is_dot_over_pixels_then_serial_over_batch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 4, 4))
    w = rng.standard_normal((2, 2, 2, 2))
    t = Tape(np.float64)
    wv = t.param(w)
    y = t.record("conv2d", [t.const(x), wv], {})
    g = rng.standard_normal(y.shape)
    t.backward(ops.sum(y * t.const(g)))
    cols, _ = nn_ops.im2col(x, (2, 2), (1, 1), (1, 1), [(0, 0), (0, 0)], 1)
    per_n = [matmul(g[n].reshape(1, 2, -1), cols[n].swapaxes(-1, -2)) for n in range(3)]
    want = np.zeros_like(per_n[0])
    for p in per_n:
        want = want + p
    np.testing.assert_array_equal(t.grad(wv), (0.0 + want).reshape(w.shape))


@pytest.mark.parametrize(("op", "x_shape", "w_shape"), [
    ("conv2d", (0, 3, 5, 5), (4, 3, 3, 3)),  # an empty batch
    ("conv2d", (2, 0, 5, 5), (4, 0, 3, 3)),  # no channels
    ("conv2d", (2, 3, 5, 5), (0, 3, 3, 3)),  # no filters
    ("maxpool2d", (0, 3, 4, 4), None),
    ("maxpool2d", (2, 0, 4, 4), None),
    ("avgpool2d", (0, 3, 4, 4), None),
])
def test_an_empty_batch_poisons_the_tape_naming_op_node_and_shapes(op, x_shape, w_shape):
    # it used to record and then raise a raw ValueError (a reshape of size 0) in backward
    tape = Tape()
    x = tape.param(np.zeros(x_shape), name="x")
    inputs = [x] if w_shape is None else [x, tape.param(np.ones(w_shape), name="w")]
    attrs = {} if op == "conv2d" else {"kernel": (2, 2)}
    y = tape.record(op, inputs, attrs)
    assert not tape.ok
    node = len(inputs)
    assert tape.error.startswith(f"node {node} {op}: ") and str(x_shape) in tape.error
    if w_shape is not None:
        assert str(w_shape) in tape.error
    assert ops.sum(y).tape is tape and not tape.ok  # later ops return without computing
