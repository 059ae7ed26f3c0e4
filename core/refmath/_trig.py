"""sin and cos in float64: fdlibm's (Sun's freely distributable libm, the source of most C
libraries' double sin), on whole numpy arrays. The argument is reduced by pi/2 in Cody and
Waite's three parts (``__ieee754_rem_pio2``'s medium case, good to 151 bits), then one of
fdlibm's two kernel polynomials runs on the reduced pair (``__kernel_sin``,
``__kernel_cos``). Every step is one IEEE operation in float64 (numpy contracts nothing), so
the bits are the same on every machine; the error is below 1 ulp of float64, so a float32 sin
rounded from it is the correctly rounded one but for an input whose sine lies within a
float64 ulp of a float32 rounding boundary.

Past ``|x| = 2**19 * pi / 2`` (823,550) fdlibm reduces with Payne and Hanek's multiprecision
method, which is not written here: :func:`sin64` and :func:`cos64` raise ``ValueError`` for
such an argument (a capture's rotary embedding angles stay far below it).

numpy only: no tape op or device kernel calls sin or cos yet, so there is no C twin.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.refmath._bits import from_hi_word, hi_word

__all__ = ["LARGEST", "cos64", "sin64"]

#: the largest |x| reduced here (fdlibm's medium case: high word 0x413921fb)
LARGEST = 823549.6

_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
      2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
      -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
_INVPIO2 = 6.36619772367581382433e-01
_PIO2_1, _PIO2_1T = 1.57079632673412561417e+00, 6.07710050650619224932e-11
_PIO2_2, _PIO2_2T = 6.07710050630396597660e-11, 2.02226624879595063154e-21
_PIO2_3, _PIO2_3T = 2.02226624871116645580e-21, 8.47842766036889956997e-32


def _kernel_sin(x: np.ndarray, y: np.ndarray, reduced: np.ndarray) -> np.ndarray:
    """sin(x + y), |x + y| <= pi/4 (``__kernel_sin``: iy = 1 where the argument was
    reduced, 0 where x is the input itself)."""
    z = x * x
    v = z * x
    r = _S[1] + z * (_S[2] + z * (_S[3] + z * (_S[4] + z * _S[5])))
    with_y = x - ((z * (0.5 * y - v * r) - y) - v * _S[0])
    no_y = x + v * (_S[0] + z * r)
    out = np.where(reduced, with_y, no_y)
    tiny = (hi_word(x) & 0x7FFFFFFF) < 0x3E400000  # |x| < 2**-27: x itself
    return np.where(tiny, x, out)


def _kernel_cos(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """cos(x + y), |x + y| <= pi/4 (``__kernel_cos``)."""
    ix = hi_word(x) & 0x7FFFFFFF
    z = x * x
    r = z * (_C[0] + z * (_C[1] + z * (_C[2] + z * (_C[3] + z * (_C[4] + z * _C[5])))))
    small = 1.0 - (0.5 * z - (z * r - x * y))  # |x| < 0.3
    # qx: 0.28125 past 0.78125, else x / 4 (the high word less 2 in the exponent, low zero)
    qx = np.where(ix > 0x3FE90000, 0.28125, from_hi_word(ix - 0x00200000))
    hz = 0.5 * z - qx
    big = (1.0 - qx) - (hz - (z * r - x * y))
    out = np.where(ix < 0x3FD33333, small, big)
    return np.where(ix < 0x3E400000, 1.0, out)


def _exponent(v: np.ndarray) -> np.ndarray:
    return (hi_word(v) >> 20) & 0x7FF


def _rem_pio2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(n, y0, y1, reduced): x - n * pi/2 = y0 + y1, |y0 + y1| <= pi/4
    (``__ieee754_rem_pio2`` for |x| <= 2**19 * pi/2; none at |x| <= pi/4: reduced False)."""
    hx = hi_word(x)
    ix = hx & 0x7FFFFFFF
    neg = hx < 0
    t = np.abs(x)
    # |x| < 3pi/4: n = 1, 33 + 53 bits of pi/2 (33 + 33 + 53 next to pi/2 itself)
    near = ix == 0x3FF921FB
    z = t - _PIO2_1
    z = np.where(near, z - _PIO2_2, z)
    c = np.where(near, _PIO2_2T, _PIO2_1T)
    s0 = z - c
    s1 = (z - s0) - c
    # the medium case: n = nearest integer to |x| * 2/pi, one, two or three parts of pi/2
    n = np.floor(t * _INVPIO2 + 0.5)
    r = t - n * _PIO2_1
    w = n * _PIO2_1T
    y0 = r - w
    j = ix >> 20
    second = (j - _exponent(y0)) > 16
    t2 = r
    r2 = t2 - n * _PIO2_2
    w2 = n * _PIO2_2T - ((t2 - r2) - n * _PIO2_2)
    y02 = r2 - w2
    third = second & ((j - _exponent(y02)) > 49)
    t3 = r2
    r3 = t3 - n * _PIO2_3
    w3 = n * _PIO2_3T - ((t3 - r3) - n * _PIO2_3)
    y03 = r3 - w3
    r = np.where(third, r3, np.where(second, r2, r))
    w = np.where(third, w3, np.where(second, w2, w))
    y0 = np.where(third, y03, np.where(second, y02, y0))
    y1 = (r - y0) - w
    special = ix < 0x4002D97C
    n = np.where(special, 1.0, n)
    y0 = np.where(special, s0, y0)
    y1 = np.where(special, s1, y1)
    n, y0, y1 = np.where(neg, -n, n), np.where(neg, -y0, y0), np.where(neg, -y1, y1)
    none = ix <= 0x3FE921FB
    return (np.where(none, 0.0, n).astype(np.int64), np.where(none, x, y0),
            np.where(none, 0.0, y1), ~none)


def _trig(x: np.ndarray, shift: int) -> np.ndarray:
    x = np.asarray(x, np.float64)
    finite = np.isfinite(x)
    if np.any(np.abs(x[finite]) > LARGEST):
        raise ValueError(f"sin/cos of |x| > {LARGEST}: Payne-Hanek reduction not written")
    with np.errstate(all="ignore"):
        xs = np.where(finite, x, 0.0)
        n, y0, y1, reduced = _rem_pio2(xs)
        q = (n + shift) & 3
        s, c = _kernel_sin(y0, y1, reduced), _kernel_cos(y0, y1)
        out = np.where(q == 0, s, np.where(q == 1, c, np.where(q == 2, -s, -c)))
        return np.where(finite, out, x - x)  # inf and NaN: NaN


def sin64(x: np.ndarray) -> np.ndarray:
    """fdlibm's sin, elementwise, float64."""
    return _trig(x, 0)


def cos64(x: np.ndarray) -> np.ndarray:
    """fdlibm's cos, elementwise, float64."""
    return _trig(x, 1)
