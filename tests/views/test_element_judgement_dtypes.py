"""The element view judges a reference against a candidate of another dtype in the narrower
type, as the parity summaries do: a float64 reference against a float32, float16 or bfloat16
candidate that is its rounding differs nowhere (issue 48: judged in the wider type, every
element "differed" while the worst-elements table, judged apart, stayed empty).

Oracle: numpy, the reference rounded to the candidate's dtype and the bits compared (two NaNs
equal, the NaN policy). Only the judgement is checked (counts, rows, levels), not its wording.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tapescope.core import precision
from tapescope.views.element_view import (
    MAX_ROWS,
    ElementView,
    n_differ,
    ulp_level_image,
    worst_elements,
)

NARROW = (np.dtype(np.float32), precision.FLOAT16, precision.BFLOAT16)


def _pair(dt: np.dtype, shape: tuple, moved: list[int], seed: int):
    """A float64 reference none of whose values the candidate's dtype holds exactly, and the
    candidate: its rounding, one ulp up at the flat positions ``moved``."""
    rng = np.random.default_rng(seed)
    ref = rng.uniform(-3, 3, shape) * (1 + 2.0 ** -40)
    cand = ref.astype(dt)
    sint = precision.bits_types(dt)[0]
    flat = cand.reshape(-1).view(sint)
    for k in moved:
        flat[k] += 1  # one ulp away from zero
    return ref, cand


def _oracle(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    r = ref.astype(cand.dtype)
    sint = precision.bits_types(cand.dtype)[0]
    return (r.view(sint) != cand.view(sint)) & ~(np.isnan(r) & np.isnan(cand))


def _check(ref: np.ndarray, cand: np.ndarray, moved: list[int]) -> None:
    want = _oracle(ref, cand)
    assert sorted(np.flatnonzero(want).tolist()) == sorted(set(moved))
    assert not np.array_equal(ref, cand.astype(np.float64))  # the wider type would see them
    for r, c in ((ref, cand), (cand, ref)):  # either side the wider one
        assert n_differ(r, c) == int(want.sum())
        rows = worst_elements(r, c, limit=ref.size)
        assert sorted(np.ravel_multi_index(i, ref.shape) for i, *_ in rows) == sorted(
            set(moved))
        assert all(u == 1.0 for _, _, _, u, _ in rows)
        lv = ulp_level_image(r, c)
        assert np.count_nonzero(lv) == int(want.sum())


def test_a_float64_reference_against_its_float32_rounding_differs_nowhere(qtbot):
    ref, cand = _pair(np.dtype(np.float32), (2, 3), [], 0)
    _check(ref, cand, [])
    w = ElementView()
    qtbot.addWidget(w)
    w.set_pair(ref, cand, "x")
    assert w.model.rowCount() == 0 and not np.any(w.img)
    # one element one ulp off, in float32: that one is the only row and the only level
    ref, cand = _pair(np.dtype(np.float32), (2, 3), [4], 1)
    _check(ref, cand, [4])
    w.set_pair(ref, cand, "x")
    assert w.model.rowCount() == 1 and np.count_nonzero(w.img) == 1


@given(dt=st.sampled_from(NARROW),
       shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
       picks=st.lists(st.integers(0, 10 ** 6), max_size=6), seed=st.integers(0, 2 ** 16))
@example(dt=precision.BFLOAT16, shape=(3, 4), picks=[0, 5], seed=0)
@example(dt=precision.FLOAT16, shape=(2, 1, 3), picks=[], seed=0)
@settings(max_examples=30, deadline=None)
def test_mixed_dtypes_are_judged_in_the_narrower_type(dt, shape, picks, seed):
    n = int(np.prod(shape))
    moved = sorted({p % n for p in picks})
    ref, cand = _pair(dt, shape, moved, seed)
    _check(ref, cand, moved)
    assert len(worst_elements(ref, cand)) == min(len(moved), MAX_ROWS)
