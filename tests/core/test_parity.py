"""core.parity: ulp distance on ordered integers, NaN and signed zeros, per-tensor summaries, and
the first divergence of a report."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tapescope.core.parity import (
    NodeParity,
    compare_arrays,
    first_divergence,
    ordered,
    ulp_distance,
)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_adjacent_floats_are_one_ulp_apart(dt):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(500).astype(dt) * dt(1e3)
    up = np.nextafter(x, dt(np.inf))
    assert np.all(ulp_distance(x, up) == 1)
    assert np.all(ulp_distance(up, x) == 1)
    # ordered integers are monotone in the value
    s = np.sort(np.concatenate([x, up]))
    o = ordered(s)
    assert np.all(o[1:] >= o[:-1])


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_distance_across_zero_counts_both_sides(dt):
    tiny = np.array([np.finfo(dt).smallest_subnormal], dtype=dt)
    assert ulp_distance(-tiny, tiny)[0] == 2
    assert ulp_distance(np.array([-0.0], dt), np.array([0.0], dt))[0] == 0
    big = np.array([np.finfo(dt).max], dtype=dt)
    bits = 64 if dt == np.float64 else 32
    # -max to +max: both halves of the line minus the two infinities' slots
    assert ulp_distance(-big, big)[0] == 2 * ((1 << (bits - 1)) - (1 << (bits - 1 - (
        11 if dt == np.float64 else 8)))) - 2


def test_summary_fields():
    ref = np.array([1.0, 2.0, 3.0, 0.0, np.nan, 5.0])
    got = ref.copy()
    got[1] = np.nextafter(2.0, 3.0)
    got[2] = 3.5
    got[3] = -0.0
    got[5] = np.nan
    d = compare_arrays(ref, got)
    assert d.n == 6 and d.n_diff == 4 and d.first_index == 1
    assert d.n_signed_zero == 1 and d.n_nan == 1
    assert d.max_ulp == int(ulp_distance(np.array([3.0]), np.array([3.5]))[0])
    assert d.max_abs == 0.5 and d.max_rel == 0.5 / 3.0
    assert not d.exact


def test_nans_are_equal_whatever_their_payload():
    a = np.array([np.nan, 1.0])
    assert compare_arrays(a, a.copy()).exact
    b = a.copy()
    b.view(np.int64)[0] ^= 1  # another NaN payload: equal (the NaN policy), counted apart
    d = compare_arrays(a, b)
    assert d.exact and d.n_diff == 0 and d.n_nan == 0 and d.nan_bits_differ == 1
    b[1] = np.nan  # a NaN where the reference has a number still differs
    d = compare_arrays(a, b)
    assert d.n_diff == 1 and d.n_nan == 1 and d.nan_bits_differ == 1 and d.first_index == 1


def test_infinities_and_zero_reference():
    d = compare_arrays(np.array([np.inf, 0.0]), np.array([-np.inf, 1e-300]))
    assert d.max_abs == np.inf and d.max_rel == np.inf and d.n_diff == 2


def test_bad_pairs_are_named():
    with pytest.raises(TypeError, match="dtypes differ"):
        compare_arrays(np.zeros(2), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="shapes differ"):
        compare_arrays(np.zeros(2), np.zeros(3))
    with pytest.raises(TypeError, match="unsupported dtype"):
        compare_arrays(np.zeros(2, np.int32), np.zeros(2, np.int32))


def test_strict_json_spells_non_finite_floats():
    import json

    from tapescope.core.parity import strict_json

    data = {"a": float("inf"), "b": [float("nan"), -float("inf"), np.float64(2.5)], 3: (1,)}
    text = json.dumps(strict_json(data), allow_nan=False)
    assert json.loads(text) == {"a": "inf", "b": ["nan", "-inf", 2.5], "3": [1]}


# ---- NaN without a distance, exact pairs, signed and relative zeros, no warnings -----------------
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_nan_against_a_number_has_no_ulp_distance(dt):
    ref = np.array([np.nan, 1.0, 2.0, np.nan], dtype=dt)
    oth = np.array([1.0, np.nan, np.nextafter(dt(2.0), dt(3.0)), np.nan], dtype=dt)
    assert ulp_distance(ref, oth).tolist() == [0, 0, 1, 0]
    d = compare_arrays(ref, oth)
    assert d.n_diff == 3 and d.n_nan == 2 and d.max_ulp == 1


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_an_exact_pair_reports_all_zeros(dt):
    x = np.array([[1.5, -0.0], [np.inf, 3.0]], dtype=dt)
    d = compare_arrays(x, x.copy())
    assert (d.n, d.n_diff, d.max_ulp, d.max_abs, d.max_rel, d.first_index) == \
        (4, 0, 0, 0.0, 0.0, None)
    assert d.exact


def test_only_a_pair_of_zeros_is_a_signed_zero():
    d = compare_arrays(np.array([1.0, 0.0, 0.0, -0.0]), np.array([0.0, 1.0, -0.0, 0.0]))
    assert d.n_diff == 4 and d.n_signed_zero == 2


def test_any_difference_from_a_zero_reference_is_infinitely_relative():
    d = compare_arrays(np.array([0.0, 4.0]), np.array([0.5, 4.0]))
    assert d.max_abs == 0.5 and d.max_rel == np.inf and d.first_index == 0


def test_nan_only_differences_leave_the_numeric_metrics_at_zero():
    d = compare_arrays(np.array([1.0, 2.0]), np.array([np.nan, 2.0]))
    assert (d.n_diff, d.n_nan, d.max_ulp, d.max_abs, d.max_rel) == (1, 1, 0, 0.0, 0.0)


def test_the_metrics_never_warn():
    ref = np.array([np.inf, 0.0, -np.inf, 1.0, np.nan])
    oth = np.array([-np.inf, 1e-300, 1.0, np.inf, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf - inf, x / 0: handled, never a RuntimeWarning
        d = compare_arrays(ref, oth)
    assert d.n_diff == 5 and d.max_abs == np.inf and d.max_rel == np.inf


def test_strict_json_takes_numpy_scalars_that_are_not_python_floats():
    import json

    from tapescope.core.parity import strict_json

    data = {"f32": np.float32(np.inf), "i": np.int64(7), "nan": [np.float32("nan")]}
    text = json.dumps(strict_json(data), allow_nan=False)  # a numpy int is no JSON by itself
    assert json.loads(text) == {"f32": "inf", "i": 7, "nan": ["nan"]}


# ---- the first divergence: the lowest differing value, else the highest differing gradient -------
SAME = compare_arrays(np.zeros(2), np.zeros(2))
DIFF = compare_arrays(np.zeros(2), np.array([0.0, 1.0]))


def nodes(values: str, grads: str) -> tuple[NodeParity, ...]:
    """One node per character: '.' exact, 'x' differs, '-' (grads only) no gradient."""
    return tuple(NodeParity(i, "op", None, DIFF if v == "x" else SAME,
                            None if g == "-" else DIFF if g == "x" else SAME)
                 for i, (v, g) in enumerate(zip(values, grads, strict=True)))


def test_the_first_differing_value_in_tape_order_wins():
    assert first_divergence(nodes(".x.x.", "x...x")) == (1, "value")
    assert first_divergence(nodes("....x", "x....")) == (4, "value")


def test_otherwise_the_highest_differing_gradient_wins():
    assert first_divergence(nodes(".....", ".x.x-")) == (3, "grad")
    assert first_divergence(nodes(".....", "x-...")) == (0, "grad")


def test_all_exact_is_none():
    assert first_divergence(nodes("...", "..-")) is None
    assert first_divergence(()) is None
