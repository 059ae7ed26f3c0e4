"""Stats, NaN scans and copy-as-numpy text."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tapescope.views.models.array_stats import (
    array_stats,
    first_nonfinite,
    nonfinite_nodes,
    numpy_text,
)


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


def _mixed_arrays(seed: int) -> list:
    """Arrays of every kind the scan meets: small and big, float64, float32, float16, ints,
    bools, None, empty, 0-d, strided views, huge-but-finite values whose sum overflows, NaN/inf
    anywhere in them."""
    rng = np.random.default_rng(seed)
    out: list = []
    for k in range(400):
        kind = rng.integers(0, 12)
        if kind == 0:
            out.append(None)
            continue
        if kind == 1:
            out.append(rng.integers(-5, 5, size=rng.integers(0, 9)))
            continue
        if kind == 2:
            out.append(rng.random(3) > 0.5)
            continue
        big = kind in (3, 9) or (kind == 4 and k % 2 == 1)
        n = int(rng.integers(40000, 41000)) if big else int(
            rng.integers(0, 40))
        dt = (np.float64, np.float32, np.float16)[k % 3]
        a = rng.standard_normal(n).astype(dt)
        if kind == 4 and n:
            a[:] = np.finfo(dt).max  # finite, yet the sum overflows to inf
        if kind >= 8 and n:
            a[rng.integers(0, n)] = (np.nan, np.inf, -np.inf)[k % 3]
        if kind == 5 and n > 4:
            a = a.reshape(2, -1)[:, ::2] if n % 2 == 0 else a[::3]  # not contiguous
        if kind == 6:
            a = np.asarray(dt(np.inf if k % 2 else 1.0))  # 0-d
        out.append(a)
    return out


def test_nonfinite_flags_is_has_nonfinite_of_each_array():
    from tapescope.views.models.array_stats import has_nonfinite, nonfinite_flags

    for seed in range(6):
        arrays = _mixed_arrays(seed)
        want = [has_nonfinite(a) for a in arrays]
        assert nonfinite_flags(arrays).tolist() == want
    assert nonfinite_flags([]).tolist() == [] and nonfinite_flags([None]).tolist() == [False]
    assert nonfinite_flags([[1.0, float("inf")], np.float32(np.nan)]).tolist() == [True, True]


def test_scans_with_flags_answer_as_the_per_array_loop():
    from tapescope.views.models.array_stats import has_nonfinite, nonfinite_flags

    vals = _mixed_arrays(1)
    grads = _mixed_arrays(2)
    ids = list(range(len(vals)))
    loop = [i for i in ids if has_nonfinite(vals[i]) or has_nonfinite(grads[i])]
    assert nonfinite_nodes(ids, vals.__getitem__, grads.__getitem__) == loop
    flags = (nonfinite_flags(vals), nonfinite_flags(grads))
    assert nonfinite_nodes(ids, None, None, flags=flags) == loop
    first_v = next((i for i in ids if has_nonfinite(vals[i])), None)
    first_g = next((i for i in reversed(ids) if has_nonfinite(grads[i])), None)
    want = first_v if first_v is not None else first_g
    assert first_nonfinite(ids, vals.__getitem__, grads.__getitem__) == want
    clean = [np.ones(2)] * 5
    assert first_nonfinite(range(5), clean.__getitem__, grads[:5].__getitem__) == next(
        (i for i in reversed(range(5)) if has_nonfinite(grads[i])), None)
