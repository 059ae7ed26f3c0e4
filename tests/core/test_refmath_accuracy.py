"""core.refmath accuracy against high-precision references.

mpmath (120-bit) on a sample per function and dtype; np.longdouble (64-bit mantissa on x86:
about 2**-11 double ulp of its own error) screens a larger sample. The bounds are the contract
in docs/refmath.md: < 1 ulp for exp, expm1, log, log1p; <= 2 ulp for tanh, sigmoid, erf;
<= 1.5 ulp for rsqrt (two roundings); float32 results are the float64 result rounded once, so
within 0.5 ulp plus the float64 error (~2**-28 float32 ulp).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from tapescope.core import refmath
from tapescope.core.refmath._domain import domain_sample, ulp_error

BOUND64 = {"exp": 1.0, "expm1": 1.0, "log": 1.0, "log1p": 1.0, "tanh": 2.0, "sigmoid": 2.0,
           "erf": 2.0, "rsqrt": 1.5}
BOUND32 = 0.5 + 1e-6

MP = {
    "exp": mpmath.exp, "expm1": mpmath.expm1, "log": mpmath.log, "log1p": mpmath.log1p,
    "tanh": mpmath.tanh, "sigmoid": lambda v: 1 / (1 + mpmath.exp(-v)), "erf": mpmath.erf,
    "rsqrt": lambda v: 1 / mpmath.sqrt(v),
}


def mp_ulp_error(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|y - f(x)| in ulps of y's format, f evaluated by mpmath at 120 bits."""
    mant, emin, top = (53, -1074, 1024) if y.dtype == np.float64 else (24, -149, 128)
    f = MP[name]
    out = np.empty(x.size)
    with mpmath.workprec(120):
        overflow = mpmath.mpf(2) ** top
        for i, (xi, yi) in enumerate(zip(x.tolist(), y.tolist(), strict=True)):
            ref = f(mpmath.mpf(xi))
            if ref == 0:
                out[i] = 0.0 if yi == 0 else np.inf
                continue
            _, e = mpmath.frexp(ref)
            ulp = mpmath.ldexp(1, max(int(e) - mant, emin))
            if abs(ref) >= overflow - ulp / 2:  # rounds to infinity
                out[i] = 0.0 if np.isinf(yi) and (yi > 0) == (ref > 0) else np.inf
                continue
            out[i] = float(abs(mpmath.mpf(yi) - ref) / ulp)
    return out


def _sample(name: str, dtype: type, n: int, seed: int) -> np.ndarray:
    """n finite inputs in the function's domain, mostly where it is neither flat nor saturated."""
    rng = np.random.default_rng(seed)
    x = domain_sample(name, dtype, 40 * n, seed=seed)
    x = x[np.isfinite(x)]
    if name in ("log", "rsqrt"):  # poles and NaNs are special values (test_refmath_api)
        x = np.abs(x[x != 0.0])
    if name == "log1p":
        x = x[x > -1.0]
    return rng.choice(x, size=n, replace=False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", refmath.FUNCTIONS)
def test_against_mpmath(name: str, dtype: type) -> None:
    x = _sample(name, dtype, 2000, seed=17)
    y = getattr(refmath, name)(x)
    err = mp_ulp_error(name, x, y)
    bound = BOUND64[name] if dtype == np.float64 else BOUND32
    worst = int(np.argmax(err))
    assert err[worst] <= bound, (
        f"{name} {np.dtype(dtype)}: {err[worst]:.3f} ulp at x={x[worst]!r} (bound {bound})")


LONGDOUBLE = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "sigmoid": lambda v: np.where(v >= 0, 1 / (1 + np.exp(-v)), np.exp(v) / (1 + np.exp(v))),
}


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="long double is not 80-bit here")
@pytest.mark.parametrize("name", sorted(LONGDOUBLE))
def test_against_longdouble_screen(name: str) -> None:
    x = domain_sample(name, np.float64, 150_000, seed=23)
    y = getattr(refmath, name)(x)
    with np.errstate(all="ignore"):
        ref = LONGDOUBLE[name](x.astype(np.longdouble))
    ok = ~np.isnan(ref)
    err = ulp_error(y[ok], ref[ok])
    worst = int(np.argmax(err))
    # the reference itself is off by up to ~2**-11 double ulp
    assert err[worst] <= BOUND64[name] + 2e-3, (
        f"{name}: {err[worst]:.3f} ulp at x={x[ok][worst]!r}")
    assert np.all(np.isnan(y[~ok])), f"{name}: a NaN reference where refmath is not NaN"
