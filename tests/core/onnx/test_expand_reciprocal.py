"""Expand and Reciprocal have tape forms (issue 45 item 2: ``cls.expand``, GQA's repeat_kv,
HF RMSNorm's ``torch.rsqrt``), lowered onto mul and div (docs/reference-order-nn.md): the
forward is the executor's bit for bit, -0.0, inf and NaN included, and the gradient is the
derivative (central differences in float64); a broadcast's gradient sums the repeated axes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import ops
from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.importer import import_to_tape
from tapescope.core.tape import Tape


def _model(op: str, shape_in, shape_out, extra=()):
    f = TensorProto.DOUBLE
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in extra]
    node = helper.make_node(op, ["x", *(k for k, _ in extra)], ["y"])
    g = helper.make_graph([node], op, [helper.make_tensor_value_info("x", f, shape_in)],
                          [helper.make_tensor_value_info("y", f, shape_out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


CASES = [
    ("Expand", (3, 1, 4), (2, 3, 5, 4), [("shape", [2, 3, 5, 4])]),  # a new and a size-1 axis
    ("Expand", (2, 1, 3), (2, 1, 3), [("shape", [1, 1])]),  # a shape that grows nothing
    ("Reciprocal", (3, 4), (3, 4), []),
]


@pytest.mark.parametrize("op, shape, out, extra", CASES, ids=["expand", "expand-noop", "recip"])
def test_forward_bits_and_gradient(op, shape, out, extra):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    special = x.copy()
    special.flat[:4] = [-0.0, np.inf, np.nan, 0.0]
    model = _model(op, list(shape), list(out), extra)
    for data in (x, special):
        want = Session(model).run({"x": data})["y"]
        tape = Tape(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):  # 1 / 0.0: inf, as the executor
            y = import_to_tape(Session(model, fold=False), tape, {"x": data}).outputs["y"]
        got = np.asarray(y.value)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
    # the gradient of sum(w * y) by central differences (the tape's x is a param here)
    w = rng.standard_normal(want.shape)
    tape = Tape(np.float64)
    xp = tape.param(x, name="x")
    y = import_to_tape(Session(model, fold=False), tape, {"x": xp}).outputs["y"]
    tape.backward(ops.sum(ops.mul(y, tape.const(w))))
    g = np.asarray(tape.grad(xp.id))
    num = np.zeros_like(x)
    f = Session(model)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = 1e-6
        num.flat[i] = (np.sum(w * f.run({"x": x + e})["y"])
                       - np.sum(w * f.run({"x": x - e})["y"])) / 2e-6
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)
