"""core.bits.same_bytes: bit for bit means bytes (NaN payloads and zero signs count)."""

from __future__ import annotations

import numpy as np
import pytest

import tapescope.core.bits as bits
from tapescope.core import precision


@pytest.fixture(params=["memcmp", "numpy"])
def same(request, monkeypatch):
    """same_bytes through libc's memcmp, and through its numpy fallback (no C library)."""
    if request.param == "numpy":
        monkeypatch.setattr(bits, "_MEMCMP", None)
    else:
        assert bits._MEMCMP is not None  # Linux, macOS, Windows: a C library is there
    return bits.same_bytes


@pytest.mark.parametrize("dt", [np.float64, np.float32, precision.FLOAT16, precision.BFLOAT16])
def test_one_bit_anywhere_differs_and_equal_bits_are_equal(same, dt):
    a = np.arange(1, 40, dtype=np.float32).astype(dt).reshape(3, 13)
    assert same(a, a.copy())
    u = {8: np.uint64, 4: np.uint32, 2: np.uint16}[np.dtype(dt).itemsize]
    for k in (0, 20, 38):  # the first, a middle and the last element
        b = a.copy()
        b.reshape(-1).view(u)[k] ^= 1
        assert not same(a, b) and not same(b, a)


def test_nan_payload_and_zero_sign_are_bits(same):
    a = np.array([np.nan, 0.0, 1.0])
    b = a.copy()
    b.view(np.uint64)[0] ^= 1  # another NaN, equal under core.parity's NaN policy
    assert np.isnan(b[0]) and not same(a, b)
    c = a.copy()
    c[1] = -0.0
    assert not same(a, c)


def test_dtype_and_size_decide_before_the_bytes_and_shape_does_not(same):
    a = np.zeros(8, np.float32)
    assert not same(a, np.zeros(4, np.float64))  # the same 32 bytes, another dtype
    assert not same(a, np.zeros(9, np.float32)) and not same(a, np.zeros(0, np.float32))
    assert same(a, np.zeros((2, 4), np.float32))  # shape is the caller's to check
    assert same(np.zeros(0), np.zeros(0))


def test_a_strided_view_is_compared_in_row_major_order(same):
    a = np.arange(12.0).reshape(3, 4)
    assert same(a.T, np.ascontiguousarray(a.T)) and not same(a.T, a)
    assert same(a[:, ::2], np.array([[0.0, 2], [4, 6], [8, 10]]))


def test_arrays_that_are_not_floats_are_refused(same):
    with pytest.raises(TypeError, match="float arrays"):
        same(np.array([object()]), np.array([object()]))
    with pytest.raises(TypeError, match="int64"):
        same(np.zeros(2), np.zeros(2, np.int64))
