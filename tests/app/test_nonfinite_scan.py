"""The batched NaN/inf scans answer exactly as the per-array loops they replaced."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tapescope.app.step_history import produced_nonfinite


def _finite(a) -> bool:
    return a is None or np.asarray(a).dtype.kind != "f" or bool(np.isfinite(a).all())


def oracle_produced(nodes, value, grad=None) -> list[int]:
    """The per-array loop produced_nonfinite was (the oracle)."""
    nodes = list(nodes)
    fin_v, fin_g, consumers = {}, {}, {}
    for n in nodes:
        fin_v[n.id] = _finite(value(n.id))
        fin_g[n.id] = True if grad is None else _finite(grad(n.id))
        for j in n.inputs:
            consumers.setdefault(j, []).append(n.id)
    out = set()
    for n in nodes:
        if n.inputs and not fin_v[n.id] and all(fin_v.get(j, True) for j in n.inputs):
            out.add(n.id)
        if not fin_g[n.id] and all(fin_g.get(c, True) for c in consumers.get(n.id, ())):
            out.add(n.id)
    return sorted(out)


class N(NamedTuple):
    id: int
    inputs: tuple[int, ...]


def _random_graph(seed: int, first: int = 0):
    """A DAG of ``first``.. ids (inputs may lie outside it), NaN/inf sprinkled on values and
    gradients, some gradients None, some values integer."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    nodes, vals, grads = [], {}, {}
    for k in range(n):
        i = first + k
        ins = tuple(int(j) for j in rng.integers(max(0, first - 3), i, size=rng.integers(
            0, 4))) if i else ()
        nodes.append(N(i, ins))
        v = rng.standard_normal(int(rng.integers(0, 6)))
        if v.size and rng.random() < 0.25:
            v[rng.integers(0, v.size)] = (np.nan, np.inf, -np.inf)[k % 3]
        vals[i] = v if rng.random() > 0.05 else np.arange(3)
        g = None if rng.random() < 0.15 else rng.standard_normal(v.shape).astype(np.float32)
        if g is not None and g.size and rng.random() < 0.2:
            g[0] = np.nan
        grads[i] = g
    return nodes, vals, grads


def test_produced_nonfinite_is_the_per_array_rule():
    for seed in range(60):
        nodes, vals, grads = _random_graph(seed, first=seed % 3 * 5)
        assert produced_nonfinite(nodes, vals.get, grads.get) == oracle_produced(
            nodes, vals.get, grads.get), seed
        assert produced_nonfinite(nodes, vals.get) == oracle_produced(nodes, vals.get), seed


def test_produced_nonfinite_on_a_recorded_tape_with_a_mask_and_a_nan():
    from tapescope.core import Tape, ops

    t = Tape()
    x = t.param(np.array([[0.5, 1.0], [2.0, -1.0]]), name="x")
    mask = t.const(np.array([[0.0, -np.inf], [0.0, 0.0]]), name="mask")
    s = ops.softmax(x + mask)
    y = ops.log(x)
    loss = ops.sum(s) + ops.sum(y)
    t.backward(loss)
    assert produced_nonfinite(t.nodes, t.value, t.grad) == oracle_produced(
        t.nodes, t.value, t.grad)


def test_session_scans_share_one_and_follow_new_gradients():
    from tapescope.app.session import Session
    from tapescope.core import Tape, ops
    from tapescope.views.models.array_stats import has_nonfinite

    t = Tape()
    x = t.param(np.array([1.0, -1.0, 4.0]), name="x")
    mask = t.const(np.array([0.0, -np.inf, 0.0]), name="mask")
    y = ops.log(x) + mask
    loss = ops.sum(ops.exp(y))
    t.backward(loss)
    s = Session(t, loss.id, "test")
    ids = range(len(t))
    held = [i for i in ids if has_nonfinite(t.value(i)) or has_nonfinite(s.grads[i])]
    assert s.nonfinite() == held and held
    first_v = [i for i in ids if has_nonfinite(t.value(i))]
    assert s.first_nonfinite() == first_v[0]
    assert s.produced_nonfinite() == oracle_produced(t.nodes, t.value, s.grads.__getitem__)
    flags = s.nonfinite_flags()
    assert s.nonfinite_flags() is flags  # one scan, kept
    s.snapshot_gradients()
    assert s.nonfinite_flags() is not flags  # new gradients: scanned again
    assert dict(s.labels()) == {n.id: f"{n.op} {n.name or ''}".strip() for n in t.nodes}
    assert s.labels().get(len(t)) is None and len(s.labels()) == len(t)
