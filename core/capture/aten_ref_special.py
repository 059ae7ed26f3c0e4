"""The reference forms of the special functions a probabilistic model's loss records (session 44:
``torch.distributions``' Dirichlet, Beta, Gamma and Student-t log-probabilities and KL terms,
``torch.special``): ``lgamma``, ``digamma``, ``polygamma``, ``erfinv``, ``special_log_ndtr``.

Each output is the exact function value correctly rounded to the result's type (float32 or
float64; a half type: to float32, then to the half type, as torch's kernels compute in float).
The value is computed by mpmath at 40 bits past the target's and again at twice as many until
both round alike (Ziv's strategy), each distinct argument once; at most ``_BUDGET`` distinct
arguments a call (mpmath costs 40-500 us a value: past it no reference, said so). Poles and
limits as stated in docs/reference-order.md ("Special functions").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    F32,
    F64,
    HALF,
    NoReference,
    as_dtype,
    check_elems,
    default_float,
    form,
    is_float,
)

_BUDGET = 1 << 14  # distinct arguments a call may evaluate (mpmath: ~20-250 us each)


def _mp():
    try:
        import mpmath
    except ImportError:  # pragma: no cover — a dependency; said so where it is missing
        raise NoReference("special functions need mpmath (pip install mpmath)") from None
    return mpmath


def _rounded(v, target: np.dtype, mp) -> float:
    """mpmath value ``v`` correctly rounded to ``target`` (float32 or float64): the candidate
    nearest it among the double's rounding and its neighbours (ties to even)."""
    d = float(v)  # (round to nearest double: exact for float64 targets)
    if target == F64 or not math.isfinite(d):
        return d if target == F64 else float(np.float32(d))
    f = np.float32(d)
    if not np.isfinite(f):
        return float(f)
    best, err = f, abs(mp.mpf(float(f)) - v)
    for g in (np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))):
        if not np.isfinite(g):
            continue
        e = abs(mp.mpf(float(g)) - v)
        if e < err or (e == err and int(np.float32(g).view(np.uint32)) % 2 == 0):
            best, err = g, e
    return float(best)


def _ziv(value: Callable, u: float, target: np.dtype, bits: int, mp) -> float:
    """``value(mp, u)`` correctly rounded to ``target``: evaluated at the target's precision
    plus 40 bits and again at twice as many, until both round alike (Ziv's strategy: a value
    near a zero of the function, digamma's at 1.4616..., loses bits to cancellation at the
    lower precision)."""
    prec = bits + 40
    with mp.workprec(prec):
        r = _rounded(value(mp, mp.mpf(u)), target, mp)
    while prec < 4096:
        prec *= 2
        with mp.workprec(prec):
            r2 = _rounded(value(mp, mp.mpf(u)), target, mp)
        if r2 == r or (math.isnan(r) and math.isnan(r2)):
            return r
        r = r2
    return r


def _double_fast(fn: Callable, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``fn`` (numpy's, accurate to an ulp of a double) of float32 ``xs`` rounded to float32,
    and where that rounding is certain: the double lies farther than 4 of its ulps from the
    midpoint between its float32 rounding and that one's neighbour on its side (Ziv's first
    step; the rest go to mpmath)."""
    with np.errstate(all="ignore"):
        d = fn(xs.astype(F64))
        f = d.astype(F32)
        other = np.nextafter(f, np.where(d > f.astype(F64), np.float32(np.inf),
                                         np.float32(-np.inf)))
        mid = (f.astype(F64) + other.astype(F64)) / 2  # (exact: two floats' mean in a double)
        ok = np.isfinite(d) & np.isfinite(other) & (np.abs(d - mid) > 4 * np.spacing(np.abs(d)))
    return f, ok


def _special(name: str, value: Callable, special_cases: Callable,
             fast: Callable | None = None) -> Callable:
    """A form of ``fn(x)``: ``special_cases(x)`` for the arguments it answers (a float or
    None), else ``value(mp, mpf(x))`` correctly rounded; ``fast``: numpy's double form of it,
    taken for a float32 result where its rounding is certain (``_double_fast``)."""
    def run(args: list, kwargs: dict, x=None) -> list:
        x = np.asarray(args[0] if x is None else x)
        out = x.dtype if is_float(x.dtype) else F32
        target = F64 if out == F64 else F32
        check_elems(x.size, name)
        xs = np.ascontiguousarray(x.astype(target)).reshape(-1)
        if fast is not None and target == F32:
            f, ok = _double_fast(fast, xs)
            if not ok.all():  # (the uncertain ones, and the special cases: mpmath's way)
                f[~ok] = _special(name, value, special_cases)([xs[~ok]], kwargs)[0]
            y = f.reshape(x.shape)
            return [y.astype(out) if out in HALF else y]
        u = "u8" if target == F64 else "u4"  # (by their bits: -0.0 and +0.0 apart)
        ubits, inv = np.unique(xs.view(u), return_inverse=True)
        uniq = ubits.view(target)
        if uniq.size > _BUDGET:
            raise NoReference(f"{name}: {uniq.size:,} distinct arguments, past the special "
                              f"functions' budget of {_BUDGET:,} (mpmath's values)")
        mp = _mp()
        res = np.empty(uniq.shape, target)
        bits = 53 if target == F64 else 24
        for i, u in enumerate(uniq.tolist()):
            s = special_cases(u)
            res[i] = s if s is not None else _ziv(value, u, target, bits, mp)
        y = res[inv].reshape(x.shape)
        return [y.astype(out) if out in HALF else y]
    return run


def _pole(x: float) -> bool:
    return x <= 0 and x == math.floor(x)


def _lgamma_cases(x: float) -> float | None:
    if math.isnan(x):
        return math.nan
    if math.isinf(x) or _pole(x):
        return math.inf
    return None


def _lgamma(mp, x):
    return mp.loggamma(x) if x > 0 else mp.log(abs(mp.gamma(x)))


def _digamma_cases(x: float) -> float | None:
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    if x == 0:
        return -math.inf if math.copysign(1, x) > 0 else math.inf
    if _pole(x):
        return math.nan
    return None


def _erfinv_cases(x: float) -> float | None:
    if math.isnan(x) or abs(x) > 1:
        return math.nan
    if abs(x) == 1:
        return math.copysign(math.inf, x)
    if x == 0:
        return x  # (the zero's sign)
    return None


def _log_ndtr_cases(x: float) -> float | None:
    if math.isnan(x):
        return math.nan
    if x == math.inf:
        return -0.0  # (the limit from below: log of a probability just under 1)
    if x == -math.inf:
        return -math.inf
    return None


def _log_ndtr(mp, x):
    # (past 0, log1p of the small tail: ncdf(x) itself is 1 to the working precision)
    return mp.log(mp.ncdf(x)) if x <= 0 else mp.log1p(-mp.ncdf(-x))


_DIGAMMA = _special("digamma", lambda mp, x: mp.digamma(x), _digamma_cases)
form("aten.lgamma.default")(_special("lgamma", _lgamma, _lgamma_cases))
form("aten.digamma.default")(_DIGAMMA)
def _log_cases(x: float) -> float | None:
    if math.isnan(x) or x < 0:
        return math.nan
    return -math.inf if x == 0 else math.inf if math.isinf(x) else 0.0 if x == 1 else None


# log2 and log10 (a DCG loss's discounts): correctly rounded; numpy's double for a float32
# result where its rounding is certain, mpmath for the rest and for float64
form("aten.log2.default")(_special("log2", lambda mp, x: mp.log(x, 2), _log_cases, np.log2))
form("aten.log10.default")(_special("log10", lambda mp, x: mp.log10(x), _log_cases,
                                    np.log10))
form("aten.erfinv.default")(_special("erfinv", lambda mp, x: mp.erfinv(x), _erfinv_cases))
form("aten.special_log_ndtr.default")(_special("special_log_ndtr", _log_ndtr,
                                               _log_ndtr_cases))


@form("aten.polygamma.default")
def _polygamma(args: list, kwargs: dict) -> list:
    """``polygamma(n, x)``, n >= 1 (n = 0: digamma's): at a pole the limit from the right
    (+inf for odd n, -inf for even), +inf gives a zero of that sign, -inf NaN."""
    n, x = args[0], args[1]
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise NoReference("polygamma: n a whole number, 0 or more")
    if n == 0:
        return _DIGAMMA([x], {})
    sign = 1.0 if n % 2 == 1 else -1.0

    def cases(v: float) -> float | None:
        if math.isnan(v) or v == -math.inf:
            return math.nan
        if v == math.inf:
            return math.copysign(0.0, sign)
        if _pole(v):
            return math.copysign(math.inf, sign)
        return None
    return _special("polygamma", lambda mp, v: mp.polygamma(n, v), cases)([x], kwargs)



# --- window functions -----------------------------------------------------------------------------

_WINDOWS = {"hann_window": (0.5, 0.5), "hamming_window": (0.54, 0.46)}


def window_args(base: str, args: list, kwargs: dict) -> tuple[int, bool, float, float]:
    """(N, periodic, alpha, beta) of a ``hann_window`` / ``hamming_window`` call."""
    n = args[0] if args else kwargs.get("window_length")
    if type(n) is not int or n < 0:
        raise NoReference(f"window length {n!r} (a non-negative int)")
    alpha, beta = _WINDOWS[base]
    periodic = bool(args[1]) if len(args) > 1 else bool(kwargs.get("periodic", True))
    if len(args) > 2:
        alpha = float(args[2])
    if len(args) > 3:
        beta = float(args[3])
    return n, periodic, alpha, beta


def _window(base: str):
    def run(args: list, kwargs: dict) -> list:
        """``alpha - beta * cos(2 pi n / (M - 1))`` for n < N (M = N + 1 where ``periodic``,
        the default), each value correctly rounded to the dtype (mpmath, Ziv's strategy: the
        sum cancels near n = 0, where a double's would lose the bits); N = 1: ones; N = 0:
        empty."""
        n, periodic, alpha, beta = window_args(base, args, kwargs)
        return [_window_values(base, n, periodic, alpha, beta,
                               as_dtype(kwargs.get("dtype")) or default_float())]
    return run


def _window_values(base: str, n: int, periodic: bool, alpha: float, beta: float,
                   out: np.dtype) -> np.ndarray:
    if not is_float(out):
        raise NoReference(f"a window of {out} (written for floating types)")
    check_elems(n, base)
    if n <= 1:
        return np.ones(n, out)
    if n > _BUDGET:
        raise NoReference(f"{base}: {n:,} values, past the special functions' budget of "
                          f"{_BUDGET:,} (mpmath's values)")
    m = n + 1 if periodic else n
    target = F64 if out == F64 else F32
    bits = 53 if target == F64 else 24
    mp = _mp()

    def value(mp, u):
        return mp.mpf(alpha) - mp.mpf(beta) * mp.cos(2 * mp.pi * u / (m - 1))
    y = np.array([_ziv(value, float(k), target, bits, mp) for k in range(n)], target)
    return y.astype(out)


form("aten.hann_window.default", "aten.hann_window.periodic")(_window("hann_window"))
form("aten.hamming_window.default", "aten.hamming_window.periodic",
     "aten.hamming_window.periodic_alpha",
     "aten.hamming_window.periodic_alpha_beta")(_window("hamming_window"))


# --- the modulus of a complex value ---------------------------------------------------------------

def complex_abs(z: np.ndarray) -> np.ndarray:
    """``|z|`` of a complex64 / complex128 array, each the exact modulus correctly rounded to
    the component type: for complex64 ``sqrt(re^2 + im^2)`` in double (the squares exact, two
    roundings), kept where its float32 rounding is certain (``_double_fast``'s test), mpmath
    (Ziv) for the rest and for complex128; an infinite component gives inf, else a NaN NaN."""
    target = F32 if z.dtype == np.complex64 else F64
    re, im = np.ascontiguousarray(z.real).reshape(-1), np.ascontiguousarray(z.imag).reshape(-1)
    out = np.empty(re.shape, target)
    with np.errstate(all="ignore"):
        special = ~(np.isfinite(re) & np.isfinite(im))
        out[special] = np.where(np.isinf(re[special]) | np.isinf(im[special]), np.inf, np.nan)
        todo = ~special
        if target == F32:
            r64, i64 = re.astype(F64), im.astype(F64)
            d = np.sqrt(r64 * r64 + i64 * i64)
            f = d.astype(F32)
            other = np.nextafter(f, np.where(d > f.astype(F64), np.float32(np.inf),
                                             np.float32(-np.inf)))
            mid = (f.astype(F64) + other.astype(F64)) / 2
            ok = todo & np.isfinite(other) & (np.abs(d - mid) > 4 * np.spacing(np.abs(d)))
            out[ok] = f[ok]
            todo &= ~ok
    _by_mpmath(out, todo, re, im, lambda mp, a, b: mp.sqrt(a ** 2 + b ** 2), "abs")
    return out.reshape(z.shape)


def _by_mpmath(out: np.ndarray, todo: np.ndarray, re: np.ndarray, im: np.ndarray,
               value: Callable, what: str) -> None:
    """``out[i]`` for each ``todo`` element: ``value(mp, re, im)`` (mpmath numbers) correctly
    rounded to ``out``'s type (``_ziv``); past ``_BUDGET`` elements, no reference."""
    idx = np.flatnonzero(todo)
    if idx.size > _BUDGET:
        raise NoReference(f"{what}: {idx.size:,} complex values for mpmath, past the budget "
                          f"of {_BUDGET:,}")
    if not idx.size:
        return
    mp = _mp()
    bits = 53 if out.dtype == F64 else 24
    for i in idx.tolist():
        a, b = float(re[i]), float(im[i])
        out[i] = _ziv(lambda mp, _u, a=a, b=b: value(mp, mp.mpf(a), mp.mpf(b)), 0.0,
                      out.dtype, bits, mp)


def complex_angle(z: np.ndarray) -> np.ndarray:
    """``angle(z)``: the principal argument, exact, correctly rounded to the component type:
    atan2(im, re) (for complex64 numpy's double atan2 where its float32 rounding is certain,
    ``_double_fast``'s test; mpmath for the rest and for complex128); zeros and infinities as
    C99's atan2 (a zero imaginary part's sign kept: -pi for (-1, -0.0)), rounded from the
    double; NaN where a part is. A real operand: pi below 0, NaN for NaN, else 0."""
    if z.dtype.kind != "c":
        t = z.dtype.type
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(z), z, np.where(z < 0, t(math.pi), t(0))).astype(z.dtype)
    target = F32 if z.dtype == np.complex64 else F64
    re, im = np.ascontiguousarray(z.real).reshape(-1), np.ascontiguousarray(z.imag).reshape(-1)
    out = np.empty(re.shape, target)
    with np.errstate(all="ignore"):
        special = ~(np.isfinite(re) & np.isfinite(im)) | (im == 0) | (re == 0)
        out[special] = np.arctan2(im[special].astype(F64), re[special].astype(F64)).astype(
            target)
        todo = ~special
        if target == F32:
            f, ok = _double_fast(lambda v: np.arctan2(im[todo].astype(F64), v),
                                 re[todo])
            sub = np.flatnonzero(todo)
            out[sub[ok]] = f[ok]
            todo[sub[ok]] = False
    _by_mpmath(out, todo, re, im, lambda mp, a, b: mp.atan2(b, a), "angle")
    return out.reshape(z.shape)


def complex_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b`` of complex numbers by Smith's algorithm (numpy's and c10::complex's, written
    here without an FMA): where ``|br| >= |bi|``: ``rat = bi / br``, ``scl = 1 / (br + bi *
    rat)``, ``re = (ar + ai * rat) * scl``, ``im = (ai - ar * rat) * scl`` (both zero:
    ``ar / |br|``, ``ai / |bi|``); else ``rat = br / bi``, ``scl = 1 / (bi + br * rat)``,
    ``re = (ar * rat + ai) * scl``, ``im = (ai * rat - ar) * scl``; each step rounded."""
    a, b = np.broadcast_arrays(a, b)
    t = a.real.dtype.type
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    with np.errstate(all="ignore"):
        first = np.abs(br) >= np.abs(bi)
        zero = (br == 0) & (bi == 0)
        rat1 = bi / br
        scl1 = t(1) / (br + bi * rat1)
        rat2 = br / bi
        scl2 = t(1) / (bi + br * rat2)
        re = np.where(first, (ar + ai * rat1) * scl1, (ar * rat2 + ai) * scl2)
        im = np.where(first, (ai - ar * rat1) * scl1, (ai * rat2 - ar) * scl2)
        re = np.where(zero, ar / np.abs(br), re)
        im = np.where(zero, ai / np.abs(bi), im)
    out = np.empty(a.shape, a.dtype)
    out.real, out.imag = re, im
    return out


def complex_sgn(z: np.ndarray) -> np.ndarray:
    """``sgn(z) = z / |z|`` (0 where z is 0): each component divided by the correctly rounded
    modulus (``complex_abs``), each quotient rounded."""
    m = complex_abs(z)
    t = m.dtype.type
    with np.errstate(all="ignore"):
        zero = m == 0
        safe = np.where(zero, t(1), m)
        re = np.where(zero, t(0), z.real / safe)
        im = np.where(zero, t(0), z.imag / safe)
    out = np.empty(z.shape, z.dtype)
    out.real, out.imag = re, im
    return out
