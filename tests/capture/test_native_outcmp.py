"""The extension's one-output comparison (core/native/refmath_py.c's ``outcmp``, the capture
judge's two native passes of an output in one call; its numbers against the numpy form are
tests/capture/test_judge_native_diff.py's, on every native path): what it declines (None: a
dtype not in the kinds, an empty output, a NaN's policy), what it refuses (another dtype or
shape, not arrays), no reference kept or dropped, clean under AddressSanitizer."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.capture import judge
from tests.helpers.native_ext import ext_or_skip


def _ext_or_skip():
    ext = ext_or_skip("the judge's Python path only")
    assert native.compare_out_entry() is ext.outcmp
    return ext


def test_outcmp_declines_and_refuses_what_it_does_not_take():
    ext = _ext_or_skip()
    kinds = native.float_diff_entry()[1]
    b = judge._BLOCK
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    y = x.copy()
    y[1, 2] = np.nextafter(y[1, 2], np.float32(9))
    assert ext.outcmp(y, x, x, kinds, b)[:2] == (12, 1)
    assert ext.outcmp(x, x, x, kinds, b) == (12, 0, None, 0, 0.0, 0, 0, 0)
    n = x.copy()
    n[0, 0] = np.nan
    assert ext.outcmp(n, x, x, kinds, b) is None  # (the NaN policy: the caller's path)
    assert ext.outcmp(x, x, n, kinds, b) is None
    assert ext.outcmp(n, n, n.copy(), kinds, b) == (12, 0, None, 0, 0.0, 0, 0, 0)  # (no diff)
    i = np.arange(4)
    assert ext.outcmp(i, i.copy(), i, kinds, b) is None  # (not a kind: the bytes test's)
    assert ext.outcmp(x[:0], x[:0].copy(), x[:0], kinds, b) is None  # (empty)
    assert ext.outcmp(x, x, x, {}, b) is None
    for bad in ((x.astype(np.float64), x, x), (x, x, x.astype(np.float16)), (x.T, x, x),
                (x, x, x.reshape(4, 3))):
        with pytest.raises((TypeError, ValueError)):
            ext.outcmp(*bad, kinds, b)
    for bad in ((x.tolist(), x, x, kinds, b), (x, x, x, list(kinds), b), (x, x, x, kinds),
                (x, x, x, kinds, "b"), (x, x, x, {x.dtype: "one"}, b), (x, x, x, kinds, 0)):
        with pytest.raises((TypeError, ValueError)):
            ext.outcmp(*bad)
    with pytest.raises(TypeError):  # (a dtype key the dict cannot compare: its error, raised)
        ext.outcmp(x, x, x, {_Unequal(): 1}, b)


class _Unequal:
    def __hash__(self) -> int:
        return hash(np.dtype(np.float32))

    def __eq__(self, other) -> bool:
        raise TypeError("no")


def test_outcmp_keeps_every_reference_count():
    ext = _ext_or_skip()
    kinds = native.float_diff_entry()[1]
    x = np.linspace(0, 1, 16, dtype=np.float32)
    y = x[::-1].copy()
    n = np.full(16, np.nan, np.float32)
    objs = [x, y, n, kinds, x.dtype]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(3000):
        ext.outcmp(y, x, y, kinds, judge._BLOCK)
        ext.outcmp(x, x, y, kinds, judge._BLOCK)
        assert ext.outcmp(n, x, x, kinds, judge._BLOCK) is None
        try:
            ext.outcmp(x, x, x.reshape(4, 4), kinds, judge._BLOCK)
        except ValueError:
            pass
    assert [sys.getrefcount(o) for o in objs] == before


_ASAN_CHILD = """
import numpy as np
from tapescope.core import native, precision
assert native.library() is not None and native.sanitize_flags()
assert "libasan" in open("/proc/self/maps").read(), "not the sanitized build"
oc, kinds = native.compare_out_entry(), native.float_diff_entry()[1]
n = 0
for dt in (np.float64, np.float32, precision.FLOAT16, precision.BFLOAT16):
    for k in (1, 7, 16, 1000, 70000):
        x = np.linspace(-1, 1, k).astype(dt)
        y = x.copy()
        y[k // 2] = -y[k // 2] if k > 1 else 1
        for g, r, t in ((y, x, x), (x, x, y), (y[::-1], x[::-1], y), (y, x, y)):
            got = oc(g, r, t, kinds, 509)
            assert got is not None and got[0] == k
            n += 1
    z = np.full(3, np.nan, dt)
    assert oc(z, np.zeros(3, dt), z, kinds, 1) is None
    try:
        oc(x, x, x[:-1], kinds, 1)
    except ValueError:
        n += 1
print("compared", n)
"""


def test_outcmp_runs_clean_under_asan_and_ubsan():
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(_ASAN_CHILD, "compared 84")


def test_outcmp_answers_views_of_the_same_elements_without_reading_them():
    """Two views of the very same elements (one first address, dtype, shape and strides: a
    view op's reference over the recorded input and the recorded output laid over the same
    bytes) are the same bits, a NaN among them included; one address and shape but other
    strides (a square matrix and its transpose) or another byte order is read and compared."""
    ext = _ext_or_skip()
    kinds = native.float_diff_entry()[1]
    b = judge._BLOCK
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    x[0, 3] = np.nan
    x.setflags(write=False)
    g, r, t = x.T, x.T, np.transpose(x)  # three view objects, one layout
    assert g is not r and ext.outcmp(g, r, t, kinds, b) == (16, 0, None, 0, 0.0, 0, 0, 0)
    y = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert ext.outcmp(y.T, y, y, kinds, b)[:2] == (16, 12)  # (the same address, transposed)
    assert ext.outcmp(y.T, y.T, y, kinds, b)[1::5] == (0, 12)  # (and as the chain's output)
    s = y.view(y.dtype.newbyteorder())  # (one address, the other byte order)
    with pytest.raises(TypeError):
        ext.outcmp(s, y, y, kinds, b)
