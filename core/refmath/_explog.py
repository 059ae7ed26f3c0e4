"""exp, expm1, exp as a double-double (and the constants _log shares): fdlibm in numpy.

Each kernel takes a 1-D float64 array and returns a new one. fdlibm's branches become masks:
the common path runs on the whole block (on a sanitized copy, so no integer cast ever sees NaN
or inf), and the rare branches run on just their own elements, spelled out in full. Each numpy
operation is one IEEE operation in the order the C twin (core/refmath/refmath.cuh) spells it,
and products are never fused, so both produce the same bits. Callers wrap these in
``np.errstate(all="ignore")``.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.refmath._bits import INF, NAN, add_exponent, from_hi_word

# fdlibm constants (decimal as in fdlibm; hex words in the comments are the intended bits).
LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42 fee00000: k*LN2_HI exact for |k| < 2**20
LN2_LO = 1.90821492927058770002e-10  # 0x3dea39ef 35793c76
INVLN2 = 1.44269504088896338700e00  # 0x3ff71547 652b82fe
TWOM1000 = 9.33263618503218878990e-302  # 2**-1000
O_THRESHOLD = 7.09782712893383973096e02  # 0x40862E42 FEFA39EF: exp overflows above
U_THRESHOLD = -7.45133219101941108420e02  # 0xc0874910 D52D3051: exp underflows to 0 below

# exp: c(r) = r - r^2*P(r^2) approximates the Remez form of exp on [-ln2/2, ln2/2].
P1 = 1.66666666666666019037e-01
P2 = -2.77777777770155933842e-03
P3 = 6.61375632143793436117e-05
P4 = -1.65339022054652515390e-06
P5 = 4.13813679705723846039e-08

# expm1: scaled coefficients of the rational approximation.
Q1 = -3.33333333333331316428e-02
Q2 = 1.58730158725481460165e-03
Q3 = -7.93650757867487942473e-05
Q4 = 4.00821782732936239552e-06
Q5 = -2.01099218183624371326e-07


def _exp_reduce(xr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                           np.ndarray]:
    """fdlibm's exp reduction for finite xr: (ix, k, hi, lo, q) with x = k*ln2 + (hi - lo) and
    exp(hi - lo) = 1 - ((lo - q) - hi). In-place numpy, one IEEE operation per step."""
    ix = xr.view(np.int64) >> 32
    ix &= 0x7FFFFFFF
    # k = trunc(x/ln2 +- 1/2). fdlibm forces k = +-1 for 0.5ln2 < |x| < 1.5ln2; this formula
    # already gives +-1 on that whole band (its edges are 1e-9 inside), so only the k = 0 band
    # (|x| <= 0.5ln2 by high word, where the formula could give +-1) needs forcing.
    kf = INVLN2 * xr
    kf += np.copysign(0.5, xr)
    k = kf.astype(np.int64)
    np.putmask(k, ix <= 0x3FD62E42, 0)
    t = k.astype(np.float64)
    hi = t * LN2_HI
    np.subtract(xr, hi, out=hi)  # exact: LN2_HI has 32 trailing zero bits
    lo = np.multiply(t, LN2_LO, out=t)
    r = hi - lo
    rr = r * r
    # c = r - rr*(P1 + rr*(P2 + rr*(P3 + rr*(P4 + rr*P5)))), innermost first
    p = rr * P5
    for coef in (P4, P3, P2, P1):
        p += coef
        p *= rr
    c = np.subtract(r, p, out=p)
    q = r * c
    q /= np.subtract(2.0, c, out=c)  # q = (r*c)/(2-c)
    # NOTE: for k == 0 fdlibm writes 1-((r*c)/(c-2)-r); with hi = r, lo = +0 the general form
    # 1-((lo-q)-hi) rounds identically (c-2 == -(2-c) exactly), so one formula serves both.
    return ix, k, hi, lo, q


def exp64(x: np.ndarray) -> np.ndarray:
    """exp(x), fdlibm e_exp.c: x = k*ln2 + r, exp(r) by a rational form, then scale by 2**k."""
    ok = (x >= U_THRESHOLD) & (x <= O_THRESHOLD)  # False for NaN
    allok = bool(ok.all())
    xr = x if allok else np.where(ok, x, 0.0)
    ix, k, hi, lo, q = _exp_reduce(xr)
    y = np.subtract(lo, q, out=lo)
    y -= hi
    np.subtract(1.0, y, out=y)
    deep = k < -1021  # result subnormal: scale by 2**(k+1000), then one rounding by 2**-1000
    anydeep = bool(deep.any())
    if anydeep:
        k[deep] += 1000
    k <<= 52
    yi = y.view(np.int64)
    yi += k  # add k to the exponent field
    if anydeep:
        y[deep] *= TWOM1000
    tiny = ix < 0x3E300000  # |x| < 2**-28: exp(x) rounds as 1 + x
    if tiny.any():
        y[tiny] = 1.0 + xr[tiny]
    if not allok:
        bad = ~ok
        xb = x[bad]
        y[bad] = np.where(np.isnan(xb), NAN, np.where(xb > 0.0, INF, 0.0))
    return y


def _expm1_64_all_branches(x: np.ndarray) -> np.ndarray:
    """expm1_64 for any input, every fdlibm branch spelled out (used on the rare elements)."""
    bits = x.view(np.int64)
    ix = (bits >> 32) & 0x7FFFFFFF
    neg = bits < 0
    nan = np.isnan(x)
    over = x > O_THRESHOLD
    minus1 = neg & (ix >= 0x4043687A) & ~nan  # x <= -56 ln2: exp(x) - 1 rounds to -1
    xr = np.where(nan | over | minus1, 0.0, x)
    k = (INVLN2 * xr + np.where(neg, -0.5, 0.5)).astype(np.int64)
    k = np.where(ix < 0x3FF0A2B2, np.where(neg, -1, 1), k)
    k = np.where(ix <= 0x3FD62E42, 0, k)
    t = k.astype(np.float64)
    hi = xr - t * LN2_HI  # k == 0: hi = x, lo = +0, r = x exactly (c unused)
    lo = t * LN2_LO
    r = hi - lo
    c = (hi - r) - lo  # what the rounding of r lost
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))))
    tt = 3.0 - r1 * hfx
    e = hxs * ((r1 - tt) / (6.0 - r * tt))
    y0 = r - (r * e - hxs)  # k == 0
    e = (r * (e - c) - c) - hxs
    ym1 = 0.5 * (r - e) - 0.5  # k == -1
    yp1 = np.where(r < -0.25, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e))  # k == 1
    yfar = add_exponent(1.0 - (e - r), k) - 1.0  # k <= -2 or k > 56: the -1 is negligible
    kc = np.clip(k, 2, 56)
    t_lo = from_hi_word(0x3FF00000 - (0x200000 >> np.minimum(kc, 19)))  # 1 - 2**-k
    ymid = add_exponent(t_lo - (e - r), k)  # 2 <= k < 20
    t_hi = from_hi_word((0x3FF - kc) << 20)  # 2**-k
    yhigh = add_exponent((r - (e + t_hi)) + 1.0, k)  # 20 <= k <= 56
    y = np.where(k < 20, ymid, yhigh)
    y = np.where((k <= -2) | (k > 56), yfar, y)
    y = np.where(k == 1, yp1, y)
    y = np.where(k == -1, ym1, y)
    y = np.where(k == 0, y0, y)
    y = np.where(ix < 0x3C900000, xr, y)  # |x| < 2**-54: expm1(x) rounds to x
    y = np.where(over, INF, y)
    y = np.where(minus1, -1.0, y)
    return np.where(nan, NAN, y)


def expm1_64(x: np.ndarray) -> np.ndarray:
    """exp(x) - 1, fdlibm s_expm1.c: the exp reduction plus a correction term c, no cancellation.

    Fast path for 2**-54 <= |x| < 56 ln2 (k in [-56, 56]); the rest goes to the all-branch form.
    """
    ix = x.view(np.int64) >> 32
    ix &= 0x7FFFFFFF
    main = (ix >= 0x3C900000) & (ix < 0x4043687A)  # False for NaN and inf
    allm = bool(main.all())
    xr = x if allm else np.where(main, x, 0.5)
    kf = INVLN2 * xr
    kf += np.copysign(0.5, xr)
    k = kf.astype(np.int64)  # +-1 on 0.5ln2 < |x| < 1.5ln2 as fdlibm forces (see _exp_reduce)
    np.putmask(k, ix <= 0x3FD62E42, 0)
    t = k.astype(np.float64)
    hi = t * LN2_HI
    np.subtract(xr, hi, out=hi)
    lo = np.multiply(t, LN2_LO, out=t)
    r = hi - lo
    c = np.subtract(hi, r, out=hi)
    c -= lo  # what the rounding of r lost
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = hxs * Q5
    for coef in (Q4, Q3, Q2, Q1):
        r1 += coef
        r1 *= hxs
    r1 += 1.0  # 1 + hxs*(Q1 + hxs*(Q2 + ...))
    tt = r1 * hfx
    np.subtract(3.0, tt, out=tt)
    den = r * tt
    np.subtract(6.0, den, out=den)
    e = np.subtract(r1, tt, out=r1)
    e /= den
    e *= hxs  # hxs*((r1-tt)/(6-r*tt))
    y0 = r * e
    y0 -= hxs
    np.subtract(r, y0, out=y0)  # k == 0: r - (r*e - hxs)
    e -= c
    e *= r
    e -= c
    e -= hxs  # e = (r*(e-c)-c) - hxs
    d = e - r
    ym1 = np.subtract(r, e, out=tt)
    ym1 *= 0.5
    ym1 -= 0.5  # k == -1: 0.5*(r-e) - 0.5
    yp1 = np.where(r < -0.25, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e))  # k == 1
    yfar = add_exponent(1.0 - d, k)
    yfar -= 1.0  # k <= -2: exp(x) - 1 with the -1 exact or negligible
    kc = np.clip(k, 2, 19)
    ymid = add_exponent(from_hi_word(0x3FF00000 - (0x200000 >> kc)) - d, k)  # 2 <= k < 20
    kc = np.clip(k, 20, 56)
    yhigh = e + from_hi_word((0x3FF - kc) << 20)
    np.subtract(r, yhigh, out=yhigh)
    yhigh += 1.0
    yhigh = add_exponent(yhigh, k)  # 20 <= k <= 56: (r - (e + 2**-k)) + 1
    y = np.select([k == 0, k == -1, k == 1, k <= -2, k < 20], [y0, ym1, yp1, yfar, ymid], yhigh)
    if not allm:
        rare = ~main
        y[rare] = _expm1_64_all_branches(x[rare])
    return y


def exp_dd64(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """exp(a) as an unevaluated sum eh + el (relative error <= ~2**-54), for -708 <= a <= 0.

    fdlibm's exp with the last two roundings captured exactly (TwoSum / Fast2Sum), so that
    sigmoid and tanh can divide with ~1 ulp total error; what remains is the rounding inside
    r*c/(2-c), measured at most 2**-54.1 relative. ``eh`` equals exp64(a) there (up to the
    |a| < 2**-28 shortcut exp64 takes). Out-of-range inputs give garbage; callers mask them.
    """
    _, k, hi, lo, q = _exp_reduce(a)
    s1 = np.subtract(lo, q, out=lo)
    big = s1 - hi  # TwoSum(s1, -hi): big + err == s1 - hi exactly
    bb = big - s1
    err = big - bb
    np.subtract(s1, err, out=err)
    np.negative(hi, out=hi)
    hi -= bb
    err += hi  # (s1 - (big - bb)) + (-hi - bb)
    yh = np.subtract(1.0, big, out=bb)
    yl = np.subtract(1.0, yh, out=s1)
    yl -= big
    yl -= err  # Fast2Sum (|big| < 1): 1 - big == yh + yl
    k += 0x3FF
    k <<= 52
    scale = k.view(np.float64)  # 2**k, normal for k >= -1022
    yh *= scale
    yl *= scale
    return yh, yl
