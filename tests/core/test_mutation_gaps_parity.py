"""core.parity edge cases that a mutation run of core/parity.py showed no test held (mutmut,
docs/testing.md): NaN against a number has no ulp distance, an exact pair reports all zeros,
only a ±0 pair is a signed zero, a zero reference makes any difference infinitely relative,
and the metrics never warn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tapescope.core.parity import compare_arrays, ulp_distance


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
