"""tanh, sigmoid, erf, rsqrt on float64 arrays, built on the exp/expm1 kernels.

Same rules as _explog: whole-array numpy, every fdlibm branch computed on sanitized input and
picked with ``np.where``, one IEEE operation per numpy operation in the C twin's order.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.refmath._bits import NAN, low_cleared
from tapescope.core.refmath._explog import exp64, exp_dd64

# erf constants (fdlibm s_erf.c)
ERX = 8.45062911510467529297e-01  # (float)0.84506291151
EFX = 1.28379167095512586316e-01  # 2/sqrt(pi) - 1
EFX8 = 1.02703333676410069053e00
PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
      -5.77027029648944159157e-03, -2.37630166566501626084e-05)
QQ = (3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
      1.32494738004321644526e-04, -3.96022827877536812320e-06)
PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
      3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
      -2.16637559486879084300e-03)
QA = (1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
      1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e01,
      -6.23753324503260060396e01, -1.62396669462573470355e02, -1.84605092906711035994e02,
      -8.12874355063065934246e01, -9.81432934416914548592e00)
SA = (1.96512716674392571292e01, 1.37657754143519042600e02, 4.34565877475229228821e02,
      6.45387271733267880336e02, 4.29008140027567833386e02, 1.08635005541779435134e02,
      6.57024977031928170135e00, -6.04244152148580987438e-02)
RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e01,
      -1.60636384855821916062e02, -6.37566443368389627722e02, -1.02509513161107724954e03,
      -4.83519191608651397019e02)
SB = (3.03380607434824582924e01, 3.25792512996573918826e02, 1.53672958608443695994e03,
      3.19985821950859553908e03, 2.55305040643316442583e03, 4.74528541206955367215e02,
      -2.24409524465858183362e01)


def _horner(z: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    """c0 + z*(c1 + z*(c2 + ...)), innermost first: the nesting fdlibm (and the C twin) write."""
    acc = z * coeffs[-1]
    for c in coeffs[-2:0:-1]:
        acc = z * (c + acc)
    return coeffs[0] + acc


def _one_plus(z: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    """1 + z*(c1 + z*(c2 + ...)) for denominators written with a leading 1."""
    return _horner(z, (1.0, *coeffs))


# tanh(x) = x + x*(z*T(z)), z = x*x: the Taylor series (2**2n (2**2n - 1) B_2n / (2n)!),
# truncated where |x| < 1/8 makes the next term < 2**-60 relative.
TANH_T = (-0.3333333333333333, 0.13333333333333333, -0.05396825396825397,
          0.021869488536155203, -0.008863235529902197, 0.003592128036572481,
          -0.0014558343870513183, 0.000590027440945586, -0.00023912911424355248)


def _tanh_rare(x: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """tanh where |x| < 1/8, |x| >= 22, or NaN (small arrays: plain np.where is fine)."""
    xs = np.where(np.isnan(x) | (ix >= 0x40360000), 0.0, x)
    z = xs * xs
    y = xs + xs * (z * _horner(z, TANH_T))  # |x| < 1/8: the Taylor series
    y = np.where(ix < 0x3C800000, x * (1.0 + x), y)  # |x| < 2**-55: x (keeps -0, subnormals)
    y = np.where(ix >= 0x40360000, np.copysign(1.0, x), y)  # |x| >= 22 (and inf): +-1
    return np.where(np.isnan(x), NAN, y)


def _ratio_dd(nh: np.ndarray, nl: np.ndarray, dh: np.ndarray, dl: np.ndarray) -> np.ndarray:
    """(nh + nl) / (dh + dl) to first order: q + (nl - q*dl)/dh, q = nh/dh. Overwrites nh."""
    q = np.divide(nh, dh, out=nh)
    dl *= q
    np.subtract(nl, dl, out=dl)
    dl /= dh
    q += dl
    return q


def tanh64(x: np.ndarray) -> np.ndarray:
    """tanh(x): odd Taylor series for |x| < 1/8, else (1-e)/(1+e) with e = exp(-2|x|) carried
    as a double-double, so the quotient is rounded about once (<= ~1 ulp)."""
    a = np.abs(x)
    mid = a >= 0.125  # 1/8 <= |x| < 22: the high-word tests 0x3FC00000 <= ix < 0x40360000
    mid &= a < 22.0  # (both bounds are exact doubles); False for NaN
    allmid = bool(mid.all())
    if not allmid:
        np.putmask(a, ~mid, 0.5)
    a *= -2.0
    eh, el = exp_dd64(a)
    nh = 1.0 - eh  # Fast2Sum: 1 - eh == nh + ((1 - nh) - eh) exactly (eh < 1)
    nl = np.subtract(1.0, nh, out=a)
    nl -= eh
    nl -= el
    dh = 1.0 + eh  # Fast2Sum: 1 + eh == dh + (eh - (dh - 1)) exactly
    dl = dh - 1.0
    np.subtract(eh, dl, out=dl)
    dl += el
    y = _ratio_dd(nh, nl, dh, dl)
    np.copysign(y, x, out=y)  # y > 0 here: the same as negating for x < 0
    if not allmid:
        rare = ~mid
        xr = x[rare]
        ix = xr.view(np.int64) >> 32
        y[rare] = _tanh_rare(xr, ix & 0x7FFFFFFF)
    return y


def sigmoid64(x: np.ndarray) -> np.ndarray:
    """n/(1+e) with e = exp(-|x|) as a double-double, n = 1 for x >= 0 and e for x < 0 (~1 ulp).

    Below x = -708 the result is exp(x) itself (1+e rounds to 1); above 708 it is 1.
    """
    ok = np.abs(x) <= 708.0  # False for NaN
    allok = bool(ok.all())
    a = np.abs(x) if allok else np.where(ok, np.abs(x), 0.0)
    np.negative(a, out=a)
    eh, el = exp_dd64(a)
    d = 1.0 + eh  # Fast2Sum: 1 + eh == d + (eh - (d - 1)) exactly
    s = d - 1.0
    np.subtract(eh, s, out=s)
    s += el
    neg = x < 0.0
    nh = np.where(neg, eh, 1.0)
    nl = np.where(neg, el, 0.0)
    y = _ratio_dd(nh, nl, d, s)
    if not allok:
        bad = ~ok
        xb = x[bad]
        y[bad] = np.where(np.isnan(xb), NAN, np.where(xb > 0.0, 1.0, exp64(xb)))
    return y


def erf64(x: np.ndarray) -> np.ndarray:
    """erf(x), fdlibm s_erf.c: rational approximations on [0,0.84375), [0.84375,1.25), then
    1 - exp(-x*x - 0.5625 + R/S)/x with x*x split exactly."""
    bits = x.view(np.int64)
    ix = (bits >> 32) & 0x7FFFFFFF
    neg = bits < 0
    nan = np.isnan(x)
    xs = np.where(nan, 0.0, x)
    # |x| < 0.84375: x + x*P(x^2)/Q(x^2)
    z = xs * xs
    ya = xs + xs * (_horner(z, PP) / _one_plus(z, QQ))
    ytiny = np.where(ix < 0x00800000, 0.125 * (8.0 * xs + EFX8 * xs), xs + EFX * xs)
    ya = np.where(ix < 0x3E300000, ytiny, ya)  # |x| < 2**-28 (scaled to dodge underflow)
    # 0.84375 <= |x| < 1.25: erx + P(s)/Q(s), s = |x| - 1
    ax = np.abs(xs)
    s = ax - 1.0
    pq = _horner(s, PA) / _one_plus(s, QA)
    yb = np.where(neg, -ERX - pq, ERX + pq)
    # 1.25 <= |x| < 6: erfc(|x|) = exp(-z*z - 0.5625) * exp((z-x)(z+x) + R/S) / x
    ad = np.where((ix >= 0x3FF40000) & (ix < 0x40180000), ax, 2.0)
    s = 1.0 / (ad * ad)
    mid = ix < 0x4006DB6E  # |x| < 1/0.35
    rr = np.where(mid, _horner(s, RA), _horner(s, RB))
    ss = np.where(mid, _one_plus(s, SA), _one_plus(s, SB))
    zc = low_cleared(ad)  # z*z is exact: z has at most 21 significant bits
    r = exp64(-zc * zc - 0.5625) * exp64((zc - ad) * (zc + ad) + rr / ss)
    yd = np.where(neg, r / ad - 1.0, 1.0 - r / ad)
    y = np.where(ix < 0x3FEB0000, ya, np.where(ix < 0x3FF40000, yb, yd))
    y = np.where(ix >= 0x40180000, np.where(neg, -1.0, 1.0), y)  # |x| >= 6 (and inf): +-1
    return np.where(nan, NAN, y)


def rsqrt64(x: np.ndarray) -> np.ndarray:
    """1/sqrt(x): two correctly rounded operations (sqrt, then divide); -0 gives -inf."""
    y = 1.0 / np.sqrt(x)
    return np.where(np.isnan(x) | (x < 0.0), NAN, y)
