"""The extension's sums of squares (core/native/refmath_py.c's ``sqsums``,
``core.native.square_sums``: a ``_foreach_norm``'s rows in one call; their bits against
``vector_norm`` are tests/capture/test_judge_small_steps.py's, on every native path): a NaN sum
declined, the lists and arrays it does not take refused (``square_sums`` then None), no
reference kept or dropped, clean under AddressSanitizer."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tapescope.core import native
from tests.helpers.native_ext import ext_or_skip


def _ext_or_skip():
    return ext_or_skip("the padded matrix only")


def test_sqsums_sums_declines_a_nan_and_refuses_what_it_does_not_take():
    ext = _ext_or_skip()
    for dt in (np.float32, np.float64):
        xs = [np.array([3.0, 4.0], dt), np.zeros(0, dt), np.array(-2.0, dt), np.ones((2, 3), dt)]
        got = ext.sqsums(xs)
        assert got.dtype == dt and got.tolist() == [25.0, 0.0, 4.0, 6.0]
        assert np.signbit(got[1]) == np.False_  # (+0.0: the chain's start)
        assert ext.sqsums([np.array([1.0, np.nan], dt)]) is None
        assert native.square_sums([np.array([np.inf], dt), np.array([1.0], dt)]).tolist() == [
            np.inf, 1.0]
    x = np.ones(6, np.float32)
    odd = np.frombuffer(np.zeros(25, np.uint8).data, np.float32, 6, 1)  # unaligned
    for bad in ([], (x,), [x, x.astype(np.float64)], [x.astype(np.float16)], [x.tolist()],
                [x.astype(">f4")], [np.ma.masked_array(x)]):
        with pytest.raises(TypeError):
            ext.sqsums(bad)
        assert native.square_sums(bad) is None
    for bad in ([x[::2]], [x, odd], [np.ones((3, 4), np.float32).T]):
        with pytest.raises(ValueError):
            ext.sqsums(bad)
        assert native.square_sums(bad) is None


def test_sqsums_keeps_every_reference_count():
    ext = _ext_or_skip()
    xs = [np.linspace(0, 1, 16, dtype=np.float32) for _ in range(5)]
    nan = [np.full(4, np.nan, np.float32)]
    before = [sys.getrefcount(x) for x in xs + nan]
    for _ in range(3000):
        ext.sqsums(xs)
        assert ext.sqsums(nan) is None
        try:
            ext.sqsums(xs + [xs[0][::2]])
        except ValueError:
            pass
    assert [sys.getrefcount(x) for x in xs + nan] == before


_ASAN_CHILD = """
import numpy as np
from tapescope.core import native
assert native.library() is not None and native.sanitize_flags()
assert "libasan" in open("/proc/self/maps").read(), "not the sanitized build"
n = 0
for dt in (np.float32, np.float64):
    xs = [np.linspace(0, 1, k, dtype=dt).reshape(-1) for k in (0, 1, 7, 16, 1000)]
    xs.append(np.array(2.0, dt))
    got = native.square_sums(xs)
    assert got is not None and got.shape == (len(xs),)
    assert native.square_sums([np.array([np.nan], dt)]) is None
    assert native.square_sums([np.ones(8, dt)[::2]]) is None
    n += len(xs)
print("summed", n)
"""


def test_sqsums_runs_clean_under_asan_and_ubsan():
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(_ASAN_CHILD, "summed 12")
