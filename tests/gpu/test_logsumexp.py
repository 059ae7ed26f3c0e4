"""log_sum_exp: the op table's reduction with one output per row (RowForm out="row").

The table walks (test_ops_parity, test_row_forms, test_ops_tape_form, ...) hold it like every op
on its samples; this file holds what is special about it: the guard (``mf``: a row of -inf is
-inf, a +inf is +inf, as torch.logsumexp) against PyTorch, and its generated kernels over every
axis, a row of one and a long row, in every dtype the host backend runs, bit for bit with the
tape, values and gradients; a fused tape around it, fused == unfused; and emitc's C of it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.core.ops import REGISTRY

INF = np.inf


def test_the_guard_rows_are_torch_s():
    torch = pytest.importorskip("torch")
    x = np.array([[-INF, -INF, -INF], [INF, 1.0, 2.0], [np.nan, 1.0, 2.0], [-INF, 0.5, -1.0],
                  [1e308, 1e308, -1e308]])
    t = Tape()
    with np.errstate(all="ignore"):  # -1e308 - 1e308 is -inf: its exp is 0, as it should be
        y = ops.log_sum_exp(t.param(x)).value
        # without the guard, x - max is NaN on the first two rows
        naive = np.max(x, -1) + np.log(np.sum(np.exp(x - np.max(x, -1, keepdims=True)), -1))
    want = torch.logsumexp(torch.from_numpy(x), dim=-1).numpy()
    assert y[0] == -INF and y[1] == INF and np.isnan(y[2])
    assert np.isfinite(y[3:]).all()
    np.testing.assert_array_equal(y[:3], want[:3])
    np.testing.assert_allclose(y[3:], want[3:], rtol=1e-15)  # torch: its own sum order
    assert np.isnan(naive[:2]).all()


def _episode(dt: str, shape: tuple, axis: int, seed: int):
    rng = np.random.default_rng(seed)
    t = Tape(dt)
    x = t.param(rng.uniform(-3, 3, shape), name="x")
    y = ops.log_sum_exp(x, axis=axis)
    w = t.const(rng.standard_normal(y.shape))
    loss = ops.sum(ops.mul(ops.tanh(y), w))
    t.backward(loss)
    return t, loss


CASES = [((5, 7), -1), ((5, 7), 0), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), 2),
         ((9,), 0), ((4, 1), -1), ((1, 4), 0), ((2, 1000), -1), ((2, 2, 3, 2), 2)]


@pytest.mark.parametrize("dt", ["float64", "float32", "float16", "bfloat16"])
def test_generated_kernels_replay_the_tape_bit_for_bit_on_every_axis(host, dt):
    for k, (shape, axis) in enumerate(CASES):
        t, loss = _episode(dt, shape, axis, k)
        prog = gpu.capture(host, t, loss)
        prog.forward()
        prog.backward()
        rep = gpu.parity.compare(t, prog)
        node = rep.nodes[1]
        assert node.op == "log_sum_exp" and node.value.n == t.node(1).size, (shape, axis)
        assert rep.nodes[0].grad is not None and rep.nodes[0].grad.n == t.node(0).size
        bad = [(n.id, n.op) for n in rep.nodes if not n.exact]
        assert rep.exact, f"{dt} {shape} axis {axis}: differing nodes {bad}"


def test_a_fused_tape_around_it_is_the_unfused_one(host):
    """fusion="none": a row segment ends at it and starts again after it; fused == unfused."""
    rng = np.random.default_rng(5)
    t = Tape()
    x = t.param(rng.uniform(-1, 1, (6, 4)), name="x")
    w1 = t.param(rng.uniform(-1, 1, (4, 4)), name="W1")
    h = ops.tanh(ops.matmul(x, w1))
    s = ops.log_sum_exp(ops.relu(h), axis=-1)  # [6]
    z = ops.reshape(s, (3, 2))
    w2 = t.param(rng.uniform(-1, 1, (2, 3)), name="W2")
    loss = ops.mean(ops.sigmoid(ops.matmul(ops.tanh(z), w2)))
    t.backward(loss)
    plain = gpu.capture(host, t, loss)
    fused = gpu.capture(host, t, loss, fuse=True)
    assert fused.fusion is not None and fused.fusion.segments, "nothing fused: the case is vacuous"
    assert [s.kind for s in fused.fusion.segments].count("row") >= 2  # before it and after it
    assert not any("log_sum_exp" in seg.ops for seg in fused.fusion.segments)
    for p in (plain, fused):
        p.forward()
        p.backward()
        assert gpu.parity.compare(t, p).exact


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_emitc_spells_it_over_a_row_of_one(tmp_path, dt):
    """emitc's rule is the row form over one element: gcc's run is the tape, bit for bit."""
    from tests.helpers.emitc import compile_all, emit_traced, run_traced, same

    t = Tape(dt)
    xs = [t.param(np.array([v]), name=f"x{k}") for k, v in enumerate((0.75, -2.5, 40.0))]
    loss = ops.tanh(ops.log_sum_exp(xs[0]))
    for x in xs[1:]:
        loss = ops.add(loss, ops.mul(ops.log_sum_exp(x, axis=0), loss))
    t.backward(loss)
    lib = compile_all(tmp_path, [emit_traced(t, loss, {}, "lse")])
    got, g, tv, tg = run_traced(lib, "lse", t, {}, np.zeros(len(xs)))
    assert same(got, loss.value)
    assert same(tv, [t.value(i).reshape(-1)[0] for i in range(len(t))])
    assert same(g, [x.grad[0] for x in xs])


def test_it_is_one_entry_of_the_table():
    d = REGISTRY["log_sum_exp"]
    assert d.row is not None and d.row.out == "row" and d.c is None
    assert d.kind == "reduce" and d.transcendental and d.fusion == "none"
