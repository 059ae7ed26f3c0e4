"""core.explain: the variants of the reference order, each held to what it claims, and the
cause it names for candidates that depart in one known way."""

from __future__ import annotations

from collections import namedtuple
from fractions import Fraction

import numpy as np
import pytest

from tapescope.core import explain_prims, mathlib
from tapescope.core.explain import CAUSES, FORMULAS, VARIANTS, Prims, explain, fma, variants_for
from tapescope.core.optable.registry import REGISTRY

Node = namedtuple("Node", "op attrs shape")
rng = np.random.default_rng(7)


@pytest.mark.parametrize("how", ["fma", "fma_emulated"])
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_fma_rounds_once(dt, how):
    """explain's fma (C's fma where native code runs) and numpy's emulation alone."""
    a, b = rng.standard_normal((2, 600)).astype(dt)
    c = (rng.standard_normal(600) * 1e-3).astype(dt)
    c[:200] = -(a[:200].astype(np.float64) * b[:200]).astype(dt)  # cancellation: the hard case
    got = getattr(explain_prims, how)(a, b, c)
    exact = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
             for x, y, z in zip(a, b, c, strict=True)]
    # float(Fraction) rounds correctly to float64; np.float32(float) would round twice
    want = np.array([float(e) for e in exact]) if dt == np.float64 else np.array(
        [_nearest32(e) for e in exact], dtype=np.float32)
    assert got.dtype == dt
    assert np.array_equal(got, want)
    plain = a * b + c
    assert not np.array_equal(got, plain), "the test data must tell fma from a*b+c"


def _nearest32(e: Fraction) -> np.float32:
    f = np.float32(float(e))
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(cands, key=lambda v: abs(Fraction(float(v)) - e))


@pytest.mark.parametrize("op", sorted(FORMULAS))
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_formulas_with_the_reference_primitives_are_the_op_table(op, dt):
    ref = mathlib.get("refmath")
    for xs, at in REGISTRY[op].sample(rng, np.dtype(dt)):
        want = np.asarray(REGISTRY[op].forward(ref, xs, at), dtype=dt)
        got = np.asarray(FORMULAS[op][0](Prims(), xs, at), dtype=dt)
        assert np.array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8)), op


def test_every_variant_has_a_documented_cause_in_order():
    assert {v.cause for v in VARIANTS} == set(CAUSES)
    order = [CAUSES.index(v.cause) for v in VARIANTS]
    assert order == sorted(order)  # tried in the documented order


def _node(op, xs, **attrs):
    y = REGISTRY[op].forward(mathlib.get("refmath"), xs, attrs)
    return Node(op, attrs, np.shape(y))


def test_softmax_with_a_reciprocal_multiply_is_reciprocal():
    x = rng.standard_normal((16, 33))
    m = np.max(x, -1, keepdims=True)
    e = mathlib.get("refmath").exp(x - m)
    s = np.add.accumulate(e, axis=-1)[:, -1:]
    cand = e * (1.0 / s)
    c = explain(_node("softmax", [x], axis=-1), [x], cand)
    assert (c.cause, c.variant) == ("reciprocal", "x * (1/y)")
    assert c.text() == "matches the reference with x * (1/y)"


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_a_contracted_product_is_fma(dt):
    a, b = rng.standard_normal((8, 40)).astype(dt), rng.standard_normal((40, 5)).astype(dt)
    acc = np.zeros((8, 5), dtype=dt)
    for k in range(40):
        acc = fma(a[:, k, None], b[None, k, :], acc)
    assert explain(_node("matmul", [a, b]), [a, b], acc).cause == "fma"


def test_platform_transcendentals_are_libm():
    x = rng.uniform(-5, 5, 4000)
    cand = np.exp(x)
    assert not np.array_equal(cand, mathlib.get("refmath").exp(x)), "needs a libm difference"
    c = explain(_node("exp", [x]), [x], cand)
    assert c.cause == "libm"


def test_a_pairwise_sum_is_reassociation_and_a_wide_one_accumulator():
    # its own seed: on ~7 % of draws the long double sum rounds as another order tried
    # earlier does (a 32-lane tree, numpy's pairwise), and the shared rng's draw depends on
    # which tests ran before on this worker
    x = np.random.default_rng(1).standard_normal((3, 1000))
    c = explain(_node("sum", [x], axis=-1, keepdims=False), [x], np.sum(x, axis=-1))
    assert (c.cause, c.variant) == ("reassociation", "pairwise sum (numpy's np.sum)")
    wide = np.add.accumulate(x.astype(np.longdouble), axis=-1)[:, -1].astype(np.float64)
    if np.finfo(np.longdouble).nmant > 52:  # a platform whose long double is wider
        c = explain(_node("sum", [x], axis=-1, keepdims=False), [x], wide)
        assert c.cause == "accumulator"


def test_flushed_subnormals_are_ftz():
    a = np.array([3 * 2.0 ** -1070, 1.0, -5 * 2.0 ** -1065])
    b = np.array([2.0, 4.0, 2.0])
    cand = np.array([0.0, 0.25, -0.0])
    assert explain(_node("div", [a, b]), [a, b], cand).cause == "ftz"


def test_an_unexplained_difference_is_unknown_with_the_closest_variant():
    x = rng.standard_normal((4, 20))
    M = mathlib.get("refmath")
    e = M.exp(x - np.max(x, -1, keepdims=True))
    cand = e * (1.0 / np.add.accumulate(e, axis=-1)[:, -1:])  # the reciprocal softmax ...
    cand.view(np.uint64)[:, 0] += np.uint64(5)  # ... five ulp off on one column: no variant's
    c = explain(_node("softmax", [x], axis=-1), [x], cand)
    assert c.cause == "unknown" and c.closest in CAUSES and c.max_ulp >= 1
    assert c.to_json()["closest"] == c.closest
    assert "unknown (closest" in c.text()


def test_a_difference_no_variant_comes_closer_to_is_unknown_alone():
    """The reference nudged on one column: every variant differs from the candidate at least
    as much as the reference does, so none is named (issue 44: no closest that is not closer)."""
    x = rng.standard_normal((4, 20))
    y = REGISTRY["softmax"].forward(mathlib.get("refmath"), [x], {"axis": -1})
    cand = y.copy()
    cand.view(np.uint64)[:, 0] += np.uint64(5)
    c = explain(_node("softmax", [x], axis=-1), [x], cand)
    assert c.cause == "unknown" and c.closest is None and c.tried > 0
    assert c.text() == "unknown"


def test_an_exact_op_has_only_ftz():
    assert [v.cause for v in variants_for("add")] == ["ftz"]
    # fma, MKL's four small-product kernels (session 24), its column kernel over a transposed
    # matrix (session 47), its Intel panels and its 384-term panels (sessions 40-41), its AMD
    # panels (session 31), numpy's BLAS, MKL's dot-product kernel on an AMD CPU (session 31),
    # the halving tree, 8 column tilings, 20 k-lane forms, 6 split-K forms (issue 44), the
    # wider accumulator (float32 has no narrower one), 2 TF32 forms, ftz
    assert [v.cause for v in variants_for("matmul", np.float32)] == [
        "fma", *["fma"] * 8, "reassociation", "reassociation", "reassociation",
        *["reassociation"] * 34,
        *["accumulator"] * 3, "ftz"]
    # float64 has no TF32 form: its narrower float32 accumulator instead
    assert not any(v.label.startswith("TF32") for v in variants_for("matmul", np.float64))


def test_every_introduced_entry_has_a_cause_updates_included():
    """An update that departs (a one-ulp nudge of a parameter after SGD) is `unknown`."""
    from tapescope.core.provenance import OptimizerState, ParamUpdate, StepState, provenance

    Nd = namedtuple("Nd", "id op inputs shape attrs requires_grad name")
    w = np.array([1.0, 2.0])
    g = np.array([0.5, 0.25])
    after = w - 0.1 * g
    after.view(np.uint64)[0] += np.uint64(1)
    nodes = (Nd(0, "param", (), (2,), {}, True, "w"),)
    opt = OptimizerState("sgd", 0.1, 1, [ParamUpdate(0, 0.0, w, g, after)])
    st = StepState(1, nodes, 0, {0: w}.get, {0: g}.get, None, None, None, opt)
    intro = provenance(st, explain=True).introduced
    (e,) = [x for x in intro if x.which == "update"]
    assert e.to_json()["cause"] == "unknown" and e.to_json()["explain"]["closest"] is None
    assert all("cause" in x.to_json() for x in intro)
    assert not any("cause" in x.to_json() for x in provenance(st).introduced)
