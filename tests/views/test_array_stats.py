"""Stats, NaN scans and copy-as-numpy text."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from views.array_stats import array_stats, first_nonfinite, nonfinite_nodes, numpy_text


def test_stats_ignore_nonfinite_and_count_them():
    a = np.array([1.0, np.nan, 3.0, np.inf, -np.inf])
    s = array_stats(a)
    assert (s["nan"], s["inf"], s["size"]) == (1, 2, 5)
    assert (s["min"], s["max"], s["mean"]) == (1.0, 3.0, 2.0)
    assert s["std"] == 1.0
    assert np.isnan(array_stats(np.array([np.nan]))["mean"])


@settings(max_examples=60, deadline=None)
@given(arrays(st.sampled_from([np.float64, np.float32]), st.tuples(st.integers(0, 3),
              st.integers(1, 4)), elements=st.floats(allow_nan=True, allow_infinity=True,
                                                      width=32)))
def test_numpy_text_round_trips_bit_for_bit(a):
    b = eval(numpy_text(a), {"np": np})  # noqa: S307 — our own generated text, in a test
    assert b.dtype == a.dtype and b.shape == a.shape
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)) or np.array_equal(
        np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)])


def test_first_nonfinite_prefers_values_in_tape_order_then_late_gradients():
    vals = {0: np.ones(2), 1: np.array([1.0, np.nan]), 2: np.array([np.inf])}
    grads = {0: np.array([np.nan]), 1: None, 2: np.ones(1)}
    assert first_nonfinite(vals, vals.get, grads.get) == 1
    assert nonfinite_nodes(sorted(vals), vals.get, grads.get) == [0, 1, 2]
    clean = {0: np.ones(1)}
    assert first_nonfinite(clean, clean.get, {0: np.array([np.inf])}.get) == 0
    assert first_nonfinite(clean, clean.get) is None
