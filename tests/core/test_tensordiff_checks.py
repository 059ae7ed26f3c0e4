"""TensorDiff.from_json checks every field: a malformed summary never reads as exact."""

from __future__ import annotations

import math

import pytest

from tapescope.core.parity import TensorDiff

EXACT = {"n": 6, "n_diff": 0, "max_ulp": 0, "max_abs": 0.0, "max_rel": 0.0,
         "first_index": None, "n_nan": 0, "n_signed_zero": 0, "nan_bits_differ": 0}


@pytest.mark.parametrize("field,value,says", [
    ("n_diff", math.nan, "'n_diff' must be a whole number, not 'nan'"),
    ("n_diff", 0.5, "'n_diff' must be a whole number"),
    ("n_diff", True, "'n_diff' must be a whole number"),
    ("n_diff", -3, "'n_diff' is -3, not in 0..6"),
    ("n_diff", 7, "'n_diff' is 7, not in 0..6"),
    ("n", "6", "'n' must be a whole number"),
    ("max_ulp", None, "'max_ulp' must be a whole number"),
    ("max_abs", "garbage", "'max_abs' must be a number >= 0"),
    ("max_rel", -1.0, "'max_rel' must be a number >= 0"),
    ("first_index", 2, "first_index 2 with n_diff 0"),
    ("n_nan", 1, "'n_nan' is 1, not in 0..0"),
    ("nan_bits_differ", 9, "'nan_bits_differ' is 9, not in 0..6"),
])
def test_a_malformed_field_is_named(field, value, says):
    with pytest.raises(ValueError, match=f"^{says}".replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        TensorDiff.from_json({**EXACT, field: value})


def test_good_summaries_read_back_and_strict_json_floats_too():
    d = TensorDiff.from_json({**EXACT, "n_diff": 2, "first_index": 5, "max_ulp": 3,
                              "max_abs": "inf", "max_rel": "nan", "n_nan": 1})
    assert d.n_diff == 2 and d.first_index == 5 and math.isinf(d.max_abs)
    assert TensorDiff.from_json(EXACT).exact
    with pytest.raises(ValueError, match="'n' is missing"):
        TensorDiff.from_json({k: v for k, v in EXACT.items() if k != "n"})
    with pytest.raises(ValueError, match="must be an object"):
        TensorDiff.from_json([1, 2])
