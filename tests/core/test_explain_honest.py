"""Honest hints (issue 44, item 2): an unknown cause names a closest variant only when that
variant is strictly closer to the candidate than the reference itself (fewer differing
elements, or as many and a smaller max ulp); a variant exactly as far says nothing."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from tapescope.core import mathlib
from tapescope.core.explain import Cause, cause_text, closer, explain, explain_grad
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.parity import compare_arrays

Node = namedtuple("Node", "op attrs shape")


def _nudge(y: np.ndarray, idx, ulps: int) -> np.ndarray:
    out = np.array(y, copy=True)
    out.reshape(-1).view(np.uint64)[list(idx)] += np.uint64(ulps)
    return out


def test_a_variant_as_far_as_the_reference_is_not_named():
    """div by powers of two: ``x * (1/y)`` IS the reference's bits, so every variant is exactly
    the candidate's own distance (2 elements, max 3 ulp): the cause is ``unknown`` alone."""
    rng = np.random.default_rng(44)
    a = rng.standard_normal(64)
    b = 2.0 ** rng.integers(-4, 5, 64).astype(np.float64)
    ref = a / b
    assert np.array_equal(a * (1.0 / b), ref)  # the reciprocal variant equals the reference
    cand = _nudge(ref, [3, 40], 3)
    raw = compare_arrays(ref, cand)
    assert (raw.n_diff, raw.max_ulp) == (2, 3)
    node = Node("div", {}, ref.shape)
    for c in (explain(node, [a, b], cand), explain(node, [a, b], cand, raw)):
        assert c.cause == "unknown" and c.closest is None, c
        assert c.tried >= 2  # reciprocal and ftz ran; neither is closer
        assert c.text() == "unknown"
        assert cause_text(c.to_json()) == "unknown"
        assert c.to_json()["closest"] is None and c.to_json()["tried"] == c.tried


def test_a_strictly_closer_variant_is_named():
    rng = np.random.default_rng(45)
    x = rng.standard_normal((16, 33))
    M = mathlib.get("refmath")
    e = M.exp(x - np.max(x, -1, keepdims=True))
    s = np.add.accumulate(e, axis=-1)[:, -1:]
    recip = e * (1.0 / s)
    ref = REGISTRY["softmax"].forward(M, [x], {"axis": -1})
    assert not np.array_equal(recip, ref)
    cand = _nudge(recip, [5], 7)  # the reciprocal softmax, 7 ulp off on one element
    c = explain(Node("softmax", {"axis": -1}, ref.shape), [x], cand)
    assert c.cause == "unknown" and c.closest == "reciprocal", c
    assert (c.n_diff, c.max_ulp) == (1, 7)
    assert c.text().startswith("unknown (closest: reciprocal, x * (1/y): 1 elements, max 7 ulp")


def test_closer_is_strict_and_ranks_count_before_ulp():
    D = namedtuple("D", "n_nan n_diff max_ulp")
    raw = D(0, 929, 307)
    assert not closer(D(0, 929, 307), raw)  # the case: exactly the candidate's distance
    assert closer(D(0, 929, 306), raw)  # the same count, a smaller max ulp
    assert closer(D(0, 10, 10_000), raw)  # fewer elements
    assert not closer(D(0, 930, 1), raw)  # more elements, however small
    assert not closer(D(1, 1, 1), raw)  # a NaN mismatch the reference does not have


def test_a_gradient_variant_as_far_as_the_reference_is_not_named():
    """explain_grad: a product variant whose gradient is the reference's own bits (k = 1, no
    sum to reorder) is as far as the reference: not named."""
    rng = np.random.default_rng(46)
    ref = rng.standard_normal((4, 5))
    cand = _nudge(ref, [2], 4)

    def recompute(math=None, rules=None):
        return ref  # every variant reproduces the reference here

    c = explain_grad(recompute, ["matmul"], cand)
    assert c.cause == "unknown" and c.closest is None and c.tried > 0, c
    assert c.text() == "unknown"


def test_no_applicable_variant_still_says_so():
    c = Cause("unknown", "")
    assert c.text() == "unknown (no variant of the reference order applies to this op)"
    assert "tried" not in c.to_json()


def test_a_known_gap_says_why_it_is_unknown_and_travels_in_the_json():
    """A kernel whose orders are not written out (oneDNN's LSTM layer) is unknown with a note
    naming that gap, in place of "no variant applies" (and after a closest variant); the note
    rides the JSON and comes back in cause_text; none without it."""
    gap = "oneDNN's LSTM layer: not written out"
    c = Cause("unknown", "", note=gap)
    assert c.text() == f"unknown ({gap})"
    assert c.to_json()["note"] == gap and cause_text(c.to_json()) == c.text()
    near = Cause("unknown", "v", closest="fma", max_ulp=3, n_diff=2, tried=4, note=gap)
    assert near.text() == f"unknown (closest: fma, v: 2 elements, max 3 ulp); {gap}"
    assert cause_text(near.to_json()) == near.text()
    assert "note" not in Cause("unknown", "").to_json()
    assert "note" not in Cause("fma", "x").to_json()  # (a named cause has nothing to excuse)
