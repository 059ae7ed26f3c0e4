"""log and log1p on float64 arrays: fdlibm's algorithms as whole-array numpy.

Same rules as _explog: each numpy operation is one IEEE operation in the order the C twin
(core/refmath/refmath.cuh) spells it; rare branches are computed on their own elements only.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.refmath._bits import INF, NAN, hi_word, with_hi_word
from tapescope.core.refmath._explog import LN2_HI, LN2_LO

TWO54 = 1.80143985094819840000e16  # 0x43500000 00000000: scales subnormals up exactly
# log / log1p: R(z) for log(1+f) = 2s + s*R(s^2), s = f/(2+f).
LG1 = 6.666666666666735130e-01
LG2 = 3.999999999940941908e-01
LG3 = 2.857142874366239149e-01
LG4 = 2.222219843214978396e-01
LG5 = 1.818357216161805012e-01
LG6 = 1.531383769920937332e-01
LG7 = 1.479819860511658591e-01


def _log64_all_branches(x: np.ndarray) -> np.ndarray:
    """log64 for any input, every fdlibm branch spelled out (used on the rare elements)."""
    nan = ~(x >= 0.0)  # NaN or negative
    zero = x == 0.0
    pinf = x == INF
    xs = np.where(nan | zero | pinf, 1.0, x)
    sub = xs < 2.2250738585072014e-308  # subnormal: scale up by 2**54 (exact)
    xs = np.where(sub, xs * TWO54, xs)
    hx = hi_word(xs)
    k = np.where(sub, -54, 0) + (hx >> 20) - 1023
    hx = hx & 0x000FFFFF
    i = (hx + 0x95F64) & 0x100000  # 1 when the mantissa is above sqrt(2): use x/2 instead
    xn = with_hi_word(xs, hx | (i ^ 0x3FF00000))
    k = k + (i >> 20)
    f = xn - 1.0
    dk = k.astype(np.float64)
    k0 = k == 0
    # |f| < 2**-20: a short series
    tiny = (0x000FFFFF & (2 + hx)) < 3
    rt = f * f * (0.5 - 0.33333333333333333 * f)
    yt = np.where(k0, f - rt, dk * LN2_HI - ((rt - dk * LN2_LO) - f))
    yt = np.where(f == 0.0, np.where(k0, 0.0, dk * LN2_HI + dk * LN2_LO), yt)
    # general case
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    big = ((hx - 0x6147A) | (0x6B851 - hx)) > 0  # f far from 0: subtract hfsq separately
    R = t2 + t1
    hfsq = 0.5 * f * f
    sr = s * (hfsq + R)
    ya = np.where(k0, f - (hfsq - sr), dk * LN2_HI - ((hfsq - (sr + dk * LN2_LO)) - f))
    sf = s * (f - R)
    yb = np.where(k0, f - sf, dk * LN2_HI - ((sf - dk * LN2_LO) - f))
    y = np.where(tiny, yt, np.where(big, ya, yb))
    y = np.where(pinf, INF, y)
    y = np.where(zero, -INF, y)
    return np.where(nan, NAN, y)


def log64(x: np.ndarray) -> np.ndarray:
    """log(x), fdlibm e_log.c: x = 2**k * (1+f), sqrt(2)/2 < 1+f < sqrt(2), log(1+f) by R(s^2).

    Fast path for positive normal x with |f| >= 2**-20; the rest goes to the all-branch form.
    """
    hx = x.view(np.int64) >> 32
    common = (hx >= 0x00100000) & (hx < 0x7FF00000)  # positive, normal, finite (not NaN)
    common &= (0x000FFFFF & (2 + (hx & 0x000FFFFF))) >= 3  # |f| >= 2**-20
    allc = bool(common.all())
    xs = x if allc else np.where(common, x, 1.5)
    bits = xs.view(np.int64)
    hx = bits >> 32
    k = hx >> 20
    k -= 1023
    hx &= 0x000FFFFF
    i = hx + 0x95F64
    i &= 0x100000  # set when the mantissa is above sqrt(2): use x/2 instead
    top = i ^ 0x3FF00000
    top |= hx
    top <<= 32
    xb = bits & 0xFFFFFFFF
    xb |= top
    f = xb.view(np.float64)  # the normalized mantissa, then f = it - 1
    f -= 1.0
    i >>= 20
    k += i
    dk = k.astype(np.float64)
    s = f + 2.0
    np.divide(f, s, out=s)  # s = f/(2+f)
    z = s * s
    w = z * z
    t1 = w * LG6
    t1 += LG4
    t1 *= w
    t1 += LG2
    t1 *= w  # w*(LG2 + w*(LG4 + w*LG6))
    t2 = w * LG7
    for coef in (LG5, LG3):
        t2 += coef
        t2 *= w
    t2 += LG1
    t2 *= z  # z*(LG1 + w*(LG3 + w*(LG5 + w*LG7)))
    R = np.add(t2, t1, out=t2)
    hfsq = 0.5 * f
    hfsq *= f
    lo = dk * LN2_LO
    # NOTE: for k == 0 fdlibm writes f - (...); with dk = +0 the forms below round to the same
    # bits (0 - v == -v, and the result is never 0 on this path).
    ya = hfsq + R
    ya *= s
    ya += lo
    np.subtract(hfsq, ya, out=ya)  # hfsq - (s*(hfsq+R) + dk*ln2_lo)
    yb = f - R
    yb *= s
    yb -= lo  # s*(f-R) - dk*ln2_lo
    big = hx - 0x6147A
    big |= 0x6B851 - hx  # > 0: f far from 0, hfsq subtracted apart
    y = np.where(big > 0, ya, yb)
    y -= f
    np.multiply(dk, LN2_HI, out=dk)
    y = np.subtract(dk, y, out=y)
    if not allc:
        rare = ~common
        y[rare] = _log64_all_branches(x[rare])
    return y


def _log1p64_all_branches(x: np.ndarray) -> np.ndarray:
    """log1p64 for any input, every fdlibm branch spelled out (used on the rare elements)."""
    bits = x.view(np.int64)
    hx = bits >> 32
    ax = hx & 0x7FFFFFFF
    nan = ~(x >= -1.0)  # NaN or below -1
    m1 = x == -1.0
    pinf = x == INF
    xr = np.where(nan | m1 | pinf, 0.5, x)
    # -0.2929 < x < 0.41422: no reduction (k = 0, f = x). (Signed compare on the high word.)
    direct = (hx < 0x3FDA827A) & ((hx > 0) | (hx <= -0x402D413D))
    near = hx < 0x43400000  # x < 2**53: u = 1+x, c = its rounding error divided by u
    u = np.where(near, 1.0 + xr, xr)
    hu = hi_word(u)
    k = (hu >> 20) - 1023
    c = np.where(k > 0, 1.0 - (u - xr), xr - (u - 1.0)) / u
    c = np.where(near, c, 0.0)
    hu = hu & 0x000FFFFF
    low = hu < 0x6A09E  # mantissa below sqrt(2): normalize u, else u/2
    u = np.where(low, with_hi_word(u, hu | 0x3FF00000), with_hi_word(u, hu | 0x3FE00000))
    k = np.where(low, k, k + 1)
    hu = np.where(low, hu, (0x00100000 - hu) >> 2)
    f = np.where(direct, xr, u - 1.0)
    k = np.where(direct, 0, k)
    hu = np.where(direct, 1, hu)
    k0 = k == 0
    dk = k.astype(np.float64)
    hfsq = 0.5 * f * f
    # hu == 0: |f| < 2**-20
    rs = hfsq * (1.0 - 0.66666666666666666 * f)
    ys = np.where(k0, f - rs, dk * LN2_HI - ((rs - (dk * LN2_LO + c)) - f))
    yz = np.where(k0, 0.0, dk * LN2_HI + (c + dk * LN2_LO))
    ys = np.where(f == 0.0, yz, ys)
    s = f / (2.0 + f)
    z = s * s
    R = z * (LG1 + z * (LG2 + z * (LG3 + z * (LG4 + z * (LG5 + z * (LG6 + z * LG7))))))
    sr = s * (hfsq + R)
    yg = np.where(k0, f - (hfsq - sr), dk * LN2_HI - ((hfsq - (sr + (dk * LN2_LO + c))) - f))
    y = np.where(hu == 0, ys, yg)
    # |x| < 2**-29: x - x*x/2 (x itself below 2**-54)
    y = np.where(ax < 0x3E200000, np.where(ax < 0x3C900000, xr, xr - xr * xr * 0.5), y)
    y = np.where(pinf, INF, y)
    y = np.where(m1, -INF, y)
    return np.where(nan, NAN, y)


def log1p64(x: np.ndarray) -> np.ndarray:
    """log(1 + x), fdlibm s_log1p.c: u = 1+x reduced like log, plus the rounding error c of 1+x.

    Fast path for 2**-29 <= |x|, -1 < x < 2**53 and |f| >= 2**-20; the rest goes to the
    all-branch form.
    """
    hx = x.view(np.int64) >> 32
    ax = hx & 0x7FFFFFFF
    main = (ax >= 0x3E200000) & (x > -1.0) & (hx < 0x43400000)  # False for NaN
    allm = bool(main.all())
    xr = x if allm else np.where(main, x, 0.5)
    hx = xr.view(np.int64) >> 32
    # -0.2929 < x < 0.41422: no reduction (k = 0, f = x). (Signed compare on the high word.)
    direct = (hx < 0x3FDA827A) & ((hx > 0) | (hx <= -0x402D413D))
    u = 1.0 + xr
    hu = u.view(np.int64) >> 32
    k = hu >> 20
    k -= 1023
    c = np.where(k > 0, 1.0 - (u - xr), xr - (u - 1.0))
    c /= u  # the rounding error of 1 + x, relative to u
    hu &= 0x000FFFFF
    low = hu < 0x6A09E  # mantissa below sqrt(2): normalize u, else u/2
    u = with_hi_word(u, hu | np.where(low, 0x3FF00000, 0x3FE00000))
    k += ~low
    hu = np.where(low, hu, (0x00100000 - hu) >> 2)
    f = np.where(direct, xr, u - 1.0)
    np.putmask(k, direct, 0)
    np.putmask(hu, direct, 1)
    dk = k.astype(np.float64)
    hfsq = 0.5 * f
    hfsq *= f
    s = f + 2.0
    np.divide(f, s, out=s)
    z = s * s
    R = z * LG7
    for coef in (LG6, LG5, LG4, LG3, LG2, LG1):
        R += coef
        R *= z
    sr = hfsq + R
    sr *= s  # s*(hfsq+R)
    y0 = hfsq - sr
    np.subtract(f, y0, out=y0)  # k == 0: f - (hfsq - sr)
    corr = dk * LN2_LO
    corr += c
    corr += sr
    np.subtract(hfsq, corr, out=corr)
    corr -= f
    y = np.multiply(dk, LN2_HI, out=dk)
    y -= corr  # k*ln2_hi - ((hfsq - (sr + (k*ln2_lo + c))) - f)
    y = np.where(k == 0, y0, y)
    rare = ~main | (hu == 0)  # hu == 0: |f| < 2**-20, a short series
    if rare.any():
        y[rare] = _log1p64_all_branches(x[rare])
    return y
