"""Inputs that span a refmath function's whole domain, and ulp error against a reference.

Used by the refmath tests and benchmarks, and meant for any parity test of the C twin (host or
CUDA): random bit patterns (every sign, exponent and payload), uniform draws over the range
where the function is neither 0, 1 nor inf, log-uniform magnitudes, and every special value and
branch boundary of the fdlibm algorithms.
"""

from __future__ import annotations

import numpy as np

# Where each function does something other than saturate (float64 inputs).
_RANGE = {
    "exp": (-746.0, 710.0),
    "expm1": (-40.0, 710.0),
    "log": (0.0, 1000.0),
    "log1p": (-1.0, 10.0),
    "tanh": (-23.0, 23.0),
    "sigmoid": (-746.0, 40.0),
    "erf": (-6.5, 6.5),
    "rsqrt": (0.0, 1e6),
}

# High words where the fdlibm algorithms change branch (|x| thresholds), probed on both sides.
_BOUNDARY_HI = [
    0x00100000, 0x3C800000, 0x3C900000, 0x3E200000, 0x3E300000, 0x3FD2BEC3, 0x3FD62E42,
    0x3FD62E43, 0x3FDA827A, 0x3FE6A09E, 0x3FEB0000, 0x3FF00000, 0x3FF0A2B2, 0x3FF40000,
    0x4006DB6E, 0x40180000, 0x40360000, 0x4043687A, 0x43400000, 0x40862E42, 0x408633CE,
    0x7FEFFFFF, 0x7FF00000, 0x00800000,
]


def special_values64() -> np.ndarray:
    """Signed zeros, infinities, NaNs (with payloads), subnormal/normal limits, thresholds."""
    words = [
        0x0, 0x1, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF,
        0x7FF0000000000000, 0x7FF8000000000000, 0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF,
        0x3FF0000000000000, 0x40862E42FEFA39EF, 0xC0874910D52D3051,
    ]
    pos = np.array(words, dtype=np.uint64)
    base = np.concatenate([pos, pos | np.uint64(1 << 63)]).view(np.float64)
    hi = np.array(_BOUNDARY_HI, dtype=np.uint64) << np.uint64(32)
    edges = np.concatenate([hi, hi - np.uint64(1), hi + np.uint64(1), hi | np.uint64(0xFFFFFFFF)])
    edges = np.concatenate([edges, edges | np.uint64(1 << 63)]).view(np.float64)
    extra = np.array([0.5, -0.5, 2.0, -2.0, 1e-300, -1e-300, 709.782712893383973096,
                      -745.133219101941108420, 709.78, -745.13, -1.0, 22.0, -22.0, 6.0, -6.0,
                      0.84375, 1.25, 28.0, -28.0, 0.25, -0.25, 0.41422, -0.2929, 1.5, -1.5])
    both = np.concatenate([base, edges, extra])
    with np.errstate(all="ignore"):
        nb = np.nextafter(both, np.inf), np.nextafter(both, -np.inf)
    return np.concatenate([both, *nb])


def special_values32() -> np.ndarray:
    """float32 special values: the float64 list rounded, plus float32 limits and NaN payloads."""
    words = np.array([0x0, 0x1, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000,
                      0x7F800001, 0x7FFFFFFF, 0x3F800000], dtype=np.uint32)
    own = np.concatenate([words, words | np.uint32(1 << 31)]).view(np.float32)
    with np.errstate(all="ignore"):
        rounded = special_values64().astype(np.float32)
    both = np.concatenate([own, rounded])
    with np.errstate(all="ignore"):
        up = np.nextafter(both, np.float32(np.inf))
        down = np.nextafter(both, np.float32(-np.inf))
    return np.concatenate([both, up, down])


def domain_sample(name: str, dtype: type, n: int, seed: int = 0) -> np.ndarray:
    """``n`` inputs for ``name`` in ``dtype`` spanning its whole domain, specials first."""
    if name not in _RANGE:
        raise KeyError(f"domain_sample: no domain known for refmath function {name!r}")
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.float64:
        special = special_values64()
        m = max(n - special.size, 0)
        a, b = m // 3, m // 3
        c = m - a - b
        bits = rng.integers(0, 2**64, size=a, dtype=np.uint64, endpoint=False).view(np.float64)
    elif dt == np.float32:
        special = special_values32()
        m = max(n - special.size, 0)
        a, b = m // 3, m // 3
        c = m - a - b
        bits = rng.integers(0, 2**32, size=a, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        raise TypeError(f"domain_sample: dtype must be float64 or float32, got {dt}")
    lo, hi = _RANGE[name]
    uniform = rng.uniform(lo, hi, size=b)
    # log-uniform magnitudes 2**-60 .. 2**12 with random sign: the small-argument branches
    mags = np.exp2(rng.uniform(-60.0, 12.0, size=c)) * rng.choice([-1.0, 1.0], size=c)
    with np.errstate(all="ignore"):
        rest = np.concatenate([uniform, mags]).astype(dt)
    return np.concatenate([special.astype(dt), bits, rest])[: max(n, special.size)]


def ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in ulps of the format of ``y`` (float64 or float32), ``ref`` exact-ish.

    ``ref`` is a np.longdouble array (or float64 for float32 results). The ulp is that of the
    format at ``ref``'s binade, floored at the smallest subnormal. Where ``ref`` rounds to an
    infinity of the format and ``y`` is that infinity the error is 0; NaN errors become inf.
    """
    y = np.asarray(y)
    if y.dtype == np.float64:
        mant, emin = 53, -1074
    elif y.dtype == np.float32:
        mant, emin = 24, -149
    else:
        raise TypeError(f"ulp_error: result dtype must be float64 or float32, got {y.dtype}")
    r = np.asarray(ref, dtype=np.longdouble)
    yl = y.astype(np.longdouble)
    with np.errstate(all="ignore"):
        _, e = np.frexp(r)
        ulp = np.ldexp(np.longdouble(1), np.maximum(e.astype(np.int64) - mant, emin))
        err = np.abs(yl - r) / ulp
        rounded = r.astype(y.dtype)  # beyond the format's range the right answer is +-inf
    same_inf = np.isinf(rounded) & (y == rounded)
    err = np.where(same_inf, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)
