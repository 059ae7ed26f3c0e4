"""Fixed fused-vs-unfused cases, one per row-local op, values and gradients bit for bit (host).

The op list is not written here: it is every op the fusion analysis names (gpu.fusion.analysis
BINARY and UNARY) plus every op the registry marks row-local, so a new op fails loudly until it
has a case below. Each case puts the op between a matmul and a tanh, so the op sits inside a fused
row segment with a gradient flowing through it, over 6 rows (2 x 3 positions for rope) of 4
columns. These cases are deterministic: a fused kernel that drops one write (rope's second half,
say) fails here every run, not only when a property test happens to draw rope.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.core.optable.registry import REGISTRY
from tapescope.gpu import fusion
from tapescope.gpu.fusion.analysis import BINARY, UNARY
from tests.helpers.fusion import diff_nodes

ROW_LOCAL_OPS = sorted(set(BINARY) | set(UNARY)
                       | {n for n, d in REGISTRY.items() if d.fusion != "none"})
SHAPE = (2, 3, 4)  # rows = 6 (rope: 3 positions), 4 columns (rope needs an even count)

# Registry says row-local, but the analysis does not fuse it (row_info returns None): the case
# still runs fused == unfused, and test_known_unfused_ops_are_really_unfused says when it changes.
# (erf fuses since the op table renders every C target from its one C form)
KNOWN_UNFUSED: dict[str, str] = {}


def _act2(t: Tape, x, rng):
    """A second activation of the same rows, from the same input."""
    return x @ t.param(rng.uniform(-1, 1, (SHAPE[-1], SHAPE[-1])) / 2, name="W2")


def _binary(op: str, whole: bool):
    def build(t: Tape, a, x, rng):
        if whole:  # a leaf broadcast over rows: its gradient comes from the param kernel
            b = rng.uniform(1.0, 2.0, SHAPE[-1]) * np.array([1, -1, 1, -1])
            return getattr(ops, op)(a, t.param(b, name="b"))
        b = _act2(t, x, rng)
        if op == "div":  # a denominator away from zero, still an activation of the segment
            b = ops.adds(ops.exp(b), 0.5)
        return getattr(ops, op)(a, b)
    return build


def _unary(op: str):
    def build(t: Tape, a, x, rng):
        if op in ("log", "sqrt"):
            a = ops.exp(a)  # a positive argument
        if hasattr(ops, op):
            return getattr(ops, op)(a)
        return t.record(op, [a], {})  # an op without a core.ops wrapper (erf)
    return build


CASES = {f"{op}/{kind}": _binary(op, kind == "whole") for op in BINARY
         for kind in ("act", "whole")}
CASES.update({op: _unary(op) for op in set(UNARY) | {"erf"}})
CASES["adds"] = lambda t, a, x, rng: ops.adds(a, 0.3125)
CASES["muls"] = lambda t, a, x, rng: ops.muls(a, -1.7)
CASES["softmax"] = lambda t, a, x, rng: ops.softmax(a)
CASES["log_softmax"] = lambda t, a, x, rng: ops.log_softmax(a)
CASES["rms_norm"] = lambda t, a, x, rng: ops.rms_norm(
    a, t.param(rng.uniform(0.5, 1.5, SHAPE[-1]), name="gamma"))
CASES["layer_norm"] = lambda t, a, x, rng: ops.layer_norm(
    a, t.param(rng.uniform(0.5, 1.5, SHAPE[-1]), name="gamma"), eps=1e-5)
CASES["rope"] = lambda t, a, x, rng: ops.rope(a, base=100.0)
CASES["swiglu"] = lambda t, a, x, rng: ops.swiglu(a, _act2(t, x, rng))
CASES["matmul"] = lambda t, a, x, rng: a @ t.param(rng.uniform(-1, 1, (SHAPE[-1], 6)), name="W3")


def case_op(case: str) -> str:
    return case.split("/")[0]


def test_every_row_local_op_has_a_fixed_case():
    missing = [op for op in ROW_LOCAL_OPS if not any(case_op(c) == op for c in CASES)]
    assert not missing, f"row-local ops without a fixed fused case in CASES: {missing}"
    # and no case for an op that no longer exists or is no longer row-local
    assert {case_op(c) for c in CASES} <= set(ROW_LOCAL_OPS)


def build(case: str, dtype: str):
    """x [2,3,4] param -> matmul -> the op -> tanh -> mean(z*z); returns tape, loss, op node."""
    rng = np.random.default_rng(sorted(CASES).index(case))
    t = Tape(dtype=dtype)
    x = t.param(rng.uniform(-1, 1, SHAPE), name="x")
    a = x @ t.param(rng.uniform(-1, 1, (SHAPE[-1], SHAPE[-1])), name="W")
    y = CASES[case](t, a, x, rng)
    z = ops.tanh(y)
    loss = ops.mean(ops.mul(z, z))
    assert t.ok, t.error
    return t, loss, y.id


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_equals_unfused_bit_for_bit(host, case, dtype):
    with np.errstate(all="ignore"):
        t, loss, op_id = build(case, dtype)
        t.backward(loss)
    pa = gpu.capture(host, t, loss)
    pb = gpu.capture(host, t, loss)
    plan = fusion.apply(pb)
    fused_ids = {i for s in plan.segments if s.kind == "row" for i in s.node_ids}
    if case_op(case) in KNOWN_UNFUSED:
        assert op_id not in fused_ids
    else:  # otherwise the comparison below would test nothing of the fused kernels
        assert op_id in fused_ids, plan.describe()
    assert pb.nodes[op_id].op == case_op(case)
    for prog in (pa, pb):
        prog.forward()
        prog.backward()
    # every node, value and gradient, fused == unfused, bit for bit
    assert diff_nodes(pa, pb) == [], plan.describe(sources=True)
    for which in ("value", "grad"):  # the op's own output really was computed (not all zero)
        assert np.any(pb.read(op_id, which) != 0), which
    rep = gpu.parity.compare(t, pb)
    assert rep.exact, rep.first_divergence


def test_known_unfused_ops_are_really_unfused():
    """When the analysis learns one of these ops, move it out of KNOWN_UNFUSED."""
    from tapescope.gpu.fusion.analysis import row_info

    for op in KNOWN_UNFUSED:
        t, loss, op_id = build(op, "float64")
        nodes = gpu.capture(gpu.open_device("host"), t, loss).nodes
        assert row_info(nodes, op_id) is None, f"{op} is fused now: drop it from KNOWN_UNFUSED"
