"""ONNX models for the planned executor's tests and the bit checks of a planned run against a
plain one (tests/core/onnx/test_plan.py, test_plan_concat.py, test_plan_epilogue.py,
test_arena.py)."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tapescope.core.onnx import Session


def specials(x: np.ndarray, every: int = 37) -> np.ndarray:
    x = x.copy()
    flat = x.reshape(-1)
    flat[::every] = np.nan
    flat[5::every] = np.inf
    flat[9::every] = -np.inf
    flat[13::every] = -0.0
    flat[17::every] = 0.0
    return x


def planned_values(sess: Session, planned: bool = True) -> list[str]:
    """Every node output the planned run materialises."""
    hidden = sess.plan().hidden if planned and sess.plan() is not None else frozenset()
    return [o for st in sess.graph.steps for o in st.node.output if o and o not in hidden]


def same_bits(planned: Session, plain: Session, feeds: dict) -> int:
    names = planned_values(planned)
    got = planned.run(feeds, outputs=names)
    want = plain.run(feeds, outputs=names)
    for n in names:
        assert_same_bits(got[n], want[n], n)
    return len(names)


def assert_same_bits(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    if a.dtype.kind != "f":
        assert a.tobytes() == b.tobytes(), what
        return
    na, nb = np.isnan(a), np.isnan(b)
    assert np.array_equal(na, nb), what
    u = np.dtype(f"u{a.dtype.itemsize}")
    assert np.array_equal(a[~na].view(u), b[~nb].view(u)), what


def make_model(nodes, inputs: dict, inits: dict, outputs: list[str], opset: int = 17):
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(
            next(iter(inputs.values())).dtype), ["n", "c", "h", "w"]) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def spread(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    return x * np.exp2(rng.integers(-6, 6, shape)).astype(dtype)


def bn_params(rng, c, dtype, prefix):
    scale = spread(rng, (c,), dtype)
    scale[0] = -0.0
    bias = spread(rng, (c,), dtype)
    mean = spread(rng, (c,), dtype)
    mean[-1] = np.inf
    var = np.abs(spread(rng, (c,), dtype))
    var[1 % c] = 0.0  # with epsilon=0 below: a division by zero
    return {f"{prefix}s": scale, f"{prefix}b": bias, f"{prefix}m": mean, f"{prefix}v": var}


def budgets(monkeypatch, sess, feeds):
    """The Budget of one run of ``sess``."""
    made = []
    real = Session.budget

    def budget(self, cancel=None):
        b = real(self, cancel)
        made.append(b)
        return b
    monkeypatch.setattr(Session, "budget", budget)
    sess.run(feeds)
    monkeypatch.setattr(Session, "budget", real)
    return made[-1]
