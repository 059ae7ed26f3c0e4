"""refmath's half functions, checked exhaustively: every one of the 65,536 float16 and bfloat16
inputs, every function, against the float64 refmath result rounded ONCE to the half type.

A half function is the float32 function on the widened input, rounded to the half type (what a
half tape's op does: compute in float32, round once to storage). The float32 function is
itself the float64 one rounded once, so the half result is the float64 result rounded twice.
It differs from the once-rounded oracle exactly where the float32 result lands on a half-way
point between two half values (double rounding); this test holds every mismatch to that cause
and to one ulp, and pins their number per function (docs/refmath.md, "Half precision").
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import precision, refmath
from tapescope.core.parity import ulp_distance

# float16: inputs whose float32 result is a float16 half-way point and rounds the other way;
# bfloat16 has none (float32 keeps 16 bits below bfloat16's last one)
DOUBLE_ROUNDED = {
    "float16": {"exp": 2, "expm1": 1, "log": 1, "log1p": 2, "tanh": 0, "sigmoid": 7, "erf": 2,
                "rsqrt": 0},
    "bfloat16": dict.fromkeys(refmath.FUNCTIONS, 0),
}


def _all(dt: np.dtype) -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint16).view(dt)


def _both_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))


@pytest.fixture(params=["native", "numpy"])
def path(request):
    refmath.use_native(request.param == "native")
    yield request.param
    refmath.use_native(True)


@pytest.mark.parametrize("dtname", ["float16", "bfloat16"])
def test_every_half_input_against_float64_rounded_once(path, dtname):
    dt = precision.dtype_of(dtname)
    x = _all(dt)
    with np.errstate(invalid="ignore"):
        x64 = x.astype(np.float64)
    for name in refmath.FUNCTIONS:
        got = getattr(refmath, name)(x)
        assert got.dtype == dt
        with np.errstate(over="ignore"):
            want = precision.from_float64(refmath.numpy_apply(name, x64), dt)
        # NaN where and only where the oracle has one (the NaN policy: payloads are free)
        assert np.array_equal(np.isnan(got.astype(np.float32)),
                              np.isnan(want.astype(np.float32))), name
        bad = (got.view(np.uint16) != want.view(np.uint16)) & ~_both_nan(got, want)
        assert int(bad.sum()) == DOUBLE_ROUNDED[dtname][name], (
            f"{name}: {int(bad.sum())} inputs differ: {x[bad][:8]}")
        if not bad.any():
            continue
        # every mismatch is one ulp and a double rounding: the float32 result is exactly the
        # mid-point of the two half values around it
        assert ulp_distance(want[bad], got[bad]).max() == 1
        r32 = refmath.numpy_apply(name, x[bad].astype(np.float32)).astype(np.float64)
        lo = np.minimum(got[bad], want[bad]).astype(np.float64)
        hi = np.maximum(got[bad], want[bad]).astype(np.float64)
        assert np.array_equal(r32, (lo + hi) / 2), name


def test_from_float64_rounds_once():
    # 1 + 2**-8 + 2**-40: float32 keeps 1 + 2**-8, a bfloat16 half-way point that rounds to
    # even (1.0) if rounded twice; rounded once it is above the half-way point: 1 + 2**-7
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -40, -(1 + 2.0 ** -8 + 2.0 ** -40), 1 + 2.0 ** -8,
                  1 + 2.0 ** -11 + 2.0 ** -40, 1e300, -1e-300, np.inf, 0.0, -0.0])
    b = precision.from_float64(x, precision.BFLOAT16).astype(np.float64)
    assert b[0] == 1 + 2.0 ** -7 and b[1] == -(1 + 2.0 ** -7) and b[2] == 1.0
    h = precision.from_float64(x, precision.FLOAT16).astype(np.float64)
    assert h[3] == 1 + 2.0 ** -10
    assert np.isinf(h[4]) and h[5] == 0 and np.signbit(h[5]) and np.isinf(h[6])
    assert h[7] == 0 and not np.signbit(h[7]) and np.signbit(h[8])


def test_half_tape_ops_are_the_half_functions():
    # a half tape's exp node is refmath.exp on its half input: one function, one rounding
    from tapescope.core import ops
    from tapescope.core.tape import Tape

    for dtname in ("float16", "bfloat16"):
        dt = precision.dtype_of(dtname)
        x = _all(dt)
        x = x[np.isfinite(x.astype(np.float32))][::7]
        t = Tape(dtname)
        v = t.const(x)
        for name in ("exp", "log", "tanh", "sigmoid"):
            with np.errstate(all="ignore"):
                y = getattr(ops, name)(v).value
                want = getattr(refmath, name)(x)
            assert y.dtype == dt
            same = (y.view(np.uint16) == want.view(np.uint16)) | _both_nan(y, want)
            assert same.all(), name
