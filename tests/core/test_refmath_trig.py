"""core.refmath._trig: fdlibm's sin and cos in float64 on numpy arrays, the reference of a
capture's ``aten.sin`` / ``aten.cos``. Held to the C library's (glibc's, correctly rounded in
practice): within one float64 ulp everywhere they reduce, the correctly rounded float32 after
one rounding; fdlibm's own edges (no reduction to pi/4, the n = +-1 case, pi/2 itself, tiny
arguments, signed zeros, inf and NaN); an argument past the reduction written is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tapescope.core.refmath._trig import LARGEST, cos64, sin64


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.view(np.int64) - b.view(np.int64))


def _libc(fn, x: np.ndarray) -> np.ndarray:
    return np.array([fn(float(v)) for v in x])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_within_one_ulp_of_the_c_library_and_float32_correctly_rounded(name):
    ours, theirs = (sin64, math.sin) if name == "sin" else (cos64, math.cos)
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-4, 4, 20000), rng.uniform(-LARGEST, LARGEST, 20000),
                        rng.uniform(-1e-6, 1e-6, 2000), np.arange(1, 3000) * (np.pi / 2),
                        np.arange(1, 3000) * (np.pi / 4),
                        # fdlibm's branch points: pi/4, 3pi/4, |x| < 0.3 and 0.78125 in cos
                        np.nextafter(0.7853981633974483, [0, 4]), [2.356194490192345, 0.3,
                                                                  0.78125, 1.5707963267948966]])
    x = np.concatenate([x, -x])
    got, want = ours(x), _libc(theirs, x)
    assert _ulps(got, want).max() <= 1
    assert np.mean(got == want) > 0.9  # (fdlibm's < 1 ulp: correctly rounded mostly)
    x32 = rng.uniform(-200, 200, 100000).astype(np.float32).astype(np.float64)
    assert np.array_equal(ours(x32).astype(np.float32), _libc(theirs, x32).astype(np.float32))


def test_edges_zeros_tiny_inf_nan_and_shapes():
    assert np.signbit(sin64(np.array(-0.0))) and sin64(np.array(0.0)) == 0.0
    assert cos64(np.array(-0.0)) == 1.0
    tiny = np.array([5e-324, -1e-300, 1e-9])
    assert np.array_equal(sin64(tiny), tiny) and np.all(cos64(tiny) == 1.0)
    assert np.all(np.isnan(sin64(np.array([np.inf, -np.inf, np.nan]))))
    assert np.all(np.isnan(cos64(np.array([np.inf, -np.inf, np.nan]))))
    x = np.linspace(-9, 9, 24).reshape(2, 3, 4)
    assert sin64(x).shape == (2, 3, 4) and cos64(x[0, 0, 0]).shape == ()


def test_an_argument_past_the_written_reduction_is_refused():
    assert np.isfinite(sin64(np.array([LARGEST, -LARGEST]))).all()
    for fn in (sin64, cos64):
        with pytest.raises(ValueError, match="Payne-Hanek"):
            fn(np.array([1.0, 2e6]))


def test_a_capture_form_refuses_it_by_name():
    from tapescope.core.capture.aten_ref import NoReference, reference

    with pytest.raises(NoReference, match="aten.sin.default.*Payne-Hanek"):
        reference("aten.sin.default", [np.array([1e7], np.float32)], {})
    y = reference("aten.cos.default", [np.array([0.5, 100.0], np.float32)], {})[0]
    assert y.dtype == np.float32 and y[0] == np.float32(math.cos(0.5))
