"""softplus, the op added by following docs/adding-an-op.md: where the naive formula fails.

``log(1 + exp(x))`` overflows for large x and loses the tail for very negative x; the table's
``max(x, 0) + log1p(exp(-|x|))`` does neither, and every backend computes it bit for bit
(kernels, fused kernels and emitc are rendered from the same C form; the generic tests walk it).
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.gpu import fusion
from tests.helpers.op_parity import assert_exact, run_case

EDGES = [-0.0, 0.0, 1e-300, -1e-300, 1e-8, -1e-8, 0.5, -0.5, 20.0, -20.0, 36.0, -36.0, 700.0,
         -700.0, 710.0, -745.0, 1000.0, -1000.0, 3e38, -3e38, np.inf, -np.inf, np.nan]


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia, ib = a.view(np.int64).astype(object), b.view(np.int64).astype(object)
    return np.array([abs(x - y) for x, y in zip(ia, ib, strict=True)])


def test_softplus_is_accurate_where_the_naive_formula_fails():
    t = Tape()
    x = np.array([v for v in EDGES if np.isfinite(v) and abs(v) < 1e30])
    y = t.value(ops.softplus(t.const(x)))
    with np.errstate(over="ignore"):
        naive = np.log(1 + np.exp(x))
    assert np.isinf(naive).any()  # the naive spelling overflows at 710 and 1000 ...
    assert np.isfinite(y).all()  # ... this one does not
    assert y[x == 1000.0][0] == 1000.0 and y[x == -1000.0][0] == 0.0
    # within a few ulp of the correctly rounded result (numpy's logaddexp is careful too)
    assert _ulps(y, np.logaddexp(0.0, x)).max() <= 2


def test_softplus_special_values_and_gradient():
    t = Tape()
    x = t.param(np.array([np.inf, -np.inf, np.nan, -0.0]))
    y = ops.softplus(x)
    t.backward(ops.sum(y))
    v, g = t.value(y), t.grad(x)
    assert v[0] == np.inf and v[1] == 0.0 and np.isnan(v[2]) and v[3] == np.log(2.0)
    assert g[0] == 1.0 and g[1] == 0.0 and np.isnan(g[2]) and g[3] == 0.5


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("math", ["refmath", "platform"])
def test_softplus_kernels_bit_identical_on_edge_values(host, dtype, math):
    x = np.array([v for v in EDGES if abs(v) < np.finfo(dtype).max or not np.isfinite(v)], dtype)
    with np.errstate(all="ignore"):
        tape, prog, rep = run_case(host, "softplus", [x], {}, dtype, math=math)
    if math == "refmath":
        assert_exact(rep, f"softplus {np.dtype(dtype).name}")
    else:  # platform libm: the same on host as numpy's only where both are correctly rounded
        assert rep.nodes[1].value.n == x.size


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_softplus_fuses_bit_for_bit(host, dtype):
    rng = np.random.default_rng(4)
    t = Tape(dtype)
    x = t.param(rng.uniform(-30, 30, (6, 8)))
    w = t.param(rng.uniform(-1, 1, (8, 8)))
    loss = ops.mean(ops.tanh(ops.softplus(x @ w)))
    t.backward(loss)
    pa, pb = gpu.capture(host, t, loss), gpu.capture(host, t, loss)
    plan = fusion.apply(pb)
    sp = next(n.id for n in t.nodes if n.op == "softplus")
    assert any(sp in s.node_ids for s in plan.segments if s.kind == "row")
    for p, what in ((pa, "unfused"), (pb, "fused")):
        p.forward()
        p.backward()
        assert_exact(gpu.parity.compare(t, p), f"softplus {dtype} {what}")


def test_the_walkthrough_shows_the_code_that_is_in_the_table():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "adding-an-op.md").read_text()
    snippet = doc.split("```python\n", 1)[1].split("```", 1)[0]
    assert snippet.strip() in (root / "core" / "ops" / "elementwise.py").read_text()
