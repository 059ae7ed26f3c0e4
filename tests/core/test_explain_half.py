"""core.explain in a half episode: the reference accumulates in float32 and rounds once, so a
candidate that accumulates in float16 / bfloat16 itself (rounding at every add) is named
``accumulator``; an exact candidate is not introduced; another departure is not accumulator."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

from tapescope.core import precision
from tapescope.core.explain import explain, variants_for
from tapescope.core.provenance import StepState, provenance, reference_value

Nd = namedtuple("Nd", "id op inputs shape attrs requires_grad name")
HALF = pytest.mark.parametrize("dt", precision.HALF, ids=lambda d: d.name)


def _half_sum(x: np.ndarray) -> np.ndarray:
    """serial sum over the last axis with every add rounded to x's half type."""
    acc = np.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        acc = acc + x[..., k]
    return acc


def _half_mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """serial product with every product and add rounded to the half type."""
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
    for k in range(a.shape[1]):
        acc = acc + a[:, k, None] * b[None, k, :]
    return acc


def _episode(dt):
    """(nodes, inputs, planted half-accumulator outputs): sum, mean and matmul of half consts."""
    rng = np.random.default_rng(28)
    x = rng.standard_normal((4, 300)).astype(dt)
    a, b = rng.standard_normal((6, 64)).astype(dt), rng.standard_normal((64, 5)).astype(dt)
    red = {"axis": -1, "keepdims": False}
    nodes = (Nd(0, "const", (), x.shape, {}, False, "x"),
             Nd(1, "const", (), a.shape, {}, False, "a"),
             Nd(2, "const", (), b.shape, {}, False, "b"),
             Nd(3, "sum", (0,), (4,), red, False, "s"),
             Nd(4, "mean", (0,), (4,), red, False, "m"),
             Nd(5, "matmul", (1, 2), (6, 5), {}, False, "p"))
    s = _half_sum(x)
    planted = {3: s, 4: (s.astype(np.float32) / np.float32(300)).astype(dt), 5: _half_mm(a, b)}
    return nodes, {0: x, 1: a, 2: b}, planted


def _state(nodes, vals):
    return StepState(1, nodes, len(nodes) - 1, vals.get, lambda i: None)


@HALF
def test_a_half_accumulator_is_accumulator(dt):
    nodes, leaves, planted = _episode(dt)
    for i, cand in planted.items():
        n = nodes[i]
        ref = reference_value(n, [leaves[j] for j in n.inputs], dt)
        assert ref.dtype == dt and cand.dtype == dt
        assert not np.array_equal(ref, cand), f"{n.op}: the data must tell the accumulators apart"
    intro = provenance(_state(nodes, {**leaves, **planted}), explain=True).introduced
    assert sorted(e.node for e in intro) == [3, 4, 5]
    for e in intro:
        j = e.to_json()
        assert j["cause"] == "accumulator", (e.op, j)
        assert j["explain"]["variant"] == f"narrower accumulator ({dt.name}, rounded at every add)"


@HALF
def test_an_exact_half_candidate_is_not_introduced(dt):
    nodes, leaves, _ = _episode(dt)
    vals = dict(leaves)
    for n in nodes[3:]:
        vals[n.id] = reference_value(n, [vals[j] for j in n.inputs], dt)
    assert provenance(_state(nodes, vals), explain=True).introduced == []


@HALF
def test_another_half_departure_is_not_accumulator(dt):
    nodes, leaves, _ = _episode(dt)
    vals = dict(leaves)
    for n in nodes[3:]:
        ref = reference_value(n, [vals[j] for j in n.inputs], dt)
        u = precision.bits_types(dt)[1]
        vals[n.id] = (ref.view(u) + u(3)).view(dt)  # three ulp off everywhere: no variant's
    intro = provenance(_state(nodes, vals), explain=True).introduced
    assert sorted(e.node for e in intro) == [3, 4, 5]
    for e in intro:
        assert e.to_json()["cause"] == "unknown", (e.op, e.to_json())


@HALF
def test_a_float32_accumulator_in_a_half_episode_is_the_reference(dt):
    """The half reference accumulates in float32: a candidate that does is exact, not a cause."""
    nodes, leaves, _ = _episode(dt)
    x = leaves[0]
    f32 = np.zeros(4, dtype=np.float32)
    for k in range(x.shape[-1]):
        f32 = f32 + x[:, k].astype(np.float32)
    assert np.array_equal(f32.astype(dt), reference_value(nodes[3], [x], dt))


def test_half_variants_name_their_type_float32_has_no_narrower():
    for dt in precision.HALF:
        labels = [v.label for v in variants_for("sum", dt) if v.cause == "accumulator"]
        assert labels == ["wider accumulator",
                          f"narrower accumulator ({dt.name}, rounded at every add)",
                          f"{dt.name} intermediates (every step rounded to {dt.name})"]
    assert [v.label for v in variants_for("sum", np.float32) if v.cause == "accumulator"] == [
        "wider accumulator"]


def test_a_float64_accumulator_for_float32_is_accumulator():
    """The reverse: a float32 candidate that accumulated in float64, rounded once."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal((3, 500)).astype(np.float32)
    cand = np.add.accumulate(x.astype(np.float64), axis=-1)[:, -1].astype(np.float32)
    n = Nd(1, "sum", (0,), (3,), {"axis": -1, "keepdims": False}, False, "s")
    assert not np.array_equal(cand, reference_value(n, [x], np.float32))
    c = explain(n, [x], cand)
    assert (c.cause, c.variant) == ("accumulator", "wider accumulator")


@HALF
def test_half_ftz_flushes_in_the_half_type(dt):
    """ftz in a half episode flushes the half type's subnormals (bfloat16's numpy kind is V)."""
    tiny = float(precision.finfo(dt).tiny)
    a = np.array([tiny / 4, 1.0, -tiny / 2], dtype=dt)
    b = np.array([1.0, 4.0, 1.0], dtype=dt)
    cand = np.array([0.0, 0.25, -0.0], dtype=dt)
    n = Nd(2, "div", (0, 1), (3,), {}, False, "q")
    assert explain(n, [a, b], cand).cause == "ftz"


@HALF
def test_a_half_accumulated_matmul_gradient_is_accumulator(dt):
    """The gradient side: b's gradient a.T @ g of a matmul, planted with a half accumulator."""
    from tapescope.core.provenance import consumers, reference_grad

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 32)).astype(dt), rng.standard_normal((32, 5)).astype(dt)
    nodes = (Nd(0, "const", (), a.shape, {}, False, "a"),
             Nd(1, "param", (), b.shape, {}, True, "b"),
             Nd(2, "matmul", (0, 1), (64, 5), {}, True, "p"),
             Nd(3, "sum", (2,), (), {"axis": None, "keepdims": False}, True, "l"))
    vals = {0: a, 1: b}
    for n in nodes[2:]:
        vals[n.id] = reference_value(n, [vals[j] for j in n.inputs], dt)
    cons, grads = consumers(nodes, 3), {}
    for j in (3, 2, 1):
        grads[j] = reference_grad(nodes, j, 3, cons[j], vals.get, grads.get, dt)
    exact = provenance(StepState(1, nodes, 3, vals.get, grads.get), explain=True).introduced
    assert exact == []
    cand = {**grads, 1: _half_mm(np.ascontiguousarray(a.T), grads[2])}
    assert not np.array_equal(cand[1], grads[1]), "the data must tell the accumulators apart"
    (e,) = provenance(StepState(1, nodes, 3, vals.get, cand.get), explain=True).introduced
    assert (e.node, e.which, e.to_json()["cause"]) == (1, "grad", "accumulator")


@HALF
def test_a_composite_with_half_intermediates_is_accumulator(dt):
    """rope with its tables and products rounded to the half type (PyTorch's half rope casts
    cos/sin to x's type), where the reference computes in float32 and rounds once: named
    ``accumulator``, the half-intermediates variant; the reference's own output is not."""
    from tapescope.core import mathlib
    from tapescope.core.optable.registry import REGISTRY

    x = np.random.default_rng(7).standard_normal((2, 8, 16)).astype(dt)
    n = Nd(1, "rope", (0,), x.shape, {"base": 10000.0}, False, "q")
    cand = np.asarray(REGISTRY["rope"].forward(mathlib.get("refmath"), [x], dict(n.attrs)))
    cand = cand.astype(dt)
    ref = reference_value(n, [x], dt)
    assert not np.array_equal(cand, ref), "the data must tell the two apart"
    c = explain(n, [x], cand)
    assert (c.cause, c.variant) == ("accumulator",
                                    f"{dt.name} intermediates (every step rounded to {dt.name})")
    assert explain(n, [x], (ref.view(precision.bits_types(dt)[1]) + 3).view(dt)).cause \
        == "unknown"
